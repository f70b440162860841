//! Checks on this host of where a run's files go: `run.output` and every `logger.directories`
//! entry must be a directory this process may write in, or a path whose nearest existing parent
//! is one. One check ([`check_writable_dir`]) serves both; they differ in the error, which
//! names the field (and the entry). And that the loggers' margin of free space leaves them
//! room to write ([`PartitionConfig::check_free_space`]).

use std::path::{Component, Path, PathBuf};

use super::error::ConfigError;
use super::PartitionConfig;

impl PartitionConfig {
    /// Checks on this host that `run.output` can take the run's files: an existing path must be
    /// a directory this process may write in; a path that does not exist yet needs its nearest
    /// existing parent to be one (the run creates the rest). Writability is tried, not guessed
    /// from mode bits: a probe file is created and removed.
    pub fn check_output(&self) -> Result<(), ConfigError> {
        check_writable_dir(Path::new(&self.run.output))
            .map_err(|(path, reason)| ConfigError::Output { path, reason })?;
        check_run_database_path(Path::new(&self.run.output)).map_err(|reason| ConfigError::Output {
            path: self.run.output.clone(),
            reason,
        })
    }

    /// Checks on this host that every `logger.directories` entry can take files, as
    /// [`PartitionConfig::check_output`] does for `run.output` (exists and writable, or
    /// creatable); the error names the entry.
    ///
    /// Two entries naming one existing directory another way (relative and absolute, through
    /// a symbolic link) are refused here too: the lexical check of `validate` let them pass as
    /// two, and the run's loggers then shared one directory as if it were two.
    pub fn check_directories(&self) -> Result<(), ConfigError> {
        let mut seen: Vec<(PathBuf, &str)> = Vec::new();
        for entry in &self.logger.directories {
            check_writable_dir(Path::new(entry)).map_err(|(path, reason)| {
                ConfigError::Directory {
                    entry: entry.clone(),
                    path,
                    reason,
                }
            })?;
            let real = resolve_path(Path::new(entry));
            if let Some(own) = output_entry_of(&resolve_path(Path::new(&self.run.output)), &real) {
                return Err(ConfigError::Directory {
                    entry: entry.clone(),
                    path: real.display().to_string(),
                    reason: format!(
                        "it is or lies in {own:?}, one of the output directory's own entries \
                         (the run database and its journals `runs.sqlite*`, the lock \
                         `.rodeo.lock`, the runs' directories `run-*`, which each run makes \
                         anew): give the loggers a directory of their own, e.g. `data` inside \
                         the output directory"
                    ),
                });
            }
            if let Some((_, first)) = seen.iter().find(|(r, _)| *r == real) {
                return Err(ConfigError::Directory {
                    entry: entry.clone(),
                    path: real.display().to_string(),
                    reason: format!(
                        "the same directory as entry {first:?}: give each directory once"
                    ),
                });
            }
            seen.push((real, entry));
        }
        Ok(())
    }
}

/// SQLite's longest path (`SQLITE_MAX_PATHNAME`) plus one: the run database's paths must be
/// shorter.
const SQLITE_MAX_PATH: usize = 512;

/// Whether the output directory `output` is short enough for its run database: the journal
/// is the longest path the directory itself holds, and SQLite opens no path of 512 bytes or
/// more (a 515-byte output passed the check, and the run failed with "unable to open database
/// file" after making its directories). Asked by the check and by `rodeo run`/`serve` before
/// they make the directory (`-o` is not the configuration's).
pub fn check_run_database_path(output: &Path) -> Result<(), String> {
    let journal = resolve_path(output).join("runs.sqlite-journal");
    let len = journal.as_os_str().len();
    if len >= SQLITE_MAX_PATH {
        return Err(format!(
            "too long: its run database's journal would be a path of {len} bytes, and SQLite \
             opens none of {SQLITE_MAX_PATH} or more; give a shorter path"
        ));
    }
    Ok(())
}

/// The entry right under the output directory `root` that `at` is or lies in, when it is one
/// of the output directory's own: the run database and its journals (`runs.sqlite*`: a logger
/// directory named `runs.sqlite-journal` broke the database of the directory for good, a QA
/// pass), the lock (`.rodeo.lock`), a run directory (`run-*`: each run makes its own, and a
/// logger directory in a later run's wedged that run's start).
pub fn output_entry_of(root: &Path, at: &Path) -> Option<String> {
    let first = at.strip_prefix(root).ok()?.components().next()?;
    let name = first.as_os_str().to_string_lossy();
    (name.starts_with("runs.sqlite") || name == ".rodeo.lock" || name.starts_with("run-"))
        .then(|| name.into_owned())
}

/// `path` made absolute (against the working directory) with its symbolic links and `..`
/// resolved as the kernel would: every existing component through `canonicalize`, the rest
/// (not yet made) lexically. Where two configured paths lead on this host: `logger.directories`
/// named two ways (also not made yet: `dirs/a/x` and `dirs/syma/x`, `syma` a link to `a`,
/// passed as two before a QA pass), and what `PUT /api/config` may name (`rodeo_run::fixed`).
/// A symbolic link whose target is not made yet is followed too (a link to a later run's
/// directory passed as a logger directory of its own, a QA pass), at most [`LINK_HOPS`] deep.
pub fn resolve_path(path: &Path) -> PathBuf {
    resolve_within(path, LINK_HOPS)
}

/// Symbolic links [`resolve_path`] follows by hand at most (the kernel's limit).
const LINK_HOPS: usize = 40;

fn resolve_within(path: &Path, hops: usize) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut at = PathBuf::from("/");
    for c in absolute.components() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                at.pop();
            }
            Component::Normal(name) => {
                at.push(name);
                if let Ok(real) = at.canonicalize() {
                    at = real;
                } else if let (Ok(target), true) = (at.read_link(), hops > 0) {
                    // A link to what is not made yet: where it leads, as the kernel will
                    // once it is made (a relative target from the link's directory).
                    let from = at.parent().map(Path::to_path_buf).unwrap_or_default();
                    at = resolve_within(&from.join(target), hops - 1);
                }
            }
        }
    }
    at
}

impl PartitionConfig {
    /// Checks on this host that the loggers can write at all: some output directory
    /// (`logger.directories`, used in order, or `run.output` when there are none) has more
    /// room than the loggers' margin, the larger of `logger.min_free_bytes` and
    /// `logger.min_free_fraction` of its disk (`rodeo_dataflow::disks`). Otherwise every
    /// directory is full from the first event: the run would write nothing and fail. A path
    /// not made yet is measured at its nearest existing parent; one whose free space cannot be
    /// read counts as having room (`check_directories` names what is wrong with it). Loggers
    /// placed on other hosts (`[hosts]`) write to their own disks and are not checked here.
    /// Asked by `config check`, `rodeo run` and `PUT /api/config`; not when a served partition
    /// prepares its next run (the disk the last run filled to the margin may be freed before
    /// the start; a run started on a full disk ends at once, "every output directory is full").
    pub fn check_free_space(&self) -> Result<(), ConfigError> {
        // A fraction out of range is `validate`'s error, not a margin to measure.
        if self.hosts.keys().any(|app| app.starts_with("logger-"))
            || !(0.0..1.0).contains(&self.logger.min_free_fraction)
        {
            return Ok(());
        }
        let margin = rodeo_dataflow::disks::DiskMargin {
            min_free_bytes: self.logger.min_free_bytes,
            min_free_fraction: self.logger.min_free_fraction,
        };
        let dirs: Vec<&str> = if self.logger.directories.is_empty() {
            vec![self.run.output.as_str()]
        } else {
            self.logger.directories.iter().map(String::as_str).collect()
        };
        let mut full = Vec::new();
        for dir in dirs {
            let at = nearest_existing(Path::new(dir));
            match rodeo_dataflow::disks::free_space(at) {
                Ok(fs) if fs.available <= margin.bytes(fs.total) => full.push((dir, at, fs)),
                _ => return Ok(()),
            }
        }
        let Some(&(_, _, first)) = full.first() else {
            return Ok(());
        };
        let by_fraction = margin.bytes(first.total) > margin.min_free_bytes;
        let (field, value) = if by_fraction {
            (
                "logger.min_free_fraction",
                format!("{}", margin.min_free_fraction),
            )
        } else {
            ("logger.min_free_bytes", margin.min_free_bytes.to_string())
        };
        let disks: Vec<String> = full
            .iter()
            .map(|(dir, at, fs)| {
                let measured = if Path::new(dir) == *at {
                    String::new()
                } else {
                    format!(", measured at {}", at.display())
                };
                format!(
                    "{dir:?} has {} bytes free of {}{measured} (the margin there is {})",
                    fs.available,
                    fs.total,
                    margin.bytes(fs.total)
                )
            })
            .collect();
        Err(super::error::bad(
            field,
            value,
            format!(
                "a margin below the free space of some output directory (else every one is \
                 full from the first event and the run writes nothing): {}; free space there, \
                 lower logger.min_free_bytes / logger.min_free_fraction, or add a directory on \
                 another disk to logger.directories",
                disks.join("; ")
            ),
        ))
    }
}

/// `path` itself if it exists, else its nearest existing parent (`.` for a relative path
/// none of whose parents exists).
fn nearest_existing(path: &Path) -> &Path {
    let mut at = path;
    while std::fs::metadata(at).is_err() {
        at = match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => return Path::new("."),
        };
    }
    at
}

/// Whether `out` can take files: an existing directory this process may write in, or a path
/// whose nearest existing parent is one (made when used). `Err((path checked, what is wrong))`.
fn check_writable_dir(out: &Path) -> Result<(), (String, String)> {
    let mut at = out;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => return probe_writable(at),
            Ok(_) => {
                return Err((
                    at.display().to_string(),
                    if at == out {
                        "exists and is not a directory".into()
                    } else {
                        "a parent of the output path is not a directory".into()
                    },
                ))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                at = match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
            }
            Err(e) => return Err((at.display().to_string(), format!("cannot be read: {e}"))),
        }
    }
}

/// Creates and removes a probe file in `dir`: can this process write there?
/// `Err((dir, what is wrong))`.
fn probe_writable(dir: &Path) -> Result<(), (String, String)> {
    let probe = dir.join(format!(".rodeo-write-check-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err((
            dir.display().to_string(),
            format!("is a directory this process cannot write in: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_follows_links_and_dot_dot() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("l")).unwrap();
        assert_eq!(
            resolve_path(&dir.path().join("l/a/../b")),
            Path::new("/etc/b")
        );
        assert_eq!(
            resolve_path(&dir.path().join("x/../y/./z")),
            real.join("y/z")
        );
        assert_eq!(resolve_path(Path::new("/../..")), Path::new("/"));
        // Links to what is not made yet: followed, relative ones from their directory; a
        // loop ends.
        std::os::unix::fs::symlink("later/x", dir.path().join("soon")).unwrap();
        assert_eq!(
            resolve_path(&dir.path().join("soon/y")),
            real.join("later/x/y")
        );
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        assert!(resolve_path(&dir.path().join("loop")).starts_with(&real));
    }

    /// An output directory whose run database's journal would be a path SQLite cannot open is
    /// refused, naming the field and the length.
    #[test]
    fn an_output_too_long_for_the_run_database_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let long = t.path().join("e".repeat(250)).join("f".repeat(250));
        let config = PartitionConfig::from_toml(
            &format!("[run]\noutput = {:?}\n", long.display().to_string()),
            "t.toml",
        )
        .unwrap();
        let e = config.check_output().unwrap_err().to_string();
        assert!(
            e.contains("run.output") && e.contains("SQLite opens none of 512"),
            "{e}"
        );
        let short = PartitionConfig::from_toml(
            &format!(
                "[run]\noutput = {:?}\n",
                t.path().join("e").display().to_string()
            ),
            "t.toml",
        )
        .unwrap();
        short.check_output().unwrap();
    }

    /// A logger directory that is (or lies in) one of the output directory's own entries is
    /// refused, naming it; a directory of its own inside the output directory passes.
    #[test]
    fn a_logger_directory_among_the_output_directory_s_own_entries_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        let config = |dir: &str| {
            PartitionConfig::from_toml(
                &format!(
                    "[run]\noutput = {:?}\n[logger]\ndirectories = [{:?}]\n",
                    out.display().to_string(),
                    out.join(dir).display().to_string()
                ),
                "t.toml",
            )
            .unwrap()
        };
        for own in [
            "runs.sqlite-journal",
            "runs.sqlite-wal",
            "runs.sqlite",
            ".rodeo.lock",
            "run-00000002",
            "run-00000001/x",
        ] {
            let e = config(own).check_directories().unwrap_err().to_string();
            assert!(
                e.contains("logger.directories") && e.contains("the output directory's own"),
                "{own}: {e}"
            );
        }
        // Through a symbolic link to a later run's directory, not made yet.
        std::fs::create_dir_all(&out).unwrap();
        std::os::unix::fs::symlink("run-00000009", out.join("later")).unwrap();
        let e = config("later").check_directories().unwrap_err().to_string();
        assert!(e.contains("run-00000009"), "{e}");
        config("data").check_directories().unwrap();
        config("data/runs.sqlite-journal")
            .check_directories()
            .unwrap();
    }

    /// One existing directory named twice another way (through a symbolic link, or by a path
    /// `validate` cannot tell is the same) is refused on this host, naming both entries; two
    /// directories pass.
    #[test]
    fn one_logger_directory_named_two_ways_is_refused_on_this_host() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let alias = t.path().join("alias");
        std::os::unix::fs::symlink(&a, &alias).unwrap();
        let dirs = |x: &std::path::Path, y: &std::path::Path| {
            PartitionConfig::from_toml(
                &format!(
                    "[logger]\ndirectories = [{:?}, {:?}]\n",
                    x.display().to_string(),
                    y.display().to_string()
                ),
                "t.toml",
            )
            .unwrap()
        };
        dirs(&a, &b).check_directories().unwrap();
        // Not made yet, under one directory reached two ways.
        let dirs_not_made = |x: &str, y: &str| dirs(&a.join(x), &t.path().join(y));
        assert!(dirs_not_made("new", "alias/new")
            .check_directories()
            .is_err());
        assert!(dirs_not_made("new", "b/../a/new")
            .check_directories()
            .is_err());
        assert!(dirs_not_made("new", "a/other").check_directories().is_ok());
        for twin in [alias, b.join("..").join("a")] {
            let e = dirs(&a, &twin).check_directories().unwrap_err().to_string();
            assert!(
                e.contains("logger.directories") && e.contains("the same directory as entry"),
                "{}: {e}",
                twin.display()
            );
        }
    }
}
