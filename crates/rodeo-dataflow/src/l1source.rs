//! The Level-1 source: one accept per event, with its regions of interest.
//!
//! [`L1Source`] is the emulator of the RoIB / Level-1 (the seeds' L1 emulator): the extended
//! L1ID counts from 0 with the readout's wrap rule (L1ID wraps at `l1id_wrap` into the 8-bit
//! ECR counter, exactly as the emulated cards count, so the two agree), the global event id
//! counts from 0 and never wraps, and each event gets a number of RoIs drawn uniformly from
//! `rois_per_event`, each RoI a ROB id drawn from `roi_robs`. Everything is deterministic from
//! the seed, so a run can be replayed. The supervisor owns the source and paces it
//! ([`Pacer`]): the L1 rate is a token bucket, and no slot means no accept (flow control, the
//! RoIB's busy).

use std::time::Instant;

use rodeo_format::l1id::L1idCounter;

/// Most RoIs an event may carry.
pub const MAX_ROIS: usize = 16;

/// One Level-1 accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L1Accept {
    /// Global event id (from 0, never wraps).
    pub global_id: u64,
    /// Extended L1ID (ECR in bits 31..24).
    pub l1id: u32,
    /// Bunch-crossing id (12 bits).
    pub bcid: u32,
    /// L1 trigger type.
    pub trigger_type: u32,
    rois: [u32; MAX_ROIS],
    nrois: u8,
}

impl L1Accept {
    /// An accept with the given RoI ROB ids (at most [`MAX_ROIS`]; more are ignored).
    pub fn new(global_id: u64, l1id: u32, bcid: u32, trigger_type: u32, rois: &[u32]) -> L1Accept {
        let mut a = L1Accept {
            global_id,
            l1id,
            bcid,
            trigger_type,
            rois: [0; MAX_ROIS],
            nrois: 0,
        };
        for &r in rois.iter().take(MAX_ROIS) {
            a.rois[a.nrois as usize] = r;
            a.nrois += 1;
        }
        a
    }

    /// The RoI ROB ids.
    pub fn rois(&self) -> &[u32] {
        &self.rois[..self.nrois as usize]
    }
}

/// Configuration of the L1 emulator.
#[derive(Debug, Clone, PartialEq)]
pub struct L1SourceConfig {
    /// Accepts per second; `None`: as fast as slots free up.
    pub rate_hz: Option<f64>,
    /// Stop after this many accepts; `None`: until stopped.
    pub events: Option<u64>,
    /// ROB ids a region of interest can point at.
    pub roi_robs: Vec<u32>,
    /// Fewest and most RoIs per event (inclusive; clamped to 1..=16 and to the ROBs available).
    pub rois_per_event: (u32, u32),
    /// The L1ID wraps at this value into the ECR counter (as the readout's does).
    pub l1id_wrap: u32,
    /// L1 trigger type of every event.
    pub trigger_type: u32,
    /// PRNG seed.
    pub seed: u64,
    /// The extended L1IDs of the accepts in order, repeated when exhausted (a replay that keeps
    /// its files' L1IDs); `None`: counted from 0 with `l1id_wrap`, as the emulated cards count.
    pub l1ids: Option<std::sync::Arc<[u32]>>,
}

impl Default for L1SourceConfig {
    fn default() -> L1SourceConfig {
        L1SourceConfig {
            rate_hz: None,
            events: None,
            roi_robs: Vec::new(),
            rois_per_event: (1, 2),
            l1id_wrap: 1 << 24,
            trigger_type: 1,
            seed: 0x001A_11CE,
            l1ids: None,
        }
    }
}

/// The L1 emulator; see the module docs.
#[derive(Debug, Clone)]
pub struct L1Source {
    config: L1SourceConfig,
    next_global: u64,
    l1id: L1idCounter,
    rng: u64,
}

impl L1Source {
    /// A source at event 0.
    pub fn new(config: L1SourceConfig) -> L1Source {
        let rng = config.seed;
        L1Source {
            l1id: L1idCounter::new(config.l1id_wrap),
            config,
            next_global: 0,
            rng,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &L1SourceConfig {
        &self.config
    }

    /// Accepts produced so far.
    pub fn produced(&self) -> u64 {
        self.next_global
    }

    /// Whether the configured number of events has been produced.
    pub fn is_done(&self) -> bool {
        self.config.events.is_some_and(|n| self.next_global >= n)
    }

    fn random(&mut self) -> u64 {
        // SplitMix64: deterministic, cheap, good enough for choices.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        (((self.random() >> 32) * n) >> 32).min(n - 1)
    }

    /// The next accept, or `None` when the configured count is reached.
    pub fn next_accept(&mut self) -> Option<L1Accept> {
        let extended = match &self.config.l1ids {
            Some(list) if !list.is_empty() => list[(self.next_global % list.len() as u64) as usize],
            _ => self.l1id.extended(),
        };
        let trigger_type = self.config.trigger_type;
        self.accept_for(extended, trigger_type)
    }

    /// The next accept with an L1ID and trigger type given from outside (the external L1),
    /// its global id and RoIs as [`L1Source::next_accept`] would give; `None` when the
    /// configured count is reached.
    pub fn accept_for(&mut self, extended: u32, trigger_type: u32) -> Option<L1Accept> {
        if self.is_done() {
            return None;
        }
        let robs = self.config.roi_robs.len() as u64;
        let (lo, hi) = self.config.rois_per_event;
        let hi = (hi.max(lo) as u64).min(MAX_ROIS as u64).min(robs);
        let lo = (lo as u64).min(hi);
        let n = lo + self.below(hi - lo + 1);
        let mut rois = [0u32; MAX_ROIS];
        let mut k = 0;
        while k < n as usize {
            let at = self.below(robs) as usize;
            let pick = self.config.roi_robs[at];
            if !rois[..k].contains(&pick) {
                rois[k] = pick;
                k += 1;
            }
        }
        let accept = L1Accept::new(
            self.next_global,
            extended,
            extended.wrapping_mul(7) % 3564,
            trigger_type,
            &rois[..k],
        );
        self.next_global += 1;
        self.l1id.advance();
        Some(accept)
    }
}

/// Paces accepts at a rate: a token bucket with 1 ms of burst (or no limit).
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: Option<f64>,
    tokens: f64,
    /// The previous call's time; `None` until the first call, which starts the schedule (so
    /// the time between building the pacer and the run's first poll is not owed).
    last: Option<Instant>,
    missed: f64,
}

/// How far behind its schedule the pacer may fall and still catch up, in seconds of accepts.
/// A consumer that pauses for less (a scheduler slice, a 1-5 ms wait for a message) gets the
/// accepts it missed in a burst, so the delivered rate is the configured one whenever the
/// partition sustains it; behind by more, the rest is dropped from the schedule and counted
/// ([`Pacer::missed`]): the partition could not take the rate.
pub const CATCH_UP_S: f64 = 0.05;

impl Pacer {
    /// A pacer at `rate_hz` (`None`: unlimited), its schedule starting at the first call.
    pub fn new(rate_hz: Option<f64>) -> Pacer {
        Pacer {
            rate: rate_hz.filter(|r| *r > 0.0),
            tokens: 0.0,
            last: None,
            missed: 0.0,
        }
    }

    /// Accepts allowed now (u64::MAX when unlimited).
    pub fn available(&mut self) -> u64 {
        if self.rate.is_none() {
            // Unlimited: no clock to read (the supervisor asks on every turn).
            return u64::MAX;
        }
        self.available_at(Instant::now())
    }

    /// Accepts allowed at `now` (a time not before the previous call's).
    pub fn available_at(&mut self, now: Instant) -> u64 {
        let Some(rate) = self.rate else {
            return u64::MAX;
        };
        let cap = (rate * CATCH_UP_S).max(1.0);
        let elapsed = self.last.map_or(0.0, |last| {
            now.saturating_duration_since(last).as_secs_f64()
        });
        let due = self.tokens + elapsed * rate;
        if due > cap {
            self.missed += due - cap;
        }
        self.tokens = due.min(cap);
        self.last = Some(now);
        self.tokens.max(0.0) as u64
    }

    /// Takes `n` accepts from the bucket.
    pub fn take(&mut self, n: u64) {
        if self.rate.is_some() {
            self.tokens -= n as f64;
        }
    }

    /// Seconds until the next accept is allowed (0 when unlimited or allowed now).
    pub fn wait_s(&self) -> f64 {
        match self.rate {
            Some(rate) if self.tokens < 1.0 => (1.0 - self.tokens) / rate,
            _ => 0.0,
        }
    }

    /// Accepts the schedule wanted that the consumer was too far behind to take (0 when the
    /// partition sustained the rate).
    pub fn missed(&self) -> u64 {
        self.missed as u64
    }
}

/// One readout node's progress as the data-driven L1 reads it: (L1IDs complete on every
/// channel, counted from L1ID 0 in the wrap order; that count is final: a channel at the
/// lowest count has ended, `rodeo_ros::inputs::ReadoutProgress::ended`). The flag is read
/// first: once it is true, the count read after it is final.
pub type ReadoutMark = std::sync::Arc<dyn Fn() -> (u64, bool) + Send + Sync>;

/// The readout nodes' progress, the input of the data-driven L1 (`[l1] mode = "readout"`):
/// an L1 accept is issued for each L1ID every node has complete, in order, and the source is
/// done when the count is final (a node at the lowest count has its count final: every input
/// ended, or one the others passed) and each of its L1IDs was issued. The nodes and the
/// supervisor share it in one process (a readout node's `ReadoutProgress`).
#[derive(Clone, Default)]
pub struct ReadoutFeed {
    /// One mark per readout node.
    pub nodes: Vec<ReadoutMark>,
}

impl std::fmt::Debug for ReadoutFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadoutFeed")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

impl ReadoutFeed {
    /// (L1IDs complete on every node, that count final: a node at the lowest count has its
    /// own final); (0, false) without nodes.
    pub fn read(&self) -> (u64, bool) {
        if self.nodes.is_empty() {
            return (0, false);
        }
        let mut complete = u64::MAX;
        let mut fin = false;
        for n in &self.nodes {
            let (c, f) = n();
            if c < complete {
                (complete, fin) = (c, f);
            } else if c == complete {
                fin |= f;
            }
        }
        (complete, fin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feed_takes_the_slowest_node_and_ends_when_its_count_is_final() {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;
        let a = Arc::new(AtomicU64::new(5));
        let a2 = Arc::clone(&a);
        let feed = ReadoutFeed {
            nodes: vec![
                Arc::new(move || (a2.load(Ordering::Relaxed), false)),
                Arc::new(|| (9, true)),
            ],
        };
        assert_eq!(feed.read(), (5, false));
        // The slowest node is the one that ended: no L1ID past 9 can be complete any more.
        a.store(12, Ordering::Relaxed);
        assert_eq!(feed.read(), (9, true));
        // A node behind the one that ended can still catch up: not final.
        a.store(7, Ordering::Relaxed);
        assert_eq!(feed.read(), (7, false));
        assert_eq!(ReadoutFeed::default().read(), (0, false));
    }
    use std::time::Duration;

    /// Takes every accept allowed at `now`; returns how many.
    fn drain(p: &mut Pacer, now: Instant) -> u64 {
        let n = p.available_at(now);
        p.take(n);
        n
    }

    #[test]
    fn a_consumer_that_pauses_briefly_still_gets_the_configured_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(20_000.0));
        p.last = Some(t0);
        // One second polled every 3 ms (longer than the 1 ms the old bucket held): 20,000.
        let mut taken = 0;
        for i in 1..=333 {
            taken += drain(&mut p, t0 + Duration::from_millis(3 * i));
        }
        taken += drain(&mut p, t0 + Duration::from_secs(1));
        assert!((19_990..=20_000).contains(&taken), "{taken}");
        assert_eq!(p.missed(), 0);
    }

    #[test]
    fn a_consumer_too_far_behind_is_counted_not_flooded() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(1_000.0));
        p.last = Some(t0);
        // Away for one second: at most CATCH_UP_S of accepts come at once, the rest is missed.
        let burst = drain(&mut p, t0 + Duration::from_secs(1));
        assert_eq!(burst, (1_000.0 * CATCH_UP_S) as u64);
        assert_eq!(p.missed(), 1_000 - burst);
        assert_eq!(Pacer::new(None).available(), u64::MAX);
    }

    #[test]
    fn accepts_are_deterministic_and_wrap_like_the_readout() {
        let cfg = L1SourceConfig {
            events: Some(10),
            roi_robs: vec![1, 2, 3, 4],
            rois_per_event: (1, 3),
            l1id_wrap: 4,
            ..L1SourceConfig::default()
        };
        let mut a = L1Source::new(cfg.clone());
        let mut b = L1Source::new(cfg);
        let mut l1ids = Vec::new();
        while let Some(x) = a.next_accept() {
            assert_eq!(Some(x), b.next_accept());
            assert!((1..=3).contains(&x.rois().len()));
            let mut r = x.rois().to_vec();
            r.sort_unstable();
            r.dedup();
            assert_eq!(r.len(), x.rois().len(), "RoIs are distinct");
            l1ids.push(x.l1id);
        }
        assert_eq!(
            l1ids,
            [
                0,
                1,
                2,
                3,
                1 << 24,
                (1 << 24) + 1,
                (1 << 24) + 2,
                (1 << 24) + 3,
                2 << 24,
                (2 << 24) + 1
            ]
        );
        assert!(a.is_done());
        assert_eq!(a.produced(), 10);
    }

    #[test]
    fn no_roi_robs_means_no_rois() {
        let mut s = L1Source::new(L1SourceConfig::default());
        assert!(s.next_accept().unwrap().rois().is_empty());
    }

    #[test]
    fn pacer_limits() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(1000.0));
        p.last = Some(t0);
        assert_eq!(p.available_at(t0 + Duration::from_millis(5)), 5);
        // The burst is capped at the catch-up window (50 ms of accepts).
        assert_eq!(p.available_at(t0 + Duration::from_secs(10)), 50);
        assert_eq!(Pacer::new(None).available(), u64::MAX);
    }
}
