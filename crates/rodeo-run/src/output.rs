//! The output directory as one process owns it: its lock, its run database, its run numbers,
//! and the records of the runs made there.
//!
//! [`OutputDir::open`] makes the directory if need be, takes its lock ([`crate::lock`]), opens
//! `runs.sqlite` under that lock (so two processes never create it at once) and records every
//! run directory the database does not know: a run whose process died before recording it.
//! Run numbers come from here only ([`OutputDir::next_run_number`]): one more than the largest
//! of the run directories and the recorded runs, so the directory and the database agree.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rodeo_control::config::PartitionConfig;
use rodeo_dataflow::logger::CheckedFile;
use rodeo_files::verify::check_file;

use crate::lock::OutputLock;
use crate::rundb::{file_checksum, now_ns, FileRecord, RunDb, RunRecord};
use crate::sheet::RunSheet;

/// An output directory owned by this process (see the module docs).
#[derive(Debug)]
pub struct OutputDir {
    path: PathBuf,
    db: RunDb,
    _lock: OutputLock,
}

impl OutputDir {
    /// Makes `path` if need be, locks it for this process (described as `what` to whoever is
    /// refused next), opens its run database and records the runs a crash left unrecorded.
    pub fn open(path: &Path, what: &str) -> anyhow::Result<OutputDir> {
        // Before anything is made: inside a held directory, or too long for the run
        // database's paths (both made their directories before failing, a QA pass).
        OutputLock::check_not_inside_held(path)?;
        rodeo_control::config::check_run_database_path(path)
            .map_err(|why| anyhow::anyhow!("output directory {}: {why}", path.display()))?;
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create output directory {}", path.display()))?;
        let lock = OutputLock::acquire(path, what)?;
        let db = RunDb::open_in(path)
            .with_context(|| format!("cannot open the run database in {}", path.display()))?;
        let mut dir = OutputDir {
            path: path.to_path_buf(),
            db,
            _lock: lock,
        };
        dir.reconcile()?;
        Ok(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run database's file (`GET /api/runs` reads it).
    pub fn db_path(&self) -> PathBuf {
        self.db.path().to_path_buf()
    }

    /// The run database.
    pub fn db(&self) -> &RunDb {
        &self.db
    }

    /// The next free run number: one more than the largest run directory and recorded run (1
    /// in a fresh directory). An error when the largest is the last 32-bit number (taken
    /// with `--run-number 4294967295`): there is no next one to take.
    pub fn next_run_number(&self) -> anyhow::Result<u32> {
        let in_db = self.db.last_run_number()?;
        let in_dir = run_directories(&self.path).last().map(|(n, _)| *n);
        match in_db.max(in_dir) {
            None => Ok(1),
            Some(n) => n.checked_add(1).ok_or_else(|| {
                anyhow::anyhow!(
                    "{} holds run {n}, the largest run number: there is no next one. Give \
                     --run-number with a free number below it, or use another output directory.",
                    self.path.display()
                )
            }),
        }
    }

    /// Records one run: its sheet, the configuration it ran with, when it started and who
    /// started it, and its files (size, Adler-32, good events). A failure to record is said
    /// on stderr: the run's data and `summary.json` stay.
    pub fn record(
        &mut self,
        sheet: &RunSheet,
        config_toml: String,
        started_at_ns: Option<u64>,
        started_by: &str,
        files: Vec<FileRecord>,
    ) {
        let r = RunRecord {
            run_number: sheet.run_number,
            started_at_ns,
            stopped_at_ns: Some(now_ns()),
            started_by: started_by.to_string(),
            config_toml,
            status: sheet.status.as_str().into(),
            summary: sheet.to_json(),
            files,
        };
        if let Err(e) = self.db.record(&r) {
            eprintln!("rodeo: warning: run {} not recorded: {e}", sheet.run_number);
        }
    }

    /// Records every run directory the database does not know (see the module docs): with the
    /// `summary.json` it left (status as that sheet says), or as crashed with what its files
    /// hold.
    fn reconcile(&mut self) -> anyhow::Result<()> {
        for (n, dir) in run_directories(&self.path) {
            if self.db.has_run(n)? {
                continue;
            }
            let files = file_records(&data_files(&dir), &[]);
            let found = std::fs::read(dir.join("summary.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .and_then(RunSheet::from_json);
            let sheet = found.unwrap_or_else(|| RunSheet::crashed(n, dir.clone(), &files));
            // The file holds the tokens (mode 0600); the record is served to anyone.
            let config_toml = PartitionConfig::hide_tokens(
                &std::fs::read_to_string(dir.join("partition.toml")).unwrap_or_default(),
            );
            let status = sheet.status.as_str();
            let count = files.len();
            self.db.record(&RunRecord {
                run_number: n,
                started_at_ns: None,
                stopped_at_ns: None,
                started_by: "recovered".into(),
                config_toml,
                status: status.into(),
                summary: sheet.to_json(),
                files,
            })?;
            eprintln!(
                "rodeo: run {n} in {} had no record: recorded as {status} with {count} file(s)",
                dir.display()
            );
        }
        Ok(())
    }
}

/// The `run-NNNNNNNN` directories in `output`, by number.
fn run_directories(output: &Path) -> Vec<(u32, PathBuf)> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(output)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e
                .file_name()
                .to_str()?
                .strip_prefix("run-")?
                .parse::<u32>()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// The data files (`*.data`, `*.data.writing`) in a run directory, sorted.
pub fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".data") || n.ends_with(".data.writing"))
        })
        .collect();
    v.sort();
    v
}

/// `files` with size, Adler-32 and their events. A file its logger cross-checked after closing
/// it (in `checked`, `file` an index into `files`: end record and size read back, its Adler-32
/// summed as it was written) is not read again while its size on disk is the one written: its
/// record is the logger's (the Adler-32 its bytes must have, the events its end record counts;
/// `rodeo verify` says whether they are intact). Every other file (EventStorage, one without
/// its end record, one whose size changed) is read back completely, its events counted as
/// `rodeo verify` counts good ones; a file that cannot be read is left out.
pub fn file_records(files: &[PathBuf], checked: &[CheckedFile]) -> Vec<FileRecord> {
    let mut vouched: Vec<Option<&CheckedFile>> = vec![None; files.len()];
    for c in checked {
        if let Some(v) = vouched.get_mut(c.file) {
            *v = Some(c);
        }
    }
    files
        .iter()
        .zip(vouched)
        .filter_map(|(p, c)| {
            let c = c.filter(|c| {
                std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() == c.size_bytes)
            });
            if let Some(c) = c {
                return Some(FileRecord {
                    path: p.clone(),
                    size_bytes: c.size_bytes,
                    adler32: c.adler32,
                    events: c.events,
                });
            }
            // One reading checks the events and sums the file (rodeo's container); a file it
            // could not sum (EventStorage, damaged) is read once more for its checksum.
            let verdict = check_file(p);
            let (size_bytes, adler32) = match verdict.file_checksum {
                Some(sum) => sum,
                None => file_checksum(p).ok()?,
            };
            Some(FileRecord {
                path: p.clone(),
                size_bytes,
                adler32,
                events: verdict.good_events,
            })
        })
        .collect()
}

/// `rodeo run` (or `serve`) by `user@host`: who started a run, for its record.
pub fn started_by(command: &str) -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "?".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    format!("{command} ({user}@{host})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file its logger vouched for keeps the logger's record while its size on disk is the
    /// one written; with another size it is read back (here: not a data file, no events).
    #[test]
    fn a_checked_file_is_not_read_back_unless_its_size_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.data");
        std::fs::write(&path, [7u8; 64]).unwrap();
        let checked = CheckedFile {
            file: 0,
            size_bytes: 64,
            adler32: 0x1234_5678,
            events: 3,
        };
        let r = file_records(std::slice::from_ref(&path), std::slice::from_ref(&checked));
        assert_eq!(
            (r[0].size_bytes, r[0].adler32, r[0].events),
            (64, 0x1234_5678, 3)
        );
        std::fs::write(&path, [7u8; 60]).unwrap();
        let r = file_records(std::slice::from_ref(&path), std::slice::from_ref(&checked));
        let sum = rodeo_format::checksum::adler32(rodeo_format::checksum::ADLER32_INIT, &[7; 60]);
        assert_eq!((r[0].size_bytes, r[0].adler32, r[0].events), (60, sum, 0));
    }

    /// A run directory a crash left without a record is recorded from its `partition.toml`,
    /// which holds the tokens (mode 0600); the record, served to anyone at `/api/runs/N`,
    /// holds them hidden.
    #[test]
    fn a_recovered_run_is_recorded_without_its_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-00000003");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(
            run.join("partition.toml"),
            "[control]\ntoken = \"op-secret\"\nexpert_token = \"ex-secret\"\n[dcm]\nslots = 8\n",
        )
        .unwrap();
        let out = OutputDir::open(dir.path(), "test").unwrap();
        let got = out.db().get(3).unwrap().unwrap();
        let text = got["config_toml"].as_str().unwrap();
        assert!(!text.contains("secret"), "{text}");
        assert!(
            text.contains("(hidden)") && text.contains("slots = 8"),
            "{text}"
        );
    }

    /// The next number follows the largest run; after the last 32-bit number there is none,
    /// said as such (it was the same number again, refused as "taken before").
    #[test]
    fn the_next_run_number_follows_the_largest_and_ends_at_the_last() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            OutputDir::open(dir.path(), "test")
                .unwrap()
                .next_run_number()
                .unwrap(),
            1
        );
        std::fs::create_dir(dir.path().join("run-00000007")).unwrap();
        assert_eq!(
            OutputDir::open(dir.path(), "test")
                .unwrap()
                .next_run_number()
                .unwrap(),
            8
        );
        std::fs::create_dir(dir.path().join(format!("run-{}", u32::MAX))).unwrap();
        let e = OutputDir::open(dir.path(), "test")
            .unwrap()
            .next_run_number()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the largest run number") && e.contains("--run-number"),
            "{e}"
        );
    }

    #[test]
    fn hide_tokens_leaves_text_without_tokens_as_it_is() {
        let text = "# a comment\n[control]\ntoken = \"(hidden)\"\n[dcm]\nslots = 8\n";
        assert_eq!(PartitionConfig::hide_tokens(text), text);
        assert_eq!(
            PartitionConfig::hide_tokens("token = "),
            "",
            "not TOML: nothing"
        );
    }
}
