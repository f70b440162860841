//! The streaming EventStorage reader (versions 2 to 6).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::{
    EsError, EsFileInfo, EsRecord, RunParameters, DATA_SEPARATOR_MARKER, DATA_SEPARATOR_WORDS,
    FILE_END_LAST, FILE_END_MARKER, FILE_END_WORDS, FILE_NAME_MARKER, FILE_START_MARKER,
    FILE_START_WORDS, FREE_STRINGS_MARKER, READ_VERSIONS, RUN_PARAMETERS_MARKER,
};
use rodeo_format::compress::{bytes_to_words, read_le_words, WordsExpected};

/// Largest string accepted in a metadata record.
const MAX_STRING_BYTES: u64 = 1 << 20;
/// Largest fixed-size record accepted (start, run parameters, separator), in words.
const MAX_RECORD_WORDS: u32 = 64;
/// Largest event a zlib data block may restore to.
const MAX_INFLATED_BYTES: u64 = 1 << 30;
const END_BYTES: u64 = FILE_END_WORDS as u64 * 4;

/// One data block: the full event's words (restored if the file is compressed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsBlock {
    /// Index of the event in the file (0-based).
    pub index: u64,
    /// Byte offset of its data separator.
    pub offset: u64,
    /// The separator's block number.
    pub block_number: u32,
    /// Bytes stored in the file (compressed size if compressed).
    pub stored_bytes: u32,
    /// The full event's words.
    pub words: Vec<u32>,
}

/// What a completely valid file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsSummary {
    /// The file read.
    pub path: PathBuf,
    /// Its metadata records.
    pub info: EsFileInfo,
    /// Events (data blocks).
    pub events: u64,
    /// Bytes of data blocks as stored.
    pub data_bytes: u64,
    /// File size.
    pub file_bytes: u64,
    /// The end record's events in the run so far.
    pub events_in_run: u32,
    /// The end record's status (1: the run's last file).
    pub status: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    Done,
    Failed,
}

/// Reads an EventStorage file record by record, validating as it goes.
///
/// [`EsReader::open`] reads the metadata records (file start, file name strings, free strings,
/// run parameters); the [`Iterator`] yields one [`EsBlock`] per data separator, then stops at the
/// valid end record, or yields one error at the first problem and stops (every event before it
/// has been yielded; the error names the byte offset).
#[derive(Debug)]
pub struct EsReader {
    path: PathBuf,
    input: BufReader<File>,
    file_len: u64,
    pos: u64,
    info: EsFileInfo,
    zlib: bool,
    events: u64,
    data_bytes: u64,
    end: Option<(u32, u32)>,
    state: State,
}

impl EsReader {
    /// Opens `path` and reads its metadata records.
    pub fn open(path: impl AsRef<Path>) -> Result<EsReader, EsError> {
        let path = path.as_ref().to_path_buf();
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| EsError::Io { op, path, source }
        };
        crate::regular_file(path.as_ref()).map_err(io("open", &path))?;
        let file = File::open(&path).map_err(io("open", &path))?;
        let file_len = file.metadata().map_err(io("stat", &path))?.len();
        let mut r = EsReader {
            input: BufReader::with_capacity(1 << 20, file),
            path,
            file_len,
            pos: 0,
            info: EsFileInfo::default(),
            zlib: false,
            events: 0,
            data_bytes: 0,
            end: None,
            state: State::Reading,
        };
        r.read_metadata()?;
        r.zlib = match r.info.compression() {
            "none" | "" => false,
            "zlib" => true,
            other => {
                return Err(EsError::UnsupportedCompression {
                    codec: other.to_string(),
                })
            }
        };
        Ok(r)
    }

    /// The metadata records.
    pub fn info(&self) -> &EsFileInfo {
        &self.info
    }

    /// The path read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file length when opened.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Byte offset of the next record.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Events read so far.
    pub fn events_read(&self) -> u64 {
        self.events
    }

    /// The summary, once the end record has been read and validated.
    pub fn summary(&self) -> Option<EsSummary> {
        let (events_in_run, status) = self.end?;
        (self.state == State::Done).then(|| EsSummary {
            path: self.path.clone(),
            info: self.info.clone(),
            events: self.events,
            data_bytes: self.data_bytes,
            file_bytes: self.file_len,
            events_in_run,
            status,
        })
    }

    fn read_bytes(&mut self, buf: &mut [u8]) -> Result<(), EsError> {
        self.input.read_exact(buf).map_err(|source| EsError::Io {
            op: "read",
            path: self.path.clone(),
            source,
        })?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// Reads `n` words that the caller has checked lie within the file.
    fn read_words(&mut self, n: usize) -> Result<Vec<u32>, EsError> {
        let mut buf = vec![0u8; n * 4];
        self.read_bytes(&mut buf)?;
        Ok(bytes_to_words(&buf))
    }

    fn remaining(&self) -> u64 {
        self.file_len.saturating_sub(self.pos)
    }

    fn truncated(&self, record: EsRecord, offset: u64, needed: u64) -> EsError {
        EsError::Truncated {
            record,
            offset,
            needed,
            file_len: self.file_len,
            events: self.events,
        }
    }

    /// Reads a string whose length word is next; `offset` is its record's.
    fn read_string(&mut self, record: EsRecord, offset: u64) -> Result<String, EsError> {
        if self.remaining() < 4 {
            return Err(self.truncated(record, offset, self.pos + 4 - offset));
        }
        let len = u64::from(self.read_words(1)?[0]);
        if len > MAX_STRING_BYTES {
            return Err(EsError::BadRecord {
                record,
                offset,
                reason: format!("string of {len} bytes (at most {MAX_STRING_BYTES} accepted)"),
            });
        }
        let padded = len.next_multiple_of(4);
        if padded > self.remaining() {
            return Err(self.truncated(record, offset, self.pos + padded - offset));
        }
        let mut buf = vec![0u8; padded as usize];
        self.read_bytes(&mut buf)?;
        buf.truncate(len as usize);
        let s = String::from_utf8_lossy(&buf);
        Ok(s.trim_end_matches([' ', '\0']).to_string())
    }

    /// Reads a record of `size` words (size word already read) whose first two words are read.
    fn fixed_record(
        &mut self,
        record: EsRecord,
        offset: u64,
        size: u32,
        min: u32,
    ) -> Result<Vec<u32>, EsError> {
        if !(min..=MAX_RECORD_WORDS).contains(&size) {
            return Err(EsError::BadRecord {
                record,
                offset,
                reason: format!("record size {size} words (expected {min}..={MAX_RECORD_WORDS})"),
            });
        }
        let rest = u64::from(size - 2) * 4;
        if rest > self.remaining() {
            return Err(self.truncated(record, offset, u64::from(size) * 4));
        }
        self.read_words(size as usize - 2)
    }

    fn read_metadata(&mut self) -> Result<(), EsError> {
        let start = FILE_START_WORDS as u64 * 4;
        if self.file_len < start {
            return Err(self.truncated(EsRecord::FileStart, 0, start));
        }
        let head = self.read_words(2)?;
        let (marker, size) = (head[0], head[1]);
        if marker != FILE_START_MARKER {
            return Err(EsError::BadStart {
                field: "marker",
                expected: format!("{FILE_START_MARKER:#010x}"),
                found: u64::from(marker),
            });
        }
        if !(FILE_START_WORDS..=MAX_RECORD_WORDS).contains(&size) {
            return Err(EsError::BadStart {
                field: "record size in words",
                expected: format!("{FILE_START_WORDS}..={MAX_RECORD_WORDS}"),
                found: u64::from(size),
            });
        }
        let w = self.fixed_record(EsRecord::FileStart, 0, size, FILE_START_WORDS)?;
        let version = w.first().copied().unwrap_or(0);
        if !READ_VERSIONS.contains(&version) {
            return Err(EsError::BadStart {
                field: "format version",
                expected: "2..=6".into(),
                found: u64::from(version),
            });
        }
        let at = |i: usize| w.get(i).copied().unwrap_or(0);
        self.info.version = version;
        self.info.file_number = at(1);
        self.info.date = at(2);
        self.info.time = at(3);
        self.info.size_limit_blocks = at(4);
        self.info.size_limit_mb = at(5);
        let (mut names, mut free, mut run) = (false, false, false);
        loop {
            let offset = self.pos;
            if self.remaining() < 4 {
                if run && self.remaining() == 0 {
                    return Ok(());
                }
                let what = if run {
                    EsRecord::Event(0)
                } else {
                    EsRecord::RunParameters
                };
                return Err(self.truncated(what, offset, 4));
            }
            let marker = self.read_words(1)?[0];
            let dup = |record| EsError::BadRecord {
                record,
                offset,
                reason: "appears twice".into(),
            };
            match marker {
                FILE_NAME_MARKER if !names => {
                    self.info.app_name = self.read_string(EsRecord::FileName, offset)?;
                    self.info.file_name_core = self.read_string(EsRecord::FileName, offset)?;
                    names = true;
                }
                FREE_STRINGS_MARKER if !free => {
                    if self.remaining() < 4 {
                        return Err(self.truncated(EsRecord::FreeStrings, offset, 8));
                    }
                    let count = u64::from(self.read_words(1)?[0]);
                    if count * 4 > self.remaining() {
                        return Err(EsError::BadRecord {
                            record: EsRecord::FreeStrings,
                            offset,
                            reason: format!(
                                "{count} strings cannot fit the {} bytes left in the file",
                                self.remaining()
                            ),
                        });
                    }
                    for _ in 0..count {
                        let s = self.read_string(EsRecord::FreeStrings, offset)?;
                        self.info.free_strings.push(s);
                    }
                    free = true;
                }
                RUN_PARAMETERS_MARKER if !run => {
                    if self.remaining() < 4 {
                        return Err(self.truncated(EsRecord::RunParameters, offset, 36));
                    }
                    let size = self.read_words(1)?[0];
                    let w = self.fixed_record(EsRecord::RunParameters, offset, size, 9)?;
                    let at = |i: usize| w.get(i).copied().unwrap_or(0);
                    let masks = w.len().saturating_sub(6).min(4);
                    let mut mask = 0u128;
                    for i in 0..masks {
                        mask |= u128::from(at(4 + i)) << (32 * i);
                    }
                    self.info.run = RunParameters {
                        run_number: at(0),
                        max_events: at(1),
                        rec_enable: at(2),
                        trigger_type: at(3),
                        detector_mask: mask,
                        beam_type: at(w.len().saturating_sub(2)),
                        beam_energy: at(w.len().saturating_sub(1)),
                    };
                    run = true;
                }
                FILE_NAME_MARKER => return Err(dup(EsRecord::FileName)),
                FREE_STRINGS_MARKER => return Err(dup(EsRecord::FreeStrings)),
                RUN_PARAMETERS_MARKER => return Err(dup(EsRecord::RunParameters)),
                DATA_SEPARATOR_MARKER | FILE_END_MARKER if run => {
                    // Leave the record to the event loop: step back over its marker (inside the
                    // buffer, no system call).
                    self.input.seek_relative(-4).map_err(|source| EsError::Io {
                        op: "seek",
                        path: self.path.clone(),
                        source,
                    })?;
                    self.pos -= 4;
                    return Ok(());
                }
                _ => {
                    return Err(EsError::BadRecord {
                        record: EsRecord::RunParameters,
                        offset,
                        reason: format!(
                            "marker {marker:#010x} where the file name strings, free strings or \
                             run parameters (0x1234bbbb, required before the first event) belong"
                        ),
                    })
                }
            }
        }
    }

    /// The next data block; `None` after the end record or an error.
    pub fn next_block(&mut self) -> Option<Result<EsBlock, EsError>> {
        if self.state != State::Reading {
            return None;
        }
        match self.read_record() {
            Ok(Some(block)) => Some(Ok(block)),
            Ok(None) => {
                self.state = State::Done;
                None
            }
            Err(e) => {
                self.state = State::Failed;
                Some(Err(e))
            }
        }
    }

    fn read_record(&mut self) -> Result<Option<EsBlock>, EsError> {
        let offset = self.pos;
        let index = self.events;
        let remaining = self.remaining();
        if remaining == 0 {
            return Err(EsError::NoEndRecord {
                offset,
                events: index,
            });
        }
        let sep_bytes = u64::from(DATA_SEPARATOR_WORDS) * 4;
        if remaining < 4 {
            return Err(self.truncated(EsRecord::Event(index), offset, sep_bytes));
        }
        let marker = self.read_words(1)?[0];
        match marker {
            DATA_SEPARATOR_MARKER => {
                if remaining < sep_bytes {
                    return Err(self.truncated(EsRecord::Event(index), offset, sep_bytes));
                }
                let w = self.read_words(3)?;
                let (size, block_number, stored) = (w[0], w[1], w[2]);
                let bad = |reason: String| EsError::BadSeparator {
                    index,
                    offset,
                    reason,
                };
                if !(DATA_SEPARATOR_WORDS..=MAX_RECORD_WORDS).contains(&size) {
                    return Err(bad(format!(
                        "record size {size} words (expected {DATA_SEPARATOR_WORDS}..={MAX_RECORD_WORDS})"
                    )));
                }
                if stored % 4 != 0 || stored == 0 {
                    return Err(bad(format!(
                        "data block of {stored} bytes is not a positive number of 32-bit words"
                    )));
                }
                let needed = u64::from(size) * 4 + u64::from(stored);
                if needed > remaining {
                    return Err(self.truncated(EsRecord::Event(index), offset, needed));
                }
                self.read_words(size as usize - DATA_SEPARATOR_WORDS as usize)?;
                let mut bytes = vec![0u8; stored as usize];
                self.read_bytes(&mut bytes)?;
                let words = if self.zlib {
                    inflate(&bytes).map_err(|reason| EsError::Decompress {
                        index,
                        offset,
                        codec: "zlib".into(),
                        reason,
                    })?
                } else {
                    bytes_to_words(&bytes)
                };
                self.events += 1;
                self.data_bytes += u64::from(stored);
                Ok(Some(EsBlock {
                    index,
                    offset,
                    block_number,
                    stored_bytes: stored,
                    words,
                }))
            }
            FILE_END_MARKER => {
                if remaining < END_BYTES {
                    return Err(self.truncated(EsRecord::FileEnd, offset, END_BYTES));
                }
                let w = self.read_words(FILE_END_WORDS as usize - 1)?;
                let at = |i: usize| w.get(i).copied().unwrap_or(0);
                let checks = [
                    ("record size in words", u64::from(FILE_END_WORDS), at(0)),
                    ("events in file", self.events, at(3)),
                    ("closing marker", u64::from(FILE_END_LAST), at(8)),
                ];
                for (field, expected, found) in checks {
                    if expected != u64::from(found) {
                        return Err(EsError::BadEndRecord {
                            offset,
                            field,
                            expected,
                            found: u64::from(found),
                            events: index,
                        });
                    }
                }
                if remaining > END_BYTES {
                    return Err(EsError::TrailingBytes {
                        offset: offset + END_BYTES,
                        bytes: remaining - END_BYTES,
                        events: index,
                    });
                }
                self.end = Some((at(5), at(7)));
                Ok(None)
            }
            found => Err(EsError::BadMarker {
                offset,
                found,
                events: index,
            }),
        }
    }
}

/// Inflates one zlib data block (trailing zero padding ignored) into a positive number of
/// words, at most [`MAX_INFLATED_BYTES`] (the largest event accepted), in chunks straight into
/// the words ([`read_le_words`]).
fn inflate(input: &[u8]) -> Result<Vec<u32>, String> {
    let mut dec = flate2::read::ZlibDecoder::new(input);
    read_le_words(&mut dec, WordsExpected::AtMostBytes(MAX_INFLATED_BYTES))
}

impl Iterator for EsReader {
    type Item = Result<EsBlock, EsError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_block()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    /// A block is restored into the same words across many chunks (with zero padding after
    /// the stream); one of no bytes, or of bytes that are not whole words, is refused.
    #[test]
    fn blocks_inflate_into_whole_words_across_chunks() {
        let words: Vec<u32> = (0..(3u32 * (64 << 10) / 4) + 5)
            .map(|i| i.wrapping_mul(0x9E37_79B9) >> (i % 7))
            .collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut block = zlib(&bytes);
        block.extend_from_slice(&[0, 0, 0]);
        assert_eq!(inflate(&block).unwrap(), words);
        let err = inflate(&zlib(&bytes[..bytes.len() - 1])).unwrap_err();
        assert!(
            err.contains("not a positive number of 32-bit words"),
            "{err}"
        );
        assert!(inflate(&zlib(&[])).is_err());
        assert!(inflate(b"not zlib").is_err());
    }
}
