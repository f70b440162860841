//! One tester instance's loop ([`run_on`], on a ZeroMQ socket [`run`], on the direct link
//! [`run_direct`]): events generated with the request mix, requests sent and their replies
//! checked, clears grouped, until the event or time limit or the stop flag (see the crate
//! docs).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rodeo_cards::generator::{L1idCounter, Rng};
use rodeo_format::fragment::{Status, ROB_MARKER};
use rodeo_ros::server::DirectClient;
use rodeo_transport::socket::Socket;

use crate::config::TesterConfig;
use crate::link::{FragmentHead, TesterError, TesterLink, ZmqLink};
use crate::report::{TesterReport, INTERVAL};

/// Most ROBs a tester handles (the requested-set bitmap).
pub const MAX_ROBS: usize = 256;

#[derive(Debug, Clone, Copy, Default)]
struct RobSet([u64; MAX_ROBS / 64]);

impl RobSet {
    fn insert(&mut self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let new = self.0[w] & b == 0;
        self.0[w] |= b;
        new
    }
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1u64 << (i % 64)) != 0
    }
}

#[derive(Debug, Clone, Copy)]
struct Event {
    l1id: u32,
    /// Requests in flight for this event.
    outstanding: u32,
    /// Whether the EB request is still to be sent after the L2 reply.
    eb_due: bool,
    requested: RobSet,
    done: bool,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    generation: u16,
    event: u64,
    sent: Instant,
    eb: bool,
    tries: u32,
    in_use: bool,
}

struct State<'c, L: TesterLink> {
    config: &'c TesterConfig,
    link: &'c mut L,
    rng: Rng,
    slots: Vec<Slot>,
    free: Vec<u16>,
    /// Events in flight, from `first_event` on.
    events: VecDeque<Event>,
    first_event: u64,
    next_event: u64,
    clear_group: Vec<u32>,
    clear_seq: u32,
    last_clear: Instant,
    heads: Vec<FragmentHead>,
    robs_buf: Vec<u32>,
    /// Re-asks waiting for `retry_delay`, in due order: when, and the slot kept for it (out of
    /// `free`, not in use: a reply naming it is bad).
    retries: VecDeque<(Instant, u16)>,
    /// Per slot, the ROBs its waiting re-ask names (allocated once).
    retry_robs: Vec<Vec<u32>>,
    report: TesterReport,
}

/// Runs one tester instance on `socket` (a DEALER connected to the node) until the event or
/// time limit, or `stop`. See the module docs.
pub fn run(
    socket: &mut Socket,
    config: &TesterConfig,
    stop: &AtomicBool,
) -> Result<TesterReport, TesterError> {
    run_on(&mut ZmqLink::new(socket), config, stop)
}

/// Runs one tester instance on the direct in-process link of a node started with
/// [`rodeo_ros::server::RequestServer::start_direct`]. Requests in flight are bounded by the
/// link's capacity as well as `max_outstanding`.
pub fn run_direct(
    client: &mut DirectClient,
    config: &TesterConfig,
    stop: &AtomicBool,
) -> Result<TesterReport, TesterError> {
    run_on(client, config, stop)
}

/// Runs one tester instance on any link.
pub fn run_on<L: TesterLink>(
    link: &mut L,
    config: &TesterConfig,
    stop: &AtomicBool,
) -> Result<TesterReport, TesterError> {
    let n_out = config
        .max_outstanding
        .min(link.max_in_flight().unwrap_or(usize::MAX))
        .clamp(1, usize::from(u16::MAX));
    let mut st = State {
        config,
        link,
        rng: Rng::new(config.seed ^ (u64::from(config.instance) << 32) ^ 0x7E57),
        slots: vec![
            Slot {
                generation: 0,
                event: 0,
                sent: Instant::now(),
                eb: false,
                tries: 0,
                in_use: false,
            };
            n_out
        ],
        free: (0..n_out as u16).rev().collect(),
        events: VecDeque::with_capacity(n_out * 2),
        first_event: 0,
        next_event: 0,
        clear_group: Vec::with_capacity(config.clear_group.max(1)),
        clear_seq: 0,
        last_clear: Instant::now(),
        heads: Vec::with_capacity(MAX_ROBS),
        robs_buf: Vec::with_capacity(config.robs.len()),
        retries: VecDeque::with_capacity(n_out),
        retry_robs: (0..n_out)
            .map(|_| Vec::with_capacity(config.robs.len().min(MAX_ROBS)))
            .collect(),
        report: TesterReport::default(),
    };
    let robs = config.robs.len().min(MAX_ROBS);
    let cpu0 = rodeo_memory::cpu::thread_cpu_time();
    let start = Instant::now();
    let mut msg = L::Reply::default();
    let mut last_activity = Instant::now();
    // The interval series: room for the whole run, so the loop does not allocate.
    let expected = config.duration.map_or(64, |d| {
        (d.as_secs_f64() / INTERVAL.as_secs_f64()) as usize + 2
    });
    st.report.intervals.reserve(expected);
    let mut interval_end = INTERVAL;
    let mut events_before = 0u64;
    loop {
        let elapsed = start.elapsed();
        while elapsed >= interval_end {
            st.report.intervals.push(st.report.events - events_before);
            events_before = st.report.events;
            interval_end += INTERVAL;
        }
        let generating = !stop.load(Ordering::Relaxed)
            && config.events.is_none_or(|n| st.next_event < n)
            && config.duration.is_none_or(|d| elapsed < d);
        if !generating && st.free.len() == st.slots.len() {
            break;
        }
        // Requests at the node: taken slots but those keeping a re-ask that waits its delay.
        let at_node = st.slots.len() - st.free.len() - st.retries.len();
        // Requests wait and nothing came back for `drain_timeout`: at the end, the drain is
        // over; while generating, the node is gone (dead, stuck, never there) and sending on
        // until the time is up would only say so later.
        if at_node > 0 && last_activity.elapsed() > config.drain_timeout {
            st.report.stopped_on_silence = generating;
            break;
        }
        // The wait for a reply starts with the first request sent while none was at the node
        // (a paced tester may send its next event long after the last reply, a re-ask after
        // its delay).
        let idle = at_node == 0;
        // New events while there is room for their requests, within the rate cap, and while
        // the ring of events in flight stays bounded.
        let mut sent_any = false;
        while generating
            && st.free.len() >= 2
            && st.events.len() < st.slots.len() * 4
            && config.events.is_none_or(|n| st.next_event < n)
            && config
                .max_rate
                .is_none_or(|r| (st.next_event as f64) < r * start.elapsed().as_secs_f64() + 1.0)
        {
            st.new_event(robs)?;
            sent_any = true;
        }
        // Re-asks whose delay is over.
        if !st.retries.is_empty() {
            let now = Instant::now();
            while let Some(&(due, s)) = st.retries.front() {
                if due > now {
                    break;
                }
                st.retries.pop_front();
                st.resend(s)?;
                sent_any = true;
            }
        }
        if idle && sent_any {
            last_activity = Instant::now();
        }
        // A partial group goes out after an idle interval, so a node whose buffer is smaller
        // than a group does not wait for it.
        if !st.clear_group.is_empty() && st.last_clear.elapsed() >= config.clear_flush {
            st.send_clear()?;
        }
        // Replies.
        let got = if sent_any {
            st.link.try_recv(&mut msg)?
        } else {
            st.link.recv(&mut msg, Duration::from_millis(1))?
        };
        if got {
            last_activity = Instant::now();
            st.on_reply(&msg, robs)?;
            while st.link.try_recv(&mut msg)? {
                st.on_reply(&msg, robs)?;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    st.report.intervals.push(st.report.events - events_before);
    // Events still in flight are not cleared by this run's clears: they were never answered.
    // A re-ask still waiting its delay (the run stopped on silence) was answered PENDING: its
    // fragments are missing.
    st.report.unanswered = (st.slots.len() - st.free.len() - st.retries.len()) as u64;
    for &(_, s) in &st.retries {
        st.report.pending_fragments += st.retry_robs[usize::from(s)].len() as u64;
    }
    if !st.clear_group.is_empty() {
        st.send_clear()?;
    }
    st.report.seconds = seconds;
    st.report.cpu = rodeo_memory::cpu::thread_cpu_time().saturating_sub(cpu0);
    Ok(st.report)
}

impl<L: TesterLink> State<'_, L> {
    fn new_event(&mut self, robs: usize) -> Result<(), TesterError> {
        let c = self.config;
        let n = u64::from(c.instance) + u64::from(c.instances.max(1)) * self.next_event;
        self.next_event += 1;
        let l1id = L1idCounter::expected(c.l1id_wrap, n);
        let l2 = self.chance(c.l2_fraction);
        let eb = self.chance(c.eb_fraction);
        let mut ev = Event {
            l1id,
            outstanding: 0,
            eb_due: false,
            requested: RobSet::default(),
            done: false,
        };
        let index = self.first_event + self.events.len() as u64;
        if l2 && robs > 0 {
            self.robs_buf.clear();
            let want = c.roi_size.min(robs);
            while self.robs_buf.len() < want {
                let i = (((self.rng.next_u64() >> 32) * robs as u64) >> 32) as usize;
                if ev.requested.insert(i) {
                    self.robs_buf.push(c.robs[i]);
                }
            }
            ev.outstanding = 1;
            ev.eb_due = eb;
            self.events.push_back(ev);
            self.send_request(index, false, 0)?;
        } else if eb && robs > 0 {
            ev.outstanding = 1;
            self.events.push_back(ev);
            self.fill_eb(index, robs);
            self.send_request(index, true, 0)?;
        } else {
            self.events.push_back(ev);
            self.finish(self.events.len() - 1)?;
        }
        Ok(())
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Puts the ROBs event `index` has not requested yet into `robs_buf`, marking them.
    fn fill_eb(&mut self, index: u64, robs: usize) {
        self.robs_buf.clear();
        let ev = &mut self.events[(index - self.first_event) as usize];
        for i in 0..robs {
            if ev.requested.insert(i) {
                self.robs_buf.push(self.config.robs[i]);
            }
        }
    }

    fn send_request(&mut self, event: u64, eb: bool, tries: u32) -> Result<(), TesterError> {
        let s = self.free.pop().expect("callers check for a free slot");
        self.send_on(s, event, eb, tries)
    }

    /// Sends the re-ask kept in slot `s` (its ROBs in `retry_robs[s]`).
    fn resend(&mut self, s: u16) -> Result<(), TesterError> {
        let Slot {
            event, eb, tries, ..
        } = self.slots[usize::from(s)];
        std::mem::swap(&mut self.robs_buf, &mut self.retry_robs[usize::from(s)]);
        let sent = self.send_on(s, event, eb, tries);
        std::mem::swap(&mut self.robs_buf, &mut self.retry_robs[usize::from(s)]);
        sent
    }

    /// Sends a request for `robs_buf` of `event` on slot `s` (taken off `free` by the caller).
    fn send_on(&mut self, s: u16, event: u64, eb: bool, tries: u32) -> Result<(), TesterError> {
        let slot = &mut self.slots[usize::from(s)];
        slot.generation = slot.generation.wrapping_add(1);
        slot.event = event;
        slot.sent = Instant::now();
        slot.eb = eb;
        slot.tries = tries;
        slot.in_use = true;
        let txn = u32::from(s) | (u32::from(slot.generation) << 16);
        let l1id = self.events[(event - self.first_event) as usize].l1id;
        self.link.send_request(txn, l1id, &self.robs_buf)?;
        if eb {
            self.report.eb_requests += 1;
        } else {
            self.report.l2_requests += 1;
        }
        Ok(())
    }

    fn on_reply(&mut self, msg: &L::Reply, robs: usize) -> Result<(), TesterError> {
        self.heads.clear();
        let Some(head) = L::read(msg, &mut self.heads) else {
            self.report.bad_replies += 1;
            return Ok(());
        };
        let (l1id, txn) = (head.l1id, head.transaction);
        let s = (txn & 0xFFFF) as usize;
        let ok_slot = self
            .slots
            .get(s)
            .is_some_and(|sl| sl.in_use && u32::from(sl.generation) == txn >> 16);
        if !ok_slot {
            self.report.bad_replies += 1;
            return Ok(());
        }
        let slot = self.slots[s];
        self.slots[s].in_use = false;
        self.free.push(s as u16);
        self.report.replies += 1;
        self.report
            .latency
            .record(slot.sent.elapsed().as_nanos() as u64);
        let pos = (slot.event - self.first_event) as usize;
        let ev_l1id = self.events[pos].l1id;
        // Check each fragment's header: marker, source id of a requested ROB, status.
        self.robs_buf.clear();
        let mut bad = l1id != ev_l1id;
        for &h in &self.heads {
            let Some([marker, source, status]) = h else {
                bad = true;
                continue;
            };
            let known = self.config.robs[..robs]
                .iter()
                .position(|&r| r == source)
                .is_some_and(|i| self.events[pos].requested.contains(i));
            bad |= marker != ROB_MARKER || !known;
            let status = Status(status);
            if status.contains(Status::ROB_FRAGMENT_PENDING) {
                if slot.tries < self.config.retries {
                    self.robs_buf.push(source);
                } else {
                    self.report.pending_fragments += 1;
                }
            } else if status.contains(Status::ROB_FRAGMENT_LOST) {
                self.report.lost_fragments += 1;
            } else {
                self.report.fragments += 1;
            }
        }
        if bad {
            self.report.bad_replies += 1;
        }
        self.report.bytes += u64::from(head.payload_bytes);
        let ev = &mut self.events[pos];
        ev.outstanding -= 1;
        if !self.robs_buf.is_empty() {
            // Ask again for what was pending, after the delay (rule 3); the slot is kept for it.
            ev.outstanding += 1;
            let kept = self.free.pop().expect("this reply's slot was just freed");
            if self.config.retry_delay.is_zero() {
                self.send_on(kept, slot.event, slot.eb, slot.tries + 1)?;
            } else {
                // What `resend` sends on the kept slot.
                let k = &mut self.slots[usize::from(kept)];
                (k.event, k.eb, k.tries) = (slot.event, slot.eb, slot.tries + 1);
                std::mem::swap(&mut self.robs_buf, &mut self.retry_robs[usize::from(kept)]);
                self.retries
                    .push_back((Instant::now() + self.config.retry_delay, kept));
            }
        } else if ev.eb_due {
            ev.eb_due = false;
            ev.outstanding += 1;
            self.fill_eb(slot.event, robs);
            if self.robs_buf.is_empty() {
                self.events[pos].outstanding -= 1;
            } else {
                self.send_request(slot.event, true, 0)?;
            }
        }
        if self.events[pos].outstanding == 0 {
            self.finish(pos)?;
        }
        Ok(())
    }

    /// Event at ring position `pos` is finished: its L1ID joins the clear group (clears need
    /// no order), and the ring front advances past finished events.
    fn finish(&mut self, pos: usize) -> Result<(), TesterError> {
        let ev = &mut self.events[pos];
        ev.done = true;
        let l1id = ev.l1id;
        self.clear_group.push(l1id);
        self.report.events += 1;
        if self.clear_group.len() >= self.config.clear_group.max(1) {
            self.send_clear()?;
        }
        while self.events.front().is_some_and(|e| e.done) {
            self.events.pop_front();
            self.first_event += 1;
        }
        Ok(())
    }

    fn send_clear(&mut self) -> Result<(), TesterError> {
        self.link.send_clear(self.clear_seq, &self.clear_group)?;
        self.clear_seq = self.clear_seq.wrapping_add(1);
        self.clear_group.clear();
        self.report.clears += 1;
        self.last_clear = Instant::now();
        Ok(())
    }
}
