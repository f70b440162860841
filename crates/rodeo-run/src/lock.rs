//! One output directory, one owner: an exclusive lock on `<output>/.rodeo.lock`.
//!
//! `rodeo run` and `rodeo serve` hold it for their whole life (taking run numbers, writing run
//! directories, recovering files a dead logger left open, recording runs). A second one on the
//! same directory is refused at once with the holder's pid and command, read from the lock
//! file. The lock is `flock(2)` on the open file (through `std::fs::File::try_lock`): the
//! kernel releases it when the holder's process ends however it ends (kill -9 included), so a
//! stale lock file never blocks anybody; its contents only name the last holder. The file is
//! opened close-on-exec, so the `rodeo app` processes a controller starts do not hold it.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The lock file's name in an output directory.
pub const LOCK_FILE: &str = ".rodeo.lock";

/// Why the output directory could not be locked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another process holds the directory.
    #[error(
        "the directory {dir} is in use by {holder}: one directory has one owner; wait for it \
         to end, stop it, or choose another directory"
    )]
    Held {
        /// The output directory.
        dir: PathBuf,
        /// Who holds it, as its lock file says (`pid 123: rodeo serve ...`).
        holder: String,
    },
    /// The directory lies inside another output directory that another process holds (a
    /// served directory's run directories are the service's: a run made in one wedged the
    /// service's next run, a QA pass).
    #[error(
        "the directory {dir} lies inside the output directory {outer}, in use by {holder}: \
         its runs' directories there are the holder's; choose a directory outside it"
    )]
    InsideHeld {
        /// The output directory asked for.
        dir: PathBuf,
        /// The held output directory it lies in.
        outer: PathBuf,
        /// Who holds that one, as its lock file says.
        holder: String,
    },
    /// The lock file could not be made or locked.
    #[error("cannot lock the output directory {dir} ({file}): {source}")]
    Io {
        /// The output directory.
        dir: PathBuf,
        /// The lock file.
        file: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

/// The exclusive lock of an output directory, held until dropped (or the process ends).
#[derive(Debug)]
pub struct OutputLock {
    file: File,
    path: PathBuf,
}

impl OutputLock {
    /// Takes the lock of `dir` (which must exist) for this process, described as `what`
    /// (written into the lock file with the pid, for whoever is refused next).
    pub fn acquire(dir: &Path, what: &str) -> Result<OutputLock, LockError> {
        OutputLock::check_not_inside_held(dir)?;
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            dir: dir.to_path_buf(),
            file: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        match try_lock(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // The holder writes its line just after it takes the lock: a process refused
                // in between reads again for a moment (bounded) to name it.
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
                let holder = loop {
                    let holder = holder_line(&mut file);
                    if !holder.is_empty() || std::time::Instant::now() >= deadline {
                        break holder;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                };
                return Err(LockError::Held {
                    dir: dir.to_path_buf(),
                    holder: named(holder),
                });
            }
            Err(e) => return Err(io(e)),
        }
        let line = format!("pid {}: {what}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(line.as_bytes()))
            .map_err(io)?;
        Ok(OutputLock { file, path })
    }

    /// Refuses `dir` when it lies inside an output directory another process holds
    /// ([`LockError::InsideHeld`]); `dir` need not exist yet. Asked before anything is made
    /// there: a refused run that had made `<served>/run-00000006/foo` first left the service
    /// unable to prepare its run 6 (a QA pass).
    pub fn check_not_inside_held(dir: &Path) -> Result<(), LockError> {
        match held_above(dir) {
            Some((outer, holder)) => Err(LockError::InsideHeld {
                dir: dir.to_path_buf(),
                outer,
                holder,
            }),
            None => Ok(()),
        }
    }

    /// The directory that holds `dir` for another process: `dir` itself or the nearest one
    /// above it whose lock another process holds, with its holder as its lock file names it.
    /// `rodeo config check` warns with it (it said OK to an output directory a running
    /// service held, which every run then refused: a QA pass).
    pub fn holder_of(dir: &Path) -> Option<(PathBuf, String)> {
        held_from(dir, 0)
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        // SAFETY: `flock` on a descriptor this struct owns (open until the `File` drops right
        // after); it reads and writes no memory of ours.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The nearest directory above `dir` (resolved) whose lock another process holds, and its
/// holder as its lock file names it. Asked by trying the lock (shared, not waiting), which is
/// let go at once. A lock this process holds (its lock file names its pid: a run's logger
/// directories inside its own output directory) is no refusal.
fn held_above(dir: &Path) -> Option<(PathBuf, String)> {
    held_from(dir, 1)
}

/// As [`held_above`], from `dir`'s ancestor `skip` levels up (0: `dir` itself).
fn held_from(dir: &Path, skip: usize) -> Option<(PathBuf, String)> {
    // Resolved as far as it exists (links, `..`), the rest as written: it may not exist yet.
    let real = rodeo_control::config::resolve_path(dir);
    let own = format!("pid {}:", std::process::id());
    for outer in real.ancestors().skip(skip) {
        let Ok(mut file) = File::open(outer.join(LOCK_FILE)) else {
            continue;
        };
        // SAFETY: `flock` on a descriptor `file` owns and keeps open for the call; it reads
        // and writes no memory of ours. The lock, if taken, goes when `file` is closed.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        if r != 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock {
            let holder = holder_line(&mut file);
            if holder.starts_with(&own) {
                continue;
            }
            return Some((outer.to_path_buf(), named(holder)));
        }
    }
    None
}

/// The first line of a lock file (`pid 123: rodeo serve ...`), read from its start; empty
/// when it has none yet.
fn holder_line(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.read_to_string(&mut text);
    text.lines().next().unwrap_or("").trim().to_string()
}

/// A holder as a refusal names it: its lock file's line, or "another process".
fn named(holder: String) -> String {
    if holder.is_empty() {
        "another process".into()
    } else {
        holder
    }
}

/// `flock(LOCK_EX | LOCK_NB)` on `file`: `WouldBlock` when another open file holds it.
fn try_lock(file: &File) -> std::io::Result<()> {
    loop {
        // SAFETY: `flock` on a descriptor `file` owns and keeps open for the call; it reads and
        // writes no memory of ours.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// This process's command line, for the lock file (`rodeo serve --output x`).
pub fn this_command() -> String {
    let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        "rodeo".into()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_and_the_lock_is_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let first = OutputLock::acquire(dir.path(), "rodeo serve --output x").unwrap();
        // Another open file description of the same file: what a second process would get.
        let e = OutputLock::acquire(dir.path(), "rodeo run").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains("rodeo serve --output x"), "{text}");
        drop(first);
        let again = OutputLock::acquire(dir.path(), "rodeo run").unwrap();
        assert_eq!(again.path(), dir.path().join(LOCK_FILE));
    }

    /// The holder of a directory, or of one above it, for `config check`'s warning; none once
    /// it is let go.
    #[test]
    fn the_holder_of_a_directory_or_one_above_it_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(OutputLock::holder_of(dir.path()).is_none());
        let held = OutputLock::acquire(dir.path(), "rodeo serve --output x").unwrap();
        // As another process's lock file names it (this process's own is no holder).
        std::fs::write(held.path(), "pid 1: rodeo serve --output x\n").unwrap();
        let real = rodeo_control::config::resolve_path(dir.path());
        for d in [dir.path().to_path_buf(), dir.path().join("run-00000001")] {
            let (at, holder) = OutputLock::holder_of(&d).unwrap();
            assert_eq!(
                (at.as_path(), holder.as_str()),
                (real.as_path(), "pid 1: rodeo serve --output x")
            );
        }
        drop(held);
        assert!(OutputLock::holder_of(dir.path()).is_none());
    }

    /// A directory inside a held output directory is refused, naming that one and its holder
    /// (a run made in a served directory's `run-…` wedged the service); once it is let go, or
    /// with a lock file nobody holds, it is taken.
    #[test]
    fn a_directory_inside_a_held_one_is_refused_naming_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("run-00000004").join("deeper");
        let outer = OutputLock::acquire(dir.path(), "rodeo serve --output x").unwrap();
        // Refused before anything is made (the directory does not exist yet).
        std::fs::write(outer.path(), "pid 1: rodeo serve --output x\n").unwrap();
        assert!(OutputLock::check_not_inside_held(&inner).is_err());
        assert!(!dir.path().join("run-00000004").exists());
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(outer.path(), format!("pid {}: x\n", std::process::id())).unwrap();
        // Held by this process: no refusal (a run's logger directory inside its output).
        drop(OutputLock::acquire(&inner, "rodeo run").unwrap());
        // As another process's (its lock file names another pid; the lock stays held).
        std::fs::write(outer.path(), "pid 1: rodeo serve --output x\n").unwrap();
        let e = OutputLock::acquire(&inner, "rodeo run").unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, LockError::InsideHeld { .. }), "{text}");
        assert!(
            text.contains(&dir.path().canonicalize().unwrap().display().to_string())
                && text.contains("rodeo serve --output x"),
            "{text}"
        );
        drop(outer);
        let taken = OutputLock::acquire(&inner, "rodeo run").unwrap();
        drop(taken);
        // The outer directory's lock file is left behind, held by nobody: no refusal.
        assert!(dir.path().join(LOCK_FILE).exists());
        OutputLock::acquire(&inner, "rodeo run").unwrap();
    }

    #[test]
    fn this_command_names_the_test_binary() {
        assert!(!this_command().is_empty());
    }
}
