//! What a network receiver shares with its monitors ([`NetCounters`]): units, bytes and drops,
//! and the link's state ([`LinkState`]) with its times: the last data, the current silence,
//! the longest silence, why the last connection was lost.
//!
//! # Silence
//!
//! A receiver is *silent* while it waits for input and gets none. Time during which it does not
//! read at all (its card stalled: the store is full, a TCP sender is held back by the receiver)
//! is not silence, it is back-pressure: the receiver notes when it last looked for data, and a
//! monitor that finds it has not looked for longer than [`STALL_GAP`] counts the silence only
//! up to that moment. So a silent link means a sender that stopped sending, never a readout
//! that stopped reading.
//!
//! Every time is stored as nanoseconds since the counters were made, plus one (0: never), in
//! relaxed atomics: the receiver writes a few words per read system call, never per unit.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::POLL_INTERVAL;

/// A receiver that has not looked for data for this long is not reading (its card stalls):
/// the time since is not counted as silence.
pub const STALL_GAP: Duration = Duration::from_millis(50);

/// The state of a network input's link, as its receiver last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LinkState {
    /// No sender yet (TCP: nobody connected; UDP: no datagram yet).
    Waiting = 0,
    /// A sender is connected (TCP) or datagrams arrive (UDP).
    Connected = 1,
    /// The sender closed its connection cleanly, between two records (TCP).
    Closed = 2,
    /// The connection was reset, broke in the middle of a record or carried an invalid record
    /// (TCP); [`NetCounters::lost_reason`] says which.
    Lost = 3,
}

impl LinkState {
    fn from_u8(v: u8) -> LinkState {
        match v {
            1 => LinkState::Connected,
            2 => LinkState::Closed,
            3 => LinkState::Lost,
            _ => LinkState::Waiting,
        }
    }

    /// The state's name: `waiting`, `connected`, `closed`, `lost`.
    pub fn name(self) -> &'static str {
        match self {
            LinkState::Waiting => "waiting",
            LinkState::Connected => "connected",
            LinkState::Closed => "closed",
            LinkState::Lost => "lost",
        }
    }
}

/// Counters and state of a network receiver (64-bit, shared with monitoring); see the module
/// docs.
#[derive(Debug)]
pub struct NetCounters {
    /// Units received and written into superpages.
    pub units: AtomicU64,
    /// Bytes of those units.
    pub bytes: AtomicU64,
    /// Units dropped for their size.
    pub dropped_units: AtomicU64,
    /// Bytes dropped (those units, and the rest of a broken TCP stream).
    pub dropped_bytes: AtomicU64,
    /// Datagrams the kernel dropped before the receiver read them, its socket buffer full (UDP:
    /// the socket's own count, read every 100 ms and when the receiver ends).
    pub kernel_dropped_units: AtomicU64,
    /// Bytes of datagrams left unread in the socket buffer when the receiver ended (UDP): data
    /// the kernel received that the readout never read (the run stopped first).
    pub unread_bytes: AtomicU64,
    /// TCP connections accepted.
    pub connections: AtomicU64,
    /// TCP connections ended by an invalid record, a reset or a record cut by the close.
    pub broken_connections: AtomicU64,
    epoch: Instant,
    state: AtomicU8,
    /// When the state last changed.
    changed: AtomicU64,
    /// The last read that brought data.
    last_data: AtomicU64,
    /// The start of the current silence (0: data flows, or not connected).
    silent_since: AtomicU64,
    /// The last time the receiver looked for data.
    last_look: AtomicU64,
    /// The longest silence while connected, in nanoseconds.
    longest_silence: AtomicU64,
    /// Why the last connection was lost.
    lost: Mutex<Option<String>>,
}

impl Default for NetCounters {
    fn default() -> NetCounters {
        NetCounters {
            units: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            dropped_units: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
            kernel_dropped_units: AtomicU64::new(0),
            unread_bytes: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            broken_connections: AtomicU64::new(0),
            epoch: Instant::now(),
            state: AtomicU8::new(LinkState::Waiting as u8),
            changed: AtomicU64::new(0),
            last_data: AtomicU64::new(0),
            silent_since: AtomicU64::new(0),
            last_look: AtomicU64::new(0),
            longest_silence: AtomicU64::new(0),
            lost: Mutex::new(None),
        }
    }
}

impl NetCounters {
    /// `t` as stored: nanoseconds since the epoch, plus one.
    fn stamp(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64 + 1
    }

    /// The time stored as `v` (`None`: never).
    fn instant(&self, v: u64) -> Option<Instant> {
        (v > 0).then(|| self.epoch + Duration::from_nanos(v - 1))
    }

    pub(super) fn drop_unit(&self, bytes: usize) {
        self.dropped_units.fetch_add(1, Ordering::Relaxed);
        self.dropped_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(super) fn accept_unit(&self, bytes: usize) {
        self.units.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The link is now in `state` (a new connection, a close, a loss).
    pub(super) fn set_state(&self, state: LinkState, now: Instant) {
        self.state.store(state as u8, Ordering::Relaxed);
        self.changed.store(self.stamp(now), Ordering::Relaxed);
        // A silence ends with the connection; a new connection starts without one.
        self.silent_since.store(0, Ordering::Relaxed);
    }

    /// The connection was lost, for `why`.
    pub(super) fn lose(&self, why: String, now: Instant) {
        self.broken_connections.fetch_add(1, Ordering::Relaxed);
        *self.lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.set_state(LinkState::Lost, now);
    }

    /// A read brought data at `now`: ends a silence (noting its length).
    #[inline]
    pub(super) fn data(&self, now: Instant) {
        let t = self.stamp(now);
        self.last_data.store(t, Ordering::Relaxed);
        let since = self.silent_since.load(Ordering::Relaxed);
        if since != 0 {
            self.silent_since.store(0, Ordering::Relaxed);
            self.longest_silence
                .fetch_max(t.saturating_sub(since), Ordering::Relaxed);
        }
    }

    /// The receiver finds nothing to read at `now` and will wait: a silence starts, if none
    /// has (while connected).
    pub(super) fn quiet(&self, now: Instant) {
        if self.silent_since.load(Ordering::Relaxed) == 0 && self.state() == LinkState::Connected {
            self.silent_since.store(self.stamp(now), Ordering::Relaxed);
        }
    }

    /// The receiver looks for data at `now`. After a gap longer than [`STALL_GAP`] (its card
    /// stalled, it did not read) a silence restarts from now: back-pressure is not silence.
    pub(super) fn look(&self, now: Instant) {
        let t = self.stamp(now);
        let before = self.last_look.swap(t, Ordering::Relaxed);
        let since = self.silent_since.load(Ordering::Relaxed);
        if since != 0 && before != 0 && t.saturating_sub(before) > STALL_GAP.as_nanos() as u64 {
            self.longest_silence
                .fetch_max(before.saturating_sub(since), Ordering::Relaxed);
            self.silent_since.store(t, Ordering::Relaxed);
        }
    }

    /// The link's state.
    pub fn state(&self) -> LinkState {
        LinkState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// How long ago the state last changed (`None`: never, still waiting for a first sender).
    pub fn state_age(&self) -> Option<Duration> {
        self.instant(self.changed.load(Ordering::Relaxed))
            .map(|t| t.elapsed())
    }

    /// How long ago the last data arrived (`None`: never).
    pub fn last_data_age(&self) -> Option<Duration> {
        self.instant(self.last_data.load(Ordering::Relaxed))
            .map(|t| t.elapsed())
    }

    /// How long the link has been silent now, while connected (zero while data flows; the
    /// time the receiver did not read is not counted: module docs).
    pub fn silence(&self) -> Duration {
        let Some(since) = self.instant(self.silent_since.load(Ordering::Relaxed)) else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let looked = self
            .instant(self.last_look.load(Ordering::Relaxed))
            .unwrap_or(now);
        // A receiver that waits looks at least every POLL_INTERVAL; one that has not looked
        // for longer is stalled, and its silence ended when it last looked.
        let end = if now.saturating_duration_since(looked) > STALL_GAP.max(2 * POLL_INTERVAL) {
            looked
        } else {
            now
        };
        end.saturating_duration_since(since)
    }

    /// The longest silence while connected so far, the current one included.
    pub fn longest_silence(&self) -> Duration {
        Duration::from_nanos(self.longest_silence.load(Ordering::Relaxed)).max(self.silence())
    }

    /// Why the last connection was lost, if one was.
    pub fn lost_reason(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_is_counted_while_connected_and_waiting_only() {
        let c = NetCounters::default();
        let t0 = Instant::now();
        assert_eq!(c.state(), LinkState::Waiting);
        // Waiting for a first sender is not a silence.
        c.quiet(t0);
        assert_eq!(c.silence(), Duration::ZERO);
        c.set_state(LinkState::Connected, t0);
        c.data(t0);
        assert!(c.last_data_age().is_some());
        // Quiet for 30 ms (looking every 10 ms), then data: a silence of 30 ms is noted.
        c.quiet(t0);
        for k in 1..=3 {
            c.look(t0 + Duration::from_millis(10 * k));
        }
        c.data(t0 + Duration::from_millis(30));
        assert_eq!(c.silence(), Duration::ZERO);
        let longest = c.longest_silence();
        assert!(
            longest >= Duration::from_millis(29) && longest <= Duration::from_millis(31),
            "{longest:?}"
        );
        // A stall (no look for 1 s) is not silence: it restarts from the next look.
        c.quiet(t0 + Duration::from_millis(40));
        c.look(t0 + Duration::from_millis(1_040));
        c.data(t0 + Duration::from_millis(1_050));
        let longest = c.longest_silence();
        assert!(longest < Duration::from_millis(100), "{longest:?}");
        c.lose("reset".into(), t0);
        assert_eq!(c.state(), LinkState::Lost);
        assert_eq!(c.lost_reason().as_deref(), Some("reset"));
        assert_eq!(c.broken_connections.load(Ordering::Relaxed), 1);
    }
}
