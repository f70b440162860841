//! Converting raw-data files between the containers, and old events to eformat 5.
//!
//! [`convert_file`] reads any data file ([`DataFileReader`]: rodeo's container or EventStorage
//! v2-v6) and writes its events into one file of the other container (or the same one):
//! rodeo's container ([`crate::rawfile`]) or EventStorage version 5 ([`crate::eventstorage`]).
//! eformat 5 events are copied word for word (restored first if they were stored compressed);
//! eformat 3 and 4 events (BESIII, ATLAS before 2009) are lifted to eformat 5 by
//! [`lift_to_v5`]: their ROBs are taken out of the sub-detector and ROS levels and wrapped,
//! in the same order, in one eformat 5 full event (`rodeo_format::fragment` builders), each ROD
//! rewritten with the eformat 5 ROD version word and its status and data words unchanged.
//!
//! The file's metadata goes along: run number, luminosity block, application and stream
//! names (made valid for the output's file names), and an EventStorage file's run parameters.

use std::path::{Path, PathBuf};

use crate::datafile::{Container, DataFileError, DataFileReader, FileEvent, FileInfo};
use crate::eventstorage::{
    split_stream, valid_name_part, EsCompression, EsError, EsWriter, EsWriterConfig, RunParameters,
};
use crate::legacy::{LegacyError, LegacyEvent};
use crate::rawfile::{valid_name, RawFileConfig, RawFileError, RawFileWriter, FLAG_COMPRESSED};
use rodeo_format::compress::{compress_event, CompressError};
use rodeo_format::fragment::{
    EventBuilder, FragmentError, RobBuilder, RobPayload, RodBuilder, SourceId, StatusPosition,
};

/// How a converted file is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConvertCompression {
    /// Plain events.
    #[default]
    None,
    /// zstd event payloads (compression type 1): rodeo's container only.
    Zstd,
    /// zlib data blocks (`Compression=zlib`): EventStorage only.
    Zlib,
}

impl ConvertCompression {
    /// `none`, `zstd` or `zlib`.
    pub fn from_name(name: &str) -> Option<ConvertCompression> {
        match name {
            "none" => Some(ConvertCompression::None),
            "zstd" => Some(ConvertCompression::Zstd),
            "zlib" => Some(ConvertCompression::Zlib),
            _ => None,
        }
    }
}

/// What [`convert_file`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertOptions {
    /// The output container.
    pub format: Container,
    /// Compression of the output (a codec of `format`).
    pub compression: ConvertCompression,
    /// EventStorage project tag; `None` keeps the input's `Project=`, else `data_test`.
    pub project: Option<String>,
    /// fsync the output before its rename (default true).
    pub fsync: bool,
}

impl ConvertOptions {
    /// Plain output in `format`, the input's project, fsync on.
    pub fn new(format: Container) -> ConvertOptions {
        ConvertOptions {
            format,
            compression: ConvertCompression::None,
            project: None,
            fsync: true,
        }
    }
}

/// What a conversion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertSummary {
    /// The file written.
    pub output: PathBuf,
    /// The input's metadata.
    pub input: FileInfo,
    /// Events written.
    pub events: u64,
    /// Of those, events lifted from eformat 3 or 4 to eformat 5.
    pub lifted: u64,
    /// ROBs written.
    pub robs: u64,
    /// Size of the output file in bytes.
    pub bytes: u64,
}

/// Why an old event could not be lifted to eformat 5.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LiftError {
    /// The event does not parse as eformat 3/4.
    #[error(transparent)]
    Legacy(#[from] LegacyError),
    /// A ROD's header is not the 9 words eformat 5 has.
    #[error(
        "ROB {source_id:#010x}: ROD header of {header} words, eformat 5 RODs have 9; the ROD \
         cannot be lifted without losing words"
    )]
    RodHeader {
        /// The ROB.
        source_id: u32,
        /// Its ROD's header size word.
        header: u32,
    },
    /// Building the eformat 5 fragments failed (a size beyond 32 bits).
    #[error(transparent)]
    Fragment(#[from] FragmentError),
}

/// What went wrong converting a file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// The options do not fit together (the message says what to use).
    #[error("conversion options: {0}")]
    Options(String),
    /// The output exists already (a conversion never overwrites).
    #[error("{}: exists already; remove it or choose another output", path.display())]
    Exists {
        /// The output.
        path: PathBuf,
    },
    /// The input cannot be opened as a raw-data file, or its first event cannot be read:
    /// nothing was written.
    #[error("reading {}: {source}; nothing was converted (no output written)", input.display())]
    Open {
        /// The input.
        input: PathBuf,
        /// The reader's error.
        #[source]
        source: Box<DataFileError>,
    },
    /// Reading the input stopped (every event before it was converted: see `events`).
    #[error("reading {}: {source}; {events} events were converted before it, the output is left as {}", input.display(), output.display())]
    Read {
        /// The input.
        input: PathBuf,
        /// What the output holds so far (closed, with its end record).
        output: PathBuf,
        /// Events converted.
        events: u64,
        /// The reader's error (with the byte offset).
        #[source]
        source: Box<DataFileError>,
    },
    /// An event could not be lifted to eformat 5.
    #[error("event {index} (byte {offset} of the input): {source}")]
    Lift {
        /// Index of the event in the input.
        index: u64,
        /// Byte offset of its record.
        offset: u64,
        /// Why.
        #[source]
        source: LiftError,
    },
    /// An event fails the checks `rodeo verify` makes (its run number is not its file's start
    /// record's; an eformat 5 event's structure or checksums are bad): the converted file
    /// would carry it and fail there. Nothing is written.
    #[error(
        "event {index} (byte {offset} of the input): {why}; nothing was converted (no output \
         written: `rodeo verify` fails such an event; `rodeo dump` shows it)"
    )]
    Unverifiable {
        /// Index of the event in the input.
        index: u64,
        /// Byte offset of its record.
        offset: u64,
        /// What the check found.
        why: String,
    },
    /// Compressing an event failed.
    #[error("event {index}: {source}")]
    Compress {
        /// Index of the event in the input.
        index: u64,
        /// Why.
        #[source]
        source: CompressError,
    },
    /// Writing rodeo's container failed.
    #[error(transparent)]
    Rodeo(#[from] RawFileError),
    /// Writing EventStorage failed.
    #[error(transparent)]
    EventStorage(#[from] EsError),
    /// Opening the input, or moving the output to its name, failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// The eformat 5 source id of converted events of old files: the TDAQ event-builder id.
const CONVERTED_SOURCE_ID: u32 = 0x007C_0000;
/// ROD header words in eformat 5.
const ROD_HEADER_WORDS: u32 = 9;

/// Lifts an eformat 3 or 4 event (`event.eformat` 3 or 4) into an eformat 5 full event written
/// to `out` (cleared first): its ROBs in order, each with its source id and status words, its
/// ROD rebuilt as eformat 5 with the same header fields, status and data words; the event
/// header takes the run number, L1ID and event number the legacy walker read, the BCID and
/// trigger type of the first ROD, the old event's status words. No checksums (the old events
/// had none rodeo checks). An eformat 5 event is copied.
pub fn lift_to_v5(event: &FileEvent, out: &mut Vec<u32>) -> Result<(), LiftError> {
    out.clear();
    if event.eformat == 5 {
        out.extend_from_slice(&event.words);
        return Ok(());
    }
    let w = &event.words;
    let legacy = LegacyEvent::parse(w)?;
    let get = |i: usize| w.get(i).copied().unwrap_or(0);
    let mut robs: Vec<u32> = Vec::new();
    for rob in &legacy.robs {
        let rod = w
            .get(rob.rod_offset..rob.rod_offset + rob.rod_size)
            .unwrap_or(&[]);
        let header = rod.get(1).copied().unwrap_or(0);
        if header != ROD_HEADER_WORDS {
            return Err(LiftError::RodHeader {
                source_id: rob.source_id,
                header,
            });
        }
        let rget = |i: usize| rod.get(i).copied().unwrap_or(0);
        let n = rod.len();
        let (nstatus, position) = (
            rget(n.saturating_sub(3)) as usize,
            rget(n.saturating_sub(1)),
        );
        let hs = ROD_HEADER_WORDS as usize;
        let data_at = rob.data_offset - rob.rod_offset;
        let status: &[u32] = if position == 0 {
            rod.get(hs..hs + nstatus).unwrap_or(&[])
        } else {
            let at = data_at + rob.data_len;
            rod.get(at..at + nstatus).unwrap_or(&[])
        };
        let data = rod.get(data_at..data_at + rob.data_len).unwrap_or(&[]);
        let rod_builder = RodBuilder {
            source_id: SourceId(rget(3)),
            minor_version: (rget(2) & 0xFFFF) as u16,
            run_number: rget(4),
            extended_l1id: rget(5),
            bcid: (rget(6) & 0xFFF) as u16,
            trigger_type: rget(7) as u8,
            detector_event_type: rget(8),
            status,
            status_position: if position == 0 {
                StatusPosition::BeforeData
            } else {
                StatusPosition::AfterData
            },
            data: &[data],
        };
        // The old ROB's status words: generic header word 5 counts them, from word 6.
        let nrob_status = (get(rob.offset + 5) as usize).min(rob.rod_offset - rob.offset);
        let rob_status = w
            .get(rob.offset + 6..rob.offset + 6 + nrob_status)
            .unwrap_or(&[]);
        RobBuilder {
            source_id: SourceId(rob.source_id),
            status: rob_status,
            checksum: Default::default(),
            payload: RobPayload::Rod(rod_builder),
        }
        .write_vec(&mut robs)?;
    }
    let first_rod = legacy.robs.first().map(|r| r.rod_offset);
    let nstatus = (get(5) as usize).min(w.len().saturating_sub(6));
    let status = w.get(6..6 + nstatus).unwrap_or(&[]);
    EventBuilder {
        source_id: SourceId(CONVERTED_SOURCE_ID),
        status,
        global_id: u64::from(legacy.global_id.unwrap_or(event.index as u32)),
        run_number: legacy.run_number,
        extended_l1id: legacy.l1id,
        bcid: first_rod.map_or(0, |r| get(r + 6) & 0xFFF),
        l1_trigger_type: first_rod.map_or(0, |r| get(r + 7) & 0xFF),
        robs: &[&robs],
        ..EventBuilder::default()
    }
    .write_vec(out)?;
    Ok(())
}

/// A name usable in both containers' file names: ASCII letters, digits, `-` and `_` kept,
/// anything else made `-`; `fallback` if nothing is left.
fn file_name_part(name: &str, fallback: &str) -> String {
    let s: String = name
        .chars()
        .take(255)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() {
        fallback.to_string()
    } else {
        s
    }
}

enum Out {
    Rodeo(RawFileWriter),
    Es(EsWriter),
}

/// Converts `input` (either container, any version) into `output`: a file path (it must not
/// exist), or an existing directory (the file keeps its container's own name there). The file
/// is written in a private work directory, then linked to its place, which it never replaces. See the
/// module documentation for what is converted. A damaged input converts every event before the
/// damage, closes the output and returns [`ConvertError::Read`].
pub fn convert_file(
    input: &Path,
    output: &Path,
    options: &ConvertOptions,
) -> Result<ConvertSummary, ConvertError> {
    match (options.format, options.compression) {
        (Container::EventStorage, ConvertCompression::Zstd) => {
            return Err(ConvertError::Options(
                "zstd is not an EventStorage codec (ATLAS readers decompress zlib only): use \
                 zlib or none, or the rodeo format for zstd"
                    .into(),
            ))
        }
        (Container::Rodeo, ConvertCompression::Zlib) => {
            return Err(ConvertError::Options(
                "zlib is EventStorage's codec; rodeo's container compresses with zstd: use zstd \
                 or none, or the eventstorage format for zlib"
                    .into(),
            ))
        }
        _ => {}
    }
    let mut reader = DataFileReader::open(input).map_err(|source| ConvertError::Open {
        input: input.to_path_buf(),
        source: Box::new(source),
    })?;
    let info = reader.info().clone();
    // The writer works in a private directory (its container's own name cannot collide with
    // files there), then the closed file is linked to its place: `output`, or its own name
    // in the directory `output` (a link never replaces a file that appeared there meanwhile).
    let (dir, rename_to) = if output.is_dir() {
        remove_stale_work_dirs(output);
        let work = output.join(format!(
            "{DIR_WORK_PREFIX}{}{WORK_SUFFIX}",
            std::process::id()
        ));
        make_work_dir(&work)?;
        (work, Target::IntoDir(output.to_path_buf()))
    } else {
        if output.exists() {
            return Err(ConvertError::Exists {
                path: output.to_path_buf(),
            });
        }
        let parent = output
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let work = parent.join(format!(".{name}{WORK_SUFFIX}"));
        make_work_dir(&work)?;
        (work, Target::File(output.to_path_buf()))
    };
    let converted = write_converted(&mut reader, info, input, &dir, &rename_to, options);
    if converted.is_err() {
        // The private work directory and whatever it holds: the conversion failed before its
        // file was renamed to the output (a read error after some events is not such a
        // failure: its output is renamed first, and the directory is gone).
        let _ = std::fs::remove_dir_all(&dir);
    }
    converted
}

/// The file in a work directory that names the process converting into it: its pid and
/// start time (so a pid used again by another process is not taken for the owner).
const WORK_OWNER: &str = ".pid";

/// The name of a work directory ends so (`.OUT.converting` next to a file output).
const WORK_SUFFIX: &str = ".converting";

/// The name of a work directory in a directory output starts so (then the pid).
const DIR_WORK_PREFIX: &str = ".rodeo-convert.";

/// Where a conversion's file goes when closed.
enum Target {
    /// This path.
    File(PathBuf),
    /// Its own name in this directory.
    IntoDir(PathBuf),
}

/// The owner record of this process: `PID START` (start time in clock ticks since boot).
fn owner_record() -> String {
    let pid = std::process::id();
    format!("{pid} {}", process_start(pid).unwrap_or(0))
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`), if it exists.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The live process an owner record names, if it still runs (same pid, same start).
fn live_owner(record: &str) -> Option<u32> {
    let mut parts = record.split_whitespace();
    let pid: u32 = parts.next()?.parse().ok()?;
    let start: u64 = parts.next()?.parse().ok()?;
    (process_start(pid)? == start).then_some(pid)
}

/// Removes the work directories in `dir` (a directory output) of conversions that were
/// killed: their owners no longer run. Best effort.
fn remove_stale_work_dirs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with(DIR_WORK_PREFIX) && name.ends_with(WORK_SUFFIX)) {
            continue;
        }
        let owner = std::fs::read_to_string(e.path().join(WORK_OWNER)).unwrap_or_default();
        if live_owner(&owner).is_none() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Makes the private work directory `work` of a conversion, with the converting process's id
/// in it. One left by a conversion that was killed (its process gone) is removed first; one
/// whose process lives is another conversion into the same output: refused, saying so.
fn make_work_dir(work: &Path) -> Result<(), ConvertError> {
    let io = |op, source| ConvertError::Io {
        op,
        path: work.to_path_buf(),
        source,
    };
    if let Err(e) = std::fs::create_dir(work) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(io("create the work directory", e));
        }
        let owner = std::fs::read_to_string(work.join(WORK_OWNER)).unwrap_or_default();
        if let Some(pid) = live_owner(&owner) {
            return Err(ConvertError::Options(format!(
                "{}: process {pid} is converting into the same output (its work directory); \
                 wait for it, or choose another output",
                work.display()
            )));
        }
        // Left by a conversion that was killed: nothing in it is anyone's.
        std::fs::remove_dir_all(work).map_err(|e| io("remove the stale work directory", e))?;
        std::fs::create_dir(work).map_err(|e| io("create the work directory", e))?;
    }
    std::fs::write(work.join(WORK_OWNER), owner_record())
        .map_err(|e| io("write the owner of the work directory", e))
}

/// Converts what `reader` reads into a file written in `dir`, renamed to `rename_to` if given
/// (then `dir` is removed); the rest of [`convert_file`].
fn write_converted(
    reader: &mut DataFileReader,
    info: FileInfo,
    input: &Path,
    dir: &Path,
    target: &Target,
    options: &ConvertOptions,
) -> Result<ConvertSummary, ConvertError> {
    let app = file_name_part(&info.app_name, "convert");
    let stream = file_name_part(&info.stream, "physics_Main");
    let lumiblock = info.lumiblock.unwrap_or(0);
    let mut out = match options.format {
        Container::Rodeo => {
            let mut c = RawFileConfig::new(dir, info.run_number, &app, &stream);
            debug_assert!(valid_name(&app) && valid_name(&stream));
            c.lumiblock = lumiblock;
            c.max_file_bytes = u64::MAX / 2;
            c.fsync_on_close = options.fsync;
            Out::Rodeo(RawFileWriter::create(c)?)
        }
        Container::EventStorage => {
            let project = options
                .project
                .clone()
                .or_else(|| {
                    info.eventstorage
                        .as_ref()
                        .and_then(|es| es.free_string("Project"))
                        .map(str::to_string)
                })
                .filter(|p| valid_name_part(p))
                .unwrap_or_else(|| "data_test".into());
            let (stream_type, stream_name) = split_stream(&stream);
            let stream_type = stream_type.replace('_', "-");
            let mut c = EsWriterConfig::new(
                dir,
                project,
                info.run_number,
                stream_type,
                stream_name,
                &app,
            );
            c.lumiblock = lumiblock;
            c.run = info.eventstorage.as_ref().map_or(
                RunParameters {
                    run_number: info.run_number,
                    rec_enable: 1,
                    ..RunParameters::default()
                },
                |es| es.run,
            );
            c.max_file_bytes = u64::MAX / 2;
            c.fsync_on_close = options.fsync;
            c.first_file_number = info.file_number.max(1);
            if options.compression == ConvertCompression::Zlib {
                c.compression = EsCompression::Zlib { level: 1 };
            }
            Out::Es(EsWriter::create(c)?)
        }
    };
    let (mut events, mut lifted, mut robs) = (0u64, 0u64, 0u64);
    let (mut v5, mut packed) = (Vec::new(), Vec::new());
    let mut read_error = None;
    for next in reader.by_ref() {
        let ev = match next {
            Ok(ev) => ev,
            Err(e) => {
                read_error = Some(e);
                break;
            }
        };
        // As `verify` checks it: an output that carried a bad event would fail there (a file
        // with bad ROB checksums, or a start record of another run, converted with exit 0).
        let checked = crate::verify::cross_check(&ev, info.run_number).and_then(|()| {
            if ev.eformat == 5 {
                crate::verify::check_event(&ev.words).map_err(|e| e.to_string())?;
            }
            Ok(())
        });
        checked.map_err(|why| ConvertError::Unverifiable {
            index: ev.index,
            offset: ev.offset,
            why,
        })?;
        lift_to_v5(&ev, &mut v5).map_err(|source| ConvertError::Lift {
            index: ev.index,
            offset: ev.offset,
            source,
        })?;
        let mut words: &[u32] = &v5;
        let mut flags = 0;
        if options.compression == ConvertCompression::Zstd {
            compress_event(words, &mut packed).map_err(|source| ConvertError::Compress {
                index: ev.index,
                source,
            })?;
            words = &packed;
            flags = FLAG_COMPRESSED;
        }
        match &mut out {
            Out::Rodeo(w) => {
                w.write_event(words, flags)?;
            }
            Out::Es(w) => {
                w.write_event(words)?;
            }
        }
        events += 1;
        lifted += u64::from(ev.eformat != 5);
        robs += ev.robs.len() as u64;
    }
    let written: PathBuf = match out {
        Out::Rodeo(w) => w.finish()?.pop().map(|c| c.path),
        Out::Es(w) => w.finish()?.pop().map(|c| c.path),
    }
    .ok_or_else(|| ConvertError::Options("the writer closed no file".into()))?;
    // (`take` only when nothing was read: a later read error is the exit status's, below; a
    // `take().filter(..)` here dropped it, and a file damaged after 6 events converted them
    // with exit 0.)
    if let Some(source) = read_error.take_if(|_| events == 0) {
        // Not one event read: no output (a file of no events verified "OK, 0 events").
        let _ = std::fs::remove_file(&written);
        return Err(ConvertError::Open {
            input: input.to_path_buf(),
            source: Box::new(source),
        });
    }
    let to = match target {
        Target::File(to) => to.clone(),
        Target::IntoDir(d) => d.join(written.file_name().unwrap_or_default()),
    };
    // A link, not a rename: a file that appeared at `to` since the start is not replaced (a
    // rename overwrote it, or a dangling link there).
    // A file system without hard links (some FUSE mounts) gets the rename, checked first.
    match std::fs::hard_link(&written, &to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ConvertError::Exists { path: to });
        }
        Err(_) if std::fs::symlink_metadata(&to).is_err() => {
            std::fs::rename(&written, &to).map_err(|source| ConvertError::Io {
                op: "rename to",
                path: to.clone(),
                source,
            })?;
        }
        Err(_) => return Err(ConvertError::Exists { path: to }),
    }
    let _ = std::fs::remove_file(&written);
    let _ = std::fs::remove_file(dir.join(WORK_OWNER));
    std::fs::remove_dir(dir).map_err(|source| ConvertError::Io {
        op: "remove the work directory",
        path: dir.to_path_buf(),
        source,
    })?;
    let final_path = to;
    if let Some(source) = read_error {
        return Err(ConvertError::Read {
            input: input.to_path_buf(),
            output: final_path,
            events,
            source: Box::new(source),
        });
    }
    let bytes = std::fs::metadata(&final_path)
        .map(|m| m.len())
        .map_err(|source| ConvertError::Io {
            op: "stat",
            path: final_path.clone(),
            source,
        })?;
    Ok(ConvertSummary {
        output: final_path,
        input: info,
        events,
        lifted,
        robs,
        bytes,
    })
}
