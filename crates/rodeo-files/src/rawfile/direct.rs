//! The raw-file writer's output: one aligned buffer written with direct I/O.
//!
//! Records are copied once into a page-aligned buffer; a full buffer goes to the file in one
//! `pwrite` through a descriptor opened with `O_DIRECT` (no copy into the page cache, no
//! write-back later), at an offset that is a multiple of [`ALIGN`]. A sync (the logger's group
//! commit) and the close write what is left: the aligned part with direct I/O, the unaligned
//! tail (less than [`ALIGN`] bytes) through an ordinary descriptor of the same file, then
//! `fdatasync`; the tail stays in the buffer and the next direct write covers it again, so the
//! file on disk always ends exactly after the last record written (no padding, no truncate),
//! as with buffered writes, and a crash leaves exactly what it left before.
//!
//! A file system that refuses `O_DIRECT` (tmpfs on older kernels: `open` fails with `EINVAL`;
//! some refuse only the first write) gets the same large writes through the ordinary
//! descriptor; [`DirectOut::fallback`] says why, and the writer reports it once.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Alignment of direct writes: memory address, file offset and length (the page size, a
/// multiple of every device's logical block size).
pub const ALIGN: usize = 4096;

/// A file written through an aligned buffer, with direct I/O when the file system allows it.
#[derive(Debug)]
pub(super) struct DirectOut {
    /// The ordinary descriptor: the unaligned tail at each sync, everything without direct I/O;
    /// `fdatasync`/`fsync` go through it (they act on the file, whatever the descriptor).
    file: File,
    /// The `O_DIRECT` descriptor, `None` when direct I/O is off or was refused.
    direct: Option<File>,
    /// Storage of the buffer: `ALIGN` bytes more than its capacity, so an aligned start exists.
    storage: Vec<u8>,
    /// Offset of the aligned start in `storage`.
    start: usize,
    /// Capacity of the buffer (a multiple of `ALIGN`).
    cap: usize,
    /// Bytes in the buffer.
    len: usize,
    /// File offset of the buffer's first byte (a multiple of `ALIGN` while direct I/O is on).
    pos: u64,
    /// Why direct I/O is off, when it was asked for and refused.
    fallback: Option<String>,
    /// Everything buffered is in the file (nothing for `drop` to write).
    written_out: bool,
}

impl DirectOut {
    /// Creates `path` (it must not exist) with a buffer of `buffer_bytes` (rounded up to a
    /// multiple of [`ALIGN`]), opening a second, `O_DIRECT` descriptor when `direct`.
    pub(super) fn create(path: &Path, buffer_bytes: usize, direct: bool) -> io::Result<DirectOut> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        let cap = buffer_bytes.max(ALIGN).next_multiple_of(ALIGN);
        let storage = vec![0u8; cap + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN);
        let mut out = DirectOut {
            file,
            direct: None,
            storage,
            start,
            cap,
            len: 0,
            pos: 0,
            fallback: None,
            written_out: true,
        };
        if direct {
            match OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
            {
                Ok(f) => out.direct = Some(f),
                Err(e) => {
                    out.fallback = Some(format!(
                        "{} refuses O_DIRECT ({e}): buffered writes instead",
                        path.display()
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Whether writes go with direct I/O.
    pub(super) fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Why direct I/O was asked for and is off (`None`: on, or not asked for).
    pub(super) fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Copies `bytes` into the buffer, writing it to the file each time it is full.
    pub(super) fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        self.written_out = false;
        while !bytes.is_empty() {
            let n = (self.cap - self.len).min(bytes.len());
            let at = self.start + self.len;
            self.storage[at..at + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
            if self.len == self.cap {
                self.write_aligned(self.cap)?;
                self.len = 0;
            }
        }
        Ok(())
    }

    /// Writes the first `n` bytes of the buffer (a multiple of `ALIGN` with direct I/O) at
    /// `pos` and advances `pos` by `n`; with direct I/O refused at the first write, falls back
    /// to the ordinary descriptor for this write and every later one.
    fn write_aligned(&mut self, n: usize) -> io::Result<()> {
        let data = &self.storage[self.start..self.start + n];
        if let Some(d) = &self.direct {
            match d.write_all_at(data, self.pos) {
                Ok(()) => {
                    self.pos += n as u64;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.fallback = Some(format!(
                        "a direct write was refused ({e}): buffered writes instead"
                    ));
                    self.direct = None;
                }
                Err(e) => return Err(e),
            }
        }
        self.file.write_all_at(data, self.pos)?;
        self.pos += n as u64;
        Ok(())
    }

    /// Writes everything buffered to the file (not yet durable: see [`DirectOut::sync_data`]).
    fn write_out(&mut self) -> io::Result<()> {
        if self.direct.is_some() {
            let aligned = self.len & !(ALIGN - 1);
            if aligned > 0 {
                self.write_aligned(aligned)?;
                let (from, to) = (self.start + aligned, self.start + self.len);
                self.storage.copy_within(from..to, self.start);
                self.len -= aligned;
            }
        }
        if self.len == 0 {
            self.written_out = true;
            return Ok(());
        }
        let tail = &self.storage[self.start..self.start + self.len];
        self.file.write_all_at(tail, self.pos)?;
        if self.direct.is_none() {
            // Without direct I/O nothing needs rewriting: the buffer starts afresh after it.
            self.pos += self.len as u64;
            self.len = 0;
        }
        // With direct I/O the tail stays buffered at `pos`: the next aligned write covers it.
        self.written_out = true;
        Ok(())
    }

    /// Writes everything buffered and `fdatasync`s the file: every byte written so far is
    /// durable when this returns.
    pub(super) fn sync_data(&mut self) -> io::Result<()> {
        self.write_out()?;
        self.file.sync_data()
    }

    /// Writes everything buffered (not yet durable: see [`DirectOut::sync_all`]).
    pub(super) fn finish(&mut self) -> io::Result<()> {
        self.write_out()
    }

    /// `fsync`s the file (data and metadata).
    pub(super) fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }
}

impl Drop for DirectOut {
    /// A writer dropped without closing its file (an error elsewhere, a panic) writes what it
    /// buffered, as a `BufWriter` would: the file ends after the last complete record given,
    /// without an end record, and the reader recovers its events. Errors are ignored (the
    /// file stays `.writing`, recoverable up to what reached it).
    fn drop(&mut self) {
        if !self.written_out {
            let _ = self.write_out();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes 0, 1, 2, ... (mod 251, so no run lines up with a block).
    fn pattern(n: usize, seed: usize) -> Vec<u8> {
        (0..n).map(|i| ((i + seed) % 251) as u8).collect()
    }

    #[test]
    fn the_buffer_is_aligned_and_the_file_holds_every_byte_after_each_sync() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = dir.path().join(format!("f{direct}"));
            // A small buffer, so writes cross it in every way: exact fills, tails, big pieces.
            let mut out = DirectOut::create(&path, 3 * ALIGN, direct).unwrap();
            assert_eq!((out.storage.as_ptr() as usize + out.start) % ALIGN, 0);
            let mut expect = Vec::new();
            for (i, n) in [1usize, 4095, 4096, 5000, 3 * ALIGN, 17, 40_000, 3]
                .into_iter()
                .enumerate()
            {
                let piece = pattern(n, i);
                out.write_all(&piece).unwrap();
                expect.extend_from_slice(&piece);
                if i % 2 == 1 {
                    out.sync_data().unwrap();
                    // Exactly the bytes written: no padding past the last one.
                    assert_eq!(
                        std::fs::read(&path).unwrap(),
                        expect,
                        "direct {direct}, step {i}"
                    );
                }
            }
            out.finish().unwrap();
            out.sync_all().unwrap();
            drop(out);
            assert_eq!(std::fs::read(&path).unwrap(), expect, "direct {direct}");
        }
    }

    #[test]
    fn a_dropped_output_writes_what_it_buffered() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = dir.path().join(format!("f{direct}"));
            let mut out = DirectOut::create(&path, 2 * ALIGN, direct).unwrap();
            let data = pattern(3 * ALIGN + 123, 7);
            out.write_all(&data).unwrap();
            drop(out);
            assert_eq!(std::fs::read(&path).unwrap(), data, "direct {direct}");
        }
    }

    #[test]
    fn a_file_system_without_direct_io_gets_buffered_writes_and_a_reason() {
        // /dev/shm is tmpfs where it exists; a kernel whose tmpfs takes O_DIRECT just writes
        // directly. Either way the bytes are all there.
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return;
        }
        let dir = tempfile::tempdir_in(shm).unwrap();
        let path = dir.path().join("f");
        let mut out = DirectOut::create(&path, ALIGN, true).unwrap();
        let data = pattern(3 * ALIGN + 5, 0);
        out.write_all(&data).unwrap();
        out.sync_data().unwrap();
        assert_eq!(out.is_direct(), out.fallback().is_none());
        out.finish().unwrap();
        drop(out);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
