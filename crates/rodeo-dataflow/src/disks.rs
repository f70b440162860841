//! The logger's output directories ("disks", as the SFO's): which one it writes to, whether it
//! still has room, and what a full disk looks like.
//!
//! # Directories and margin
//!
//! A logger is given one or more directories, used in order. A directory is full when the
//! space left to unprivileged users (statvfs `f_bavail`) drops to its margin: the larger of
//! `min_free_bytes` and `min_free_fraction` of the file system's size. The margin keeps room
//! for what must still be written when a directory is left (the end records of the open
//! files, the write buffers) and for everything else on that disk.
//!
//! # When it is checked
//!
//! statvfs costs a microsecond, so it is checked cheaply but not per event: every
//! [`CHECK_EVERY_BYTES`] written ([`Disks::wrote`] says when), and by the file writers at each
//! rotation (they refuse to open a file below the margin). The kernel's own verdict, `ENOSPC`
//! or `EDQUOT` on a write or an `fdatasync` ([`is_disk_full`]), means the same: the directory
//! is full. A margin larger than [`CHECK_EVERY_BYTES`] plus the writers' buffers (4 MiB per
//! stream) lets the check see a full disk before the kernel does.
//!
//! # A directory that cannot be written
//!
//! A directory that turns read-only (a read-only remount, `chattr +i`), loses its write
//! permission or is removed while the run runs is treated like a full one: each check also asks
//! the kernel whether the directory can be written ([`writable`], `access(2)`), and an error of
//! that kind on a file ([`is_not_writable`]: `EROFS`, `EPERM`, `EACCES`, `ENOENT`) means the same.
//!
//! # Moving on
//!
//! [`Disks::move_on`] leaves the current directory for the next one that has room (a
//! directory once left is not used again in the run: its files are closed). When none has,
//! every directory is full and the logger stops writing (see the logger's "Full disks").

use std::io;
use std::path::{Path, PathBuf};

/// Bytes written between two free-space checks of the current directory.
pub const CHECK_EVERY_BYTES: u64 = 4 << 20;

/// Default `min_free_bytes`: 64 MiB (the file writers' own default margin).
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// How much room a directory keeps free: the larger of the two.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskMargin {
    /// Bytes that must stay free.
    pub min_free_bytes: u64,
    /// Fraction (0 to 1) of the file system's size that must stay free.
    pub min_free_fraction: f64,
}

impl Default for DiskMargin {
    fn default() -> Self {
        DiskMargin {
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            min_free_fraction: 0.0,
        }
    }
}

impl DiskMargin {
    /// The margin in bytes on a file system of `total` bytes.
    pub fn bytes(&self, total: u64) -> u64 {
        let frac = (self.min_free_fraction.clamp(0.0, 1.0) * total as f64).ceil() as u64;
        self.min_free_bytes.max(frac)
    }
}

pub use rodeo_files::space::{free_space, FreeSpace};

/// Whether an I/O error is the kernel saying the disk (or the user's quota) is full.
pub fn is_disk_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == io::ErrorKind::StorageFull
        || e.kind() == io::ErrorKind::QuotaExceeded
}

/// Whether an I/O error says a directory can no longer be written: it turned read-only
/// (`EROFS`, a read-only remount; `EPERM`, `chattr +i`), its permissions were taken away
/// (`EACCES`), or it was removed (`ENOENT`).
pub fn is_not_writable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EROFS) | Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::ENOENT)
    )
}

/// Whether this process may make, rename and remove files in `dir` now (`access(2)`, `W_OK`:
/// the kernel's answer for a read-only file system, an immutable directory, a directory
/// removed, and permissions; root passes permission bits, as its writes would): `Err` names
/// the directory and the cause.
pub fn writable(dir: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return Err(format!("{}: not a path the kernel takes", dir.display()));
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call; access(2) only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
        return Ok(());
    }
    Err(format!(
        "{}: cannot be written ({})",
        dir.display(),
        io::Error::last_os_error()
    ))
}

/// Whether `dir` can be written and has more room than `margin` asks: `Ok(())` if so, else why
/// not (a sentence naming the directory and the cause: the free bytes and the margin, or why
/// it cannot be written).
pub fn room_in(dir: &Path, margin: &DiskMargin) -> Result<(), String> {
    writable(dir)?;
    match free_space(dir) {
        Ok(fs) => {
            let need = margin.bytes(fs.total);
            if fs.available > need {
                Ok(())
            } else {
                Err(format!(
                    "{}: disk full ({} bytes free of {}, the margin is {need})",
                    dir.display(),
                    fs.available,
                    fs.total
                ))
            }
        }
        Err(e) => Err(format!(
            "{}: cannot read the free space: {e}",
            dir.display()
        )),
    }
}

/// The output directories of a logger, in order, and which one is in use (module docs).
#[derive(Debug)]
pub struct Disks {
    dirs: Vec<PathBuf>,
    current: usize,
    margin: DiskMargin,
    since_check: u64,
    /// Why each directory left behind was left.
    left: Vec<String>,
    /// All are full: no directory is in use.
    full: bool,
}

impl Disks {
    /// The directories `dirs` (at least one; an empty list is a list of `"."`), each keeping
    /// `margin` free.
    pub fn new(dirs: Vec<PathBuf>, margin: DiskMargin) -> Disks {
        let dirs = if dirs.is_empty() {
            vec![PathBuf::from(".")]
        } else {
            dirs
        };
        Disks {
            dirs,
            current: 0,
            margin,
            since_check: 0,
            left: Vec::new(),
            full: false,
        }
    }

    /// The directory in use (`None`: every directory is full).
    pub fn current(&self) -> Option<&Path> {
        (!self.full).then(|| self.dirs[self.current].as_path())
    }

    /// Every directory, in order.
    pub fn all(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The margin.
    pub fn margin(&self) -> DiskMargin {
        self.margin
    }

    /// The margin in bytes of the directory in use (0 when its size cannot be read: the
    /// kernel's `ENOSPC` still stops the writes).
    pub fn margin_bytes(&self) -> u64 {
        self.current()
            .and_then(|d| free_space(d).ok())
            .map_or(self.margin.min_free_bytes, |fs| self.margin.bytes(fs.total))
    }

    /// Counts `bytes` written; `true` when a free-space check is due ([`Disks::check`]).
    pub fn wrote(&mut self, bytes: u64) -> bool {
        self.since_check += bytes;
        self.since_check >= CHECK_EVERY_BYTES
    }

    /// Checks the directory in use: `Err(why)` when it is full or cannot be written (module
    /// docs).
    pub fn check(&mut self) -> Result<(), String> {
        self.since_check = 0;
        match self.current() {
            Some(d) => room_in(d, &self.margin),
            None => Err("every output directory is full or cannot be written".into()),
        }
    }

    /// Leaves the directory in use (`why` it is full) for the next one with room, made if
    /// need be; returns it, or `None` when every directory is full (then
    /// [`Disks::why_full`] says why, directory by directory).
    pub fn move_on(&mut self, why: String) -> Option<&Path> {
        if self.full {
            return None;
        }
        self.left.push(why);
        self.since_check = 0;
        while self.current + 1 < self.dirs.len() {
            self.current += 1;
            let d = &self.dirs[self.current];
            let made = std::fs::create_dir_all(d)
                .map_err(|e| format!("{}: cannot create it: {e}", d.display()));
            match made.and_then(|()| room_in(d, &self.margin)) {
                Ok(()) => return Some(self.dirs[self.current].as_path()),
                Err(why) => self.left.push(why),
            }
        }
        self.full = true;
        None
    }

    /// Why the directories left behind were left, in order, joined in one sentence.
    pub fn why_full(&self) -> String {
        self.left.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_is_the_larger_of_bytes_and_fraction() {
        let m = DiskMargin {
            min_free_bytes: 100,
            min_free_fraction: 0.1,
        };
        assert_eq!(m.bytes(500), 100);
        assert_eq!(m.bytes(10_000), 1000);
    }

    #[test]
    fn enospc_and_edquot_are_disk_full() {
        assert!(is_disk_full(&io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(is_disk_full(&io::Error::from_raw_os_error(libc::EDQUOT)));
        assert!(!is_disk_full(&io::Error::from_raw_os_error(libc::EIO)));
    }

    #[test]
    fn moves_to_the_next_directory_then_reports_all_full() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        let b = t.path().join("b/run");
        std::fs::create_dir_all(&a).unwrap();
        let mut d = Disks::new(vec![a.clone(), b.clone()], DiskMargin::default());
        assert_eq!(d.current(), Some(a.as_path()));
        assert!(!d.wrote(1));
        assert!(d.wrote(CHECK_EVERY_BYTES));
        let next = d.move_on("a: full".into()).map(Path::to_path_buf);
        assert_eq!(next.as_deref(), Some(b.as_path()));
        assert!(b.is_dir(), "the next directory is made");
        assert!(d.move_on("b: full".into()).is_none());
        assert_eq!(d.current(), None);
        assert_eq!(d.why_full(), "a: full; b: full");
        assert!(d.check().is_err());
    }

    #[test]
    fn a_directory_that_cannot_be_written_is_left_like_a_full_one() {
        assert!(is_not_writable(&io::Error::from_raw_os_error(libc::EROFS)));
        assert!(is_not_writable(&io::Error::from_raw_os_error(libc::EPERM)));
        assert!(!is_not_writable(&io::Error::from_raw_os_error(
            libc::ENOSPC
        )));
        let t = tempfile::tempdir().unwrap();
        let gone = t.path().join("removed");
        assert!(writable(t.path()).is_ok());
        let why = room_in(&gone, &DiskMargin::default()).unwrap_err();
        assert!(
            why.contains("removed") && why.contains("cannot be written"),
            "{why}"
        );
        let mut d = Disks::new(vec![gone.clone()], DiskMargin::default());
        assert!(d.check().unwrap_err().contains("cannot be written"));
    }

    #[test]
    fn a_margin_larger_than_the_disk_is_full() {
        let t = tempfile::tempdir().unwrap();
        let m = DiskMargin {
            min_free_bytes: u64::MAX,
            min_free_fraction: 0.0,
        };
        let why = room_in(t.path(), &m).unwrap_err();
        assert!(why.contains("disk full"), "{why}");
        let m = DiskMargin {
            min_free_bytes: 0,
            min_free_fraction: 1.0,
        };
        assert!(room_in(t.path(), &m).is_err());
        assert!(room_in(
            t.path(),
            &DiskMargin {
                min_free_bytes: 0,
                min_free_fraction: 0.0
            }
        )
        .is_ok());
    }
}
