//! The raw-file writer's output: aligned buffers written with direct I/O.
//!
//! Records are copied once into a page-aligned buffer; a full buffer goes to the file in one
//! `pwrite` through a descriptor opened with `O_DIRECT` (no copy into the page cache, no
//! write-back later), at an offset that is a multiple of [`ALIGN`]. A group commit (the
//! logger's sync) and the close write what is left: the aligned part with direct I/O, the
//! unaligned tail (less than [`ALIGN`] bytes) through an ordinary descriptor of the same file,
//! then `fdatasync`; the tail is carried to the start of the next buffer and the next direct
//! write covers it again, so the file on disk always ends exactly after the last record
//! written (no padding, no truncate), as with buffered writes, and a crash leaves exactly what
//! it left before.
//!
//! # A queue of buffers: the disk never waits for the copy, the copy never waits for a sync
//!
//! Full buffers, and group commits, go to the output's writer thread (`write_queue`: started
//! with the first of them, ended with the output) and the records go on into another buffer
//! while they are written: the disk is kept busy while the next buffer fills, as dd's next
//! write follows its last at once. Up to `QUEUE_DEPTH` jobs wait or are written, so a pause of
//! the caller does not idle the disk and a group commit (the tail and the `fdatasync`, in the
//! writer thread) does not stop the caller: [`DirectOut::start_sync`] queues one and returns
//! its ticket, [`DirectOut::synced`] says which tickets are done, and only then may the events
//! before it be acknowledged. Memory stays at `QUEUE_DEPTH + 1` buffers.
//!
//! A failed write (a full disk) is returned by the next call that takes answers back, and the
//! thread writes nothing after it: no sync after a hole is ever reported done, so nothing is
//! acknowledged that was not written. The close and the drop take every answer back first.
//!
//! A file system that refuses `O_DIRECT` (tmpfs on older kernels: `open` fails with `EINVAL`;
//! some refuse only the first write) gets the same large writes through the ordinary
//! descriptor; [`DirectOut::fallback`] says why, and the writer reports it once.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::block::{Block, ALIGN};
use super::write_queue::{write_at, Done, Job, SyncJob, WriteQueue, QUEUE_DEPTH};

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
    /// Buffers neither being filled nor with the writer thread.
    free: Vec<Block>,
    /// Capacity of each buffer (a multiple of `ALIGN`).
    cap: usize,
    /// Bytes in the buffer.
    len: usize,
    /// File offset of the buffer's first byte (a multiple of `ALIGN` while direct I/O is on).
    pos: u64,
    /// Why direct I/O is off, when it was asked for and refused.
    fallback: Option<String>,
    /// Bytes were given since the last group commit or close (drop has something to write).
    dirty: bool,
    /// The writer thread, from the first job on.
    queue: Option<WriteQueue>,
    /// A write of the writer thread failed: the file has a hole there, and nothing more is
    /// written after it (not even at drop).
    failed: bool,
    /// The latest group commit's ticket whose sync returned (0: none).
    synced: u64,
    /// The latest ticket asked for.
    requested: u64,
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
            free: Vec::new(),
            cap,
            len: 0,
            pos: 0,
            fallback: None,
            dirty: false,
            queue: None,
            failed: false,
            synced: 0,
            requested: 0,
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
        self.refuse_if_failed()?;
        self.dirty = true;
        while !bytes.is_empty() {
            let n = (self.cap - self.len).min(bytes.len());
            let at = self.buf.start + self.len;
            self.buf.storage[at..at + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
            if self.len == self.cap {
                let job_pos = self.pos;
                self.queue_buffer(self.cap, None, job_pos)?;
                self.pos += self.cap as u64;
                self.len = 0;
            }
        }
        Ok(())
    }

    /// Queues a group commit of everything given so far: the buffer's aligned part (all of it
    /// without direct I/O), its tail, then `fdatasync`, in the writer thread after the buffers
    /// before it. The tail is carried to the next buffer (the next direct write covers it
    /// again). Returns at once unless `QUEUE_DEPTH` jobs are in flight; `ticket` (larger than
    /// any before) is reported by [`DirectOut::synced`] once the sync returned.
    pub(super) fn start_sync(&mut self, ticket: u64) -> io::Result<()> {
        self.refuse_if_failed()?;
        let aligned = if self.direct.is_some() {
            self.len & !(ALIGN - 1)
        } else {
            self.len
        };
        let tail = self.len - aligned;
        let job_pos = self.pos;
        // The tail is copied to the start of the next buffer by `queue_buffer`.
        self.queue_buffer(aligned, Some(SyncJob { tail, ticket }), job_pos)?;
        self.pos += aligned as u64;
        self.len = tail;
        self.requested = ticket;
        self.dirty = false;
        Ok(())
    }

    /// The latest ticket whose group commit is done (every byte given before it is durable),
    /// after taking back every answer that is there; 0 before the first. A failed write is
    /// returned here (or by any other call) once.
    pub(super) fn synced(&mut self) -> io::Result<u64> {
        self.take_answers(false)?;
        Ok(self.synced)
    }

    /// The latest ticket known done, without looking for answers.
    pub(super) fn last_synced(&self) -> u64 {
        self.synced
    }

    /// Waits until the group commit of `ticket` is done (or failed).
    pub(super) fn wait_synced(&mut self, ticket: u64) -> io::Result<()> {
        while self.synced < ticket {
            match self
                .queue
                .as_mut()
                .map(|q| q.take(true))
                .transpose()?
                .flatten()
            {
                Some(done) => self.answer(done)?,
                None => {
                    return Err(io::Error::other(format!(
                        "group commit {ticket} was never queued (latest {})",
                        self.requested
                    )))
                }
            }
        }
        Ok(())
    }

    /// Writes everything buffered and `fdatasync`s the file: every byte written so far is
    /// durable when this returns (the writer's `sync` does the same with its own tickets).
    #[cfg(test)]
    pub(super) fn sync_data(&mut self) -> io::Result<()> {
        let ticket = self.requested + 1;
        self.start_sync(ticket)?;
        self.wait_synced(ticket)
    }

    /// Writes everything buffered (not yet durable: see [`DirectOut::sync_all`]), after every
    /// job in flight.
    pub(super) fn finish(&mut self) -> io::Result<()> {
        self.write_out()
    }

    /// `fsync`s the file (data and metadata).
    pub(super) fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn refuse_if_failed(&self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other(
                "an earlier write of this file failed: nothing more is written to it",
            ));
        }
        Ok(())
    }

    /// Hands the buffer (its first `n` bytes at `job_pos`, then `sync` if any) to the writer
    /// thread, taking an answer back first when `QUEUE_DEPTH` jobs are in flight, and goes on
    /// in a free buffer, into which a group commit's tail is copied.
    fn queue_buffer(&mut self, n: usize, sync: Option<SyncJob>, job_pos: u64) -> io::Result<()> {
        if self.queue.is_none() {
            self.queue = Some(WriteQueue::start(&self.file, self.direct.as_ref())?);
        }
        self.take_answers(false)?;
        while self
            .queue
            .as_ref()
            .is_some_and(|q| q.in_flight() >= QUEUE_DEPTH)
        {
            self.take_one(true)?;
        }
        let mut next = self.free.pop().unwrap_or_else(|| Block::new(self.cap));
        if let Some(s) = sync {
            next.bytes_mut(s.tail)
                .copy_from_slice(&self.buf.bytes(n + s.tail)[n..]);
        }
        let full = std::mem::replace(&mut self.buf, next);
        let job = Job {
            block: full,
            n,
            pos: job_pos,
            direct: self.direct.is_some(),
            sync,
        };
        match self.queue.as_mut() {
            Some(q) => q.send(job),
            None => Err(io::Error::other("the raw file's writer thread is gone")),
        }
    }

    /// Takes back every answer that is there (`wait`: every one, waiting for each).
    fn take_answers(&mut self, wait: bool) -> io::Result<()> {
        while self.take_one(wait)? {}
        Ok(())
    }

    /// Takes back one answer (`wait`: waits for it); false when there was none.
    fn take_one(&mut self, wait: bool) -> io::Result<bool> {
        let Some(q) = self.queue.as_mut() else {
            return Ok(false);
        };
        match q.take(wait)? {
            Some(done) => {
                self.answer(done)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// A job's answer: its buffer is free again, its sync done, its error the file's.
    fn answer(&mut self, done: Done) -> io::Result<()> {
        self.free.push(done.block);
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
        if let Some(t) = done.synced {
            self.synced = self.synced.max(t);
        }
        Ok(())
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

    /// Writes everything buffered to the file in the caller's thread (not yet durable: see
    /// [`DirectOut::sync_data`]), after every job in flight.
    fn write_out(&mut self) -> io::Result<()> {
        self.take_answers(true)?;
        self.refuse_if_failed()?;
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
            self.dirty = false;
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
        self.dirty = false;
        Ok(())
    }
}

impl Drop for DirectOut {
    /// A writer dropped without closing its file (an error elsewhere, a panic) writes what it
    /// buffered, as a `BufWriter` would: the file ends after the last complete record given,
    /// without an end record, and the reader recovers its events. Errors are ignored (the
    /// file stays `.writing`, recoverable up to what reached it). The writer thread ends here,
    /// after the jobs it has.
    fn drop(&mut self) {
        while let Ok(true) = self.take_one(true) {}
        if self.dirty && !self.failed {
            let _ = self.write_out();
        }
        self.queue = None;
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
                out.queue.is_some(),
                "full buffers went to the writer thread"
            );
            out.finish().unwrap();
            drop(out);
            assert_eq!(std::fs::read(&path).unwrap(), expect, "direct {direct}");
        }
    }

    #[test]
    fn a_group_commit_runs_in_the_writer_thread_while_the_caller_writes_on() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = dir.path().join(format!("f{direct}"));
            let mut out = DirectOut::create(&path, 2 * ALIGN, direct).unwrap();
            let a = pattern(5 * ALIGN + 77, 1);
            out.write_all(&a).unwrap();
            out.start_sync(1).unwrap();
            // More than the queue holds, written while the commit is on its way.
            let b = pattern(9 * ALIGN + 5, 2);
            out.write_all(&b).unwrap();
            out.wait_synced(1).unwrap();
            assert!(out.last_synced() >= 1);
            let on_disk = std::fs::read(&path).unwrap();
            assert!(on_disk.len() >= a.len(), "direct {direct}");
            assert_eq!(&on_disk[..a.len()], &a[..], "direct {direct}");
            // Several commits on their way at once, each with a tail carried over.
            let mut expect = [a, b].concat();
            for t in 2..=6u64 {
                let piece = pattern(1000 * t as usize + 3, t as usize);
                out.write_all(&piece).unwrap();
                expect.extend_from_slice(&piece);
                out.start_sync(t).unwrap();
            }
            out.wait_synced(6).unwrap();
            assert_eq!(out.synced().unwrap(), 6);
            assert_eq!(std::fs::read(&path).unwrap(), expect, "direct {direct}");
            assert!(out.wait_synced(7).is_err(), "a ticket never asked for");
            out.finish().unwrap();
            drop(out);
            assert_eq!(std::fs::read(&path).unwrap(), expect, "direct {direct}");
        }
    }

    /// A tmpfs of `kib` KiB on a fresh directory (unmounted when dropped); `None` where this
    /// process may not mount.
    struct SmallDisk {
        _parent: tempfile::TempDir,
        dir: std::path::PathBuf,
    }

    impl SmallDisk {
        fn mount(kib: u64) -> Option<SmallDisk> {
            let parent = tempfile::tempdir().unwrap();
            let dir = parent.path().join("disk");
            std::fs::create_dir(&dir).unwrap();
            let ok = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
                .arg(&dir)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(SmallDisk {
                _parent: parent,
                dir,
            })
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.dir).status();
        }
    }

    #[test]
    fn no_group_commit_after_a_failed_write_is_reported_done() {
        let Some(disk) = SmallDisk::mount(512) else {
            eprintln!("skipped: cannot mount a small tmpfs here (run as root to test a full disk)");
            return;
        };
        let path = disk.dir.join("f");
        let mut out = DirectOut::create(&path, 4 * ALIGN, true).unwrap();
        // Bytes given before each ticket.
        let mut given = vec![0usize];
        let mut all = Vec::new();
        let mut failed = false;
        for t in 1..=200u64 {
            let piece = pattern(3 * ALIGN + 11, t as usize);
            all.extend_from_slice(&piece);
            if out.write_all(&piece).is_err() || out.start_sync(t).is_err() {
                failed = true;
                break;
            }
            given.push(all.len());
            if out.synced().is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "1 MiB does not fit in a 512 KiB tmpfs");
        let last = given.len() as u64 - 1;
        assert!(
            out.wait_synced(last).is_err(),
            "the commits after the hole fail"
        );
        assert!(
            out.write_all(b"more").is_err(),
            "nothing is written after a hole"
        );
        let done = out.last_synced() as usize;
        assert!(done < last as usize);
        let on_disk = std::fs::read(&path).unwrap();
        // Everything before the last commit reported done is in the file, as given.
        assert!(on_disk.len() >= given[done]);
        assert_eq!(&on_disk[..given[done]], &all[..given[done]]);
        drop(out);
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
