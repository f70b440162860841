//! ATLAS EventStorage files: the experiments' raw-data container (`specs/eventstorage.md`).
//!
//! rodeo's own container is [`crate::rawfile`]. The experiments' offline software reads
//! EventStorage, written by the ATLAS SFO since 2004 and by BESIII's online system. rodeo
//! writes version 5 ([`EsWriter`]) and reads versions 2 to 6 ([`EsReader`]).
//!
//! # Records
//!
//! Little-endian u32 words; a record's size word counts its own words (marker included) and
//! readers skip by it. Strings are a byte length and the bytes, padded with spaces to 4 bytes.
//!
//! ```text
//! file start       0x1234AAAA | 8 | version | file number | date DDMMYYYY | time HHMMSS
//!                  | size limit (data blocks) | size limit (MB)
//! file name        0x1234AABB | string application name | string file-name core
//! free strings     0x1234AABC | count | strings...               (version 5 and later)
//! run parameters   0x1234BBBB | size (9 v2, 10 v5, 12 v6) | run | max events | recording
//!                  | trigger type | detector mask (1, 2 or 4 words, low first) | beam type
//!                  | beam energy
//! data separator * 0x1234CCCC | 4 | block number | block size in bytes | one full event
//! file end         0x1234DDDD | 10 | date | time | events in file | MB in file
//!                  | events in run | MB in run | status (1: last file of the run) | 0x1234EEEE
//! ```
//!
//! The writer follows athena's version-5 writer (`Event/ByteStreamCnvSvcLegacy/src/
//! offline_EventStorage/v5_DataWriter.cxx`): record order start, file name, free strings
//! (`GUID=` first, then the caller's strings, `Stream=`, `Project=`, `LumiBlock=`,
//! `Compression=zlib` when compressed), run parameters; data block numbers count the events of
//! the run from 1; dates and times are decimal DDMMYYYY and HHMMSS (UTC here, local time there).
//!
//! # Compression
//!
//! ATLAS compresses at the container level: with `Compression=zlib` among the free strings,
//! every data block is one zlib stream (RFC 1950, `deflateInit` in athena's
//! `v5_ESCompression.cxx`) of the whole full event, zero-padded to 4 bytes, and the separator's
//! block size is the padded compressed size. Readers (`zlibdecompress`, zlib `uncompress`)
//! restore the event. The full event's own compression field keeps eformat's meaning
//! (`eformat/compression.h`: 0 uncompressed, 1 zlib payload): the writer stores plain events
//! (field 0), so a zstd event of rodeo's container (whose 1 means zstd) is decompressed before it
//! is written, and the reader restores zlib payloads marked 1. zstd, rodeo's own container's
//! option, is not an EventStorage codec.
//!
//! # Reading and recovery
//!
//! Like the raw-file reader: every complete event before the first problem is returned, then one
//! typed [`EsError`] with the byte offset where reading stopped and the events recovered.

mod error;
mod reader;
mod writer;

pub use error::{EsError, EsRecord};
pub use reader::{EsBlock, EsReader, EsSummary};
pub use writer::{ClosedEsFile, EsCompression, EsWriter, EsWriterConfig};

use std::time::{SystemTime, UNIX_EPOCH};

/// Marker of the file start record.
pub const FILE_START_MARKER: u32 = 0x1234_AAAA;
/// Marker of the file name strings record.
pub const FILE_NAME_MARKER: u32 = 0x1234_AABB;
/// Marker of the free strings record.
pub const FREE_STRINGS_MARKER: u32 = 0x1234_AABC;
/// Marker of the run parameters record.
pub const RUN_PARAMETERS_MARKER: u32 = 0x1234_BBBB;
/// Marker of a data separator (one event follows).
pub const DATA_SEPARATOR_MARKER: u32 = 0x1234_CCCC;
/// Marker of the file end record.
pub const FILE_END_MARKER: u32 = 0x1234_DDDD;
/// Last word of the file end record.
pub const FILE_END_LAST: u32 = 0x1234_EEEE;
/// Words of the file start record.
pub const FILE_START_WORDS: u32 = 8;
/// Words of a data separator.
pub const DATA_SEPARATOR_WORDS: u32 = 4;
/// Words of the file end record.
pub const FILE_END_WORDS: u32 = 10;
/// The version rodeo writes.
pub const WRITE_VERSION: u32 = 5;
/// The versions rodeo reads.
pub const READ_VERSIONS: std::ops::RangeInclusive<u32> = 2..=6;
/// Suffix of a file being written.
pub const WRITING_SUFFIX: &str = ".writing";
/// The free-string tag of the compression codec (`Compression=zlib`).
pub const COMPRESSION_TAG: &str = "Compression";

/// The run parameters record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunParameters {
    /// Run number.
    pub run_number: u32,
    /// Maximum number of events.
    pub max_events: u32,
    /// Recording enabled.
    pub rec_enable: u32,
    /// Trigger type.
    pub trigger_type: u32,
    /// Detector mask (v2: 32 bits, v5: 64 bits, v6: 128 bits; low words first on disk).
    pub detector_mask: u128,
    /// Beam type.
    pub beam_type: u32,
    /// Beam energy.
    pub beam_energy: u32,
}

impl RunParameters {
    /// Record size in words for a file `version`: 9 (v2-v4), 10 (v5), 12 (v6).
    pub fn size_words(version: u32) -> u32 {
        match version {
            6.. => 12,
            5 => 10,
            _ => 9,
        }
    }

    /// The record's words for a file `version`.
    pub fn words(&self, version: u32) -> Vec<u32> {
        let size = Self::size_words(version);
        let mut w = vec![
            RUN_PARAMETERS_MARKER,
            size,
            self.run_number,
            self.max_events,
            self.rec_enable,
            self.trigger_type,
        ];
        for i in 0..(size - 8) {
            w.push((self.detector_mask >> (32 * i)) as u32);
        }
        w.push(self.beam_type);
        w.push(self.beam_energy);
        w
    }
}

/// The metadata records of a file, as read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EsFileInfo {
    /// Format version (2 to 6).
    pub version: u32,
    /// File number in the run.
    pub file_number: u32,
    /// Date, decimal DDMMYYYY.
    pub date: u32,
    /// Time, decimal HHMMSS.
    pub time: u32,
    /// Size limit in data blocks (0: none).
    pub size_limit_blocks: u32,
    /// Size limit in MB (0: none).
    pub size_limit_mb: u32,
    /// Application name (file name strings record).
    pub app_name: String,
    /// File-name core (file name strings record).
    pub file_name_core: String,
    /// Free strings (version 5 and later), trailing spaces and NULs trimmed.
    pub free_strings: Vec<String>,
    /// The run parameters.
    pub run: RunParameters,
}

impl EsFileInfo {
    /// The value of the free string `tag=value`, if present.
    pub fn free_string(&self, tag: &str) -> Option<&str> {
        self.free_strings
            .iter()
            .find_map(|s| s.strip_prefix(tag).and_then(|rest| rest.strip_prefix('=')))
    }

    /// The compression codec named by the free strings (`none` when absent).
    pub fn compression(&self) -> &str {
        self.free_string(COMPRESSION_TAG).unwrap_or("none")
    }
}

/// The ATLAS file-name core `<project>.<run:08>.<type>_<name>.daq.RAW._lb<lb:04>._<app>`.
pub fn file_name_core(
    project: &str,
    run: u32,
    stream_type: &str,
    stream_name: &str,
    lumiblock: u32,
    app: &str,
) -> String {
    format!("{project}.{run:08}.{stream_type}_{stream_name}.daq.RAW._lb{lumiblock:04}._{app}")
}

/// The ATLAS file name
/// `<project>.<run:08>.<type>_<name>.daq.RAW._lb<lb:04>._<app>._<file:04>.data`
/// (without the `.writing` suffix).
pub fn file_name(
    project: &str,
    run: u32,
    stream_type: &str,
    stream_name: &str,
    lumiblock: u32,
    app: &str,
    file_number: u32,
) -> String {
    let core = file_name_core(project, run, stream_type, stream_name, lumiblock, app);
    format!("{core}._{file_number:04}.data")
}

/// The stream type and name of a stream spelled `<type>_<name>` (`physics_Main`: type
/// `physics`, name `Main`, split at the first `_`); a name without `_` is the name, of type
/// `physics`.
pub fn split_stream(stream: &str) -> (&str, &str) {
    match stream.split_once('_') {
        Some((t, n)) if !t.is_empty() && !n.is_empty() => (t, n),
        _ => ("physics", stream),
    }
}

/// Checks a name that becomes part of an ATLAS file name: 1 to 255 bytes of ASCII letters,
/// digits, `-` and `_` for the project, stream type and application, and also no `_` in the
/// stream type (it separates type from name in the file name).
pub fn valid_name_part(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Appends an EventStorage string: byte length, bytes, spaces up to a multiple of 4.
pub fn push_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len() + (s.len().next_multiple_of(4) - s.len()), b' ');
}

/// Decimal date DDMMYYYY and time HHMMSS (UTC) of `unix_seconds`.
pub fn date_time(unix_seconds: u64) -> (u32, u32) {
    let days = (unix_seconds / 86_400) as i64;
    let secs = unix_seconds % 86_400;
    let (y, m, d) = civil_from_days(days);
    let date = d * 1_000_000 + m * 10_000 + y as u32;
    let time = (secs / 3600) as u32 * 10_000 + ((secs / 60) % 60) as u32 * 100 + (secs % 60) as u32;
    (date, time)
}

/// `unix_seconds` as `YYYY-MM-DD HH:MM:SS` (UTC), the form run lists print.
pub fn utc_text(unix_seconds: u64) -> String {
    let (y, m, d) = civil_from_days((unix_seconds / 86_400) as i64);
    let secs = unix_seconds % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Year, month (1-12), day (1-31) of a day count from 1970-01-01 (proleptic Gregorian).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift to an era starting on 0000-03-01 so leap days fall at the end of a year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Seconds since the Unix epoch, now.
pub(crate) fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A new random GUID in the form offline catalogues use (`8-4-4-4-12` upper-case hex digits),
/// from the kernel's random source, or from the clock and process id if that cannot be read.
pub fn new_guid() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if !random {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mixed = nanos ^ (u128::from(std::process::id()) << 64);
        b = mixed.to_le_bytes();
    }
    // Version 4 (random) and the RFC 4122 variant.
    b[6] = (b[6] & 0x0F) | 0x40;
    b[8] = (b[8] & 0x3F) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02X}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_atlas_pattern() {
        assert_eq!(
            file_name("data25_test", 348_885, "physics", "Main", 110, "SFO-5", 1),
            "data25_test.00348885.physics_Main.daq.RAW._lb0110._SFO-5._0001.data"
        );
        assert!(valid_name_part("SFO-5") && !valid_name_part("a.b") && !valid_name_part(""));
    }

    #[test]
    fn dates_are_decimal() {
        // 2009-06-19 07:35:41 UTC.
        assert_eq!(date_time(1_245_396_941), (19_062_009, 73_541));
        assert_eq!(date_time(0), (1_011_970, 0));
        // A leap day.
        assert_eq!(date_time(951_782_400).0, 29_022_000);
        assert_eq!(utc_text(1_245_396_941), "2009-06-19 07:35:41");
        assert_eq!(utc_text(951_782_400), "2000-02-29 00:00:00");
    }

    #[test]
    fn run_parameters_sizes() {
        let p = RunParameters {
            run_number: 7,
            detector_mask: 0x1_0000_0002,
            ..RunParameters::default()
        };
        let w = p.words(5);
        assert_eq!(w.len(), 10);
        assert_eq!((w[1], w[6], w[7]), (10, 2, 1));
        assert_eq!(p.words(2).len(), 9);
        assert_eq!(p.words(6).len(), 12);
    }

    #[test]
    fn guids_look_like_guids() {
        let g = new_guid();
        assert_eq!(g.len(), 36);
        assert_eq!(g.matches('-').count(), 4);
        assert_ne!(g, new_guid());
    }
}
