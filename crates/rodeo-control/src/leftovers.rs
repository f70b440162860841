//! What runs of this user whose processes are gone left in the temporary directory: their
//! runtime directories (`<tmp>/rodeo-<hash>`, the ipc endpoints' socket files), which a run
//! removes at its end but a run whose controller was killed cannot. A controller removes them
//! when it starts ([`remove_stale_runtime_dirs`], one log line), as every process's first
//! shared-memory socket removes what dead processes left in shared memory.
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

/// Whether `name` is a runtime directory's name: `rodeo-` and 16 hex digits.
fn is_runtime_name(name: &str) -> bool {
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
        let mut sockets = 0;
        let mut listened = false;
        let mut other = false;
        for f in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            match f.file_type() {
                Ok(t) if t.is_socket() => {
                    sockets += 1;
                    listened |= bound.contains(&f.path());
                }
                _ => other = true,
            }
        }
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
}
