//! The TCP receiver: one sender at a time, a stream of length-prefixed records read in large
//! non-blocking reads into a buffer, whole units copied into the superpage.
//!
//! # The connection's end
//!
//! - The sender closes between two records: the link is [`LinkState::Closed`] (a clean end;
//!   with [`TcpReceiver::end_with_sender`] the receiver finishes, so the channel's link goes
//!   down and a run fed by a finite sender ends with it).
//! - The connection is reset, or ends in the middle of a record, or carries an invalid record
//!   length: the link is [`LinkState::Lost`], the bytes of the cut record are dropped and
//!   counted, and the receiver waits for the next sender. A sender killed between two records
//!   cannot be told from one that closed cleanly: TCP says the same (FIN) for both.
//! - The sender falls silent without a close (its host lost power, a cable cut: no FIN ever
//!   comes; or a peer that connects and never sends): once the connection has been quiet for
//!   [`TAKEOVER_SILENCE`], a new connection waiting to be accepted is taken as a candidate,
//!   and the first of its bytes to arrive make it the sender: the silent one is dropped (the
//!   link [`LinkState::Lost`], its cut record counted). A candidate that closes without a byte
//!   is dropped, and so is one whose first bytes are not a record's length word (a port scan's
//!   `GET /`, garbage); one idle for [`TAKEOVER_SILENCE`] gives its place to a newer
//!   connection, so an idle one cannot hold it either. A sender silent between spills keeps its link while
//!   nobody else sends, so a port scan or a probe that connects cannot take it over.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wait::wait_readable;
use super::{is_timeout, LinkState, NetCounters, UnitRule, FLUSH_INTERVAL, POLL_INTERVAL};
use crate::dma::{Fill, Generator};

/// The receive buffer: many records per read at high rates, and room for the largest record
/// (a length word and [`super::MAX_NET_UNIT`] bytes) however the stream is cut.
const RECEIVE_BUFFER: usize = 256 * 1024;

/// How long the current sender must have been quiet before a new connection may take its place
/// (module docs: only once the new one sends).
pub const TAKEOVER_SILENCE: Duration = Duration::from_secs(1);

/// Receives units as length-prefixed records over TCP; see the parent module's docs.
#[derive(Debug)]
pub struct TcpReceiver {
    listener: TcpListener,
    stream: Option<TcpStream>,
    /// A newer connection waiting to send while `stream` is quiet, and since when (module
    /// docs).
    candidate: Option<(TcpStream, Instant)>,
    /// Since when `stream` has given nothing to read (`None`: data came with the last read).
    quiet_since: Option<Instant>,
    rule: UnitRule,
    counters: Arc<NetCounters>,
    /// Bytes read and not yet taken: `inbuf[start..end]`, whole records then maybe a part.
    inbuf: Box<[u8]>,
    start: usize,
    end: usize,
    /// When the last read that brought data returned.
    last_read: Instant,
    /// Finish (no more input) once a sender has ended its connection cleanly.
    end_with_sender: bool,
    /// A sender ended cleanly while `end_with_sender` was set.
    finished: bool,
}

/// What the buffered records gave.
enum Taken {
    /// Every whole record was taken: read more.
    NeedMore,
    /// The superpage or the unit budget is full (the rest waits in the buffer).
    Full,
    /// An invalid record length: the stream cannot be resynchronised.
    Invalid(usize),
}

impl TcpReceiver {
    /// Listens on `addr` (port 0 picks a free port; see [`TcpReceiver::local_addr`]).
    pub fn bind(addr: SocketAddr, rule: UnitRule) -> io::Result<TcpReceiver> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let record = 4 + rule.max_bytes().next_multiple_of(4);
        Ok(TcpReceiver {
            listener,
            stream: None,
            candidate: None,
            quiet_since: None,
            rule,
            counters: Arc::default(),
            inbuf: vec![0u8; RECEIVE_BUFFER.max(2 * record)].into_boxed_slice(),
            start: 0,
            end: 0,
            last_read: Instant::now(),
            end_with_sender: false,
            finished: false,
        })
    }

    /// Makes the receiver finish ([`Generator::is_finished`]) when its first sender ends its
    /// connection cleanly (between records): the channel then hands over its last superpage
    /// and takes its link down, so a run fed by a finite sender ends with it. Off by default:
    /// a receiver then waits for the next sender.
    pub fn end_with_sender(mut self, on: bool) -> TcpReceiver {
        self.end_with_sender = on;
        self
    }

    /// The listening address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The counters (shared: keep a clone to read them while the channel runs).
    pub fn counters(&self) -> Arc<NetCounters> {
        Arc::clone(&self.counters)
    }

    /// Accepts a waiting sender, waiting for one at most [`POLL_INTERVAL`]; true when one is
    /// connected.
    fn accept(&mut self) -> bool {
        if let Some((c, _)) = self.candidate.take() {
            self.adopt(c);
            return true;
        }
        for attempt in 0..2 {
            match self.listener.accept() {
                Ok((s, _)) => {
                    if s.set_nonblocking(true).is_err() {
                        return false;
                    }
                    self.adopt(s);
                    return true;
                }
                Err(e) if is_timeout(&e) && attempt == 0 => {
                    if wait_readable(&self.listener, POLL_INTERVAL).is_err() {
                        std::thread::sleep(POLL_INTERVAL);
                    }
                }
                Err(e) if is_timeout(&e) => return false,
                // A connection that failed before it was accepted (reset in the backlog), or
                // out of descriptors: try again on the next turn, after a pause.
                Err(_) => {
                    std::thread::sleep(POLL_INTERVAL);
                    return false;
                }
            }
        }
        false
    }

    /// Makes `s` (non-blocking) the sender.
    fn adopt(&mut self, s: TcpStream) {
        let _ = s.set_nodelay(true);
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        self.counters
            .set_state(LinkState::Connected, Instant::now());
        self.start = 0;
        self.end = 0;
        self.quiet_since = None;
        self.stream = Some(s);
    }

    /// The current sender has been quiet since `quiet_since`: takes a waiting connection as the
    /// candidate, and when the candidate has sent a byte makes it the sender, the quiet one
    /// dropped (module docs). A candidate that closed without a byte is dropped; one that has
    /// waited [`TAKEOVER_SILENCE`] without a byte gives its place to a newer connection (so an
    /// idle one cannot hold it), a younger one keeps it. True when the sender changed.
    fn take_over(&mut self, now: Instant) -> bool {
        let since = *self.quiet_since.get_or_insert(now);
        if now.saturating_duration_since(since) < TAKEOVER_SILENCE {
            return false;
        }
        if let Some(changed) = self.try_candidate(now) {
            return changed;
        }
        // No candidate, or one that may give its place: a newer connection, if one waits.
        if let Ok((s, _)) = self.listener.accept() {
            if s.set_nonblocking(true).is_ok() {
                self.candidate = Some((s, now));
            }
        }
        self.try_candidate(now).unwrap_or(false)
    }

    /// Looks at the candidate: `Some(true)` when it sent data and is now the sender,
    /// `Some(false)` when it keeps waiting and keeps its place, `None` when there is no
    /// candidate or it gave its place (closed, failed, or idle for [`TAKEOVER_SILENCE`]).
    fn try_candidate(&mut self, now: Instant) -> Option<bool> {
        let (c, waiting_since) = self.candidate.as_ref()?;
        let waiting_since = *waiting_since;
        let mut first = [0u8; 4];
        let peeked = c.peek(&mut first);
        let idle = now.saturating_duration_since(waiting_since) >= TAKEOVER_SILENCE;
        match peeked {
            Ok(0) => {
                // Closed without a byte: nothing to take over with.
                self.candidate = None;
                None
            }
            // Not yet a whole length word: it keeps waiting (or gives its place when idle).
            Ok(n) if n < first.len() => (!idle).then_some(false),
            Ok(_) if !self.valid_length(u32::from_le_bytes(first) as usize) => {
                // Not a record (a port scan's "GET /", garbage): it takes nothing over.
                self.candidate = None;
                None
            }
            Ok(_) => {
                let silent = self
                    .quiet_since
                    .map_or(0, |q| now.saturating_duration_since(q).as_millis());
                let why = format!(
                    "the sender was silent for {silent} ms and a new connection sent data: the \
                     silent one was dropped (its host gone without a close?)"
                );
                self.close(Some(why), now);
                let (c, _) = self.candidate.take().expect("the candidate just peeked");
                self.adopt(c);
                Some(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => (!idle).then_some(false),
            Err(_) => {
                self.candidate = None;
                None
            }
        }
    }

    /// Whether `len` may be a record's length word (1..=the rule's largest unit).
    fn valid_length(&self, len: usize) -> bool {
        len != 0 && len <= self.rule.max_bytes()
    }

    /// Copies the whole records buffered into `buf` after `fill`, as many as fit and
    /// `max_units` allows.
    fn take_records(&mut self, buf: &mut [u8], fill: &mut Fill, max_units: u64) -> Taken {
        while fill.units < max_units {
            let have = &self.inbuf[self.start..self.end];
            let Some(word) = have.get(..4) else {
                return Taken::NeedMore;
            };
            let len = u32::from_le_bytes([word[0], word[1], word[2], word[3]]) as usize;
            if !self.valid_length(len) {
                return Taken::Invalid(len);
            }
            let record = 4 + len.next_multiple_of(4);
            if have.len() < record {
                return Taken::NeedMore;
            }
            if buf.len() - fill.bytes < len {
                return Taken::Full; // the unit goes into the next superpage
            }
            if self.rule.accepts(len) {
                buf[fill.bytes..fill.bytes + len].copy_from_slice(&have[4..4 + len]);
                fill.bytes += len;
                fill.units += 1;
                self.counters.accept_unit(len);
            } else {
                self.counters.drop_unit(len);
            }
            self.start += record;
        }
        Taken::Full
    }

    /// Makes room at the end of the buffer for the next read: moves a partial record to the
    /// front when the room left could not hold the largest one.
    fn make_room(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.inbuf.len() - self.end < self.inbuf.len() / 2 {
            self.inbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// The connection ended: cleanly (between records) or lost for `why`, with the bytes of
    /// any cut record dropped and counted.
    fn close(&mut self, lost: Option<String>, now: Instant) {
        let cut = (self.end - self.start) as u64;
        self.stream = None;
        self.start = 0;
        self.end = 0;
        match lost {
            None => {
                self.counters.set_state(LinkState::Closed, now);
                self.finished |= self.end_with_sender;
            }
            Some(why) => {
                self.counters
                    .dropped_bytes
                    .fetch_add(cut, Ordering::Relaxed);
                self.counters.lose(why, now);
            }
        }
    }
}

impl Generator for TcpReceiver {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        self.fill_until(buf, max_units, &mut None)
    }

    fn fill_until(
        &mut self,
        buf: &mut [u8],
        max_units: u64,
        flush_by: &mut Option<Instant>,
    ) -> Fill {
        let mut fill = Fill::default();
        let mut now = Instant::now();
        self.counters.look(now);
        if self.stream.is_none() && (self.finished || !self.accept()) {
            return fill;
        }
        let mut waited = false;
        loop {
            match self.take_records(buf, &mut fill, max_units) {
                Taken::NeedMore => {}
                Taken::Full => return fill,
                Taken::Invalid(len) => {
                    let why = format!(
                        "invalid record length {len} (1..={} bytes allowed): the stream cannot \
                         be resynchronised, the connection was dropped",
                        self.rule.max_bytes()
                    );
                    self.close(Some(why), now);
                    return fill;
                }
            }
            if fill.units > 0 && flush_by.is_none() {
                // The first unit of this superpage arrived with the last read (or before it).
                *flush_by = Some(self.last_read + FLUSH_INTERVAL);
            }
            if flush_by.is_some_and(|d| now >= d) {
                return fill;
            }
            self.make_room();
            let Some(stream) = self.stream.as_mut() else {
                return fill;
            };
            match stream.read(&mut self.inbuf[self.end..]) {
                Ok(0) => {
                    let why = (self.end > self.start).then(|| {
                        format!(
                            "the sender closed in the middle of a record ({} bytes dropped)",
                            self.end - self.start
                        )
                    });
                    self.close(why, Instant::now());
                    return fill;
                }
                Ok(n) => {
                    self.end += n;
                    now = Instant::now();
                    self.last_read = now;
                    self.quiet_since = None;
                    self.counters.data(now);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.take_over(now) {
                        continue;
                    }
                    let limit = match *flush_by {
                        Some(d) => d.saturating_duration_since(now),
                        // Nothing to hand over: wait once, then let the channel look at its
                        // stop flag.
                        None if waited => return fill,
                        None => POLL_INTERVAL,
                    };
                    self.counters.quiet(now);
                    let Some(stream) = self.stream.as_ref() else {
                        return fill;
                    };
                    if wait_readable(stream, limit).is_err() {
                        return fill;
                    }
                    waited = true;
                    now = Instant::now();
                    self.counters.look(now);
                }
                Err(e) => {
                    let why = match e.kind() {
                        io::ErrorKind::ConnectionReset => {
                            "connection reset by the sender".to_string()
                        }
                        _ => format!("connection failed: {e}"),
                    };
                    self.close(Some(why), Instant::now());
                    return fill;
                }
            }
        }
    }

    fn waits_for_input(&self) -> bool {
        true
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}
