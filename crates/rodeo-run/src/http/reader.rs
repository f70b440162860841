//! The reader thread (one `mio` poll over every open connection, TLS handshakes, deadlines,
//! eviction) and the workers that answer complete requests.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_memory::{Backoff, BackoffSpec, BoundedQueue, FullPolicy, Refused};

use super::auth::Peer;
use super::conn::Conn;
use super::request::Completion;
use super::routes::{respond, Shared};
use super::{
    read_request, HttpConfig, HttpCounters, Request, RequestError, Response, MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
};

/// A connection whose request is read (or failed to read) and waits for a worker.
pub(super) struct ReadRequest {
    conn: Conn,
    peer: Peer,
    request: Result<Request, RequestError>,
}

/// A connection being read: its bytes so far and its deadline.
struct Open {
    conn: Conn,
    peer: SocketAddr,
    buf: Vec<u8>,
    /// How far `buf` was searched for a whole request.
    completion: Completion,
    deadline: Instant,
    /// Accept sequence number: tells a live entry of `order` from a stale one.
    seq: u64,
    /// Watched for writability too (TLS output waits for the socket).
    writable: bool,
}

/// Largest request in bytes (head, separator, body).
const MAX_REQUEST_BYTES: usize = MAX_HEADER_BYTES + 4 + MAX_BODY_BYTES;
/// The listener's token; connection `i` of the table is token `i + 1`.
const LISTENER: mio::Token = mio::Token(0);

/// The reader thread's state: the listener and the table of open connections.
pub(super) struct Reader {
    poll: mio::Poll,
    listener: mio::net::TcpListener,
    open: Vec<Option<Open>>,
    free: Vec<usize>,
    /// (slot, seq) in accept order: deadlines are accept time + timeout, so the front is both
    /// the oldest connection and the next deadline. Entries of closed connections are skipped.
    order: VecDeque<(usize, u64)>,
    live: usize,
    next_seq: u64,
    timeout: Duration,
    max_connections: usize,
    /// HTTPS settings (None: plain HTTP).
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl Reader {
    pub(super) fn new(listener: TcpListener, config: &HttpConfig) -> io::Result<Reader> {
        let poll = mio::Poll::new()?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        poll.registry()
            .register(&mut listener, LISTENER, mio::Interest::READABLE)?;
        Ok(Reader {
            poll,
            listener,
            open: Vec::new(),
            free: Vec::new(),
            order: VecDeque::new(),
            live: 0,
            next_seq: 0,
            timeout: config.io_timeout,
            max_connections: config
                .max_connections
                .clamp(1, open_files_limit().map_or(usize::MAX, connection_budget)),
            tls: config.tls.clone(),
        })
    }

    pub(super) fn run(mut self, queue: &Queues, stop: &AtomicBool, counters: &HttpCounters) {
        let mut events = mio::Events::with_capacity(256);
        while !stop.load(Ordering::Relaxed) {
            let wait = self
                .next_deadline()
                .map_or(Duration::from_millis(50), |d| {
                    d.saturating_duration_since(Instant::now())
                })
                .min(Duration::from_millis(50));
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::warn!("HTTP reader: poll failed: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
                continue;
            }
            for ev in events.iter() {
                if ev.token() == LISTENER {
                    self.accept_all(counters);
                } else {
                    let slot = ev.token().0 - 1;
                    if let Some(ready) = self.read_ready(slot) {
                        hand_over(queue, ready, counters);
                    }
                }
            }
            self.expire(counters);
        }
        // Dropping `tx` (the caller's) when this returns ends the workers' loops.
    }

    /// The deadline of the oldest live connection.
    fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&(slot, seq)) = self.order.front() {
            match &self.open[slot] {
                Some(o) if o.seq == seq => return Some(o.deadline),
                _ => {
                    self.order.pop_front();
                }
            }
        }
        None
    }

    fn accept_all(&mut self, counters: &HttpCounters) {
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, most likely: make room, take the next one later.
                    tracing::warn!("HTTP accept: {e}");
                    if self.live > 0 {
                        self.evict_oldest(counters);
                    }
                    return;
                }
            };
            if self.live >= self.max_connections {
                self.evict_oldest(counters);
            }
            let conn = match Conn::new(TcpStream::from(stream), self.tls.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("HTTP reader: cannot start TLS on a connection: {e}");
                    continue;
                }
            };
            let slot = self.free.pop().unwrap_or_else(|| {
                self.open.push(None);
                self.open.len() - 1
            });
            let fd = conn.tcp().as_raw_fd();
            if let Err(e) = self.poll.registry().register(
                &mut mio::unix::SourceFd(&fd),
                mio::Token(slot + 1),
                mio::Interest::READABLE,
            ) {
                tracing::warn!("HTTP reader: cannot watch a connection: {e}");
                self.free.push(slot);
                continue;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            self.open[slot] = Some(Open {
                conn,
                peer,
                buf: Vec::new(),
                completion: Completion::default(),
                deadline: Instant::now() + self.timeout,
                seq,
                writable: false,
            });
            self.order.push_back((slot, seq));
            self.live += 1;
        }
    }

    /// Takes connection `slot` out of the table (and out of the poll set).
    fn close(&mut self, slot: usize) -> Option<Open> {
        let o = self.open.get_mut(slot)?.take()?;
        let fd = o.conn.tcp().as_raw_fd();
        let _ = self
            .poll
            .registry()
            .deregister(&mut mio::unix::SourceFd(&fd));
        self.free.push(slot);
        self.live -= 1;
        Some(o)
    }

    fn evict_oldest(&mut self, counters: &HttpCounters) {
        while let Some((slot, seq)) = self.order.pop_front() {
            if matches!(&self.open[slot], Some(o) if o.seq == seq) {
                self.close(slot);
                counters.evicted.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }

    /// Reads what connection `slot` has (with TLS: moves its handshake on); returns it when
    /// its request is complete (or cannot become one).
    fn read_ready(&mut self, slot: usize) -> Option<ReadRequest> {
        let o = self.open.get_mut(slot)?.as_mut()?;
        let mut ready = o.conn.read_available(&mut o.buf, MAX_REQUEST_BYTES);
        if o.writable && !ready.wants_write {
            ready = o.conn.flush_pending();
        }
        if o.completion.complete(&o.buf) {
            let o = self.close(slot)?;
            let request = read_request(&mut o.buf.as_slice());
            let tls = matches!(o.conn, Conn::Tls(_));
            return Some(ReadRequest {
                conn: o.conn,
                peer: Peer { addr: o.peer, tls },
                request,
            });
        }
        if ready.closed {
            // Gone before its request was whole: nobody to answer.
            self.close(slot);
            return None;
        }
        if ready.wants_write != o.writable {
            o.writable = ready.wants_write;
            let interest = if o.writable {
                mio::Interest::READABLE | mio::Interest::WRITABLE
            } else {
                mio::Interest::READABLE
            };
            let fd = o.conn.tcp().as_raw_fd();
            if let Err(e) = self.poll.registry().reregister(
                &mut mio::unix::SourceFd(&fd),
                mio::Token(slot + 1),
                interest,
            ) {
                tracing::warn!("HTTP reader: cannot watch a connection: {e}");
                self.close(slot);
            }
        }
        None
    }

    /// Answers 408 to, and closes, every connection past its deadline.
    fn expire(&mut self, counters: &HttpCounters) {
        let now = Instant::now();
        while let Some(deadline) = self.next_deadline() {
            if deadline > now {
                return;
            }
            let Some((slot, _)) = self.order.pop_front() else {
                return;
            };
            if let Some(mut o) = self.close(slot) {
                counters.timed_out.fetch_add(1, Ordering::Relaxed);
                counters.client_errors.fetch_add(1, Ordering::Relaxed);
                // Best effort, never waiting: the answer fits the socket's buffer (over TLS
                // only once the handshake is done).
                let _ =
                    Response::error(408, &RequestError::Timeout.to_string()).write_to(&mut o.conn);
                o.conn.close();
            }
        }
    }
}

/// Whether a read request goes to the operators' queue: it proves a role above an
/// observer's (its token checked, as the worker will again).
pub(super) type Priority = Box<dyn Fn(&Peer, &Request) -> bool + Send + Sync>;

/// The workers' two queues: requests whose token proves a role above an observer's (commands,
/// acknowledgements, comments, conditions, configuration) apart from the rest, and taken
/// first, so that a flood of reads or of requests with a wrong token (anyone may send them)
/// neither fills the operators' queue (503) nor keeps a worker from them.
pub(super) struct Queues {
    commands: BoundedQueue<ReadRequest>,
    others: BoundedQueue<ReadRequest>,
    priority: Priority,
}

impl Queues {
    /// Two queues of `capacity` each; `priority` tells the operators' requests.
    pub(super) fn new(capacity: usize, priority: Priority) -> Queues {
        let queue = |name| BoundedQueue::new(name, capacity.max(1), FullPolicy::Refuse);
        Queues {
            commands: queue("control.http.commands"),
            others: queue("control.http.requests"),
            priority,
        }
    }

    /// `ready` into its queue: `None`, or `ready` back when that queue is full.
    fn push(&self, ready: ReadRequest) -> Option<ReadRequest> {
        let command = matches!(&ready.request, Ok(r) if (self.priority)(&ready.peer, r));
        let queue = if command {
            &self.commands
        } else {
            &self.others
        };
        queue.push(ready).err().map(|Refused { item, .. }| item)
    }

    /// The next request, a command first.
    fn pop(&self) -> Option<ReadRequest> {
        self.commands.pop().or_else(|| self.others.pop())
    }
}

/// Gives a read request to the workers, or answers 503 when its queue is full.
fn hand_over(queue: &Queues, ready: ReadRequest, counters: &HttpCounters) {
    match queue.push(ready) {
        None => {}
        Some(mut r) => {
            counters.server_errors.fetch_add(1, Ordering::Relaxed);
            // Best effort, never waiting (the stream is still non-blocking).
            let _ = Response::error(503, "busy").write_to(&mut r.conn);
            r.conn.close();
        }
    }
}

/// A worker: answers the requests of the queue until the server stops. Each request's
/// handling is isolated ([`respond`]): a panic is a 500 and a log line, and the worker goes on.
pub(super) fn worker(queue: &Queues, stop: &AtomicBool, shared: &Shared) {
    let mut idle = Backoff::new(BackoffSpec::IDLE_SERVER);
    let counters: &HttpCounters = &shared.counters;
    loop {
        let Some(ReadRequest {
            mut conn,
            peer,
            request,
        }) = queue.pop()
        else {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            idle.wait();
            continue;
        };
        idle.reset();
        let _ = conn.tcp().set_nonblocking(false);
        let response = match request {
            Ok(req) => respond(shared, &peer, &req),
            Err(RequestError::Io(_)) => continue,
            Err(e @ RequestError::Timeout) => Response::error(408, &e.to_string()),
            Err(e @ (RequestError::HeadTooLarge | RequestError::BodyTooLarge(_))) => {
                Response::error(413, &e.to_string())
            }
            Err(e) => Response::error(400, &e.to_string()),
        };
        let class = match response.status {
            200..=299 => &counters.ok,
            400..=499 => &counters.client_errors,
            _ => &counters.server_errors,
        };
        class.fetch_add(1, Ordering::Relaxed);
        let until = Instant::now() + shared.timeout;
        let _ = response.write_to(&mut Deadline {
            conn: &mut conn,
            until,
        });
        conn.close();
    }
}

/// A connection's answer under one deadline for the whole of it: each write may take only
/// what is left. (The socket's write timeout bounds each write, not the answer: a client that
/// read a few bytes every few seconds held a worker for as long as it liked.)
struct Deadline<'c> {
    conn: &'c mut Conn,
    until: Instant,
}

impl io::Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.conn.tcp().set_write_timeout(Some(left))?;
        io::Write::write(self.conn, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::Write::flush(self.conn)
    }
}

/// Open connections at most in a process whose open-file limit is `limit`: a quarter of it (at
/// least 16), so that a flood of connections leaves the logger's files, the ZeroMQ sockets and
/// the run database the rest (1,100 idle connections under the usual 1024 took them all).
fn connection_budget(limit: u64) -> usize {
    usize::try_from(limit / 4).unwrap_or(usize::MAX).max(16)
}

/// The process's open-file limit, raised first to its hard limit (what an unprivileged
/// process may do); `None` if it cannot be read.
fn open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct through a valid pointer to a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit struct through a valid pointer to a local; a
        // refusal (a hard limit past the kernel's nr_open) leaves the limit as it was.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    Some(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flood of reads (or of wrong tokens) that fills their queue leaves an operator's
    /// command room, and the command is taken before the reads that came first.
    #[test]
    fn a_command_is_queued_apart_from_a_flood_of_reads_and_taken_first() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        let mut ready = |raw: &[u8]| {
            clients.push(TcpStream::connect(addr).unwrap());
            let (server, peer) = listener.accept().unwrap();
            ReadRequest {
                conn: Conn::Plain(server),
                peer: Peer {
                    addr: peer,
                    tls: false,
                },
                request: super::super::request::read_request(&mut &raw[..]),
            }
        };
        let queues = Queues::new(
            2,
            Box::new(|_, r: &Request| r.header("authorization") == Some("Bearer t")),
        );
        for _ in 0..2 {
            assert!(queues
                .push(ready(b"GET /api/status HTTP/1.1\r\n\r\n"))
                .is_none());
        }
        assert!(
            queues
                .push(ready(b"GET /api/status HTTP/1.1\r\n\r\n"))
                .is_some(),
            "the reads' queue is full"
        );
        // A POST without a token, or with a wrong one, is refused by a worker in its turn:
        // no room either.
        let no_token = b"POST /api/command HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        assert!(queues.push(ready(no_token)).is_some());
        let wrong =
            b"POST /api/command HTTP/1.1\r\nAuthorization: Bearer x\r\nContent-Length: 2\r\n\r\n{}";
        assert!(queues.push(ready(wrong)).is_some());
        let command = b"POST /api/command HTTP/1.1\r\nAuthorization: Bearer t\r\nContent-Length: 18\r\n\r\n{\"command\":\"stop\"}";
        assert!(
            queues.push(ready(command)).is_none(),
            "the command has room"
        );
        let first = queues.pop().expect("a request");
        assert_eq!(
            first.request.as_ref().unwrap().method,
            "POST",
            "the command first"
        );
        assert_eq!(queues.pop().unwrap().request.unwrap().method, "GET");
    }

    /// A client that never reads gets the answer's bytes until its socket is full, then
    /// nothing more once the deadline of the whole answer has passed: the worker is free again.
    #[test]
    fn an_answer_has_one_deadline_however_slowly_the_client_reads() {
        use std::io::Write as _;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut conn = Conn::Plain(server);
        let began = Instant::now();
        let mut out = Deadline {
            conn: &mut conn,
            until: began + Duration::from_millis(300),
        };
        let e = out.write_all(&vec![7u8; 256 << 20]).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
    }

    /// The limit is read (and raised to the hard limit where it can be: never lowered), and
    /// the connections take a quarter of it.
    #[test]
    fn connections_take_a_quarter_of_the_open_file_limit() {
        let mut before = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit struct through a valid pointer to a local.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut before) };
        assert_eq!(rc, 0);
        let limit = open_files_limit().unwrap();
        assert!(
            limit >= before.rlim_cur && limit <= before.rlim_max,
            "{limit}"
        );
        assert_eq!(connection_budget(1024), 256);
        assert_eq!(connection_budget(20), 16);
        assert_eq!(connection_budget(u64::MAX), usize::MAX / 4);
    }
}
