//! rodeo's data files: what is written to disk and read back.
//!
//! **Role in the flow.** The last stage of the data flow (the logger writes these files) and the
//! first of a replay (a readout node's cards can be fed from them). Built on `rodeo-format`, which
//! defines the events and fragments inside the files.
//!
//! The containers:
//!
//! - [`rawfile`]: rodeo's raw-data files (writer with rotation and free-space check, streaming
//!   reader with checksum validation and recovery of damaged files).
//! - [`eventstorage`]: ATLAS EventStorage files, the experiments' container: a version-5 writer
//!   (ATLAS file names, metadata records, zlib data blocks) and a reader of versions 2 to 6.
//! - [`legacy`]: eformat v3/v4 full events (BESIII, ATLAS before 2009) walked through their
//!   sub-detector and ROS fragments down to the ROBs.
//! - [`datafile`]: one reader for every data file, whichever container it is (chosen by the
//!   first record) and whichever eformat version its events are: run number, L1ID, ROBs.
//!
//! What is done with them:
//!
//! - [`describe`]: a file's metadata and events as JSON (`rodeo dump --json`).
//! - [`verify`]: a file checked completely (records, checksums, every event and ROB).
//! - [`convert`]: a data file into either container, eformat 3/4 events lifted to eformat 5.
//! - [`replay`]: the RODs of data files' events loaded for replay through a readout node.
//! - [`recover`]: the files a logger left open when it died, closed with their complete
//!   events (what a restarted logger does first).
//!
//! - [`space`]: free space on the file system of a directory (statvfs), and the share of it one
//!   command may write (`room_near`).
//!
//! The links' bytes on disk:
//!
//! - [`linkfile`]: link capture files, recorded streams of FELIX blocks or S-LINK fragments.
//!
//! **Owns**: file layouts, naming, the write path's durability (fsync, `.writing` then rename)
//! and every parser of file bytes, each returning a typed error with the byte offset; none
//! panics on any input (the fuzz targets in `fuzz/` hold them to that).
//!
//! **Must not depend on** threads, sockets or any stage of the data flow: the logger, the
//! readout and the tools call into it, never the other way round.

pub mod convert;
pub mod datafile;
pub mod describe;
pub mod eventstorage;
pub mod legacy;
pub mod linkfile;
pub mod rawfile;
pub mod recover;
pub mod replay;
pub mod space;
pub mod verify;

/// `Ok` when `path` is a regular file (symbolic links followed); otherwise an `InvalidInput`
/// error saying what it is. Checked before a reader opens a file: opening a FIFO without a
/// writer blocks for ever, and one with a writer was read as a file that "ends at byte 0"
/// (and its writer killed by SIGPIPE).
pub fn regular_file(path: &std::path::Path) -> std::io::Result<()> {
    let kind = std::fs::metadata(path)?.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else {
        use std::os::unix::fs::FileTypeExt as _;
        if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        }
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{what}, not a regular file: a data file is read from a file"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO (no writer: opening it would block) and a directory are refused before any open,
    /// by the readers too; a file is not.
    #[test]
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path and a mode; no memory is shared.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = regular_file(&fifo).unwrap_err();
        assert!(e.to_string().starts_with("a FIFO"), "{e}");
        assert!(regular_file(dir.path())
            .unwrap_err()
            .to_string()
            .starts_with("a directory"));
        let e = datafile::DataFileReader::open(&fifo)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a FIFO"), "{e}");
        let e = verify::check_file(&fifo);
        assert!(
            !e.ok && e.error.as_deref().is_some_and(|m| m.contains("a FIFO")),
            "{e:?}"
        );
        let file = dir.path().join("a.data");
        std::fs::write(&file, [0u8; 8]).unwrap();
        regular_file(&file).unwrap();
    }
}
