//! Link capture files: a recorded stream of link units (FELIX blocks or S-LINK ROD fragments).
//!
//! `rodeo gen link --output FILE` writes one; the file-player channel replays it into
//! superpages, unit by unit, as the link delivered it (QuestNP's "user data" replay, broken
//! fragments included). Each unit is kept with its length, so a player writes whole units even
//! when their contents are corrupt: unit boundaries are what the link hardware knows, contents
//! are what the receiving side must check.
//!
//! Layout, little-endian 32-bit words (like the raw-data files):
//!
//! | part | words |
//! |---|---|
//! | header | `0x4B4E4C52` ("RLNK"); header size in words (8); format version (1); mode (1 FELIX blocks, 2 S-LINK fragments); FELIX block size in bytes (0 for S-LINK); flags (bit 0 S-LINK framing, bit 1 S-LINK CRC word); L1ID wrap; reserved (0) |
//! | unit (zero or more) | length in bytes; the unit's bytes, zero-padded to a multiple of 4 |
//!
//! A file ends after its last whole unit; a unit cut short is reported with its byte offset.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The first word of a link capture file ("RLNK" in byte order).
pub const LINK_FILE_MARKER: u32 = 0x4B4E_4C52;
/// Header words.
pub const LINK_FILE_HEADER_WORDS: usize = 8;
/// The format version this crate writes and reads.
pub const LINK_FILE_VERSION: u32 = 1;
/// Largest unit accepted by the reader (64 MiB, the largest superpage).
pub const MAX_UNIT_BYTES: usize = 64 << 20;

/// What kind of link a capture holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkMode {
    /// FELIX to-host blocks of a fixed size.
    Felix,
    /// S-LINK ROD fragments.
    Slink,
}

impl LinkMode {
    fn word(self) -> u32 {
        match self {
            LinkMode::Felix => 1,
            LinkMode::Slink => 2,
        }
    }

    fn from_word(w: u32) -> Option<LinkMode> {
        match w {
            1 => Some(LinkMode::Felix),
            2 => Some(LinkMode::Slink),
            _ => None,
        }
    }
}

/// The header of a link capture file: how to read its units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkFileHeader {
    /// Link kind.
    pub mode: LinkMode,
    /// FELIX block size in bytes (0 for S-LINK).
    pub block_size: u32,
    /// S-LINK fragments are framed by control words.
    pub framing: bool,
    /// S-LINK fragments are followed by a CRC word.
    pub crc: bool,
    /// The L1ID wrap value of the stream.
    pub l1id_wrap: u32,
}

impl LinkFileHeader {
    fn words(&self) -> [u32; LINK_FILE_HEADER_WORDS] {
        let flags = u32::from(self.framing) | (u32::from(self.crc) << 1);
        [
            LINK_FILE_MARKER,
            LINK_FILE_HEADER_WORDS as u32,
            LINK_FILE_VERSION,
            self.mode.word(),
            self.block_size,
            flags,
            self.l1id_wrap,
            0,
        ]
    }
}

/// What went wrong with a link capture file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkFileError {
    /// An I/O operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the link-file marker.
    #[error("{}: not a link capture file (first word {found:#010x}, expected {LINK_FILE_MARKER:#010x})", path.display())]
    NotALinkFile {
        /// The file.
        path: PathBuf,
        /// The first word.
        found: u32,
    },
    /// The header names an unknown version, size or mode.
    #[error("{}: unsupported link-file header: {what} = {found}", path.display())]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// The field.
        what: &'static str,
        /// Its value.
        found: u32,
    },
    /// The file ends inside a unit (or its header): the units before it are whole.
    #[error("{}: file ends at byte {len} inside unit {unit} at byte {offset} (needs {needed} bytes); {unit} units are whole", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Index of the cut unit.
        unit: u64,
        /// Byte offset of its length word.
        offset: u64,
        /// Bytes the unit needs from its offset.
        needed: u64,
        /// File length.
        len: u64,
    },
    /// A unit is larger than [`MAX_UNIT_BYTES`] (or empty): the length word is corrupt.
    #[error("{}: unit {unit} at byte {offset} has length {length} (1..={MAX_UNIT_BYTES} allowed)", path.display())]
    BadUnitLength {
        /// The file.
        path: PathBuf,
        /// Index of the unit.
        unit: u64,
        /// Byte offset of its length word.
        offset: u64,
        /// The length word.
        length: u32,
    },
    /// An S-LINK unit whose length is not whole 32-bit words: every fragment after it in a
    /// superpage would be read out of step.
    #[error("{}: unit {unit} at byte {offset} has length {length}: an S-LINK fragment is whole 32-bit words (a multiple of 4 bytes)", path.display())]
    UnitNotWords {
        /// The file.
        path: PathBuf,
        /// Index of the unit.
        unit: u64,
        /// Byte offset of its length word.
        offset: u64,
        /// The length word.
        length: u32,
    },
}

/// Writes a link capture file: header, then units; [`LinkFileWriter::finish`] flushes and
/// fsyncs.
#[derive(Debug)]
pub struct LinkFileWriter {
    out: BufWriter<File>,
    path: PathBuf,
    mode: LinkMode,
    units: u64,
    bytes: u64,
}

impl LinkFileWriter {
    /// Creates (truncates) `path` and writes the header.
    pub fn create(path: &Path, header: &LinkFileHeader) -> Result<LinkFileWriter, LinkFileError> {
        let io = |op| {
            let path = path.to_path_buf();
            move |source| LinkFileError::Io { op, path, source }
        };
        let file = File::create(path).map_err(io("create"))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        for w in header.words() {
            out.write_all(&w.to_le_bytes()).map_err(io("write"))?;
        }
        Ok(LinkFileWriter {
            out,
            path: path.to_path_buf(),
            mode: header.mode,
            units: 0,
            bytes: 0,
        })
    }

    /// Appends one unit (1 byte ..= [`MAX_UNIT_BYTES`], whole words in an S-LINK file;
    /// others are refused as [`LinkFileError::BadUnitLength`] or
    /// [`LinkFileError::UnitNotWords`] so the file stays readable).
    pub fn write_unit(&mut self, unit: &[u8]) -> Result<(), LinkFileError> {
        if unit.is_empty() || unit.len() > MAX_UNIT_BYTES {
            return Err(LinkFileError::BadUnitLength {
                path: self.path.clone(),
                unit: self.units,
                offset: self.bytes,
                length: unit.len().min(u32::MAX as usize) as u32,
            });
        }
        if self.mode == LinkMode::Slink && unit.len() % 4 != 0 {
            return Err(LinkFileError::UnitNotWords {
                path: self.path.clone(),
                unit: self.units,
                offset: self.bytes,
                length: unit.len() as u32,
            });
        }
        let pad = unit.len().next_multiple_of(4) - unit.len();
        let r = self
            .out
            .write_all(&(unit.len() as u32).to_le_bytes())
            .and_then(|()| self.out.write_all(unit))
            .and_then(|()| self.out.write_all(&[0u8; 3][..pad]));
        r.map_err(|source| LinkFileError::Io {
            op: "write",
            path: self.path.clone(),
            source,
        })?;
        self.units += 1;
        self.bytes += (4 + unit.len() + pad) as u64;
        Ok(())
    }

    /// Units written so far.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Flushes and fsyncs the file; returns the number of units.
    pub fn finish(self) -> Result<u64, LinkFileError> {
        let path = self.path;
        let units = self.units;
        let file = self.out.into_inner().map_err(|e| LinkFileError::Io {
            op: "flush",
            path: path.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().map_err(|source| LinkFileError::Io {
            op: "fsync",
            path,
            source,
        })?;
        Ok(units)
    }
}

/// A whole link capture file in memory, validated: the units are whole.
#[derive(Debug, Clone)]
pub struct LinkFile {
    header: LinkFileHeader,
    bytes: Vec<u8>,
    units: u64,
    unit_bytes: u64,
    max_unit: usize,
}

impl LinkFile {
    /// Reads and validates `path`. A file cut inside a unit is an error naming the offset.
    pub fn read(path: &Path) -> Result<LinkFile, LinkFileError> {
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|source| LinkFileError::Io {
                op: "read",
                path: path.to_path_buf(),
                source,
            })?;
        LinkFile::from_bytes(path, bytes)
    }

    /// Validates a file's bytes (`path` names it in errors).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<LinkFile, LinkFileError> {
        let len = bytes.len() as u64;
        let word = |i: usize| {
            bytes
                .get(4 * i..4 * i + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let header_bytes = (4 * LINK_FILE_HEADER_WORDS) as u64;
        let Some(marker) = word(0) else {
            return Err(LinkFileError::Truncated {
                path: path.to_path_buf(),
                unit: 0,
                offset: 0,
                needed: header_bytes,
                len,
            });
        };
        if marker != LINK_FILE_MARKER {
            return Err(LinkFileError::NotALinkFile {
                path: path.to_path_buf(),
                found: marker,
            });
        }
        if len < header_bytes {
            return Err(LinkFileError::Truncated {
                path: path.to_path_buf(),
                unit: 0,
                offset: 0,
                needed: header_bytes,
                len,
            });
        }
        let w = |i| word(i).unwrap_or(0);
        let bad = |what, found| LinkFileError::BadHeader {
            path: path.to_path_buf(),
            what,
            found,
        };
        if w(1) != LINK_FILE_HEADER_WORDS as u32 {
            return Err(bad("header size", w(1)));
        }
        if w(2) != LINK_FILE_VERSION {
            return Err(bad("version", w(2)));
        }
        let mode = LinkMode::from_word(w(3)).ok_or_else(|| bad("mode", w(3)))?;
        let header = LinkFileHeader {
            mode,
            block_size: w(4),
            framing: w(5) & 1 != 0,
            crc: w(5) & 2 != 0,
            l1id_wrap: w(6),
        };
        let mut file = LinkFile {
            header,
            bytes,
            units: 0,
            unit_bytes: 0,
            max_unit: 0,
        };
        let mut at = header_bytes as usize;
        while at < file.bytes.len() {
            let unit = file.units;
            let length = match file.bytes.get(at..at + 4) {
                Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                None => {
                    return Err(LinkFileError::Truncated {
                        path: path.to_path_buf(),
                        unit,
                        offset: at as u64,
                        needed: 4,
                        len,
                    })
                }
            };
            if length == 0 || length as usize > MAX_UNIT_BYTES {
                return Err(LinkFileError::BadUnitLength {
                    path: path.to_path_buf(),
                    unit,
                    offset: at as u64,
                    length,
                });
            }
            if mode == LinkMode::Slink && length % 4 != 0 {
                return Err(LinkFileError::UnitNotWords {
                    path: path.to_path_buf(),
                    unit,
                    offset: at as u64,
                    length,
                });
            }
            let needed = 4 + (length as usize).next_multiple_of(4);
            if at + needed > file.bytes.len() {
                return Err(LinkFileError::Truncated {
                    path: path.to_path_buf(),
                    unit,
                    offset: at as u64,
                    needed: needed as u64,
                    len,
                });
            }
            file.units += 1;
            file.unit_bytes += u64::from(length);
            file.max_unit = file.max_unit.max(length as usize);
            at += needed;
        }
        Ok(file)
    }

    /// The header.
    pub fn header(&self) -> &LinkFileHeader {
        &self.header
    }

    /// Number of units.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Bytes of all units (without length words and padding).
    pub fn unit_bytes(&self) -> u64 {
        self.unit_bytes
    }

    /// The largest unit, in bytes.
    pub fn max_unit(&self) -> usize {
        self.max_unit
    }

    /// The units in order.
    pub fn iter(&self) -> LinkUnits<'_> {
        LinkUnits {
            bytes: &self.bytes,
            at: 4 * LINK_FILE_HEADER_WORDS,
        }
    }

    /// The units from byte position `at` (as returned by [`LinkUnits::position`]).
    pub fn iter_from(&self, at: usize) -> LinkUnits<'_> {
        LinkUnits {
            bytes: &self.bytes,
            at: at.max(4 * LINK_FILE_HEADER_WORDS),
        }
    }
}

/// Iterator over the units of a validated [`LinkFile`].
#[derive(Debug, Clone)]
pub struct LinkUnits<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl LinkUnits<'_> {
    /// Byte position of the next unit's length word (to resume with [`LinkFile::iter_from`]).
    pub fn position(&self) -> usize {
        self.at
    }
}

impl<'a> Iterator for LinkUnits<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let b = self.bytes.get(self.at..self.at + 4)?;
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let unit = self.bytes.get(self.at + 4..self.at + 4 + len)?;
        self.at += 4 + len.next_multiple_of(4);
        Some(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> LinkFileHeader {
        LinkFileHeader {
            mode: LinkMode::Slink,
            block_size: 0,
            framing: true,
            crc: false,
            l1id_wrap: 1 << 24,
        }
    }

    #[test]
    fn units_round_trip_and_truncation_names_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.rlnk");
        let mut w = LinkFileWriter::create(&path, &header()).unwrap();
        let units: Vec<Vec<u8>> = (1..20u8).map(|n| vec![n; n as usize * 4]).collect();
        for u in &units {
            w.write_unit(u).unwrap();
        }
        assert!(w.write_unit(&[]).is_err());
        assert_eq!(w.finish().unwrap(), units.len() as u64);
        let f = LinkFile::read(&path).unwrap();
        assert_eq!(f.header(), &header());
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            units.iter().map(|u| &u[..]).collect::<Vec<_>>()
        );
        assert_eq!(f.max_unit(), 76);
        // An S-LINK unit of other than whole words is refused by the writer, and by the
        // reader where it lies (a file made by hand).
        let odd = dir.path().join("odd.rlnk");
        let mut w = LinkFileWriter::create(&odd, &header()).unwrap();
        w.write_unit(&[1, 2, 3, 4]).unwrap();
        assert!(matches!(
            w.write_unit(&[5, 6, 7]),
            Err(LinkFileError::UnitNotWords { unit: 1, .. })
        ));
        w.finish().unwrap();
        let mut bytes = std::fs::read(&odd).unwrap();
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&[5, 6, 7, 0]);
        std::fs::write(&odd, &bytes).unwrap();
        match LinkFile::read(&odd) {
            Err(LinkFileError::UnitNotWords {
                unit: 1, length: 3, ..
            }) => {}
            other => panic!("{other:?}"),
        }

        let bytes = std::fs::read(&path).unwrap();
        let cut = bytes.len() - 10;
        match LinkFile::from_bytes(&path, bytes[..cut].to_vec()) {
            Err(LinkFileError::Truncated { unit, .. }) => assert_eq!(unit, 18),
            other => panic!("{other:?}"),
        }
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(matches!(
            LinkFile::from_bytes(&path, bad),
            Err(LinkFileError::NotALinkFile { .. })
        ));
        let mut bad = bytes;
        bad[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            LinkFile::from_bytes(&path, bad),
            Err(LinkFileError::BadUnitLength { unit: 0, .. })
        ));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x = 7u64;
        for len in 0..200 {
            let mut bytes: Vec<u8> = header()
                .words()
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            for _ in 0..len {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                bytes.push((x >> 59) as u8);
            }
            if let Ok(f) = LinkFile::from_bytes(Path::new("x"), bytes) {
                assert_eq!(f.iter().count() as u64, f.units());
            }
        }
    }
}
