//! What runs of this user whose processes are gone left in the temporary directory: their
//! runtime directories (`<tmp>/rodeo-<hash>`, the ipc endpoints' socket files), which a run's
//! controller removes at its end. When the controller is killed or frozen, the applications
//! walking themselves down remove it, the last one to close its endpoints
//! ([`remove_runtime_dir_when_unused`]); what even they cannot (every application killed too)
//! a controller removes when it starts ([`remove_stale_runtime_dirs`], one log line), as every
//! process's first shared-memory socket removes what dead processes left in shared memory.
//!
//! A runtime directory is stale when it belongs to this user, holds socket files none of which
//! any process listens on (`/proc/net/unix` lists every bound unix socket by path), and has not
//! changed for [`STALE_AFTER`] (a run being configured has made its directory but not yet
//! bound its sockets); or when it is empty and has not changed for [`EMPTY_STALE_AFTER`].

use std::collections::HashSet;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a runtime directory with sockets nobody listens on is left alone.
pub const STALE_AFTER: Duration = Duration::from_secs(60);
/// How long an empty runtime directory is left alone (a partition configured, not connected).
pub const EMPTY_STALE_AFTER: Duration = Duration::from_secs(3600);

/// The paths of every unix socket bound on this host now.
fn bound_unix_sockets() -> HashSet<PathBuf> {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    text.lines()
        .skip(1)
        // "Num RefCount Protocol Flags Type St Inode Path": the path is the 8th field.
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

/// What a runtime directory holds ([`contents`]).
#[derive(Default)]
struct Contents {
    /// Its socket files.
    sockets: usize,
    /// One of them is bound now.
    listened: bool,
    /// It holds something besides socket files.
    other: bool,
}

/// What `dir` holds, its sockets judged bound by `bound`; `None` when it cannot be read.
fn contents(dir: &Path, bound: &HashSet<PathBuf>) -> Option<Contents> {
    let mut c = Contents::default();
    for f in std::fs::read_dir(dir).ok()?.flatten() {
        match f.file_type() {
            Ok(t) if t.is_socket() => {
                c.sockets += 1;
                c.listened |= bound.contains(&f.path());
            }
            _ => c.other = true,
        }
    }
    Some(c)
}

/// Whether `name` is a runtime directory's name: `rodeo-` and 16 hex digits.
pub fn is_runtime_name(name: &str) -> bool {
    name.strip_prefix("rodeo-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The stale runtime directories under `tmp` (module docs).
pub fn stale_runtime_dirs(tmp: &Path) -> Vec<PathBuf> {
    // SAFETY: getuid(2) cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    let bound = bound_unix_sockets();
    let mut stale = Vec::new();
    for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(meta) = e.metadata() else { continue };
        if !is_runtime_name(&name) || !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
        let Some(age) = age else { continue };
        let Contents {
            sockets,
            listened,
            other,
        } = contents(&e.path(), &bound).unwrap_or_default();
        let old_enough = if sockets == 0 && !other {
            age >= EMPTY_STALE_AFTER
        } else {
            age >= STALE_AFTER
        };
        if !listened && !other && old_enough {
            stale.push(e.path());
        }
    }
    stale
}

/// Removes the stale runtime directories of the system's temporary directory (module docs) and
/// says so in one line; returns how many were removed.
pub fn remove_stale_runtime_dirs() -> usize {
    let tmp = std::env::temp_dir();
    let removed: Vec<PathBuf> = stale_runtime_dirs(&tmp)
        .into_iter()
        .filter(|d| std::fs::remove_dir_all(d).is_ok())
        .collect();
    if !removed.is_empty() {
        eprintln!(
            "rodeo: removed {} runtime director{} of runs whose processes are gone ({})",
            removed.len(),
            if removed.len() == 1 { "y" } else { "ies" },
            removed
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    removed.len()
}

/// Removes the runtime directory `dir` of a run whose controller is gone, once no socket in it
/// is bound any more (every application of the run has closed its endpoints), waiting at most
/// `wait`. Each application that walks itself down after its controller's death calls this
/// after closing its own sockets: whichever sees the others' sockets gone removes the directory
/// (the others find it gone). Returns whether `dir` is gone; a directory still in use after
/// `wait`, or holding anything but socket files, stays (the next controller's start removes it
/// once stale, [`remove_stale_runtime_dirs`]).
pub fn remove_runtime_dir_when_unused(dir: &Path, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let Some(c) = contents(dir, &bound_unix_sockets()) else {
            return !dir.exists();
        };
        if c.other {
            // Not a runtime directory's content: not ours to remove.
            return false;
        }
        if !c.listened {
            // Another application may be removing it at the same moment: gone either way.
            let _ = std::fs::remove_dir_all(dir);
            return !dir.exists();
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_with_a_listened_socket_stays_and_one_nobody_listens_on_goes() {
        let tmp = tempfile::tempdir().unwrap();
        let live = tmp.path().join("rodeo-00000000000000aa");
        let dead = tmp.path().join("rodeo-00000000000000bb");
        let other = tmp.path().join("rodeo-not-a-runtime-dir");
        for d in [&live, &dead, &other] {
            std::fs::create_dir(d).unwrap();
        }
        let _listener = std::os::unix::net::UnixListener::bind(live.join("ros-1.sock")).unwrap();
        drop(std::os::unix::net::UnixListener::bind(dead.join("ros-1.sock")).unwrap());
        drop(std::os::unix::net::UnixListener::bind(other.join("ros-1.sock")).unwrap());
        // A child another test of this process spawns at that moment holds a copy of a closed
        // listener's descriptor until its exec: wait (bounded) until the kernel lists neither.
        rodeo_testkit::wait_until(
            "the closed sockets to leave /proc/net/unix",
            Duration::from_secs(10),
            || {
                [&dead, &other]
                    .iter()
                    .all(|d| !bound_unix_sockets().contains(&d.join("ros-1.sock")))
            },
        );
        // Young: nothing is stale yet.
        assert!(stale_runtime_dirs(tmp.path()).is_empty());
        let old = std::time::SystemTime::now() - STALE_AFTER - Duration::from_secs(1);
        for d in [&live, &dead, &other] {
            std::fs::File::open(d).unwrap().set_modified(old).unwrap();
        }
        assert_eq!(stale_runtime_dirs(tmp.path()), vec![dead.clone()]);
        assert!(is_runtime_name("rodeo-0123456789abcdef"));
        assert!(!is_runtime_name("rodeo-bench-12.sock"));
    }

    /// The last application out removes the directory: not while a socket in it is bound,
    /// at once when none is; a directory holding anything else stays.
    #[test]
    fn a_runtime_dir_goes_once_no_socket_in_it_is_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rodeo-00000000000000cc");
        std::fs::create_dir(&dir).unwrap();
        let listener = std::os::unix::net::UnixListener::bind(dir.join("ros-1.sock")).unwrap();
        drop(std::os::unix::net::UnixListener::bind(dir.join("logger-1.sock")).unwrap());
        let t0 = std::time::Instant::now();
        assert!(!remove_runtime_dir_when_unused(
            &dir,
            Duration::from_millis(50)
        ));
        assert!(
            t0.elapsed() >= Duration::from_millis(50),
            "it waited for the socket"
        );
        assert!(
            dir.join("logger-1.sock").exists(),
            "nothing removed while one is bound"
        );
        drop(listener);
        // A child another test spawns may hold the closed listener until its exec (above).
        assert!(remove_runtime_dir_when_unused(
            &dir,
            Duration::from_secs(10)
        ));
        assert!(!dir.exists());
        // Gone already: nothing to do.
        assert!(remove_runtime_dir_when_unused(&dir, Duration::ZERO));
        let other = tmp.path().join("rodeo-00000000000000dd");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), b"not a socket").unwrap();
        assert!(!remove_runtime_dir_when_unused(&other, Duration::ZERO));
        assert!(other.join("notes.txt").exists());
    }
}
