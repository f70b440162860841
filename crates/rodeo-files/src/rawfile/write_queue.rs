//! The raw-file output's writer thread and its queue (module docs of `direct`, "A queue of
//! buffers"): full buffers, and the group commits between them, written in order on one thread
//! while the caller fills the next buffer.
//!
//! A [`Job`] is a buffer whose first `n` bytes go at a file offset, with direct I/O when asked;
//! a group commit ([`SyncJob`]) then writes the buffer's unaligned tail through the ordinary
//! descriptor and `fdatasync`s the file, and its ticket comes back in [`Done::synced`] once the
//! sync returned. At most [`QUEUE_DEPTH`] jobs are queued or being written. After a failed job
//! the thread writes nothing more (the file has a hole there): every later job comes back with
//! an error, so no sync after the hole is ever reported done.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Mutex;
use std::thread::JoinHandle;

use super::block::Block;

/// Jobs queued or being written at most: the thread always has the next buffer while the caller
/// fills another (a pause of the caller, a descheduled thread, does not idle the disk), and a
/// group commit does not stop the caller. Memory: `QUEUE_DEPTH + 1` buffers per open file.
pub(super) const QUEUE_DEPTH: usize = 3;

/// A group commit after a job's bytes: the tail, then `fdatasync`.
#[derive(Debug, Clone, Copy)]
pub(super) struct SyncJob {
    /// Bytes after the job's `n` written through the ordinary descriptor (the unaligned tail
    /// that a direct write cannot take; the next direct write covers them again).
    pub(super) tail: usize,
    /// Reported in [`Done::synced`] when the sync has returned.
    pub(super) ticket: u64,
}

/// A buffer for the writer thread.
pub(super) struct Job {
    pub(super) block: Block,
    /// Bytes from the buffer's start written at `pos`.
    pub(super) n: usize,
    /// File offset of the buffer's first byte.
    pub(super) pos: u64,
    /// Write the `n` bytes with direct I/O (a refusal falls back to the ordinary descriptor).
    pub(super) direct: bool,
    /// A group commit after the bytes.
    pub(super) sync: Option<SyncJob>,
}

/// A buffer back from the writer thread, with its job's result: `Ok(Some(why))` when a direct
/// write was refused and the bytes went through the ordinary descriptor.
pub(super) struct Done {
    pub(super) block: Block,
    pub(super) result: io::Result<Option<String>>,
    /// The group commit's ticket, when the job had one and its sync returned.
    pub(super) synced: Option<u64>,
}

/// The writer thread of one file and the jobs it has.
#[derive(Debug)]
pub(super) struct WriteQueue {
    jobs: Option<SyncSender<Job>>,
    /// Behind a mutex only so that the output is `Sync` (the Python package keeps a writer in a
    /// shared object); read through `get_mut`, it is never locked.
    done: Mutex<Receiver<Done>>,
    thread: Option<JoinHandle<()>>,
    /// Jobs sent whose `Done` was not taken yet.
    in_flight: usize,
}

impl WriteQueue {
    /// Starts the thread with its own descriptors of the file (`direct`: the `O_DIRECT` one).
    pub(super) fn start(file: &File, direct: Option<&File>) -> io::Result<WriteQueue> {
        let file = file.try_clone()?;
        let direct = direct.map(File::try_clone).transpose()?;
        let (jobs, job_rx) = sync_channel::<Job>(QUEUE_DEPTH);
        // Room for every job's answer: the thread never waits to hand one back.
        let (done_tx, done) = sync_channel::<Done>(QUEUE_DEPTH);
        let thread = std::thread::Builder::new()
            .name("rawfile-io".into())
            .spawn(move || {
                let mut broken = false;
                for job in job_rx {
                    let result = if broken {
                        Err(io::Error::other(
                            "an earlier write of this file failed: nothing after it is written",
                        ))
                    } else {
                        run(&file, direct.as_ref(), &job)
                    };
                    broken |= result.is_err();
                    let synced = match (&result, job.sync) {
                        (Ok(_), Some(s)) => Some(s.ticket),
                        _ => None,
                    };
                    let block = job.block;
                    if done_tx
                        .send(Done {
                            block,
                            result,
                            synced,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
            })?;
        Ok(WriteQueue {
            jobs: Some(jobs),
            done: Mutex::new(done),
            thread: Some(thread),
            in_flight: 0,
        })
    }

    /// Jobs sent and not yet taken back.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Queues `job`; the caller keeps at most [`QUEUE_DEPTH`] in flight (it takes one back
    /// first), so this never waits.
    pub(super) fn send(&mut self, job: Job) -> io::Result<()> {
        debug_assert!(self.in_flight < QUEUE_DEPTH);

        let ended = || io::Error::other("the raw file's writer thread ended");
        self.jobs
            .as_ref()
            .ok_or_else(ended)?
            .send(job)
            .map_err(|_| ended())?;
        self.in_flight += 1;
        Ok(())
    }

    /// The oldest job's answer: waits for it when `wait`, else only takes one that is there.
    /// `None`: nothing in flight, or (not waiting) the oldest job is not done yet.
    pub(super) fn take(&mut self, wait: bool) -> io::Result<Option<Done>> {
        if self.in_flight == 0 {
            return Ok(None);
        }
        let rx = self.done.get_mut().unwrap_or_else(|p| p.into_inner());
        let ended = || io::Error::other("the raw file's writer thread ended");
        let done = if wait {
            rx.recv().map_err(|_| ended())?
        } else {
            match rx.try_recv() {
                Ok(d) => d,
                Err(TryRecvError::Empty) => return Ok(None),
                Err(TryRecvError::Disconnected) => return Err(ended()),
            }
        };
        self.in_flight -= 1;
        Ok(Some(done))
    }
}

impl Drop for WriteQueue {
    /// Ends the thread after the jobs it has (their answers are dropped).
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One job: its bytes, then its group commit.
fn run(file: &File, direct: Option<&File>, job: &Job) -> io::Result<Option<String>> {
    let d = if job.direct { direct } else { None };
    let why = if job.n > 0 {
        write_at(file, d, job.block.bytes(job.n), job.pos)?
    } else {
        None
    };
    if let Some(s) = job.sync {
        if s.tail > 0 {
            let tail = &job.block.bytes(job.n + s.tail)[job.n..];
            file.write_all_at(tail, job.pos + job.n as u64)?;
        }
        file.sync_data()?;
    }
    Ok(why)
}

/// Writes `data` at `pos` through `direct` when given, else through `file`. A direct write
/// refused with `EINVAL` goes through `file` instead, and the reason is returned: the caller
/// goes on without direct I/O.
pub(super) fn write_at(
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
