//! The EventStorage version 5 writer: ATLAS file names, metadata records, rotation, `.writing`
//! until closed, optional zlib data blocks.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{
    date_time, file_name, file_name_core, new_guid, now_seconds, push_string, valid_name_part,
    EsError, RunParameters, COMPRESSION_TAG, DATA_SEPARATOR_MARKER, DATA_SEPARATOR_WORDS,
    FILE_END_LAST, FILE_END_MARKER, FILE_END_WORDS, FILE_NAME_MARKER, FILE_START_MARKER,
    FILE_START_WORDS, FREE_STRINGS_MARKER, WRITE_VERSION, WRITING_SUFFIX,
};
use crate::rawfile::free_disk_bytes;
use rodeo_format::checksum::words_as_bytes;
use rodeo_format::compress::{decompress_event, COMPRESSION_ZSTD};
use rodeo_format::fragment::FullEvent;

const END_BYTES: u64 = FILE_END_WORDS as u64 * 4;
const SEPARATOR_BYTES: u64 = DATA_SEPARATOR_WORDS as u64 * 4;
const MIB: u64 = 1 << 20;

/// How data blocks are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EsCompression {
    /// Plain full events.
    #[default]
    None,
    /// Each event one zlib stream (`Compression=zlib`), at this level (1 fastest .. 9 smallest).
    Zlib {
        /// zlib level, 1 to 9.
        level: u32,
    },
}

impl EsCompression {
    /// The option's name as configuration files spell it: `none` or `zlib` (level 1, what
    /// ATLAS's writer uses by default); anything else, `zstd` included, is refused with an error
    /// naming the option, because ATLAS readers have no other codec.
    pub fn from_name(name: &str) -> Result<EsCompression, EsError> {
        match name {
            "none" => Ok(EsCompression::None),
            "zlib" => Ok(EsCompression::Zlib { level: 1 }),
            other => Err(EsError::Config {
                reason: format!(
                    "compression = {other:?} is not available for EventStorage output: ATLAS \
                     readers decompress zlib only; use \"zlib\" or \"none\" (zstd is an option \
                     of rodeo's own container, format = \"rodeo\")"
                ),
            }),
        }
    }

    /// The name written in the `Compression=` free string, if any.
    pub fn free_string_value(&self) -> Option<&'static str> {
        match self {
            EsCompression::None => None,
            EsCompression::Zlib { .. } => Some("zlib"),
        }
    }
}

/// Configuration of an [`EsWriter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsWriterConfig {
    /// Output directory (must exist).
    pub directory: PathBuf,
    /// Project tag (first part of the file name, `Project=`), e.g. `data25_test`.
    pub project: String,
    /// Stream type, e.g. `physics` (no `_`).
    pub stream_type: String,
    /// Stream name, e.g. `Main`.
    pub stream_name: String,
    /// Application name (file name and file name strings).
    pub app_name: String,
    /// Luminosity block of the first file (file name, `LumiBlock=`).
    pub lumiblock: u32,
    /// The run parameters record; its run number names the files.
    pub run: RunParameters,
    /// Data block compression. Default none.
    pub compression: EsCompression,
    /// Free strings written after `GUID=` and before `Stream=`.
    pub extra_free_strings: Vec<String>,
    /// A file is closed before an event would make it larger (a single larger event still gets
    /// a file). Default 2 GiB.
    pub max_file_bytes: u64,
    /// A file is closed after this many events. Default unlimited (`u64::MAX`).
    pub max_events_per_file: u64,
    /// The writer refuses to open a file when less than this many bytes are free. Default 64 MiB.
    pub free_disk_margin_bytes: u64,
    /// fsync the file before the rename and the directory after it. Default true.
    pub fsync_on_close: bool,
    /// Write buffer size. Default 4 MiB.
    pub buffer_bytes: usize,
    /// File number of the first file. Default 1.
    pub first_file_number: u32,
}

impl EsWriterConfig {
    /// A configuration with the defaults documented on each field.
    pub fn new(
        directory: impl Into<PathBuf>,
        project: impl Into<String>,
        run_number: u32,
        stream_type: impl Into<String>,
        stream_name: impl Into<String>,
        app_name: impl Into<String>,
    ) -> EsWriterConfig {
        EsWriterConfig {
            directory: directory.into(),
            project: project.into(),
            stream_type: stream_type.into(),
            stream_name: stream_name.into(),
            app_name: app_name.into(),
            lumiblock: 0,
            run: RunParameters {
                run_number,
                ..RunParameters::default()
            },
            compression: EsCompression::None,
            extra_free_strings: Vec::new(),
            max_file_bytes: 2 << 30,
            max_events_per_file: u64::MAX,
            free_disk_margin_bytes: 64 << 20,
            fsync_on_close: true,
            buffer_bytes: 4 << 20,
            first_file_number: 1,
        }
    }

    fn check(&self) -> Result<(), EsError> {
        let parts = [
            ("project", &self.project),
            ("stream_name", &self.stream_name),
            ("app_name", &self.app_name),
        ];
        for (what, v) in parts {
            if !valid_name_part(v) {
                return Err(EsError::Config {
                    reason: format!(
                        "{what} {v:?} must be 1 to 255 ASCII letters, digits, '-' or '_' (it is \
                         part of the file name)"
                    ),
                });
            }
        }
        if !valid_name_part(&self.stream_type) || self.stream_type.contains('_') {
            return Err(EsError::Config {
                reason: format!(
                    "stream_type {:?} must be 1 to 255 ASCII letters, digits or '-' (the file \
                     name joins it to the stream name with '_')",
                    self.stream_type
                ),
            });
        }
        if let EsCompression::Zlib { level } = self.compression {
            if !(1..=9).contains(&level) {
                return Err(EsError::Config {
                    reason: format!("zlib level {level} is outside 1..=9"),
                });
            }
        }
        if self.max_events_per_file == 0 {
            return Err(EsError::Config {
                reason: "max_events_per_file must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// A file closed cleanly (end record written, synced if configured, renamed; or whole under
/// its `.writing` name when the rename failed, the close's error saying why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedEsFile {
    /// Final path (the `.writing` one when the rename failed).
    pub path: PathBuf,
    /// File number.
    pub file_number: u32,
    /// The GUID in its free strings.
    pub guid: String,
    /// Events in the file.
    pub events: u64,
    /// Bytes of data blocks (as stored, compressed or not).
    pub data_bytes: u64,
    /// File size in bytes.
    pub file_bytes: u64,
}

#[derive(Debug)]
struct OpenFile {
    out: BufWriter<File>,
    writing: PathBuf,
    final_path: PathBuf,
    file_number: u32,
    guid: String,
    bytes: u64,
    events: u64,
    data_bytes: u64,
}

/// Writes full events into EventStorage version 5 files, rotating by size and event count.
///
/// The first file is opened by [`EsWriter::create`] (a bad directory or a full disk is reported
/// at once). Files are written under their `.writing` name and renamed after the end record is
/// written and the file is synced; [`EsWriter::finish`] closes the last one with status 1 (the
/// run's last file). A writer dropped without `finish` leaves a `.writing` file without an end
/// record, as a crash would; the reader recovers its events.
#[derive(Debug)]
pub struct EsWriter {
    config: EsWriterConfig,
    current: Option<OpenFile>,
    next_file_number: u32,
    closed: Vec<ClosedEsFile>,
    run_events: u64,
    run_data_bytes: u64,
    plain: Vec<u32>,
    packed: Vec<u8>,
}

impl EsWriter {
    /// Validates `config` and opens the first file.
    pub fn create(config: EsWriterConfig) -> Result<EsWriter, EsError> {
        config.check()?;
        let mut w = EsWriter {
            next_file_number: config.first_file_number,
            config,
            current: None,
            closed: Vec::new(),
            run_events: 0,
            run_data_bytes: 0,
            plain: Vec::new(),
            packed: Vec::new(),
        };
        w.open_next()?;
        Ok(w)
    }

    /// The configuration.
    pub fn config(&self) -> &EsWriterConfig {
        &self.config
    }

    /// Files closed so far.
    pub fn closed_files(&self) -> &[ClosedEsFile] {
        &self.closed
    }

    /// The `.writing` path of the open file.
    pub fn current_path(&self) -> Option<&Path> {
        self.current.as_ref().map(|f| f.writing.as_path())
    }

    /// Events written by this writer.
    pub fn events(&self) -> u64 {
        self.run_events
    }

    /// Bytes of data blocks written by this writer, as stored (compressed or not).
    pub fn data_bytes(&self) -> u64 {
        self.run_data_bytes
    }

    /// Writes one eformat 5 full event as one data block. A zstd-compressed event (rodeo's
    /// compression type 1) is decompressed first, because a 1 in an ATLAS file means a zlib
    /// payload; returns the byte offset of the data separator in the current file.
    pub fn write_event(&mut self, event: &[u32]) -> Result<u64, EsError> {
        let index = self.run_events;
        let bad = |reason: String| EsError::BadEvent { index, reason };
        let e = FullEvent::parse(event).map_err(|e| bad(e.to_string()))?;
        let plain = match e.compression() {
            0 => false,
            COMPRESSION_ZSTD => {
                decompress_event(event, &mut self.plain).map_err(|e| bad(e.to_string()))?;
                true
            }
            other => return Err(bad(format!("unknown compression type {other}"))),
        };
        let zlib = match self.config.compression {
            EsCompression::None => false,
            EsCompression::Zlib { level } => {
                let words = if plain { &self.plain[..] } else { event };
                let mut buf = std::mem::take(&mut self.packed);
                buf.clear();
                let mut z = flate2::write::ZlibEncoder::new(buf, flate2::Compression::new(level));
                let mut packed = z
                    .write_all(words_as_bytes(words))
                    .and_then(|()| z.finish())
                    .map_err(|source| EsError::Compress { index, source })?;
                packed.resize(packed.len().next_multiple_of(4), 0);
                self.packed = packed;
                true
            }
        };
        let len = match (zlib, plain) {
            (true, _) => self.packed.len() as u64,
            (false, true) => self.plain.len() as u64 * 4,
            (false, false) => event.len() as u64 * 4,
        };
        let Ok(size_word) = u32::try_from(len) else {
            return Err(EsError::EventTooLarge { bytes: len });
        };
        self.rotate_if_needed(SEPARATOR_BYTES + len)?;
        let block: &[u8] = match (zlib, plain) {
            (true, _) => &self.packed,
            (false, true) => words_as_bytes(&self.plain),
            (false, false) => words_as_bytes(event),
        };
        let Some(f) = self.current.as_mut() else {
            return Err(EsError::Config {
                reason: "no open file".into(),
            });
        };
        let block_number = (self.run_events + 1) as u32;
        let mut sep = [0u8; SEPARATOR_BYTES as usize];
        for (i, w) in [
            DATA_SEPARATOR_MARKER,
            DATA_SEPARATOR_WORDS,
            block_number,
            size_word,
        ]
        .iter()
        .enumerate()
        {
            sep[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        let offset = f.bytes;
        if let Err(source) = f.out.write_all(&sep).and_then(|()| f.out.write_all(block)) {
            // The file is damaged: leave it as `.writing` (its events before this one are
            // recoverable) and let the next event open a new file.
            let path = f.writing.clone();
            self.current = None;
            return Err(EsError::Io {
                op: "write",
                path,
                source,
            });
        }
        f.bytes += SEPARATOR_BYTES + len;
        f.events += 1;
        f.data_bytes += len;
        self.run_events += 1;
        self.run_data_bytes += len;
        Ok(offset)
    }

    /// Flushes the buffer and `fdatasync`s the open file.
    pub fn sync(&mut self) -> Result<(), EsError> {
        let Some(f) = self.current.as_mut() else {
            return Ok(());
        };
        let r = f.out.flush().and_then(|()| f.out.get_ref().sync_data());
        r.map_err(|source| EsError::Io {
            op: "fdatasync",
            path: f.writing.clone(),
            source,
        })
    }

    /// Closes the open file (if it holds events) so that the next event starts a new file of
    /// luminosity block `lumiblock` (ATLAS files hold one luminosity block each).
    pub fn rotate(&mut self, lumiblock: u32) -> Result<(), EsError> {
        self.config.lumiblock = lumiblock;
        match self.current.take() {
            Some(f) if f.events == 0 => {
                self.next_file_number = f.file_number;
                let OpenFile { out, writing, .. } = f;
                drop(out);
                fs::remove_file(&writing).map_err(|source| EsError::Io {
                    op: "remove",
                    path: writing,
                    source,
                })
            }
            Some(f) => {
                self.current = Some(f);
                self.close_current(false)
            }
            None => Ok(()),
        }
    }

    /// Closes the last file (status 1: the run's last file) and returns every closed file.
    pub fn finish(mut self) -> Result<Vec<ClosedEsFile>, EsError> {
        self.close_current(true)?;
        Ok(std::mem::take(&mut self.closed))
    }

    /// Gives up the open file as a crash would (after a write or sync failed, e.g. the disk is
    /// full): it stays `.writing` without an end record. Returns the files closed before.
    pub fn abandon(mut self) -> Vec<ClosedEsFile> {
        self.current = None;
        std::mem::take(&mut self.closed)
    }

    fn rotate_if_needed(&mut self, record_bytes: u64) -> Result<(), EsError> {
        if let Some(f) = &self.current {
            if f.events == 0 {
                return Ok(());
            }
            let full = f.events >= self.config.max_events_per_file
                || f.bytes + record_bytes + END_BYTES > self.config.max_file_bytes;
            if !full {
                return Ok(());
            }
            self.close_current(false)?;
        }
        self.open_next()
    }

    fn header_records(&self, file_number: u32, guid: &str) -> Vec<u8> {
        let c = &self.config;
        let (date, time) = date_time(now_seconds());
        let blocks_limit = if c.max_events_per_file == u64::MAX {
            0
        } else {
            c.max_events_per_file.min(u64::from(u32::MAX)) as u32
        };
        let mb_limit = (c.max_file_bytes / MIB).min(u64::from(u32::MAX)) as u32;
        let mut out = Vec::new();
        for w in [
            FILE_START_MARKER,
            FILE_START_WORDS,
            WRITE_VERSION,
            file_number,
            date,
            time,
            blocks_limit,
            mb_limit,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&FILE_NAME_MARKER.to_le_bytes());
        push_string(&mut out, &c.app_name);
        let core = file_name_core(
            &c.project,
            c.run.run_number,
            &c.stream_type,
            &c.stream_name,
            c.lumiblock,
            &c.app_name,
        );
        push_string(&mut out, &core);
        let mut strings = vec![format!("GUID={guid}")];
        strings.extend(c.extra_free_strings.iter().cloned());
        strings.push(format!("Stream={}_{}", c.stream_type, c.stream_name));
        strings.push(format!("Project={}", c.project));
        strings.push(format!("LumiBlock={}", c.lumiblock));
        if let Some(codec) = c.compression.free_string_value() {
            strings.push(format!("{COMPRESSION_TAG}={codec}"));
        }
        out.extend_from_slice(&FREE_STRINGS_MARKER.to_le_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        for s in &strings {
            push_string(&mut out, s);
        }
        for w in c.run.words(WRITE_VERSION) {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    fn open_next(&mut self) -> Result<(), EsError> {
        let dir = self.config.directory.clone();
        let free = free_disk_bytes(&dir).map_err(|e| EsError::Config {
            reason: format!("output directory: {e}"),
        })?;
        if free < self.config.free_disk_margin_bytes {
            return Err(EsError::DiskSpace {
                dir,
                free,
                margin: self.config.free_disk_margin_bytes,
            });
        }
        let file_number = self.next_file_number;
        let c = &self.config;
        let name = file_name(
            &c.project,
            c.run.run_number,
            &c.stream_type,
            &c.stream_name,
            c.lumiblock,
            &c.app_name,
            file_number,
        );
        let final_path = dir.join(&name);
        let writing = dir.join(format!("{name}{WRITING_SUFFIX}"));
        if final_path.exists() {
            return Err(EsError::AlreadyExists { path: final_path });
        }
        let file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&writing)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(EsError::AlreadyExists { path: writing })
            }
            Err(source) => {
                return Err(EsError::Io {
                    op: "create",
                    path: writing,
                    source,
                })
            }
        };
        let guid = new_guid();
        let header = self.header_records(file_number, &guid);
        let mut out = BufWriter::with_capacity(self.config.buffer_bytes.max(4096), file);
        out.write_all(&header).map_err(|source| EsError::Io {
            op: "write",
            path: writing.clone(),
            source,
        })?;
        self.next_file_number = file_number.wrapping_add(1);
        self.current = Some(OpenFile {
            out,
            writing,
            final_path,
            file_number,
            guid,
            bytes: header.len() as u64,
            events: 0,
            data_bytes: 0,
        });
        Ok(())
    }

    fn close_current(&mut self, last: bool) -> Result<(), EsError> {
        let Some(mut f) = self.current.take() else {
            return Ok(());
        };
        let (date, time) = date_time(now_seconds());
        let mb = |bytes: u64| ((bytes + MIB / 2) / MIB).min(u64::from(u32::MAX)) as u32;
        let words = [
            FILE_END_MARKER,
            FILE_END_WORDS,
            date,
            time,
            f.events.min(u64::from(u32::MAX)) as u32,
            mb(f.data_bytes),
            self.run_events.min(u64::from(u32::MAX)) as u32,
            mb(self.run_data_bytes),
            u32::from(last),
            FILE_END_LAST,
        ];
        let mut end = [0u8; END_BYTES as usize];
        for (i, w) in words.iter().enumerate() {
            end[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        let err = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| EsError::Io { op, path, source }
        };
        f.out.write_all(&end).map_err(err("write", &f.writing))?;
        let file = f.out.into_inner().map_err(|e| EsError::Io {
            op: "flush",
            path: f.writing.clone(),
            source: e.into_error(),
        })?;
        if self.config.fsync_on_close {
            file.sync_all().map_err(err("fsync", &f.writing))?;
        }
        drop(file);
        let renamed = fs::rename(&f.writing, &f.final_path);
        let mut closed = ClosedEsFile {
            path: f.final_path,
            file_number: f.file_number,
            guid: f.guid,
            events: f.events,
            data_bytes: f.data_bytes,
            file_bytes: f.bytes + END_BYTES,
        };
        if let Err(source) = renamed {
            // Whole and synced, but its directory turned read-only: listed as `.writing`.
            closed.path = f.writing.clone();
            self.closed.push(closed);
            return Err(EsError::Io {
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
        self.closed.push(closed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zstd_is_refused_by_name() {
        let e = EsCompression::from_name("zstd").unwrap_err();
        assert!(e.to_string().contains("zstd") && e.to_string().contains("zlib"));
        assert_eq!(
            EsCompression::from_name("zlib").unwrap(),
            EsCompression::Zlib { level: 1 }
        );
    }

    #[test]
    fn bad_names_are_refused() {
        let dir = std::env::temp_dir();
        let mut c = EsWriterConfig::new(&dir, "data25", 1, "physics", "Main", "app");
        c.stream_type = "phys_ics".into();
        assert!(matches!(EsWriter::create(c), Err(EsError::Config { .. })));
        let c = EsWriterConfig::new(&dir, "da.ta", 1, "physics", "Main", "app");
        assert!(matches!(EsWriter::create(c), Err(EsError::Config { .. })));
    }
}
