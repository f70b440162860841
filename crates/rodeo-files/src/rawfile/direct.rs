//! The raw-file writer's output: aligned buffers written with direct I/O.
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
//! # Two buffers: the disk never waits for the copy
//!
//! A full buffer is handed to the output's writer thread (started with the first full buffer,
//! ended with the output) and the records go on into a second buffer while the first one is
//! written: the disk is kept busy while the next buffer fills, as dd's next write follows its
//! last at once, instead of idling while the caller copies (one write in flight at most, so
//! memory stays at two buffers). A sync, the close and the drop wait for the write in flight
//! first; its error (a full disk) is returned by the next call, which is always before the
//! sync that would make its events durable, so nothing is acknowledged that was not written.
//!
//! A file system that refuses `O_DIRECT` (tmpfs on older kernels: `open` fails with `EINVAL`;
//! some refuse only the first write) gets the same large writes through the ordinary
//! descriptor; [`DirectOut::fallback`] says why, and the writer reports it once.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// Alignment of direct writes: memory address, file offset and length (the page size, a
/// multiple of every device's logical block size).
pub const ALIGN: usize = 4096;

/// Page-aligned memory: `storage` has `ALIGN` bytes more than the capacity, `start` is the
/// offset of its first aligned byte.
#[derive(Debug)]
pub(super) struct Block {
    storage: Vec<u8>,
    start: usize,
}

impl Block {
    pub(super) fn new(cap: usize) -> Block {
        let storage = vec![0u8; cap + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN);
        Block { storage, start }
    }

    /// The first `n` aligned bytes.
    pub(super) fn bytes(&self, n: usize) -> &[u8] {
        &self.storage[self.start..self.start + n]
    }

    /// The first `n` aligned bytes, to fill.
    pub(super) fn bytes_mut(&mut self, n: usize) -> &mut [u8] {
        &mut self.storage[self.start..self.start + n]
    }
}

/// A full buffer for the writer thread: its first `n` bytes go at file offset `pos`.
struct Job {
    block: Block,
    n: usize,
    pos: u64,
    direct: bool,
}

/// A buffer back from the writer thread, with the write's result and, when a direct write was
/// refused and the bytes went through the ordinary descriptor, why.
struct Done {
    block: Block,
    result: io::Result<Option<String>>,
}

/// The thread that writes full buffers while the next one fills (module docs).
#[derive(Debug)]
struct Writer {
    jobs: Option<SyncSender<Job>>,
    /// Behind a mutex only so that the writer is `Sync` (the Python package keeps a writer in a
    /// shared object); read through `get_mut`, it is never locked.
    done: Mutex<Receiver<Done>>,
    thread: Option<JoinHandle<()>>,
    /// A buffer is with the thread.
    busy: bool,
}

impl Writer {
    /// Starts the thread with its own descriptors of the file.
    fn start(file: &File, direct: Option<&File>) -> io::Result<Writer> {
        let file = file.try_clone()?;
        let direct = direct.map(File::try_clone).transpose()?;
        let (jobs, job_rx) = sync_channel::<Job>(1);
        let (done_tx, done) = sync_channel::<Done>(1);
        let thread = std::thread::Builder::new()
            .name("rawfile-io".into())
            .spawn(move || {
                for job in job_rx {
                    let data = job.block.bytes(job.n);
                    let d = if job.direct { direct.as_ref() } else { None };
                    let result = write_at(&file, d, data, job.pos);
                    let block = job.block;
                    if done_tx.send(Done { block, result }).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Writer {
            jobs: Some(jobs),
            done: Mutex::new(done),
            thread: Some(thread),
            busy: false,
        })
    }
}

/// Writes `data` at `pos` through `direct` when given, else through `file`. A direct write
/// refused with `EINVAL` goes through `file` instead, and the reason is returned: the caller
/// goes on without direct I/O.
fn write_at(
    file: &File,
    direct: Option<&File>,
    data: &[u8],
    pos: u64,
) -> io::Result<Option<String>> {
    if let Some(d) = direct {
        match d.write_all_at(data, pos) {
            Ok(()) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                file.write_all_at(data, pos)?;
                return Ok(Some(format!(
                    "a direct write was refused ({e}): buffered writes instead"
                )));
            }
            Err(e) => return Err(e),
        }
    }
    file.write_all_at(data, pos)?;
    Ok(None)
}

/// A file written through aligned buffers, with direct I/O when the file system allows it.
#[derive(Debug)]
pub(super) struct DirectOut {
    /// The ordinary descriptor: the unaligned tail at each sync, everything without direct I/O;
    /// `fdatasync`/`fsync` go through it (they act on the file, whatever the descriptor).
    file: File,
    /// The `O_DIRECT` descriptor, `None` when direct I/O is off or was refused.
    direct: Option<File>,
    /// The buffer being filled.
    buf: Block,
    /// The other buffer, when it is neither being filled nor with the writer thread.
    spare: Option<Block>,
    /// Capacity of each buffer (a multiple of `ALIGN`).
    cap: usize,
    /// Bytes in the buffer.
    len: usize,
    /// File offset of the buffer's first byte (a multiple of `ALIGN` while direct I/O is on).
    pos: u64,
    /// Why direct I/O is off, when it was asked for and refused.
    fallback: Option<String>,
    /// Everything buffered is in the file (nothing for `drop` to write).
    written_out: bool,
    /// The writer thread, from the first full buffer on.
    writer: Option<Writer>,
    /// A write of the writer thread failed: the file has a hole there, and nothing more is
    /// written after it (not even at drop).
    failed: bool,
}

impl DirectOut {
    /// Creates `path` (it must not exist) with buffers of `buffer_bytes` (rounded up to a
    /// multiple of [`ALIGN`]), opening a second, `O_DIRECT` descriptor when `direct`.
    pub(super) fn create(path: &Path, buffer_bytes: usize, direct: bool) -> io::Result<DirectOut> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        let cap = buffer_bytes.max(ALIGN).next_multiple_of(ALIGN);
        let mut out = DirectOut {
            file,
            direct: None,
            buf: Block::new(cap),
            spare: None,
            cap,
            len: 0,
            pos: 0,
            fallback: None,
            written_out: true,
            writer: None,
            failed: false,
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

    /// Copies `bytes` into the buffer, handing it to the writer thread each time it is full.
    pub(super) fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        self.written_out = false;
        while !bytes.is_empty() {
            let n = (self.cap - self.len).min(bytes.len());
            let at = self.buf.start + self.len;
            self.buf.storage[at..at + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
            if self.len == self.cap {
                self.hand_over()?;
            }
        }
        Ok(())
    }

    /// Gives the full buffer to the writer thread (waiting for the write before it, if any)
    /// and goes on in the other one.
    fn hand_over(&mut self) -> io::Result<()> {
        let next = match self.wait()? {
            Some(b) => b,
            None => self.spare.take().unwrap_or_else(|| Block::new(self.cap)),
        };
        let full = std::mem::replace(&mut self.buf, next);
        let writer = match &mut self.writer {
            Some(w) => w,
            None => self
                .writer
                .insert(Writer::start(&self.file, self.direct.as_ref())?),
        };
        let job = Job {
            block: full,
            n: self.cap,
            pos: self.pos,
            direct: self.direct.is_some(),
        };
        let ended = || io::Error::other("the raw file's writer thread ended");
        writer
            .jobs
            .as_ref()
            .ok_or_else(ended)?
            .send(job)
            .map_err(|_| ended())?;
        writer.busy = true;
        self.pos += self.cap as u64;
        self.len = 0;
        Ok(())
    }

    /// Waits for the buffer with the writer thread, if any: returns it, or its write's error.
    fn wait(&mut self) -> io::Result<Option<Block>> {
        let Some(w) = self.writer.as_mut().filter(|w| w.busy) else {
            return Ok(None);
        };
        w.busy = false;
        let done = w
            .done
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .recv()
            .map_err(|_| io::Error::other("the raw file's writer thread ended"))?;
        match done.result {
            Ok(Some(why)) => {
                self.fallback = Some(why);
                self.direct = None;
            }
            Ok(None) => {}
            Err(e) => {
                self.failed = true;
                return Err(e);
            }
        }
        Ok(Some(done.block))
    }

    /// Writes the first `n` bytes of the buffer (a multiple of `ALIGN` with direct I/O) at
    /// `pos` and advances `pos` by `n`; with direct I/O refused at the first write, falls back
    /// to the ordinary descriptor for this write and every later one.
    fn write_aligned(&mut self, n: usize) -> io::Result<()> {
        let data = self.buf.bytes(n);
        if let Some(why) = write_at(&self.file, self.direct.as_ref(), data, self.pos)? {
            self.fallback = Some(why);
            self.direct = None;
        }
        self.pos += n as u64;
        Ok(())
    }

    /// Writes everything buffered to the file (not yet durable: see [`DirectOut::sync_data`]),
    /// after the write in flight.
    fn write_out(&mut self) -> io::Result<()> {
        if let Some(b) = self.wait()? {
            self.spare = Some(b);
        }
        if self.direct.is_some() {
            let aligned = self.len & !(ALIGN - 1);
            if aligned > 0 {
                self.write_aligned(aligned)?;
                let start = self.buf.start;
                let (from, to) = (start + aligned, start + self.len);
                self.buf.storage.copy_within(from..to, start);
                self.len -= aligned;
            }
        }
        if self.len == 0 {
            self.written_out = true;
            return Ok(());
        }
        let tail = self.buf.bytes(self.len);
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
    /// file stays `.writing`, recoverable up to what reached it). The writer thread ends here.
    fn drop(&mut self) {
        let _ = self.wait();
        if !self.written_out && !self.failed {
            let _ = self.write_out();
        }
        if let Some(mut w) = self.writer.take() {
            drop(w.jobs.take());
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
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
            assert_eq!(
                (out.buf.storage.as_ptr() as usize + out.buf.start) % ALIGN,
                0
            );
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
    fn many_buffers_through_the_writer_thread_keep_every_byte_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = dir.path().join(format!("f{direct}"));
            let mut out = DirectOut::create(&path, 2 * ALIGN, direct).unwrap();
            let mut expect = Vec::new();
            for i in 0..200 {
                // Pieces from a few bytes to several buffers, a sync now and then: the write
                // in flight is waited for, the tail rewritten, the buffers swapped.
                let piece = pattern(1 + (i * 977) % (5 * ALIGN), i);
                out.write_all(&piece).unwrap();
                expect.extend_from_slice(&piece);
                if i % 37 == 0 {
                    out.sync_data().unwrap();
                    assert_eq!(
                        std::fs::read(&path).unwrap(),
                        expect,
                        "direct {direct}, {i}"
                    );
                }
            }
            assert!(
                out.writer.is_some(),
                "full buffers went to the writer thread"
            );
            out.finish().unwrap();
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
