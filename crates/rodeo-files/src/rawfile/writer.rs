//! The rotating raw-data file writer.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::direct::DirectOut;
use super::{
    file_name, valid_name, FileStart, RawFileError, END_MARKER, END_RECORD_WORDS, END_TRAILER,
    EVENT_HEADER_WORDS, EVENT_MARKER, FORMAT_VERSION, WRITING_SUFFIX,
};
use rodeo_format::checksum::{adler32, adler32_concat, words_as_bytes, ADLER32_INIT};

const END_RECORD_BYTES: u64 = END_RECORD_WORDS as u64 * 4;

/// Configuration of a [`RawFileWriter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFileConfig {
    /// Output directory (must exist).
    pub directory: PathBuf,
    /// Run number.
    pub run: u32,
    /// Luminosity block written in each file's start record.
    pub lumiblock: u32,
    /// Application name (file names and start records).
    pub app_name: String,
    /// Stream name (file names and start records).
    pub stream_name: String,
    /// A file is closed before an event would make it larger than this (a single event larger
    /// than the limit still gets a file of its own). Default 2 GiB.
    pub max_file_bytes: u64,
    /// A file is closed after this many events. Default: unlimited (`u64::MAX`).
    pub max_events_per_file: u64,
    /// The writer refuses to open a file when less than this many bytes are free. Default 64 MiB.
    pub free_disk_margin_bytes: u64,
    /// fsync the file (and then its directory) on close, before and after the rename. Default true.
    pub fsync_on_close: bool,
    /// Size of the write buffer (rounded up to a multiple of 4 KiB). Default 4 MiB.
    pub buffer_bytes: usize,
    /// Write with direct I/O (`O_DIRECT`: the buffer goes to the disk without a copy into the
    /// page cache); a file system that refuses it gets buffered writes
    /// ([`RawFileWriter::direct_io_fallback`] says why). Default true.
    pub direct_io: bool,
    /// Sequence number of the first file. Default 1.
    pub first_sequence: u32,
}

impl RawFileConfig {
    /// A configuration with the defaults documented on each field.
    pub fn new(
        directory: impl Into<PathBuf>,
        run: u32,
        app_name: impl Into<String>,
        stream_name: impl Into<String>,
    ) -> RawFileConfig {
        RawFileConfig {
            directory: directory.into(),
            run,
            lumiblock: 0,
            app_name: app_name.into(),
            stream_name: stream_name.into(),
            max_file_bytes: 2 << 30,
            max_events_per_file: u64::MAX,
            free_disk_margin_bytes: 64 << 20,
            fsync_on_close: true,
            buffer_bytes: 4 << 20,
            direct_io: true,
            first_sequence: 1,
        }
    }
}

/// Where an event was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLocation {
    /// Sequence number of the file (see [`RawFileWriter::current_path`] or the closed-file list).
    pub sequence: u32,
    /// Byte offset of the event record in the file.
    pub offset: u64,
    /// Index of the event within the file (0-based).
    pub index: u64,
}

/// A file closed cleanly (end record written, fsync'ed if configured, renamed; or, when the
/// rename failed because the directory turned read-only, whole under its `.writing` name, with
/// the close's error saying so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedFile {
    /// Final path (the `.writing` one when the rename failed).
    pub path: PathBuf,
    /// File sequence number.
    pub sequence: u32,
    /// Event records in the file.
    pub events: u64,
    /// Bytes of event records.
    pub event_bytes: u64,
    /// Total file size.
    pub file_bytes: u64,
    /// Adler-32 over the event records (as in the end record).
    pub adler: u32,
    /// Adler-32 of every byte of the file (start record, event records, end record) as the
    /// writer meant them (`rodeo run`'s file records), combined from the checksums taken as the
    /// records went into the write buffer, without reading anything: what reading the file
    /// back sums, unless a payload whose checksum the caller gave
    /// ([`RawFileWriter::write_event_summed`]) was damaged before it reached the writer (then
    /// the file disagrees with this sum, as the record with its checksum).
    pub file_adler: u32,
}

impl ClosedFile {
    /// Cross-checks the file on disk against what the writer wrote, without reading the
    /// events back: the file's size, and every field of its end record (read back: 36 bytes)
    /// against the writer's counts and its Adler-32 computed as the records went into the
    /// buffer. With the record checksums computed on the way, this is the logger's check of a
    /// closed file; [`crate::verify::check_file`] re-reads everything (`--verify-after`).
    pub fn check_on_disk(&self) -> Result<(), RawFileError> {
        use std::os::unix::fs::FileExt as _;
        let io_err = |op| {
            let path = self.path.clone();
            move |source| RawFileError::Io { op, path, source }
        };
        let file = File::open(&self.path).map_err(io_err("open"))?;
        let len = file.metadata().map_err(io_err("stat"))?.len();
        let offset = self.file_bytes.saturating_sub(END_RECORD_BYTES);
        let bad = |field, expected: u64, found: u64| RawFileError::BadEndRecord {
            offset,
            field,
            expected,
            found,
            events: self.events,
        };
        if len != self.file_bytes {
            return Err(bad("file size", self.file_bytes, len));
        }
        let mut end = [0u8; END_RECORD_BYTES as usize];
        file.read_exact_at(&mut end, offset)
            .map_err(io_err("read"))?;
        let w = |i: usize| {
            u64::from(u32::from_le_bytes([
                end[4 * i],
                end[4 * i + 1],
                end[4 * i + 2],
                end[4 * i + 3],
            ]))
        };
        let fields = [
            ("marker", u64::from(END_MARKER), w(0)),
            ("size", u64::from(END_RECORD_WORDS), w(1)),
            ("event count", self.events, w(2) | w(3) << 32),
            ("event bytes", self.event_bytes, w(4) | w(5) << 32),
            ("adler32", u64::from(self.adler), w(6)),
            ("trailer", u64::from(END_TRAILER), w(8)),
        ];
        for (field, expected, found) in fields {
            if expected != found {
                return Err(bad(field, expected, found));
            }
        }
        Ok(())
    }
}

/// Writer statistics (64-bit counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Events written.
    pub events: u64,
    /// Bytes of event records written.
    pub event_bytes: u64,
    /// All bytes written (records of every kind).
    pub bytes: u64,
    /// Files opened.
    pub files_opened: u64,
    /// Files closed cleanly.
    pub files_closed: u64,
    /// Files closed because the next event would exceed the size limit.
    pub rotations_by_size: u64,
    /// Files closed because they held the maximum number of events.
    pub rotations_by_count: u64,
}

#[derive(Debug)]
struct OpenFile {
    out: DirectOut,
    writing: PathBuf,
    final_path: PathBuf,
    sequence: u32,
    bytes: u64,
    events: u64,
    event_bytes: u64,
    adler: u32,
    /// Adler-32 of the start record.
    start_adler: u32,
}

/// Writes events into a sequence of raw-data files, rotating by size and event count.
///
/// The first file is opened by [`RawFileWriter::create`] (so a full disk or a bad directory is
/// reported at start); later files are opened when an event needs them. Each file is written
/// under its `.writing` name through one page-aligned buffer (each byte copied into it once),
/// with direct I/O when the file system allows it (`RawFileConfig::direct_io`), and renamed on
/// a clean close.
/// [`RawFileWriter::finish`] closes the last file; a writer dropped without `finish` leaves its
/// file as `.writing` without an end record, exactly as a crash would, and the reader recovers
/// its events.
#[derive(Debug)]
pub struct RawFileWriter {
    config: RawFileConfig,
    current: Option<OpenFile>,
    next_sequence: u32,
    closed: Vec<ClosedFile>,
    stats: WriterStats,
    start_record: Vec<u8>,
    fallback: Option<String>,
    /// The latest group commit asked for ([`RawFileWriter::start_sync`]'s tickets, across files).
    sync_asked: u64,
    /// Every ticket up to this one is durable: asked for in files since closed (and fsync'ed).
    sync_floor: u64,
    /// A file was given up after a failed write: its path and the latest ticket durable then.
    /// Tickets after that one are never reported durable (their events may be lost).
    damaged: Option<(PathBuf, u64)>,
}

impl RawFileWriter {
    /// Validates `config`, checks free disk space and opens the first file.
    pub fn create(config: RawFileConfig) -> Result<RawFileWriter, RawFileError> {
        for (what, name) in [
            ("app_name", &config.app_name),
            ("stream_name", &config.stream_name),
        ] {
            if !valid_name(name) {
                return Err(RawFileError::Config {
                    reason: format!(
                        "{what} {name:?} must be 1 to 255 bytes without '.', '/' or NUL"
                    ),
                });
            }
        }
        if config.max_events_per_file == 0 {
            return Err(RawFileError::Config {
                reason: "max_events_per_file must be at least 1".into(),
            });
        }
        let mut writer = RawFileWriter {
            next_sequence: config.first_sequence,
            config,
            current: None,
            closed: Vec::new(),
            stats: WriterStats::default(),
            start_record: Vec::new(),
            fallback: None,
            sync_asked: 0,
            sync_floor: 0,
            damaged: None,
        };
        writer.open_next()?;
        Ok(writer)
    }

    /// The configuration.
    pub fn config(&self) -> &RawFileConfig {
        &self.config
    }

    /// Statistics so far.
    pub fn stats(&self) -> WriterStats {
        self.stats
    }

    /// Files closed so far, in order.
    pub fn closed_files(&self) -> &[ClosedFile] {
        &self.closed
    }

    /// Whether the open file is written with direct I/O.
    pub fn direct_io(&self) -> bool {
        self.current.as_ref().is_some_and(|f| f.out.is_direct())
    }

    /// Why direct I/O was asked for and refused (the first file system refusal seen by this
    /// writer), for a log line; `None` when it was never refused.
    pub fn direct_io_fallback(&self) -> Option<&str> {
        self.fallback
            .as_deref()
            .or_else(|| self.current.as_ref().and_then(|f| f.out.fallback()))
    }

    /// The `.writing` path of the open file, if one is open.
    pub fn current_path(&self) -> Option<&Path> {
        self.current.as_ref().map(|f| f.writing.as_path())
    }

    /// Writes one event record holding `fragment`.
    pub fn write_event(
        &mut self,
        fragment: &[u32],
        flags: u32,
    ) -> Result<EventLocation, RawFileError> {
        self.write_event_pieces(&[fragment], flags)
    }

    /// Writes one event record holding `fragment` whose Adler-32 (of its bytes, from
    /// [`ADLER32_INIT`]) the caller already knows: `checksum` goes into the record as it is,
    /// and the fragment is only copied, not read a second time to sum it. The caller must have
    /// it from the fragment's writer (a DCM's payload checksum, combined with
    /// `rodeo_format::checksum::adler32_concat`), so that a fragment damaged on the way
    /// disagrees with its record's checksum and every reader finds it.
    pub fn write_event_summed(
        &mut self,
        fragment: &[u32],
        flags: u32,
        checksum: u32,
    ) -> Result<EventLocation, RawFileError> {
        self.write_record_summed(&[fragment], flags, checksum)
    }

    /// Writes one event record whose fragment is the concatenation of `pieces` (scatter-gather:
    /// nothing is joined in memory; the checksum is accumulated piece by piece).
    pub fn write_event_pieces(
        &mut self,
        pieces: &[&[u32]],
        flags: u32,
    ) -> Result<EventLocation, RawFileError> {
        let checksum = pieces
            .iter()
            .fold(ADLER32_INIT, |a, p| adler32(a, words_as_bytes(p)));
        self.write_record_summed(pieces, flags, checksum)
    }

    /// Writes one event record of `pieces` whose fragment bytes have Adler-32 `checksum`.
    fn write_record_summed(
        &mut self,
        pieces: &[&[u32]],
        flags: u32,
        checksum: u32,
    ) -> Result<EventLocation, RawFileError> {
        let words: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        let record_words = words + u64::from(EVENT_HEADER_WORDS);
        let Ok(size_word) = u32::try_from(record_words) else {
            return Err(RawFileError::EventTooLarge { words });
        };
        if words * 4 > super::MAX_EVENT_BYTES {
            return Err(RawFileError::EventTooLarge { words });
        }
        let record_bytes = record_words * 4;
        self.rotate_if_needed(record_bytes)?;
        let Some(file) = self.current.as_mut() else {
            return Err(RawFileError::Config {
                reason: "no open file".into(),
            });
        };
        let mut header = [0u8; 16];
        for (i, w) in [EVENT_MARKER, size_word, flags, checksum]
            .iter()
            .enumerate()
        {
            header[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        let fragment_bytes = words * 4;
        if let Err(source) = write_record(&mut file.out, &header, pieces) {
            // The file is damaged: leave it as `.writing` (a reader recovers the events before
            // this one) and let the next event open a new file.
            let path = file.writing.clone();
            let durable = self.sync_floor.max(file.out.last_synced());
            self.damaged.get_or_insert((path.clone(), durable));
            self.current = None;
            return Err(RawFileError::Io {
                op: "write",
                path,
                source,
            });
        }
        let header_sum = adler32(file.adler, &header);
        file.adler = adler32_concat(header_sum, checksum, fragment_bytes);
        let location = EventLocation {
            sequence: file.sequence,
            offset: file.bytes,
            index: file.events,
        };
        file.bytes += record_bytes;
        file.events += 1;
        file.event_bytes += record_bytes;
        self.stats.events += 1;
        self.stats.event_bytes += record_bytes;
        self.stats.bytes += record_bytes;
        Ok(location)
    }

    /// Makes every event written so far durable: flushes the buffer and `fdatasync`s the open
    /// file, waiting for it ([`RawFileWriter::start_sync`] does not wait). Events in files
    /// already closed were synced at close (with `fsync_on_close`).
    pub fn sync(&mut self) -> Result<(), RawFileError> {
        let ticket = self.start_sync()?;
        self.wait_synced(ticket)
    }

    /// Waits until the group commit `ticket` of [`RawFileWriter::start_sync`] is on disk (or
    /// its write or sync failed: the error).
    pub fn wait_synced(&mut self, ticket: u64) -> Result<(), RawFileError> {
        if self.synced()? >= ticket {
            return Ok(());
        }
        let Some(f) = self.current.as_mut() else {
            return Err(RawFileError::Config {
                reason: format!("group commit {ticket} is not the open file's: never synced"),
            });
        };
        f.out
            .wait_synced(ticket)
            .map_err(|source| RawFileError::Io {
                op: "fdatasync",
                path: f.writing.clone(),
                source,
            })
    }

    /// Starts a group commit of every event written so far and returns its ticket, without
    /// waiting: the writer thread writes what is buffered and `fdatasync`s the file after the
    /// buffers before it, while the caller goes on writing. A logger acknowledges the events
    /// written before the call once [`RawFileWriter::synced`] reaches the ticket.
    pub fn start_sync(&mut self) -> Result<u64, RawFileError> {
        let Some(f) = self.current.as_mut() else {
            return Ok(self.sync_asked);
        };
        self.sync_asked += 1;
        f.out
            .start_sync(self.sync_asked)
            .map_err(|source| RawFileError::Io {
                op: "fdatasync",
                path: f.writing.clone(),
                source,
            })?;
        Ok(self.sync_asked)
    }

    /// The latest ticket of [`RawFileWriter::start_sync`] whose events are durable, without
    /// waiting. A failed write or sync of the open file is returned (the file is damaged: its
    /// events after the last ticket reached are not on disk).
    pub fn synced(&mut self) -> Result<u64, RawFileError> {
        if let Some((path, durable)) = &self.damaged {
            return Err(RawFileError::Io {
                op: "write",
                path: path.clone(),
                source: io::Error::other(format!(
                    "a write to this file failed: events after group commit {durable} may not \
                     be on disk"
                )),
            });
        }
        let floor = self.sync_floor;
        let Some(f) = self.current.as_mut() else {
            return Ok(floor);
        };
        let done = f.out.synced().map_err(|source| RawFileError::Io {
            op: "fdatasync",
            path: f.writing.clone(),
            source,
        })?;
        Ok(floor.max(done))
    }

    /// The latest ticket known durable, without looking for news (after [`RawFileWriter::synced`]
    /// returned an error: what was durable before the failure).
    pub fn last_synced(&self) -> u64 {
        let open = self.current.as_ref().map_or(0, |f| f.out.last_synced());
        self.sync_floor.max(open)
    }

    /// Closes the open file (if it holds any event) so the next event starts a new one; the
    /// lumiblock of the next file's start record becomes `lumiblock`.
    pub fn rotate(&mut self, lumiblock: u32) -> Result<(), RawFileError> {
        self.config.lumiblock = lumiblock;
        match self.current.take() {
            Some(f) if f.events == 0 => {
                // Nothing written yet: drop the empty file and reuse its sequence number, so the
                // next file's start record carries the new lumiblock.
                self.next_sequence = f.sequence;
                let OpenFile { out, writing, .. } = f;
                drop(out);
                // No event in it: nothing asked for there needs the disk.
                self.sync_floor = self.sync_asked;
                fs::remove_file(&writing).map_err(|source| RawFileError::Io {
                    op: "remove",
                    path: writing,
                    source,
                })
            }
            Some(f) => {
                self.current = Some(f);
                self.close_current()
            }
            None => Ok(()),
        }
    }

    /// Closes the last file cleanly and returns every file closed by this writer.
    pub fn finish(mut self) -> Result<Vec<ClosedFile>, RawFileError> {
        self.close_current()?;
        Ok(std::mem::take(&mut self.closed))
    }

    /// Gives up the open file as a crash would (after a write or sync failed, e.g. the disk is
    /// full: closing it would need more room): it stays `.writing` without an end record, and
    /// a reader recovers its complete events. Returns the files closed before.
    pub fn abandon(mut self) -> Vec<ClosedFile> {
        self.current = None;
        std::mem::take(&mut self.closed)
    }

    fn rotate_if_needed(&mut self, record_bytes: u64) -> Result<(), RawFileError> {
        if let Some(f) = &self.current {
            if f.events == 0 {
                return Ok(());
            }
            if f.events >= self.config.max_events_per_file {
                self.stats.rotations_by_count += 1;
            } else if f.bytes + record_bytes + END_RECORD_BYTES > self.config.max_file_bytes {
                self.stats.rotations_by_size += 1;
            } else {
                return Ok(());
            }
            self.close_current()?;
        }
        self.open_next()
    }

    fn open_next(&mut self) -> Result<(), RawFileError> {
        let dir = &self.config.directory;
        let free = free_disk_bytes(dir)?;
        if free < self.config.free_disk_margin_bytes {
            return Err(RawFileError::DiskSpace {
                dir: dir.clone(),
                free,
                margin: self.config.free_disk_margin_bytes,
            });
        }
        let sequence = self.next_sequence;
        let name = file_name(
            self.config.run,
            &self.config.stream_name,
            &self.config.app_name,
            sequence,
        );
        let final_path = dir.join(&name);
        let writing = dir.join(format!("{name}{WRITING_SUFFIX}"));
        if final_path.exists() {
            return Err(RawFileError::AlreadyExists { path: final_path });
        }
        let mut out =
            match DirectOut::create(&writing, self.config.buffer_bytes, self.config.direct_io) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(RawFileError::AlreadyExists { path: writing })
                }
                Err(source) => {
                    return Err(RawFileError::Io {
                        op: "create",
                        path: writing,
                        source,
                    })
                }
            };
        let start = FileStart {
            version: FORMAT_VERSION,
            sequence,
            creation_time_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            run: self.config.run,
            lumiblock: self.config.lumiblock,
            app_name: self.config.app_name.clone(),
            stream_name: self.config.stream_name.clone(),
        };
        self.start_record.clear();
        start.encode(&mut self.start_record);
        out.write_all(&self.start_record)
            .map_err(|source| RawFileError::Io {
                op: "write",
                path: writing.clone(),
                source,
            })?;
        let bytes = self.start_record.len() as u64;
        self.stats.bytes += bytes;
        self.stats.files_opened += 1;
        self.next_sequence = sequence.wrapping_add(1);
        self.current = Some(OpenFile {
            out,
            writing,
            final_path,
            sequence,
            bytes,
            events: 0,
            event_bytes: 0,
            adler: ADLER32_INIT,
            start_adler: adler32(ADLER32_INIT, &self.start_record),
        });
        Ok(())
    }

    fn close_current(&mut self) -> Result<(), RawFileError> {
        let Some(mut f) = self.current.take() else {
            return Ok(());
        };
        if self.fallback.is_none() {
            self.fallback = f.out.fallback().map(str::to_string);
        }
        let mut end = [0u8; END_RECORD_BYTES as usize];
        let words = [
            END_MARKER,
            END_RECORD_WORDS,
            f.events as u32,
            (f.events >> 32) as u32,
            f.event_bytes as u32,
            (f.event_bytes >> 32) as u32,
            f.adler,
            0,
            END_TRAILER,
        ];
        for (i, w) in words.iter().enumerate() {
            end[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        let err = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| RawFileError::Io { op, path, source }
        };
        let fsync = self.config.fsync_on_close;
        let written = f
            .out
            .write_all(&end)
            .and_then(|()| f.out.finish())
            .map_err(err("write", &f.writing))
            .and_then(|()| match fsync {
                true => f.out.sync_all().map_err(err("fsync", &f.writing)),
                false => Ok(()),
            });
        if let Err(e) = written {
            // The file stays `.writing`; group commits asked for after the last one done are
            // not known to be on disk.
            let durable = self.sync_floor.max(f.out.last_synced());
            self.damaged.get_or_insert((f.writing.clone(), durable));
            return Err(e);
        }
        drop(f.out);
        // Everything asked for in this file is on disk now (its sync jobs ran before the
        // close's writes, and the close synced).
        self.sync_floor = self.sync_asked;
        let file_bytes = f.bytes + END_RECORD_BYTES;
        self.stats.bytes += END_RECORD_BYTES;
        let renamed = fs::rename(&f.writing, &f.final_path);
        // The file is the start record, the event records and the end record, nothing else.
        let file_adler = adler32(adler32_concat(f.start_adler, f.adler, f.event_bytes), &end);
        let mut closed = ClosedFile {
            path: f.final_path,
            sequence: f.sequence,
            events: f.events,
            event_bytes: f.event_bytes,
            file_bytes,
            adler: f.adler,
            file_adler,
        };
        if let Err(source) = renamed {
            // The file is whole (end record written, synced) but keeps its `.writing` name
            // (its directory turned read-only): listed under that name, the error says why.
            closed.path = f.writing.clone();
            self.closed.push(closed);
            return Err(RawFileError::Io {
                op: "rename",
                path: f.writing,
                source,
            });
        }
        if self.config.fsync_on_close {
            File::open(&self.config.directory)
                .and_then(|d| d.sync_all())
                .map_err(err("fsync", &self.config.directory))?;
        }
        self.stats.files_closed += 1;
        self.closed.push(closed);
        Ok(())
    }
}

fn write_record(out: &mut DirectOut, header: &[u8], pieces: &[&[u32]]) -> io::Result<()> {
    out.write_all(header)?;
    for p in pieces {
        out.write_all(words_as_bytes(p))?;
    }
    Ok(())
}

/// Bytes available to unprivileged users on the file system holding `dir`
/// ([`crate::space::free_space`]), as the writers' error.
pub fn free_disk_bytes(dir: &Path) -> Result<u64, RawFileError> {
    crate::space::free_space(dir)
        .map(|f| f.available)
        .map_err(|source| RawFileError::Io {
            op: "statvfs",
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statvfs_reports_free_space() {
        let dir = std::env::temp_dir();
        assert!(free_disk_bytes(&dir).unwrap() > 0);
        let missing = dir.join("rodeo-no-such-directory-for-statvfs");
        assert!(matches!(
            free_disk_bytes(&missing),
            Err(RawFileError::Io { op: "statvfs", .. })
        ));
    }
}
