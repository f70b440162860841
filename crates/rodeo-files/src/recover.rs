//! Recovery of the raw-data files a logger left open when it died (killed with -9, crashed):
//! what a restarted logger does before it writes anything.
//!
//! A file being written is named `<name>.writing` and has no end record. [`recover_files`]
//! finds every such file of one run and application in a directory and turns it into a
//! closed file of the same name without the suffix: it keeps every complete event (each
//! record whose checksum is right, up to the first damaged or cut record, which a kill in the
//! middle of a write leaves at the end), writes them into a new file with the writer (so the
//! start record, the end record with its count, bytes and checksum, the fsyncs and the rename
//! are the writer's own), and removes the old one. The new start record is made from the file
//! name (run, stream, application, sequence) in the current format version, whichever version
//! the old file was; an old start record that fails its checksum does not cost the events
//! ([`Recovered::start_damaged`]). The global ids of the kept events are
//! handed back, so the logger drops the copies of those events that senders resend (their
//! acknowledgement was lost with the process).
//!
//! # Crash safety
//!
//! The old file is first renamed `<name>.recovering`; its events are copied into
//! `<name>.writing`, which the writer renames `<name>` when it is closed; then
//! `<name>.recovering` is removed, unless the copy stopped at damage rather than at the cut a
//! kill leaves (a record with a bad marker, size or checksum, a read error, a start record too
//! damaged to find the events after it): then the old file is kept as `<name>.damaged`
//! ([`Recovered::kept_damaged`]) for an expert to look at, since what follows the damage may
//! still hold events. A recovery that dies half-way leaves `<name>.recovering`
//! (and maybe a `<name>.writing` copy, removed and made again): the next recovery starts again
//! from it. No event is ever held only in a file that is being rewritten.
//!
//! [`next_sequence`] gives the first file sequence number a restarted logger may use for a
//! stream, so it never writes over a file of its previous life.

use std::path::{Path, PathBuf};

use rodeo_format::fragment::FullEvent;

use crate::rawfile::{parse_file_name, RawFileConfig, RawFileError, RawFileReader, RawFileWriter};

/// Suffix of a file being recovered (see the module docs).
pub const RECOVERING_SUFFIX: &str = ".recovering";
/// Suffix of an old file kept because its copy stopped at damage (see the module docs).
pub const DAMAGED_SUFFIX: &str = ".damaged";

/// One file recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The closed file (its name without `.writing`).
    pub path: PathBuf,
    /// Its stream.
    pub stream: String,
    /// Its file sequence number.
    pub sequence: u32,
    /// Complete events kept.
    pub events: u64,
    /// Bytes of the events' fragments kept.
    pub event_bytes: u64,
    /// Global ids of the kept events (an event whose header does not parse has none).
    pub global_ids: Vec<u64>,
    /// Why the copy stopped before the end of the old file (a cut or damaged record), if it
    /// did: the bytes after it were dropped.
    pub dropped_tail: Option<String>,
    /// The old file's start record failed its checksum (format version 2): its events were
    /// kept (each checked by its own record checksum) and the new start record was made from
    /// the file name, as always.
    pub start_damaged: Option<String>,
    /// The old file, kept under this name (`<name>.damaged`) because the copy stopped at
    /// damage, not at the cut a kill leaves (module docs).
    pub kept_damaged: Option<PathBuf>,
}

/// Why a recovery failed.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The directory could not be listed, or a file renamed or removed.
    #[error("recovering {path}: {source}; check the permissions of the directory")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The recovered copy could not be written.
    #[error("recovering {path}: writing the copy: {source}")]
    Write {
        /// The file recovered.
        path: PathBuf,
        /// The cause.
        source: RawFileError,
    },
}

/// Every `.writing` (and half-recovered `.recovering`) file of run `run` and application `app`
/// in `dir`, recovered (module docs), in name order.
pub fn recover_files(dir: &Path, run: u32, app: &str) -> Result<Vec<Recovered>, RecoverError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecoverError::Io { path, source }
    };
    let mut todo: Vec<(PathBuf, String, u32, bool)> = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // No directory yet: nothing was written there.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (base, recovering) = match name.strip_suffix(RECOVERING_SUFFIX) {
            Some(b) => (b, true),
            None => (name, false),
        };
        let Some((r, stream, a, seq, writing)) = parse_file_name(base) else {
            continue;
        };
        if r != run || a != app || (writing == recovering) {
            // A closed file, or a `.writing` name with `.recovering` (never made).
            continue;
        }
        todo.push((entry.path(), stream.to_string(), seq, recovering));
    }
    todo.sort();
    // A `.recovering` file wins over a `.writing` copy of the same name (an interrupted
    // recovery): that copy is incomplete and made again.
    let mut out = Vec::new();
    for (path, stream, seq, recovering) in &todo {
        let closed = dir.join(crate::rawfile::file_name(run, stream, app, *seq));
        let writing = PathBuf::from(format!(
            "{}{}",
            closed.display(),
            crate::rawfile::WRITING_SUFFIX
        ));
        let old = PathBuf::from(format!("{}{RECOVERING_SUFFIX}", closed.display()));
        if !recovering {
            if todo
                .iter()
                .any(|(_, s, q, r)| *r && s == stream && q == seq)
            {
                continue;
            }
            std::fs::rename(path, &old).map_err(io(path))?;
        } else if writing.exists() {
            std::fs::remove_file(&writing).map_err(io(&writing))?;
        }
        let (mut r, damage) = copy_complete_events(&old, dir, run, app, stream, *seq)?;
        if damage {
            let kept = PathBuf::from(format!("{}{DAMAGED_SUFFIX}", closed.display()));
            std::fs::rename(&old, &kept).map_err(io(&old))?;
            r.kept_damaged = Some(kept);
        } else {
            std::fs::remove_file(&old).map_err(io(&old))?;
        }
        out.push(r);
    }
    Ok(out)
}

/// Copies the complete events of `old` into a new closed file of the same name; true beside
/// it when the copy stopped at damage, not at the cut a kill leaves (the old file is then
/// kept).
fn copy_complete_events(
    old: &Path,
    dir: &Path,
    run: u32,
    app: &str,
    stream: &str,
    sequence: u32,
) -> Result<(Recovered, bool), RecoverError> {
    let werr = |source| RecoverError::Write {
        path: old.to_path_buf(),
        source,
    };
    let mut cfg = RawFileConfig::new(dir, run, app, stream);
    cfg.first_sequence = sequence;
    cfg.max_file_bytes = u64::MAX;
    // A recovery must not fail for want of the margin kept for new data.
    cfg.free_disk_margin_bytes = 0;
    cfg.direct_io = false;
    let mut writer = RawFileWriter::create(cfg).map_err(werr)?;
    let mut events = 0u64;
    let mut event_bytes = 0u64;
    let mut global_ids = Vec::new();
    let mut dropped_tail = None;
    let mut start_damaged = None;
    let mut damage = false;
    // The start record is rewritten from the file name: a damaged one (its checksum) must not
    // cost the events, which carry checksums of their own.
    match RawFileReader::open_salvaging(old) {
        Ok((mut reader, damaged)) => {
            start_damaged = damaged.map(|e| e.to_string());
            while let Some(e) = reader.next_event() {
                match e {
                    Ok(ev) => {
                        writer.write_event(ev.words, ev.flags).map_err(werr)?;
                        events += 1;
                        event_bytes += 4 * ev.words.len() as u64;
                        if let Ok(f) = FullEvent::parse(ev.words) {
                            global_ids.push(f.global_id());
                        }
                    }
                    Err(e) => {
                        // The expected end of a file left open: no end record. Anything else
                        // is a cut or damaged record, dropped with what follows it.
                        if !matches!(e, RawFileError::NoEndRecord { .. }) {
                            damage = !matches!(e, RawFileError::Truncated { .. });
                            dropped_tail = Some(e.to_string());
                        }
                        break;
                    }
                }
            }
        }
        // No start record to find the events from: nothing copied, the old file kept unless
        // it simply ends before its start record was whole (a kill at the very start).
        Err(e) => {
            damage = !matches!(e, RawFileError::Truncated { .. });
            dropped_tail = Some(e.to_string());
        }
    }
    let closed = writer.finish().map_err(werr)?;
    let path = closed
        .first()
        .map(|c| c.path.clone())
        .unwrap_or_else(|| dir.join(crate::rawfile::file_name(run, stream, app, sequence)));
    let recovered = Recovered {
        path,
        stream: stream.to_string(),
        sequence,
        events,
        event_bytes,
        global_ids,
        dropped_tail,
        start_damaged,
        kept_damaged: None,
    };
    Ok((recovered, damage))
}

/// Every `.writing` file of run `run` and application `app` in `dir`, read and left as it is:
/// what [`recover_files`] would keep of each (complete events, their global ids), for a
/// directory that can no longer be written (it turned read-only: nothing can be renamed or
/// made there). [`Recovered::path`] is the `.writing` file itself.
pub fn read_left_open(dir: &Path, run: u32, app: &str) -> Result<Vec<Recovered>, RecoverError> {
    read_files(dir, run, app, true)
}

/// Every closed file of run `run` and application `app` in `dir`, read and left as it is (its
/// complete events and their global ids): the files earlier lives of a restarted logger closed
/// (rotated, or recovered by a life that died in its turn), which no summary counts since
/// those lives ended without one. [`Recovered::path`] is the file itself.
pub fn read_closed(dir: &Path, run: u32, app: &str) -> Result<Vec<Recovered>, RecoverError> {
    read_files(dir, run, app, false)
}

/// The `.writing` (`writing`) or closed files of run `run` and `app` in `dir`, read.
fn read_files(
    dir: &Path,
    run: u32,
    app: &str,
    writing: bool,
) -> Result<Vec<Recovered>, RecoverError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecoverError::Io { path, source }
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(dir)(e)),
    };
    let mut todo = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some((r, stream, a, seq, w)) = parse_file_name(name) {
            if r == run && a == app && w == writing {
                todo.push((entry.path(), stream.to_string(), seq));
            }
        }
    }
    todo.sort();
    let mut out = Vec::new();
    for (path, stream, sequence) in todo {
        let mut r = Recovered {
            path: path.clone(),
            stream,
            sequence,
            events: 0,
            event_bytes: 0,
            global_ids: Vec::new(),
            dropped_tail: None,
            start_damaged: None,
            kept_damaged: None,
        };
        match RawFileReader::open_salvaging(&path) {
            Ok((mut reader, damaged)) => {
                r.start_damaged = damaged.map(|e| e.to_string());
                while let Some(e) = reader.next_event() {
                    match e {
                        Ok(ev) => {
                            r.events += 1;
                            r.event_bytes += 4 * ev.words.len() as u64;
                            if let Ok(f) = FullEvent::parse(ev.words) {
                                r.global_ids.push(f.global_id());
                            }
                        }
                        Err(e) => {
                            if !matches!(e, RawFileError::NoEndRecord { .. }) {
                                r.dropped_tail = Some(e.to_string());
                            }
                            break;
                        }
                    }
                }
            }
            Err(e) => r.dropped_tail = Some(e.to_string()),
        }
        out.push(r);
    }
    Ok(out)
}

/// The first file sequence number free for `stream` of run `run` and application `app` in
/// `dir` (one more than the largest taken, closed or not; 1 when there is none).
pub fn next_sequence(dir: &Path, run: u32, stream: &str, app: &str) -> u32 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let base = name.strip_suffix(RECOVERING_SUFFIX).unwrap_or(name);
            let (r, s, a, seq, _) = parse_file_name(base)?;
            (r == run && s == stream && a == app).then_some(seq)
        })
        .max()
        .map_or(1, |m| m.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rawfile::{file_name, verify_file, WRITING_SUFFIX};
    use rodeo_format::fragment::{EventBuilder, SourceId};

    fn event(gid: u64) -> Vec<u32> {
        let robs: [&[u32]; 0] = [];
        let mut v = Vec::new();
        EventBuilder {
            source_id: SourceId(0x7C_0000),
            global_id: gid,
            run_number: 5,
            extended_l1id: gid as u32,
            robs: &robs,
            ..EventBuilder::default()
        }
        .write_vec(&mut v)
        .unwrap();
        v
    }

    /// A `.writing` file with `n` events and its last record cut short (a kill mid-write).
    fn left_open(dir: &Path, n: u64) -> PathBuf {
        let mut cfg = RawFileConfig::new(dir, 5, "logger-1", "physics_Main");
        cfg.direct_io = false;
        cfg.free_disk_margin_bytes = 0;
        let mut w = RawFileWriter::create(cfg).unwrap();
        for g in 0..n {
            w.write_event(&event(100 + g), 0).unwrap();
        }
        w.sync().unwrap();
        let path = w.current_path().unwrap().to_path_buf();
        // Dropping the writer would close the file: forget it, as a killed process does.
        std::mem::forget(w);
        let mut bytes = std::fs::read(&path).unwrap();
        let half = event(999).len() * 2;
        bytes.extend_from_slice(&0x1234_CCCCu32.to_le_bytes());
        bytes.extend(std::iter::repeat_n(7u8, half));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_file_left_open_keeps_its_complete_events_and_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let writing = left_open(dir.path(), 7);
        assert!(writing.to_str().unwrap().ends_with(WRITING_SUFFIX));
        assert_eq!(next_sequence(dir.path(), 5, "physics_Main", "logger-1"), 2);
        let r = recover_files(dir.path(), 5, "logger-1").unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].events, 7);
        assert_eq!(r[0].global_ids, (100..107).collect::<Vec<_>>());
        assert!(r[0].dropped_tail.is_some(), "the cut record is reported");
        let closed = dir.path().join(file_name(5, "physics_Main", "logger-1", 1));
        assert_eq!(r[0].path, closed);
        assert!(!writing.exists());
        let s = verify_file(&closed).unwrap();
        assert_eq!(s.events, 7);
        // Nothing left to recover; other applications' and runs' files are not touched.
        assert!(recover_files(dir.path(), 5, "logger-1").unwrap().is_empty());
        assert!(recover_files(dir.path(), 6, "logger-1").unwrap().is_empty());
        assert!(recover_files(&dir.path().join("none"), 5, "logger-1")
            .unwrap()
            .is_empty());
        assert_eq!(next_sequence(dir.path(), 5, "physics_Main", "logger-1"), 2);
    }

    /// `path`'s bytes with their start record replaced: the same fields as version 1 (no
    /// checksum) when `v1`, else with the run number's low byte flipped (checksum left stale).
    fn rewrite_start(path: &Path, v1: bool) {
        let bytes = std::fs::read(path).unwrap();
        let size = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize * 4;
        let mut out = Vec::new();
        if v1 {
            let (r, _) = RawFileReader::open_salvaging(path).unwrap();
            let mut start = r.start().clone();
            start.version = 1;
            start.encode(&mut out);
        } else {
            out.extend_from_slice(&bytes[..size]);
            out[24] ^= 1;
        }
        out.extend_from_slice(&bytes[size..]);
        std::fs::write(path, out).unwrap();
    }

    #[test]
    fn a_version_1_file_left_open_is_recovered_into_the_current_version() {
        let dir = tempfile::tempdir().unwrap();
        let writing = left_open(dir.path(), 4);
        rewrite_start(&writing, true);
        let r = recover_files(dir.path(), 5, "logger-1").unwrap();
        assert_eq!((r.len(), r[0].events), (1, 4));
        assert_eq!(r[0].start_damaged, None);
        let s = verify_file(&r[0].path).unwrap();
        assert_eq!(s.events, 4);
        assert_eq!(s.start.version, crate::rawfile::FORMAT_VERSION);
        assert!(s.start.checksummed());
        assert_eq!(
            (s.start.run, s.start.stream_name.as_str()),
            (5, "physics_Main")
        );
    }

    #[test]
    fn a_damaged_start_record_does_not_cost_the_events() {
        let dir = tempfile::tempdir().unwrap();
        let writing = left_open(dir.path(), 5);
        rewrite_start(&writing, false);
        assert!(RawFileReader::open(&writing).is_err(), "the damage is seen");
        let r = recover_files(dir.path(), 5, "logger-1").unwrap();
        assert_eq!(r[0].events, 5);
        assert_eq!(r[0].global_ids, (100..105).collect::<Vec<_>>());
        let why = r[0]
            .start_damaged
            .as_deref()
            .expect("the damage is reported");
        assert!(why.contains("Adler-32"), "{why}");
        // The new start record is the file name's: run 5, not the damaged 4.
        let s = verify_file(&r[0].path).unwrap();
        assert_eq!((s.start.run, s.events), (5, 5));
    }

    /// A start record damaged in a name (a byte that is no UTF-8), a length or a padding
    /// byte costs the names only, not the events (before: every event of the file was
    /// dropped with it).
    #[test]
    fn a_start_record_damaged_in_its_names_does_not_cost_the_events() {
        // Word 8 is the application name's length, its bytes from word 9 (byte 36).
        for (at, byte) in [(36usize, 0x80u8), (32, 0xFF), (39, 0x01)] {
            let dir = tempfile::tempdir().unwrap();
            let writing = left_open(dir.path(), 3);
            let mut bytes = std::fs::read(&writing).unwrap();
            bytes[at] = byte;
            std::fs::write(&writing, &bytes).unwrap();
            assert!(RawFileReader::open(&writing).is_err(), "the damage is seen");
            let r = recover_files(dir.path(), 5, "logger-1").unwrap();
            assert_eq!(r[0].events, 3, "byte {at} = {byte:#x}");
            assert_eq!(r[0].kept_damaged, None, "every event kept: nothing to keep");
            assert!(r[0].start_damaged.is_some(), "byte {at}: reported");
            let s = verify_file(&r[0].path).unwrap();
            assert_eq!((s.start.run, s.events), (5, 3));
        }
    }

    /// A copy that stops at damage in the middle (a bad record marker), not at the cut a kill
    /// leaves, keeps the old file as `.damaged`: what follows the damage may hold events. A
    /// file only cut at its end is removed once copied.
    #[test]
    fn a_file_damaged_in_the_middle_is_kept_for_an_expert() {
        let dir = tempfile::tempdir().unwrap();
        let writing = left_open(dir.path(), 6);
        let mut bytes = std::fs::read(&writing).unwrap();
        let size = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize * 4;
        // The first event record's marker, just after the start record.
        bytes[size] ^= 0xFF;
        std::fs::write(&writing, &bytes).unwrap();
        let r = recover_files(dir.path(), 5, "logger-1").unwrap();
        assert_eq!(r[0].events, 0);
        let kept = r[0]
            .kept_damaged
            .clone()
            .expect("the damaged original is kept");
        assert!(kept.to_str().unwrap().ends_with(DAMAGED_SUFFIX), "{kept:?}");
        assert_eq!(std::fs::read(&kept).unwrap(), bytes);
        // Nothing left to recover; the kept file is not taken for a data file.
        assert!(recover_files(dir.path(), 5, "logger-1").unwrap().is_empty());
        assert!(read_closed(dir.path(), 5, "logger-1")
            .unwrap()
            .iter()
            .all(|c| c.path != kept));
        // Only cut at its end (what a kill leaves): the old file goes.
        let dir = tempfile::tempdir().unwrap();
        left_open(dir.path(), 2);
        let r = recover_files(dir.path(), 5, "logger-1").unwrap();
        assert!(r[0].dropped_tail.is_some());
        assert_eq!(r[0].kept_damaged, None);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A record that declares an event past 1 GiB is refused before anything is reserved for
    /// it (a sparse file passes any check against its length).
    #[test]
    fn a_record_declaring_an_event_past_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let writing = left_open(dir.path(), 2);
        let mut bytes = std::fs::read(&writing).unwrap();
        let size = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize * 4;
        let words = (crate::rawfile::MAX_EVENT_BYTES / 4) as u32 + 1;
        bytes[size + 4..size + 8].copy_from_slice(&(words + 4).to_le_bytes());
        std::fs::write(&writing, &bytes).unwrap();
        let (mut r, _) = RawFileReader::open_salvaging(&writing).unwrap();
        match r.next_event() {
            Some(Err(e @ RawFileError::RecordTooLarge { size_words, .. })) => {
                assert_eq!(size_words, words + 4);
                assert_eq!(
                    (e.offset(), e.events_recovered()),
                    (Some(size as u64), Some(0))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_second_restart_reads_the_files_earlier_lives_closed() {
        let dir = tempfile::tempdir().unwrap();
        // The first life's file, recovered (closed) by the second life, which is killed in
        // its turn with a file of its own open.
        left_open(dir.path(), 4);
        assert_eq!(recover_files(dir.path(), 5, "logger-1").unwrap().len(), 1);
        assert!(read_left_open(dir.path(), 5, "logger-1")
            .unwrap()
            .is_empty());
        let mut cfg = RawFileConfig::new(dir.path(), 5, "logger-1", "physics_Main");
        cfg.direct_io = false;
        cfg.free_disk_margin_bytes = 0;
        cfg.first_sequence = 2;
        let mut w = RawFileWriter::create(cfg).unwrap();
        w.write_event(&event(200), 0).unwrap();
        w.sync().unwrap();
        std::mem::forget(w);
        let closed = read_closed(dir.path(), 5, "logger-1").unwrap();
        assert_eq!(closed.len(), 1, "{closed:?}");
        assert_eq!(closed[0].events, 4);
        assert_eq!(closed[0].global_ids.len(), 4);
        assert_eq!(
            read_left_open(dir.path(), 5, "logger-1").unwrap()[0].events,
            1
        );
        // Another application's or run's files are not this logger's.
        assert!(read_closed(dir.path(), 6, "logger-1").unwrap().is_empty());
        assert!(read_closed(dir.path(), 5, "logger-2").unwrap().is_empty());
    }

    #[test]
    fn an_interrupted_recovery_starts_again_from_the_renamed_file() {
        let dir = tempfile::tempdir().unwrap();
        let writing = left_open(dir.path(), 3);
        let base = writing
            .to_str()
            .unwrap()
            .strip_suffix(WRITING_SUFFIX)
            .unwrap();
        let old = PathBuf::from(format!("{base}{RECOVERING_SUFFIX}"));
        std::fs::rename(&writing, &old).unwrap();
        // A half-made copy, as a recovery killed half-way leaves it.
        std::fs::write(&writing, b"junk").unwrap();
        let r = recover_files(dir.path(), 5, "logger-1").unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].events, 3);
        assert!(!old.exists() && !writing.exists());
        assert_eq!(verify_file(PathBuf::from(base)).unwrap().events, 3);
    }
}
