//! `[logger]`: the loggers, their streams, the files' format and compression, and the output
//! directories.

use serde::{Deserialize, Serialize};

use super::error::{num, Checks};

/// `[logger]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LoggerSection {
    /// Nodes.
    pub nodes: usize,
    /// Stream names.
    pub streams: Vec<String>,
    /// File rotation size.
    pub max_file_mib: u64,
    /// The files' container.
    pub format: FormatName,
    /// Compression (a codec of `format`).
    pub compression: CompressionName,
    /// EventStorage project tag.
    pub project: String,
    /// zstd level of `compression = "zstd"` (the DCMs compress).
    pub zstd_level: i32,
    /// After the run, re-read every file completely (`rodeo_files::verify::check_file`)
    /// instead of trusting the loggers' check (record checksums computed as the bytes are
    /// written, end record and size read back). Off by default.
    pub verify_after: bool,
    /// Output directories, used in order (each gets `run-NNNNNNNN/`); empty: `run.output`.
    pub directories: Vec<String>,
    /// Bytes each output directory keeps free.
    pub min_free_bytes: u64,
    /// Fraction (0 to 1) of its file system each output directory keeps free.
    pub min_free_fraction: f64,
}

/// The logger's file formats in the configuration.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FormatName {
    /// rodeo's own container.
    Rodeo,
    /// ATLAS EventStorage version 5.
    Eventstorage,
}

/// Compression names in the configuration.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CompressionName {
    /// Payloads as they are.
    None,
    /// zstd (compression type 1), rodeo's container.
    Zstd,
    /// zlib data blocks, EventStorage.
    Zlib,
}

impl Default for LoggerSection {
    fn default() -> Self {
        LoggerSection {
            nodes: 1,
            streams: vec!["physics_Main".into()],
            max_file_mib: 1024,
            format: FormatName::Rodeo,
            compression: CompressionName::None,
            project: "data_test".into(),
            zstd_level: rodeo_format::compress::DEFAULT_ZSTD_LEVEL,
            verify_after: false,
            directories: Vec::new(),
            min_free_bytes: rodeo_dataflow::disks::DEFAULT_MIN_FREE_BYTES,
            min_free_fraction: 0.0,
        }
    }
}

impl LoggerSection {
    /// The longest name a file of stream `st` can have (with the `.writing` suffix): at the
    /// largest run and file numbers, from the last logger, in this configuration's format.
    fn longest_file_name(&self, st: &str) -> usize {
        let app = format!("logger-{}", self.nodes.max(1));
        let name = match self.format {
            FormatName::Rodeo => rodeo_files::rawfile::file_name(u32::MAX, st, &app, u32::MAX),
            FormatName::Eventstorage => {
                let (t, n) = rodeo_files::eventstorage::split_stream(st);
                rodeo_files::eventstorage::file_name(
                    &self.project,
                    u32::MAX,
                    t,
                    n,
                    u32::MAX,
                    &app,
                    u32::MAX,
                )
            }
        };
        name.len() + rodeo_files::eventstorage::WRITING_SUFFIX.len()
    }

    /// Checks this section's own values, each error naming its field (checks across sections
    /// are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, c: &mut Checks) {
        if self.nodes == 0 || self.nodes > 16 {
            c.bad("logger.nodes", self.nodes, "1..=16");
        }
        if self.streams.is_empty() {
            c.bad("logger.streams", "[]", "at least one stream name");
        }
        // Stream names become parts of file names: no path separator, no leading dot, no dot
        // at all (rodeo's file names use dots between their fields).
        for st in &self.streams {
            let ok = !st.is_empty()
                && st.len() <= 255
                && st
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                c.bad(
                    "logger.streams",
                    format!("{st:?}"),
                    "1 to 255 ASCII letters, digits, '_' or '-' (a stream name is part of its \
                     files' names)",
                );
            }
        }
        // A stream's files are named after it, the run number, the logger and the file's
        // sequence number (and `.writing` while written): the whole name must fit a file
        // system's 255 bytes at any run and sequence number. A 220-character stream passed the
        // check, and its logger died at its first file ("File name too long") while the run
        // stalled (a QA pass).
        let shortest = self.longest_file_name("physics_a");
        if self.format == FormatName::Eventstorage && shortest > 255 {
            c.bad(
                "logger.project",
                format!("{:?}", self.project),
                format!(
                    "a shorter name: with it every file's name is at least {shortest} bytes, \
                     more than the 255 a file system takes"
                ),
            );
        }
        for st in &self.streams {
            let longest = self.longest_file_name(st);
            if longest > 255 && shortest <= 255 {
                c.bad(
                    "logger.streams",
                    format!("{st:?}"),
                    format!(
                        "a shorter name: its files' names would be up to {longest} bytes with \
                         the run number, the logger, the file's number and `.writing`, more \
                         than the 255 a file system takes"
                    ),
                );
            }
        }
        // Two streams of one name write files nobody can tell apart (the sequence numbers are
        // the logger's): the trigger's shares between them are lost in the files.
        for (i, st) in self.streams.iter().enumerate() {
            if self.streams[..i].contains(st) {
                c.bad(
                    "logger.streams",
                    format!("{st:?} twice"),
                    "each stream name once (a stream's files carry its name: two streams of \
                     one name cannot be told apart)",
                );
            }
        }
        if self.max_file_mib == 0 || self.max_file_mib > 1 << 24 {
            c.bad(
                "logger.max_file_mib",
                self.max_file_mib,
                ">= 1, at most 16777216 (16 TiB)",
            );
        }
        if !self.min_free_fraction.is_finite() || !(0.0..1.0).contains(&self.min_free_fraction) {
            c.bad(
                "logger.min_free_fraction",
                num(self.min_free_fraction),
                "a fraction of the disk >= 0 and < 1 (0: only logger.min_free_bytes)",
            );
        }
        for (i, d) in self.directories.iter().enumerate() {
            if d.is_empty() || d.contains('\0') {
                c.bad(
                    "logger.directories",
                    format!("{d:?}"),
                    "directory paths, not empty, without NUL",
                );
            }
            // Compared as paths: `d`, `d/` and `./d` are one directory (they passed as three).
            let same = |e: &String| lexical(e) == lexical(d);
            if self.directories[..i].iter().any(same) {
                c.bad(
                    "logger.directories",
                    format!("{d:?} twice"),
                    "each directory once (they are used in order)",
                );
            }
        }
        if !(-7..=22).contains(&self.zstd_level) {
            c.bad(
                "logger.zstd_level",
                self.zstd_level,
                "-7..=22 (zstd's levels: 1 the default, negative faster, higher smaller)",
            );
        }
        match (self.format, self.compression) {
            (FormatName::Eventstorage, CompressionName::Zstd) => c.bad(
                "logger.compression",
                "\"zstd\"",
                "\"zlib\" or \"none\" with logger.format = \"eventstorage\" (ATLAS readers \
                     decompress zlib only; zstd needs logger.format = \"rodeo\")",
            ),
            (FormatName::Rodeo, CompressionName::Zlib) => c.bad(
                "logger.compression",
                "\"zlib\"",
                "\"zstd\" or \"none\" with logger.format = \"rodeo\" (zlib is \
                     EventStorage's codec: logger.format = \"eventstorage\")",
            ),
            _ => {}
        }
        if self.format == FormatName::Eventstorage {
            use rodeo_files::eventstorage::valid_name_part;
            if !valid_name_part(&self.project) {
                c.bad(
                    "logger.project",
                    format!("{:?}", self.project),
                    "1 to 255 ASCII letters, digits, '-' or '_' (part of the EventStorage file names)",
                );
            }
            for st in &self.streams {
                let (t, n) = rodeo_files::eventstorage::split_stream(st);
                if !valid_name_part(t) || t.contains('_') || !valid_name_part(n) {
                    c.bad(
                        "logger.streams",
                        format!("{st:?}"),
                        "\"<type>_<name>\" (or a name alone, of type physics) of ASCII letters, \
                         digits, '-' and '_' with logger.format = \"eventstorage\"",
                    );
                }
            }
        }
    }
}
/// A path with its `.` components and trailing separators left out (`d/`, `./d` and `d`
/// alike); `..` is kept (it may cross a symbolic link).
fn lexical(path: &str) -> std::path::PathBuf {
    std::path::Path::new(path)
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::PartitionConfig;

    fn check(toml: &str) -> Result<PartitionConfig, String> {
        PartitionConfig::from_toml(toml, "t.toml").map_err(|e| e.to_string())
    }

    /// A stream whose files' names would pass 255 bytes at some run or file number is refused,
    /// naming the field and the length, in both formats; one that fits passes.
    #[test]
    fn a_stream_whose_file_names_cannot_fit_is_refused() {
        let stream = |n: usize| "a".repeat(n);
        let e = check(&format!("[logger]\nstreams = [{:?}]\n", stream(220))).unwrap_err();
        assert!(
            e.contains("logger.streams") && e.contains("more than the 255"),
            "{e}"
        );
        check(&format!("[logger]\nstreams = [{:?}]\n", stream(200))).unwrap();
        let es = |project: usize, name: usize| {
            check(&format!(
                "[logger]\nformat = \"eventstorage\"\ncompression = \"none\"\nproject = {:?}\n\
                 streams = [\"physics_{}\"]\n",
                "p".repeat(project),
                stream(name)
            ))
        };
        let e = es(100, 150).unwrap_err();
        assert!(e.contains("logger.streams"), "{e}");
        // A project too long for any stream is named itself.
        let e = es(250, 1).unwrap_err();
        assert!(
            e.contains("logger.project") && !e.contains("logger.streams"),
            "{e}"
        );
        es(20, 100).unwrap();
    }
}
