//! The external L1 (`[l1] mode = "external"`): L1 accepts from a trigger unit outside the
//! partition (a TLU-like trigger/busy pair), over one TCP connection.
//!
//! # Protocol (little-endian; docs/test-beam.md)
//!
//! - trigger unit -> partition: one 8-byte record per L1 accept, in order:
//!   `u32 extended L1ID` (ECR in bits 31..24), `u32 L1 trigger type`.
//! - partition -> trigger unit: one byte each time the busy state changes, and once when the
//!   connection is accepted: `B` busy, `R` ready. A trigger unit holds its triggers while busy.
//!
//! # Back-pressure
//!
//! The accepts wait in a bounded queue ([`QUEUE`]) until the supervisor assigns them. The
//! partition is busy when that queue is half full or the supervisor has no free DCM slot; a full
//! queue stops the reader, so TCP closes its window and the sender blocks: nothing is dropped.
//!
//! # Shutdown
//!
//! One trigger unit at a time. Its clean close (between records) ends the input: the supervisor
//! assigns what is queued and the run ends. A close inside a record is counted (`broken`) and
//! ends the input too. A connection that closes (or resets) before sending a byte (a port scan, a
//! health probe) ends nothing: the input waits for the next one (counted,
//! [`ExternalTrigger::dropped_connections`]). A connection that stays open holds the input,
//! sending or not: a newer one waits in the listen queue (no takeover: any byte a stranger
//! sends would be an 8-byte record, so a scan could replace a unit waiting for beam; the
//! port belongs on the test beam's private network). The reader thread waits at most
//! [`POLL`] for anything, its busy/ready writes included (a trigger unit that never reads them
//! loses them instead of blocking the reader), so [`ExternalTrigger`]'s drop stops it
//! promptly.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rodeo_memory::{Backoff, BackoffSpec, BoundedQueue, FullPolicy};

/// Accepts received and not yet assigned, at most.
pub const QUEUE: usize = 4096;

/// Longest wait of the reader thread for input or room.
pub const POLL: Duration = Duration::from_millis(5);

/// What the reader thread and the supervisor share: the stop, end-of-input and no-slot flags
/// and the reader's counts.
#[derive(Default)]
struct ReaderState {
    stop: AtomicBool,
    ended: AtomicBool,
    /// Set by the supervisor: no free DCM slot.
    no_slots: AtomicBool,
    received: AtomicU64,
    broken: AtomicU64,
    /// Connections that closed before sending a byte.
    dropped: AtomicU64,
}

/// The trigger input of the external L1; see the module docs.
pub struct ExternalTrigger {
    queue: Arc<BoundedQueue<(u32, u32)>>,
    shared: Arc<ReaderState>,
    local: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ExternalTrigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalTrigger")
            .field("local", &self.local)
            .finish()
    }
}

impl ExternalTrigger {
    /// Listens on `address` (`tcp://HOST:PORT` or `HOST:PORT`; port 0 picks one, see
    /// [`ExternalTrigger::local_addr`]) and starts the reader thread.
    pub fn start(address: &str) -> io::Result<ExternalTrigger> {
        let host = address.strip_prefix("tcp://").unwrap_or(address);
        let listener = TcpListener::bind(host)?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        // `block`: the reader stops reading while it is full (TCP back-pressure to the sender).
        let queue = Arc::new(BoundedQueue::new(
            "dataflow.l1_external",
            QUEUE,
            FullPolicy::Block(BackoffSpec::IDLE),
        ));
        let shared = Arc::new(ReaderState::default());
        let (q, s) = (Arc::clone(&queue), Arc::clone(&shared));
        let thread = std::thread::Builder::new()
            .name("l1-external".into())
            .spawn(move || serve(&listener, &q, &s))?;
        Ok(ExternalTrigger {
            queue,
            shared,
            local,
            thread: Some(thread),
        })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next accept received: (extended L1ID, trigger type).
    pub fn pop(&self) -> Option<(u32, u32)> {
        self.queue.pop()
    }

    /// Accepts waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// The trigger unit closed its connection (no more accepts will come).
    pub fn ended(&self) -> bool {
        self.shared.ended.load(Ordering::Acquire)
    }

    /// Tells the reader whether the partition has a free DCM slot (part of the busy state).
    pub fn set_no_slots(&self, none: bool) {
        self.shared.no_slots.store(none, Ordering::Relaxed);
    }

    /// Connections that closed before sending a byte (module docs).
    pub fn dropped_connections(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Accepts received so far, and connections broken inside a record.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.received.load(Ordering::Relaxed),
            self.shared.broken.load(Ordering::Relaxed),
        )
    }
}

impl Drop for ExternalTrigger {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Makes an accepted connection the trigger unit's: blocking with [`POLL`] timeouts both ways.
fn prepare(stream: &TcpStream) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(POLL))?;
    let _ = stream.set_nodelay(true);
    Ok(())
}

/// The next connection, prepared; `None` once stopped.
fn wait_for_unit(listener: &TcpListener, shared: &ReaderState) -> Option<TcpStream> {
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return None;
        }
        match listener.accept() {
            Ok((s, _)) => match prepare(&s) {
                Ok(()) => return Some(s),
                Err(_) => {
                    shared.broken.fetch_add(1, Ordering::Relaxed);
                }
            },
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

fn serve(listener: &TcpListener, queue: &BoundedQueue<(u32, u32)>, shared: &ReaderState) {
    let Some(mut stream) = wait_for_unit(listener, shared) else {
        return;
    };
    let mut record = [0u8; 8];
    let mut have = 0usize;
    let mut busy = None;
    // Whether this connection has sent a byte (until it has, it may be a probe).
    let mut spoke = false;
    let mut full = Backoff::new(BackoffSpec::IDLE);
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let now_busy =
            shared.no_slots.load(Ordering::Relaxed) || queue.len() >= queue.capacity() / 2;
        if busy != Some(now_busy) {
            busy = Some(now_busy);
            // A trigger unit that does not read its busy bytes only loses them (the write
            // gives up after `POLL`).
            let _ = send_state(&mut stream, now_busy);
        }
        if queue.len() >= queue.capacity() {
            full.wait();
            continue;
        }
        full.reset();
        let read = stream.read(&mut record[have..]);
        // Nothing yet: look again (the stop, the busy state) and read on.
        if let Err(e) = &read {
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
            ) {
                continue;
            }
        }
        match read {
            // A probe: closed, or reset (a health check that closes with our ready byte
            // unread), before sending a byte. Wait for the trigger unit.
            Ok(0) | Err(_) if !spoke => {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
                let Some(next) = wait_for_unit(listener, shared) else {
                    return;
                };
                stream = next;
                busy = None;
            }
            Ok(0) => {
                if have != 0 {
                    shared.broken.fetch_add(1, Ordering::Relaxed);
                }
                break;
            }
            Ok(n) => {
                spoke = true;
                have += n;
                if have == record.len() {
                    have = 0;
                    let l1id = u32::from_le_bytes([record[0], record[1], record[2], record[3]]);
                    let tt = u32::from_le_bytes([record[4], record[5], record[6], record[7]]);
                    // Room was checked above and only this thread pushes; should it still be
                    // full, `block` waits for room (or the stop).
                    if queue
                        .push_or((l1id, tt), || shared.stop.load(Ordering::Acquire))
                        .is_err()
                    {
                        return;
                    }
                    shared.received.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                shared.broken.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
    shared.ended.store(true, Ordering::Release);
}

fn send_state(stream: &mut TcpStream, busy: bool) -> io::Result<()> {
    stream.write_all(if busy { b"B" } else { b"R" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_arrive_in_order_the_state_is_sent_and_a_close_ends_the_input() {
        let ext = ExternalTrigger::start("tcp://127.0.0.1:0").unwrap();
        let mut s = TcpStream::connect(ext.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut state = [0u8; 1];
        s.read_exact(&mut state).unwrap();
        assert_eq!(&state, b"R");
        for l1id in 0..100u32 {
            let mut rec = l1id.to_le_bytes().to_vec();
            rec.extend_from_slice(&7u32.to_le_bytes());
            // Split records on purpose: the reader joins them.
            s.write_all(&rec[..3]).unwrap();
            s.write_all(&rec[3..]).unwrap();
        }
        close_as_a_unit(s);
        rodeo_testkit::wait_until("the close to be seen", Duration::from_secs(10), || {
            ext.ended()
        });
        let got: Vec<(u32, u32)> = std::iter::from_fn(|| ext.pop()).collect();
        assert_eq!(got, (0..100).map(|l| (l, 7)).collect::<Vec<_>>());
        assert_eq!(ext.counts(), (100, 0));
    }

    /// Closes a trigger unit's connection as a unit that reads its busy/ready bytes does: its
    /// end first (the input reads every record, then the end), then what the input sent read
    /// until it closes. A socket closed with unread bytes resets the connection, and the
    /// input's read then fails before the records still queued to it (seen: 3 of 10 read).
    fn close_as_a_unit(mut unit: TcpStream) {
        unit.shutdown(std::net::Shutdown::Write).unwrap();
        unit.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _ = unit.read_to_end(&mut Vec::new());
    }

    /// Probes that connect and close before a byte end nothing: the trigger unit connecting
    /// after them drives the input, and its close ends it.
    #[test]
    fn probes_do_not_end_the_input() {
        let ext = ExternalTrigger::start("tcp://127.0.0.1:0").unwrap();
        for n in 1..=2 {
            drop(TcpStream::connect(ext.local_addr()).unwrap());
            rodeo_testkit::wait_until("the probe counted", Duration::from_secs(10), || {
                ext.dropped_connections() == n
            });
        }
        assert!(!ext.ended(), "a probe does not end the input");
        let mut unit = TcpStream::connect(ext.local_addr()).unwrap();
        for l1id in 0..10u32 {
            let mut rec = l1id.to_le_bytes().to_vec();
            rec.extend_from_slice(&1u32.to_le_bytes());
            unit.write_all(&rec).unwrap();
        }
        close_as_a_unit(unit);
        rodeo_testkit::wait_until("the unit's close", Duration::from_secs(10), || ext.ended());
        let got: Vec<(u32, u32)> = std::iter::from_fn(|| ext.pop()).collect();
        assert_eq!(got, (0..10).map(|l| (l, 1)).collect::<Vec<_>>());
        assert_eq!(ext.counts(), (10, 0));
        assert_eq!(ext.dropped_connections(), 2);
    }

    /// A probe that resets its connection (closes with the ready byte unread, or with a zero
    /// linger) before sending a byte ends nothing either: the read's reset error counts it as a
    /// probe, as a clean close does (it ended the input, seen under load in CI).
    #[test]
    fn a_probe_that_resets_ends_nothing() {
        let ext = ExternalTrigger::start("tcp://127.0.0.1:0").unwrap();
        let mut probe = TcpStream::connect(ext.local_addr()).unwrap();
        probe
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // The ready byte: the input has accepted this connection.
        let mut state = [0u8; 1];
        probe.read_exact(&mut state).unwrap();
        // A zero linger: the close sends a reset, not a FIN.
        rodeo_testkit::net::close_with_reset(probe);
        rodeo_testkit::wait_until("the reset probe counted", Duration::from_secs(10), || {
            ext.dropped_connections() == 1
        });
        assert!(!ext.ended(), "a reset probe does not end the input");
        let mut unit = TcpStream::connect(ext.local_addr()).unwrap();
        for l1id in 0..5u32 {
            let mut rec = l1id.to_le_bytes().to_vec();
            rec.extend_from_slice(&2u32.to_le_bytes());
            unit.write_all(&rec).unwrap();
        }
        close_as_a_unit(unit);
        rodeo_testkit::wait_until("the unit's close", Duration::from_secs(10), || ext.ended());
        let got: Vec<(u32, u32)> = std::iter::from_fn(|| ext.pop()).collect();
        assert_eq!(got, (0..5).map(|l| (l, 2)).collect::<Vec<_>>());
        assert_eq!(ext.counts(), (5, 0));
    }

    /// A trigger unit that never reads its busy bytes: the writes give up after `POLL`, so
    /// the reader never blocks on them (it hung, and the supervisor's stop with it).
    #[test]
    fn a_unit_that_never_reads_blocks_no_write() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _unit = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut ours, _) = listener.accept().unwrap();
        prepare(&ours).unwrap();
        let chunk = vec![b'B'; 1 << 16];
        let t0 = std::time::Instant::now();
        let failed = loop {
            if let Err(e) = ours.write_all(&chunk) {
                break e;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the writes never gave up"
            );
        };
        assert!(
            matches!(
                failed.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{failed}"
        );
    }

    #[test]
    fn no_free_slot_makes_the_partition_busy() {
        let ext = ExternalTrigger::start("127.0.0.1:0").unwrap();
        ext.set_no_slots(true);
        let mut s = TcpStream::connect(ext.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut state = [0u8; 1];
        s.read_exact(&mut state).unwrap();
        assert_eq!(&state, b"B");
        ext.set_no_slots(false);
        s.read_exact(&mut state).unwrap();
        assert_eq!(&state, b"R");
    }
}
