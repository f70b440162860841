//! A logger's configuration: [`LoggerConfig`], the container it writes ([`FileFormat`]) and
//! how it compresses events ([`LoggerCompression`]), with the check that the codec is one of
//! the format's and that the names fit an ATLAS file name.

use std::path::PathBuf;

use rodeo_files::eventstorage::split_stream;

use crate::disks::DiskMargin;

/// Configuration of a logger.
#[derive(Debug, Clone)]
pub struct LoggerConfig {
    /// Application name (in file names and errors).
    pub name: String,
    /// Endpoint to bind (DCMs connect here).
    pub endpoint: String,
    /// Output directory.
    pub directory: PathBuf,
    /// Further output directories, used in order once `directory` is full (module docs, "Full
    /// disks"; made when first used).
    pub more_directories: Vec<PathBuf>,
    /// Room every output directory keeps free.
    pub margin: DiskMargin,
    /// Run number.
    pub run: u32,
    /// Stream names, by stream index; events for other indices go to `stream<N>`.
    pub streams: Vec<String>,
    /// Rotate files at this size.
    pub max_file_bytes: u64,
    /// Most events per group commit.
    pub batch: usize,
    /// The container of the files.
    pub format: FileFormat,
    /// How events are compressed (a codec of `format`: see [`LoggerConfig::check`]).
    pub compression: LoggerCompression,
    /// EventStorage project tag (first part of the file names, `Project=`).
    pub project: String,
    /// ZeroMQ high-water mark of its socket (default [`crate::DEFAULT_HIGH_WATER_MARK`]).
    pub high_water_mark: u32,
    /// Largest incoming message of its sockets, in bytes (ZMQ_MAXMSGSIZE, or the shared-memory
    /// inbox's limit): larger ones are refused before they are buffered (`None`, the default:
    /// no limit). A partition sets it from `[transport] max_message_bytes`.
    pub max_message_bytes: Option<usize>,
    /// The ROBs a complete event of the partition carries (0: not known, not checked). Each
    /// event written is checked against it: one short of ROBs must carry the partial flag
    /// (`LoggerSummary::events_short_unflagged` counts those that do not).
    pub expected_robs: usize,
    /// Free strings written into every EventStorage file after rodeo's own (`Comment=...`,
    /// `RunType=...`, `Shifter=...`: the run's words). rodeo's container has no place for
    /// them: there they are in the run directory's `partition.toml` and `summary.json`.
    pub free_strings: Vec<String>,
    /// Most sender identities kept (default 4096): past it a new identity takes the place of
    /// the least recently heard sender with nothing waiting for a commit, or is refused
    /// (counted bad) while every one has.
    pub max_senders: usize,
}

/// The container a logger writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileFormat {
    /// rodeo's own container (`specs/raw-file.md`), with a checksum per record.
    #[default]
    Rodeo,
    /// ATLAS EventStorage version 5 (`specs/eventstorage.md`), what offline software reads.
    EventStorage,
}

/// How a logger compresses events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoggerCompression {
    /// Events as they are.
    #[default]
    None,
    /// zstd payloads (compression type 1), rodeo's container only.
    Zstd,
    /// zlib data blocks (`Compression=zlib`, level 1 as ATLAS), EventStorage only.
    Zlib,
}

impl LoggerConfig {
    /// A logger `name` binding `endpoint`, writing run `run` into `directory`, one stream
    /// `physics_Main`, 1 GiB files, batches of 256.
    pub fn new(name: &str, endpoint: &str, directory: PathBuf, run: u32) -> LoggerConfig {
        LoggerConfig {
            name: name.to_string(),
            endpoint: endpoint.to_string(),
            directory,
            more_directories: Vec::new(),
            margin: DiskMargin::default(),
            run,
            streams: vec!["physics_Main".into()],
            max_file_bytes: 1 << 30,
            batch: 256,
            format: FileFormat::Rodeo,
            compression: LoggerCompression::None,
            project: "data_test".to_string(),
            high_water_mark: crate::DEFAULT_HIGH_WATER_MARK,
            max_message_bytes: None,
            expected_robs: 0,
            free_strings: Vec::new(),
            max_senders: crate::MAX_PEER_IDENTITIES,
        }
    }

    /// Checks that the compression is a codec of the format and, for EventStorage, that the
    /// project, application and stream names can be parts of an ATLAS file name. The message
    /// says what to use instead.
    pub fn check(&self) -> Result<(), String> {
        match (self.format, self.compression) {
            (FileFormat::EventStorage, LoggerCompression::Zstd) => {
                return Err(
                    "compression \"zstd\" is not an EventStorage codec (ATLAS readers \
                     decompress zlib only): use compression = \"zlib\" or \"none\" with \
                     format = \"eventstorage\", or format = \"rodeo\" for zstd"
                        .into(),
                )
            }
            (FileFormat::Rodeo, LoggerCompression::Zlib) => {
                return Err(
                    "compression \"zlib\" is EventStorage's codec: rodeo's container \
                     compresses with zstd; use compression = \"zstd\" or \"none\" with \
                     format = \"rodeo\", or format = \"eventstorage\" for zlib"
                        .into(),
                )
            }
            _ => {}
        }
        if self.format == FileFormat::EventStorage {
            use rodeo_files::eventstorage::valid_name_part;
            let name_ok = |s: &str| valid_name_part(s);
            if !name_ok(&self.project) {
                return Err(format!(
                    "project {:?}: 1 to 255 ASCII letters, digits, '-' or '_' (part of the \
                     EventStorage file names)",
                    self.project
                ));
            }
            if !name_ok(&self.name) {
                return Err(format!(
                    "application name {:?}: 1 to 255 ASCII letters, digits, '-' or '_' (part of \
                     the EventStorage file names)",
                    self.name
                ));
            }
            for s in &self.streams {
                let (t, n) = split_stream(s);
                if !name_ok(t) || t.contains('_') || !name_ok(n) {
                    return Err(format!(
                        "stream {s:?}: \"<type>_<name>\" (or a name alone, of type physics) \
                         of ASCII letters, digits, '-' and '_' (part of the EventStorage file \
                         names)"
                    ));
                }
            }
        }
        Ok(())
    }
}
