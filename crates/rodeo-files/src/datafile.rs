//! One reader for every raw-data file: rodeo's container or EventStorage v2-v6, eformat 3, 4 or 5.
//!
//! [`DataFileReader::open`] looks at the first record (both containers start with 0x1234AAAA):
//! a start record of 8 words is EventStorage's (`specs/eventstorage.md`), anything else is left
//! to rodeo's reader (`specs/raw-file.md`), which reports its own errors. Events come out as
//! [`FileEvent`]s with what every consumer needs whatever the file: run number, L1ID, and the
//! ROBs with their source identifiers and word ranges. eformat 5 events are read with
//! [`rodeo_format::fragment`], eformat 3/4 events with [`crate::legacy`] (through their sub-detector
//! and ROS levels).
//!
//! Compressed events are restored by default: rodeo's zstd events (record flag bit 0),
//! EventStorage zlib data blocks (`Compression=zlib`) and eformat zlib payloads (compression
//! type 1 in an EventStorage file, eformat's meaning). [`FileEvent::stored_compressed`] says the
//! event was stored compressed.
//!
//! Damage is handled as each container's reader does: every complete event before it, then one
//! [`DataFileError`] with the byte offset where reading stopped. An event whose container record
//! is intact but whose fragment does not parse ends the reading the same way
//! ([`DataFileError::Event`], with the record's byte offset).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::eventstorage::{EsError, EsFileInfo, EsReader, FILE_START_WORDS};
use crate::legacy::{LegacyError, LegacyEvent};
use crate::rawfile::{FileStart, RawFileError, RawFileReader, FLAG_COMPRESSED, START_MARKER};
use rodeo_format::compress::{decompress_event, decompress_zlib_event, CompressError};
use rodeo_format::fragment::{FragmentError, FullEvent, FULL_EVENT_MARKER};

/// Which container a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Container {
    /// rodeo's own raw-data file (`specs/raw-file.md`).
    Rodeo,
    /// ATLAS/BESIII EventStorage (`specs/eventstorage.md`).
    EventStorage,
}

impl Container {
    /// `"rodeo"` or `"eventstorage"`.
    pub fn name(self) -> &'static str {
        match self {
            Container::Rodeo => "rodeo",
            Container::EventStorage => "eventstorage",
        }
    }
}

/// File-level metadata, the same fields whichever the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// The container.
    pub container: Container,
    /// Its format version (rodeo: 1; EventStorage: 2 to 6).
    pub version: u32,
    /// Run number (rodeo start record; EventStorage run parameters).
    pub run_number: u32,
    /// Luminosity block (rodeo start record; EventStorage `LumiBlock=`), if the file has one.
    pub lumiblock: Option<u32>,
    /// File sequence number (rodeo) or file number (EventStorage).
    pub file_number: u32,
    /// Application that wrote the file.
    pub app_name: String,
    /// Stream (rodeo stream name; EventStorage `Stream=`, else the file-name core).
    pub stream: String,
    /// File-level compression: `none` or `zlib` (EventStorage); rodeo marks events one by one.
    pub compression: String,
    /// The EventStorage metadata records, for an EventStorage file.
    pub eventstorage: Option<EsFileInfo>,
    /// The rodeo start record, for a rodeo file.
    pub rodeo: Option<FileStart>,
}

/// One ROB of a [`FileEvent`]: word ranges into [`FileEvent::words`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RobRef {
    /// Source identifier.
    pub source_id: u32,
    /// Word offset of the ROB fragment.
    pub offset: usize,
    /// Its size in words.
    pub size: usize,
    /// Word offset of its ROD fragment.
    pub rod_offset: usize,
    /// The ROD's size in words.
    pub rod_size: usize,
    /// Word offset of the ROD's data block.
    pub data_offset: usize,
    /// Data words.
    pub data_len: usize,
}

/// One event of a data file, decoded far enough for dumps, checks and replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEvent {
    /// Index in the file (0-based).
    pub index: u64,
    /// Byte offset of the event's record (rodeo event record or EventStorage data separator).
    pub offset: u64,
    /// eformat major version of the event: 3, 4 or 5.
    pub eformat: u32,
    /// Run number (from the full-event header; see [`crate::legacy`] for v3/v4).
    pub run_number: u32,
    /// The L1ID word of the full-event header (eformat 5: the extended L1ID, ECR in bits 31..24).
    pub l1id: u32,
    /// Global event id (event number), when the header has one.
    pub global_id: Option<u64>,
    /// The event was stored compressed (and has been restored).
    pub stored_compressed: bool,
    /// The Adler-32 of the event's record (rodeo's container, verified by the reader);
    /// EventStorage has no checksum per record.
    pub record_adler32: Option<u32>,
    /// The full event's words (plain).
    pub words: Vec<u32>,
    /// Its ROBs in order.
    pub robs: Vec<RobRef>,
}

impl FileEvent {
    /// The words of one of this event's ROBs (empty if `rob` is not one of them).
    pub fn rob_words(&self, rob: &RobRef) -> &[u32] {
        slice(&self.words, rob.offset, rob.size)
    }

    /// The words of the ROB's ROD fragment.
    pub fn rod_words(&self, rob: &RobRef) -> &[u32] {
        slice(&self.words, rob.rod_offset, rob.rod_size)
    }

    /// The ROD's data block.
    pub fn data_words(&self, rob: &RobRef) -> &[u32] {
        slice(&self.words, rob.data_offset, rob.data_len)
    }
}

fn slice(words: &[u32], at: usize, len: usize) -> &[u32] {
    at.checked_add(len)
        .and_then(|end| words.get(at..end))
        .unwrap_or(&[])
}

/// Why an event's fragment could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// An eformat 5 event does not parse (or one of its ROBs).
    #[error(transparent)]
    Fragment(#[from] FragmentError),
    /// An eformat 3/4 event does not parse.
    #[error(transparent)]
    Legacy(#[from] LegacyError),
    /// A compressed event does not restore.
    #[error(transparent)]
    Compress(#[from] CompressError),
    /// The full event is shorter than its record: words follow it inside the record (a
    /// record holds exactly one event).
    #[error("the full event's size word says {size_words} words, its record holds {record_words}: {} words after the event", record_words - *size_words as usize)]
    TrailingWords {
        /// The event's size word.
        size_words: u32,
        /// The words of the record's event block.
        record_words: usize,
    },
    /// The block is not a full event of a known version.
    #[error(
        "not a full event of eformat 3, 4 or 5: marker {marker:#010x}, version {version:#010x}"
    )]
    NotAnEvent {
        /// First word.
        marker: u32,
        /// Fourth word.
        version: u32,
    },
}

/// What went wrong reading a data file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataFileError {
    /// Opening or reading the file failed before its container was known.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file starts with neither container's start record.
    #[error("{}: not a raw-data file: file start record marker {found:#010x}, expected 0x1234aaaa (rodeo or EventStorage)", path.display())]
    NotADataFile {
        /// The file.
        path: PathBuf,
        /// The first word (0 if the file is shorter than a word).
        found: u32,
    },
    /// rodeo's container reader stopped (see [`RawFileError::offset`]).
    #[error(transparent)]
    Rodeo(#[from] RawFileError),
    /// The EventStorage reader stopped (see [`EsError::offset`]).
    #[error(transparent)]
    EventStorage(#[from] EsError),
    /// An event's record is intact but its fragment is not a valid event.
    #[error("event {index} at byte {offset}: {error}; {index} events recovered")]
    Event {
        /// Index of the event (= events recovered).
        index: u64,
        /// Byte offset of its record.
        offset: u64,
        /// What is wrong.
        #[source]
        error: EventError,
    },
}

impl DataFileError {
    /// The byte offset where reading stopped, for errors inside a file.
    pub fn offset(&self) -> Option<u64> {
        match self {
            DataFileError::Rodeo(e) => e.offset(),
            DataFileError::EventStorage(e) => e.offset(),
            DataFileError::Event { offset, .. } => Some(*offset),
            DataFileError::NotADataFile { .. } => Some(0),
            _ => None,
        }
    }

    /// The events returned before the error, for errors inside a file.
    pub fn events_recovered(&self) -> Option<u64> {
        match self {
            DataFileError::Rodeo(e) => e.events_recovered(),
            DataFileError::EventStorage(e) => e.events_recovered(),
            DataFileError::Event { index, .. } => Some(*index),
            DataFileError::NotADataFile { .. } => Some(0),
            _ => None,
        }
    }
}

#[derive(Debug)]
enum Inner {
    Rodeo(RawFileReader),
    Es(EsReader),
}

/// Reads events from a data file of either container; see the module documentation.
#[derive(Debug)]
pub struct DataFileReader {
    inner: Inner,
    info: FileInfo,
    decompress: bool,
    failed: bool,
    scratch: Vec<u32>,
}

/// Which container the file at `path` is, from its first record.
pub fn detect_container(path: &Path) -> Result<Container, DataFileError> {
    let io = |op, source| DataFileError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    crate::regular_file(path).map_err(|e| io("open", e))?;
    let mut f = File::open(path).map_err(|e| io("open", e))?;
    let mut head = [0u8; 8];
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io("read", e)),
        }
    }
    let word = |i: usize| {
        head.get(i * 4..i * 4 + 4)
            .filter(|_| n >= i * 4 + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let marker = word(0).unwrap_or(0);
    if marker != START_MARKER {
        return Err(DataFileError::NotADataFile {
            path: path.to_path_buf(),
            found: marker,
        });
    }
    Ok(if word(1) == Some(FILE_START_WORDS) {
        Container::EventStorage
    } else {
        Container::Rodeo
    })
}

impl DataFileReader {
    /// Opens `path`, whichever container it is, restoring compressed events.
    pub fn open(path: impl AsRef<Path>) -> Result<DataFileReader, DataFileError> {
        DataFileReader::open_with(path, true)
    }

    /// Opens `path`; `decompress` false yields compressed events as stored in rodeo files
    /// (their ROB list empty). EventStorage zlib data blocks are always restored (the block is
    /// the container's, not the event's).
    pub fn open_with(
        path: impl AsRef<Path>,
        decompress: bool,
    ) -> Result<DataFileReader, DataFileError> {
        let path = path.as_ref();
        let (inner, info) = match detect_container(path)? {
            Container::Rodeo => {
                let r = RawFileReader::open(path)?;
                let s = r.start().clone();
                let info = FileInfo {
                    container: Container::Rodeo,
                    version: s.version,
                    run_number: s.run,
                    lumiblock: Some(s.lumiblock),
                    file_number: s.sequence,
                    app_name: s.app_name.clone(),
                    stream: s.stream_name.clone(),
                    compression: "none".into(),
                    eventstorage: None,
                    rodeo: Some(s),
                };
                (Inner::Rodeo(r), info)
            }
            Container::EventStorage => {
                let r = EsReader::open(path)?;
                let es = r.info().clone();
                let info = FileInfo {
                    container: Container::EventStorage,
                    version: es.version,
                    run_number: es.run.run_number,
                    lumiblock: es.free_string("LumiBlock").and_then(|v| v.parse().ok()),
                    file_number: es.file_number,
                    app_name: es.app_name.clone(),
                    stream: es
                        .free_string("Stream")
                        .unwrap_or(&es.file_name_core)
                        .to_string(),
                    compression: es.compression().to_string(),
                    eventstorage: Some(es),
                    rodeo: None,
                };
                (Inner::Es(r), info)
            }
        };
        Ok(DataFileReader {
            inner,
            info,
            decompress,
            failed: false,
            scratch: Vec::new(),
        })
    }

    /// The file's metadata.
    pub fn info(&self) -> &FileInfo {
        &self.info
    }

    /// The path read.
    pub fn path(&self) -> &Path {
        match &self.inner {
            Inner::Rodeo(r) => r.path(),
            Inner::Es(r) => r.path(),
        }
    }

    /// The file length when opened.
    pub fn file_len(&self) -> u64 {
        match &self.inner {
            Inner::Rodeo(r) => r.file_len(),
            Inner::Es(r) => r.file_len(),
        }
    }

    /// Size and Adler-32 of the whole file, read on the way (rodeo's container, once the end
    /// record has been read and validated); `None` otherwise (EventStorage, or not complete).
    pub fn file_checksum(&mut self) -> Option<(u64, u32)> {
        match &mut self.inner {
            Inner::Rodeo(r) => r.file_checksum(),
            Inner::Es(_) => None,
        }
    }

    /// True once the end record has been read and validated.
    pub fn complete(&self) -> bool {
        match &self.inner {
            Inner::Rodeo(r) => r.summary().is_some(),
            Inner::Es(r) => r.summary().is_some(),
        }
    }

    /// Reads and decodes the next event.
    fn next_event(&mut self) -> Option<Result<FileEvent, DataFileError>> {
        if self.failed {
            return None;
        }
        let (index, offset, mut words, compressed, adler) = match &mut self.inner {
            Inner::Rodeo(r) => match r.next()? {
                Ok(e) => (
                    e.index,
                    e.offset,
                    e.words,
                    e.flags & FLAG_COMPRESSED != 0,
                    Some(e.checksum),
                ),
                Err(e) => return Some(Err(e.into())),
            },
            Inner::Es(r) => match r.next()? {
                Ok(b) => (
                    b.index,
                    b.offset,
                    b.words,
                    self.info.compression != "none",
                    None,
                ),
                Err(e) => return Some(Err(e.into())),
            },
        };
        let fail = |error: EventError| DataFileError::Event {
            index,
            offset,
            error,
        };
        let es = matches!(self.inner, Inner::Es(_));
        let mut stored_compressed = compressed;
        if is_v5(&words) {
            let compression = match FullEvent::parse(&words) {
                Ok(e) => e.compression(),
                Err(e) => return Some(Err(fail(e.into()))),
            };
            if compression != 0 && (self.decompress || es) {
                stored_compressed = true;
                let restored = if es {
                    decompress_zlib_event(&words, &mut self.scratch)
                } else {
                    decompress_event(&words, &mut self.scratch)
                };
                if let Err(e) = restored {
                    return Some(Err(fail(e.into())));
                }
                std::mem::swap(&mut words, &mut self.scratch);
            }
        }
        Some(
            decode(index, offset, words, stored_compressed)
                .map(|mut e| {
                    e.record_adler32 = adler;
                    e
                })
                .map_err(fail),
        )
    }
}

fn is_v5(words: &[u32]) -> bool {
    words.first() == Some(&FULL_EVENT_MARKER) && words.get(3).is_some_and(|v| v >> 24 == 5)
}

/// Decodes the full event in `words` (any supported eformat version) into a [`FileEvent`].
/// A compressed eformat 5 event decodes with an empty ROB list; `record_adler32` is left
/// `None` (the container's, not the event's).
pub fn decode(
    index: u64,
    offset: u64,
    words: Vec<u32>,
    stored_compressed: bool,
) -> Result<FileEvent, EventError> {
    let marker = words.first().copied().unwrap_or(0);
    let version = words.get(3).copied().unwrap_or(0);
    if marker != FULL_EVENT_MARKER {
        return Err(EventError::NotAnEvent { marker, version });
    }
    // A record (rodeo's event record, EventStorage's data block) holds exactly one event: its
    // size word must be the record's. A larger size word is the fragment parsers' truncation.
    let size_words = words.get(1).copied().unwrap_or(0);
    if (size_words as usize) < words.len() {
        return Err(EventError::TrailingWords {
            size_words,
            record_words: words.len(),
        });
    }
    match version >> 24 {
        5 => {
            let e = FullEvent::parse(&words)?;
            let mut robs = Vec::new();
            if e.compression() == 0 {
                let mut it = e.robs();
                loop {
                    let at = it.offset();
                    let Some(rob) = it.next() else { break };
                    let rob = rob?;
                    let rod = rob.rod();
                    let rod_offset = at + rob.header_size();
                    let data = rod.data();
                    let data_offset = rod_offset + offset_in(rod.words(), data);
                    robs.push(RobRef {
                        source_id: rob.source_id().0,
                        offset: at,
                        size: rob.size_words(),
                        rod_offset,
                        rod_size: rod.words().len(),
                        data_offset,
                        data_len: data.len(),
                    });
                }
            }
            let (run_number, l1id, global_id) = (e.run_number(), e.extended_l1id(), e.global_id());
            Ok(FileEvent {
                index,
                offset,
                eformat: 5,
                run_number,
                l1id,
                global_id: Some(global_id),
                stored_compressed,
                record_adler32: None,
                words,
                robs,
            })
        }
        3 | 4 => {
            let e = LegacyEvent::parse(&words)?;
            let robs = e
                .robs
                .iter()
                .map(|r| RobRef {
                    source_id: r.source_id,
                    offset: r.offset,
                    size: r.size,
                    rod_offset: r.rod_offset,
                    rod_size: r.rod_size,
                    data_offset: r.data_offset,
                    data_len: r.data_len,
                })
                .collect();
            Ok(FileEvent {
                index,
                offset,
                eformat: e.major,
                run_number: e.run_number,
                l1id: e.l1id,
                global_id: e.global_id.map(u64::from),
                stored_compressed,
                record_adler32: None,
                words,
                robs,
            })
        }
        _ => Err(EventError::NotAnEvent { marker, version }),
    }
}

/// Word offset of `inner` inside `outer` (both borrowed from the same buffer).
fn offset_in(outer: &[u32], inner: &[u32]) -> usize {
    (inner.as_ptr() as usize).saturating_sub(outer.as_ptr() as usize) / 4
}

impl Iterator for DataFileReader {
    type Item = Result<FileEvent, DataFileError>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = self.next_event()?;
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}
