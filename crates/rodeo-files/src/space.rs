//! Free space on the file system that holds a directory (statvfs): the one place rodeo asks
//! (the file writers before each new file, the logger's disks, the status line, `rodeo info`,
//! the service's `disk_free_bytes`).

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// Space on the file system of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeSpace {
    /// Bytes available to unprivileged users.
    pub available: u64,
    /// Size of the file system.
    pub total: u64,
}

/// statvfs of `dir`.
pub fn free_space(dir: &Path) -> io::Result<FreeSpace> {
    let c_path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let mut stat = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call, and `stat`
    // points to writable memory of the size and alignment of `struct statvfs`, which statvfs
    // fills completely on success and does not read.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the whole struct.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
    let (avail, blocks, frsize) = (
        stat.f_bavail as u64,
        stat.f_blocks as u64,
        stat.f_frsize as u64,
    );
    Ok(FreeSpace {
        available: avail.saturating_mul(frsize),
        total: blocks.saturating_mul(frsize),
    })
}

/// Bytes available to unprivileged users where `dir` is or would be made: the file system of
/// `dir`, or of its nearest existing parent (None when it cannot be asked).
pub fn available_near(dir: &Path) -> Option<u64> {
    let existing = dir
        .ancestors()
        .find(|p| p.as_os_str().is_empty() || p.exists())
        .unwrap_or(dir);
    let existing = if existing.as_os_str().is_empty() {
        Path::new(".")
    } else {
        existing
    };
    free_space(existing).ok().map(|f| f.available)
}

/// The share of the free space one command's own output may take (a bench's files, a
/// generated link file): the rest stays for the files others write there.
pub const MAX_FREE_SHARE: f64 = 0.8;

/// What one command may write where `dir` is or would be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Bytes available there ([`available_near`]).
    pub free: u64,
    /// [`MAX_FREE_SHARE`] of them: the most the command may write.
    pub allowed: u64,
}

/// The [`Room`] where `dir` is or would be made (None when it cannot be asked).
pub fn room_near(dir: &Path) -> Option<Room> {
    available_near(dir).map(|free| Room {
        free,
        allowed: (MAX_FREE_SHARE * free as f64) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statvfs_reports_free_space_and_an_error_for_a_missing_directory() {
        let dir = std::env::temp_dir();
        let f = free_space(&dir).unwrap();
        assert!(f.available > 0 && f.total >= f.available);
        assert!(free_space(&dir.join("rodeo-no-such-directory-for-statvfs")).is_err());
        assert!(available_near(&dir.join("no/such/dir")).is_some_and(|b| b > 0));
    }
}
