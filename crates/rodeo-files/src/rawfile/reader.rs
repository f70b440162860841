//! The streaming, validating raw-data file reader.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::direct_in::DirectIn;
use super::{
    FileStart, RawFileError, RecordKind, END_MARKER, END_RECORD_WORDS, END_TRAILER,
    EVENT_HEADER_WORDS, EVENT_MARKER, FORMAT_VERSION, MIN_FORMAT_VERSION, START_MARKER,
};
use rodeo_format::checksum::{adler32, adler32_concat, ADLER32_INIT};

/// Largest start record accepted, in words (two maximal strings fit many times over).
const MAX_START_WORDS: u32 = 16_384;
/// Smallest start record: 8 fixed words and two empty strings.
const MIN_START_WORDS: u32 = 10;
/// Bytes read from the file per step while reading a fragment.
const STEP_BYTES: usize = 64 << 10;
const END_RECORD_BYTES: u64 = END_RECORD_WORDS as u64 * 4;

/// One event, borrowed from the reader (its words live in a buffer reused for the next event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRef<'a> {
    /// Index of the event in the file (0-based).
    pub index: u64,
    /// Byte offset of the event record in the file.
    pub offset: u64,
    /// Record flags (bit 0: compressed).
    pub flags: u32,
    /// The record's Adler-32 (verified).
    pub checksum: u32,
    /// The fragment's words.
    pub words: &'a [u32],
}

impl EventRef<'_> {
    /// An owned copy.
    pub fn to_event(&self) -> Event {
        Event {
            index: self.index,
            offset: self.offset,
            flags: self.flags,
            checksum: self.checksum,
            words: self.words.to_vec(),
        }
    }
}

/// One event, owned (what the [`Iterator`] of [`RawFileReader`] yields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Index of the event in the file (0-based).
    pub index: u64,
    /// Byte offset of the event record in the file.
    pub offset: u64,
    /// Record flags (bit 0: compressed).
    pub flags: u32,
    /// The record's Adler-32 (verified).
    pub checksum: u32,
    /// The fragment's words.
    pub words: Vec<u32>,
}

/// What a completely valid file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    /// The file read.
    pub path: PathBuf,
    /// Its start record.
    pub start: FileStart,
    /// Number of events.
    pub events: u64,
    /// Bytes of event records.
    pub event_bytes: u64,
    /// Adler-32 over the event records.
    pub adler: u32,
    /// File size in bytes.
    pub file_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    Done,
    Failed,
}

/// Reads a raw-data file record by record, validating everything: in 1 MiB blocks with direct
/// I/O where the file system allows (what is on the disk, not in the page cache), the size and
/// Adler-32 of the whole file kept on the way ([`RawFileReader::file_checksum`]).
///
/// Two ways to get events: [`RawFileReader::next_event`] lends each event's words from one
/// reused buffer (no allocation in steady state), and the [`Iterator`] implementation yields
/// owned [`Event`]s (one `Vec<u32>` each, moved out of the reader without a copy). Both stop after the end record or after the first
/// error, which is yielded once (see the module documentation for the recovery rules).
#[derive(Debug)]
pub struct RawFileReader {
    path: PathBuf,
    input: DirectIn,
    file_len: u64,
    pos: u64,
    start: FileStart,
    events: u64,
    event_bytes: u64,
    adler: u32,
    words: Vec<u32>,
    step: Vec<u8>,
    state: State,
}

impl RawFileReader {
    /// Opens `path` and validates its start record.
    pub fn open(path: impl AsRef<Path>) -> Result<RawFileReader, RawFileError> {
        let (reader, damaged) = RawFileReader::open_inner(path.as_ref(), true)?;
        debug_assert!(damaged.is_none());
        Ok(reader)
    }

    /// Opens `path` like [`RawFileReader::open`], except that a start record whose Adler-32
    /// disagrees with its bytes, or whose version word, names, their lengths or padding are
    /// damaged, is read anyway as long as its marker and size hold (the events are found from
    /// its size): the reader comes back with the first error it overlooked (for a checksum,
    /// [`RawFileError::StartChecksum`]), and the names it could not read empty. For salvaging
    /// the events of a damaged file (crash recovery rewrites the start record from the file
    /// name); the events are still checked record by record. Never use the start record's
    /// fields when an error comes back.
    pub fn open_salvaging(
        path: impl AsRef<Path>,
    ) -> Result<(RawFileReader, Option<RawFileError>), RawFileError> {
        RawFileReader::open_inner(path.as_ref(), false)
    }

    fn open_inner(
        path: &Path,
        strict: bool,
    ) -> Result<(RawFileReader, Option<RawFileError>), RawFileError> {
        let path = path.to_path_buf();
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| RawFileError::Io { op, path, source }
        };
        let file = DirectIn::open(&path).map_err(io("open", &path))?;
        let file_len = file.metadata().map_err(io("stat", &path))?.len();
        let mut reader = RawFileReader {
            input: file,
            path,
            file_len,
            pos: 0,
            start: FileStart {
                version: 0,
                sequence: 0,
                creation_time_ns: 0,
                run: 0,
                lumiblock: 0,
                app_name: String::new(),
                stream_name: String::new(),
            },
            events: 0,
            event_bytes: 0,
            adler: ADLER32_INIT,
            words: Vec::new(),
            step: Vec::new(),
            state: State::Reading,
        };
        let (start, damaged) = reader.read_start(strict)?;
        reader.start = start;
        Ok((reader, damaged))
    }

    /// The file's start record.
    pub fn start(&self) -> &FileStart {
        &self.start
    }

    /// The path read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File length when it was opened.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Byte offset of the next record.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Valid events read so far.
    pub fn events_read(&self) -> u64 {
        self.events
    }

    /// The summary, once the end record has been read and validated.
    pub fn summary(&self) -> Option<FileSummary> {
        (self.state == State::Done).then(|| FileSummary {
            path: self.path.clone(),
            start: self.start.clone(),
            events: self.events,
            event_bytes: self.event_bytes,
            adler: self.adler,
            file_bytes: self.file_len,
        })
    }

    /// Size and Adler-32 of every byte of the file (`rodeo run`'s file records), once the end
    /// record has been read and validated: what follows it is read too. `None` before that,
    /// or after an error (read the file again then: [`RawFileReader`] stopped at the error).
    pub fn file_checksum(&mut self) -> Option<(u64, u32)> {
        if self.state != State::Done {
            return None;
        }
        self.input.finish().ok()
    }

    /// The next event, lent from the reader's buffer; `None` after the end record or an error.
    pub fn next_event(&mut self) -> Option<Result<EventRef<'_>, RawFileError>> {
        if self.state != State::Reading {
            return None;
        }
        match self.read_record() {
            Ok(Some((offset, flags, checksum))) => Some(Ok(EventRef {
                index: self.events - 1,
                offset,
                flags,
                checksum,
                words: &self.words,
            })),
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

    fn read_bytes(&mut self, buf: &mut [u8]) -> Result<(), RawFileError> {
        self.input
            .read_exact(buf)
            .map_err(|source| RawFileError::Io {
                op: "read",
                path: self.path.clone(),
                source,
            })
    }

    /// Reads `N` (at most 8) little-endian words; returns them and their bytes.
    fn read_words<const N: usize>(&mut self) -> Result<([u32; N], [u8; 32]), RawFileError> {
        let mut buf = [0u8; 32];
        let bytes = buf.get_mut(..N * 4).unwrap_or_default();
        self.read_bytes(bytes)?;
        let mut words = [0u32; N];
        for (w, b) in words.iter_mut().zip(bytes.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok((words, buf))
    }

    /// Reads and checks the start record; with `strict` false a checksum mismatch is handed
    /// back beside the record instead of failing.
    fn read_start(
        &mut self,
        strict: bool,
    ) -> Result<(FileStart, Option<RawFileError>), RawFileError> {
        let truncated = |needed: u64, file_len| RawFileError::Truncated {
            record: RecordKind::Start,
            offset: 0,
            needed,
            file_len,
            events: 0,
        };
        if self.file_len < 8 {
            return Err(truncated(u64::from(MIN_START_WORDS) * 4, self.file_len));
        }
        let ([marker, size], _) = self.read_words::<2>()?;
        if marker != START_MARKER {
            return Err(RawFileError::BadStart {
                field: "marker",
                expected: format!("{START_MARKER:#010x}"),
                found: u64::from(marker),
            });
        }
        if !(MIN_START_WORDS..=MAX_START_WORDS).contains(&size) {
            return Err(RawFileError::BadStart {
                field: "record size in words",
                expected: format!("{MIN_START_WORDS}..={MAX_START_WORDS}"),
                found: u64::from(size),
            });
        }
        let size_bytes = u64::from(size) * 4;
        if size_bytes > self.file_len {
            return Err(truncated(size_bytes, self.file_len));
        }
        let mut rest = vec![0u8; size_bytes as usize - 8];
        self.read_bytes(&mut rest)?;
        let word = |i: usize| -> u32 {
            rest.get(i * 4..i * 4 + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .unwrap_or(0)
        };
        // Word indices below are relative to the start of `rest` (file word 2).
        let mut version = word(0);
        let mut damaged = None;
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            let e = RawFileError::BadStart {
                field: "format version",
                expected: format!("{MIN_FORMAT_VERSION}..={FORMAT_VERSION}"),
                found: u64::from(version),
            };
            if strict {
                return Err(e);
            }
            // Salvaging: a damaged version word is taken as this writer's own.
            damaged = Some(e);
            version = FORMAT_VERSION;
        }
        // Version 2 ends the record with its Adler-32: check it before trusting any field.
        let checksummed = version >= 2;
        let total = size as usize - 2 - usize::from(checksummed);
        if checksummed {
            let stored = word(total);
            let mut head = [0u8; 8];
            head[..4].copy_from_slice(&marker.to_le_bytes());
            head[4..].copy_from_slice(&size.to_le_bytes());
            let sum = adler32(adler32(ADLER32_INIT, &head), &rest[..total * 4]);
            if sum != stored {
                let e = RawFileError::StartChecksum {
                    expected: stored,
                    found: sum,
                };
                if strict {
                    return Err(e);
                }
                damaged.get_or_insert(e);
            }
        }
        // The names: in salvage mode a damaged field (a flipped bit in a name, its padding or
        // a length) costs the names only, as a failed checksum does: the record's size was
        // checked above, so the events after it are still found.
        let strings = match start_strings(&word, &rest, total, size) {
            Ok(s) => s,
            Err(e) if !strict => {
                damaged.get_or_insert(e);
                [String::new(), String::new()]
            }
            Err(e) => return Err(e),
        };
        self.pos = size_bytes;
        let [app_name, stream_name] = strings;
        let start = FileStart {
            version,
            sequence: word(1),
            creation_time_ns: u64::from(word(2)) | (u64::from(word(3)) << 32),
            run: word(4),
            lumiblock: word(5),
            app_name,
            stream_name,
        };
        Ok((start, damaged))
    }

    /// Reads the record at `pos`: `Some((offset, flags, checksum))` for a valid event (its
    /// words in `self.words`), `None` for a valid end record.
    fn read_record(&mut self) -> Result<Option<(u64, u32, u32)>, RawFileError> {
        let offset = self.pos;
        let remaining = self.file_len.saturating_sub(offset);
        let index = self.events;
        let file_len = self.file_len;
        let truncated = |record, needed| RawFileError::Truncated {
            record,
            offset,
            needed,
            file_len,
            events: index,
        };
        if remaining == 0 {
            return Err(RawFileError::NoEndRecord {
                offset,
                events: index,
            });
        }
        let header_bytes = u64::from(EVENT_HEADER_WORDS) * 4;
        if remaining < 4 {
            return Err(truncated(RecordKind::Event(index), header_bytes));
        }
        let ([marker], _) = self.read_words::<1>()?;
        match marker {
            EVENT_MARKER => {
                if remaining < header_bytes {
                    let needed = if remaining >= 8 {
                        let ([size], _) = self.read_words::<1>()?;
                        (u64::from(size) * 4).max(header_bytes)
                    } else {
                        header_bytes
                    };
                    return Err(truncated(RecordKind::Event(index), needed));
                }
                let ([size, flags, checksum], rest) = self.read_words::<3>()?;
                if size < EVENT_HEADER_WORDS {
                    return Err(RawFileError::BadRecordSize {
                        index,
                        offset,
                        size_words: size,
                    });
                }
                let needed = u64::from(size) * 4;
                if needed - header_bytes > super::MAX_EVENT_BYTES {
                    return Err(RawFileError::RecordTooLarge {
                        index,
                        offset,
                        size_words: size,
                    });
                }
                if needed > remaining {
                    return Err(truncated(RecordKind::Event(index), needed));
                }
                let mut header = [0u8; 16];
                header[..4].copy_from_slice(&marker.to_le_bytes());
                header[4..].copy_from_slice(&rest[..12]);
                let fragment_bytes = needed - header_bytes;
                let found = self.read_fragment(fragment_bytes)?;
                if found != checksum {
                    return Err(RawFileError::Checksum {
                        index,
                        offset,
                        expected: checksum,
                        found,
                    });
                }
                self.adler = adler32_concat(adler32(self.adler, &header), found, fragment_bytes);
                self.pos += needed;
                self.events += 1;
                self.event_bytes += needed;
                Ok(Some((offset, flags, checksum)))
            }
            END_MARKER => {
                if remaining < END_RECORD_BYTES {
                    return Err(truncated(RecordKind::End, END_RECORD_BYTES));
                }
                let ([size, n_lo, n_hi, b_lo, b_hi, adler, _reserved, trailer], _) =
                    self.read_words::<8>()?;
                let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
                let checks = [
                    (
                        "record size in words",
                        u64::from(END_RECORD_WORDS),
                        u64::from(size),
                    ),
                    ("number of event records", self.events, join(n_lo, n_hi)),
                    ("bytes of event records", self.event_bytes, join(b_lo, b_hi)),
                    (
                        "Adler-32 of event records",
                        u64::from(self.adler),
                        u64::from(adler),
                    ),
                    ("closing marker", u64::from(END_TRAILER), u64::from(trailer)),
                ];
                for (field, expected, found) in checks {
                    if expected != found {
                        return Err(RawFileError::BadEndRecord {
                            offset,
                            field,
                            expected,
                            found,
                            events: index,
                        });
                    }
                }
                if remaining > END_RECORD_BYTES {
                    return Err(RawFileError::TrailingBytes {
                        offset: offset + END_RECORD_BYTES,
                        bytes: remaining - END_RECORD_BYTES,
                        events: index,
                    });
                }
                self.pos += END_RECORD_BYTES;
                Ok(None)
            }
            found => Err(RawFileError::BadMarker {
                index,
                offset,
                expected: EVENT_MARKER,
                found,
            }),
        }
    }

    /// Reads `len` fragment bytes (already checked to lie within the file) into `self.words`;
    /// returns their Adler-32.
    fn read_fragment(&mut self, len: u64) -> Result<u32, RawFileError> {
        self.words.clear();
        self.words.reserve((len / 4) as usize);
        let mut step = std::mem::take(&mut self.step);
        step.resize(STEP_BYTES, 0);
        let mut left = len as usize;
        let mut adler = ADLER32_INIT;
        let result = loop {
            if left == 0 {
                break Ok(adler);
            }
            let n = left.min(STEP_BYTES);
            let buf = &mut step[..n];
            if let Err(e) = self.read_bytes(buf) {
                break Err(e);
            }
            adler = adler32(adler, buf);
            self.words.extend(
                buf.chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
            left -= n;
        };
        self.step = step;
        result
    }
}

impl Iterator for RawFileReader {
    type Item = Result<Event, RawFileError>;

    /// Moves the event's words out of the reader's buffer (no copy: the buffer is allocated
    /// afresh for the next event, which an owned event needs anyway).
    fn next(&mut self) -> Option<Self::Item> {
        let event = self.next_event()?;
        Some(event.map(|e| (e.index, e.offset, e.flags, e.checksum)).map(
            |(index, offset, flags, checksum)| Event {
                index,
                offset,
                flags,
                checksum,
                words: std::mem::take(&mut self.words),
            },
        ))
    }
}

/// Reads and validates a whole file; returns its summary or the first problem.
pub fn verify_file(path: impl AsRef<Path>) -> Result<FileSummary, RawFileError> {
    let mut reader = RawFileReader::open(path)?;
    while let Some(event) = reader.next_event() {
        event?;
    }
    reader.summary().ok_or(RawFileError::NoEndRecord {
        offset: reader.position(),
        events: reader.events_read(),
    })
}

/// The application and stream names of a start record of `total` words after its first two
/// (`word(i)`: word `i` of them, `rest` their bytes), each length and padding checked, and the
/// record's size against what they take.
fn start_strings(
    word: &impl Fn(usize) -> u32,
    rest: &[u8],
    total: usize,
    size: u32,
) -> Result<[String; 2], RawFileError> {
    let mut at = 6;
    let mut strings = [String::new(), String::new()];
    let fields = [
        ("application name", "application name padding"),
        ("stream name", "stream name padding"),
    ];
    for ((field, pad_field), out) in fields.into_iter().zip(strings.iter_mut()) {
        let len = word(at) as usize;
        let room = total.saturating_sub(at + 1) * 4;
        if len > room {
            return Err(RawFileError::BadStart {
                field,
                expected: format!("a length of at most {room} bytes"),
                found: len as u64,
            });
        }
        let begin = (at + 1) * 4;
        let bytes = rest.get(begin..begin + len).unwrap_or(&[]);
        *out = String::from_utf8(bytes.to_vec()).map_err(|_| RawFileError::BadString {
            field,
            offset: (at as u64 + 3) * 4,
        })?;
        // The padding is zero bytes (the spec's): a version-1 record has no checksum, so
        // this is the only way a damaged pad byte is found.
        let pad = rest
            .get(begin + len..begin + len.next_multiple_of(4))
            .unwrap_or(&[]);
        if let Some(&b) = pad.iter().find(|&&b| b != 0) {
            return Err(RawFileError::BadStart {
                field: pad_field,
                expected: "zero bytes".into(),
                found: u64::from(b),
            });
        }
        at += 1 + len.div_ceil(4);
    }
    if at != total {
        return Err(RawFileError::BadStart {
            field: "record size in words",
            expected: (at + 2).to_string(),
            found: u64::from(size),
        });
    }
    Ok(strings)
}
