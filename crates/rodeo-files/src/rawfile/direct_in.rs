//! The raw-file reader's input: the file read in large page-aligned blocks with direct I/O,
//! and the size and Adler-32 of every byte read ([`DirectIn`]).
//!
//! Reading back a file the logger wrote with direct I/O finds none of it in the page cache:
//! a buffered read makes the kernel fill the cache first and then copy into the reader's
//! buffer (on the development VM about 1 us of system CPU per KB-ish event, more than the
//! checks themselves). With `O_DIRECT` the device's DMA fills the reader's aligned block and
//! nothing is copied by the kernel; the check then reads what is on the disk, not what a cache
//! remembers. A file system that refuses `O_DIRECT` (tmpfs on older kernels) is read through
//! an ordinary descriptor, as is a block whose direct read the kernel refuses.
//!
//! The running checksum covers every byte handed out or skipped, in file order, so the reader
//! that walks a file to its end has its size and Adler-32 without a second pass.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use rodeo_format::checksum::{adler32, ADLER32_INIT};

use super::block::{Block, ALIGN};

/// Bytes read from the file per system call.
pub(super) const BLOCK_BYTES: usize = 1 << 20;

/// A file read front to back through one aligned block (module docs).
#[derive(Debug)]
pub(super) struct DirectIn {
    file: File,
    /// `file` was opened with `O_DIRECT` (and no read has been refused since).
    direct: bool,
    path: std::path::PathBuf,
    block: Block,
    /// Bytes of `block` read from the file, and how many of them were handed out.
    filled: usize,
    at: usize,
    /// File offset of the next read.
    pos: u64,
    /// A direct read came back short: the end of the file (a direct read at the unaligned
    /// offset after it would be refused).
    eof: bool,
    /// Bytes read from the file so far, and their Adler-32.
    read_bytes: u64,
    adler: u32,
}

impl DirectIn {
    /// Opens `path` for reading, with `O_DIRECT` when the file system takes it.
    pub(super) fn open(path: &Path) -> io::Result<DirectIn> {
        crate::regular_file(path)?;
        let (file, direct) = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (File::open(path)?, false),
            Err(e) => return Err(e),
        };
        Ok(DirectIn {
            file,
            direct,
            path: path.to_path_buf(),
            block: Block::new(BLOCK_BYTES),
            filled: 0,
            at: 0,
            pos: 0,
            eof: false,
            read_bytes: 0,
            adler: ADLER32_INIT,
        })
    }

    /// The file's metadata.
    pub(super) fn metadata(&self) -> io::Result<std::fs::Metadata> {
        self.file.metadata()
    }

    /// Whether reads go around the page cache.
    #[cfg(test)]
    pub(super) fn is_direct(&self) -> bool {
        self.direct
    }

    /// Reads the next block; 0 at the end of the file.
    fn fill(&mut self) -> io::Result<usize> {
        // What the block held is read (or skipped: `finish`).
        self.filled = 0;
        self.at = 0;
        if self.eof {
            return Ok(0);
        }
        let n = loop {
            match self
                .file
                .read_at(self.block.bytes_mut(BLOCK_BYTES), self.pos)
            {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                    // Refused at this offset or by this file system: go on buffered.
                    self.file = File::open(&self.path)?;
                    self.direct = false;
                }
                Err(e) => return Err(e),
            }
        };
        if self.direct && n < BLOCK_BYTES {
            self.eof = true;
        }
        let got = self.block.bytes(n);
        self.adler = adler32(self.adler, got);
        self.read_bytes += n as u64;
        self.pos += n as u64;
        debug_assert!(!self.direct || self.eof || self.pos % ALIGN as u64 == 0);
        self.filled = n;
        self.at = 0;
        Ok(n)
    }

    /// Reads to the end of the file; returns its size and Adler-32 (of every byte).
    pub(super) fn finish(&mut self) -> io::Result<(u64, u32)> {
        while self.fill()? > 0 {}
        Ok((self.read_bytes, self.adler))
    }
}

impl Read for DirectIn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.filled && self.fill()? == 0 {
            return Ok(0);
        }
        let n = buf.len().min(self.filled - self.at);
        buf[..n].copy_from_slice(&self.block.bytes(self.filled)[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn every_byte_comes_back_in_order_with_the_files_size_and_checksum() {
        let dir = tempfile::tempdir().unwrap();
        // Sizes around the block and the alignment: empty, unaligned, one block, more.
        for size in [
            0,
            1,
            4095,
            4096,
            5000,
            BLOCK_BYTES,
            BLOCK_BYTES + 3,
            2 * BLOCK_BYTES + 4097,
        ] {
            let p = dir.path().join(format!("f{size}"));
            let bytes = pattern(size);
            std::fs::write(&p, &bytes).unwrap();
            let mut r = DirectIn::open(&p).unwrap();
            let mut got = vec![0u8; size / 3];
            r.read_exact(&mut got).unwrap();
            assert_eq!(got, bytes[..size / 3], "size {size}");
            let mut small = [0u8; 5];
            let k = r.read(&mut small).unwrap();
            assert_eq!(small[..k], bytes[size / 3..size / 3 + k]);
            assert_eq!(
                r.finish().unwrap(),
                (size as u64, adler32(ADLER32_INIT, &bytes)),
                "size {size}"
            );
            assert_eq!(r.read(&mut small).unwrap(), 0);
        }
    }

    #[test]
    fn a_file_system_without_direct_io_is_read_buffered() {
        // /dev/shm is tmpfs: older kernels refuse O_DIRECT there, newer ones take it.
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        let p = dir.path().join("f");
        let bytes = pattern(10_000);
        std::fs::write(&p, &bytes).unwrap();
        let mut r = DirectIn::open(&p).unwrap();
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert_eq!(got, bytes);
        let _ = r.is_direct();
    }
}
