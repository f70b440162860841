//! A readout node restarted into a running run: its emulated inputs follow the run.
//!
//! A real detector sends the fragments of the events the L1 accepts now; an emulated input
//! generates them from the event it was started at. A node restarted into a run starts a
//! little ahead of the L1 (`NodeConfig::first_event`), but its own start-up (spawn, memory,
//! connect) can take longer than that lead: at the full L1 rate the run was 100,000 events
//! past the node's inputs when they began, the node never caught up, and 98-100% of the run's
//! events were built without its fragments (a QA pass, 2026-12-07). So a rejoined node takes
//! each clear as news of where the run is ([`RunFront::cleared`], from the request server's
//! core), and each of its emulated S-LINK generators, when it is behind that, moves on to it
//! without generating the events between ([`Following`]): those were decided while the node
//! could not serve them. A node that was not restarted has no front and generates every
//! event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rodeo_cards::dma::{Fill, Generator};
use rodeo_cards::generator::SlinkGenerator;
use rodeo_format::l1id::event_near;

/// The event a rejoined node's run has reached, as its clears say: shared by the request
/// server's core (which learns it) and the node's emulated inputs (which follow it).
#[derive(Debug, Clone)]
pub struct RunFront {
    at: Arc<AtomicU64>,
    wrap: u32,
    first_event: u64,
}

impl RunFront {
    /// The front of a node whose inputs start at event `first_event`, L1IDs wrapping at
    /// `wrap`.
    pub fn new(wrap: u32, first_event: u64) -> RunFront {
        RunFront {
            at: Arc::new(AtomicU64::new(first_event)),
            wrap,
            first_event,
        }
    }

    /// A clear whose first L1ID is `extended` came: the run has decided every event up to it.
    pub fn cleared(&self, extended: u32) {
        let near = self.get().max(self.first_event);
        if let Some(event) = event_near(self.wrap, extended, near) {
            self.at.fetch_max(event, Ordering::Relaxed);
        }
    }

    /// The event the run has reached (the node's first event until a clear says more).
    pub fn get(&self) -> u64 {
        self.at.load(Ordering::Relaxed)
    }
}

/// A generator that can tell its position and move on without generating.
pub trait Skips {
    /// The event it generates next.
    fn position(&self) -> u64;
    /// Moves on by `events` events without generating them.
    fn skip(&mut self, events: u64);
}

impl Skips for SlinkGenerator {
    fn position(&self) -> u64 {
        self.fragments()
    }

    fn skip(&mut self, events: u64) {
        SlinkGenerator::skip(self, events);
    }
}

/// `inner`, moved on to the run's front before each fill when it is behind it (module docs);
/// without a front, `inner` as it is.
#[derive(Debug)]
pub struct Following<G> {
    inner: G,
    front: Option<RunFront>,
}

impl<G: Skips> Following<G> {
    /// `inner` following `front` (`None`: not a rejoined node).
    pub fn new(inner: G, front: Option<RunFront>) -> Following<G> {
        Following { inner, front }
    }

    /// Moves `inner` on to the front when it is behind.
    fn catch_up(&mut self) {
        if let Some(front) = &self.front {
            let (to, at) = (front.get(), self.inner.position());
            if to > at {
                self.inner.skip(to - at);
            }
        }
    }
}

impl<G: Generator + Skips> Generator for Following<G> {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        self.catch_up();
        self.inner.fill(buf, max_units)
    }

    fn fill_until(
        &mut self,
        buf: &mut [u8],
        max_units: u64,
        flush_by: &mut Option<Instant>,
    ) -> Fill {
        self.catch_up();
        self.inner.fill_until(buf, max_units, flush_by)
    }

    fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    fn waits_for_input(&self) -> bool {
        self.inner.waits_for_input()
    }
}

#[cfg(test)]
mod tests {
    use rodeo_cards::generator::SlinkConfig;
    use rodeo_format::l1id::L1idCounter;

    use super::*;

    /// A generator behind the front moves on to it; one ahead of it, or without a front,
    /// generates on from where it is.
    #[test]
    fn a_generator_behind_the_run_moves_on_to_the_clears() {
        let wrap = 1000;
        let config = || SlinkConfig {
            l1id_wrap: wrap,
            ..SlinkConfig::default()
        };
        let front = RunFront::new(wrap, 10);
        let mut g = SlinkGenerator::new(config());
        g.skip(10);
        let mut f = Following::new(g, Some(front.clone()));
        let mut buf = vec![0u8; 1 << 16];
        assert_eq!(f.fill(&mut buf, 5).units, 5);
        assert_eq!(f.inner.position(), 15);
        // The run cleared event 2500 (past an ECR): the generator jumps there.
        front.cleared(L1idCounter::expected(wrap, 2500));
        assert_eq!(front.get(), 2500);
        assert_eq!(f.fill(&mut buf, 1).units, 1);
        assert_eq!(f.inner.position(), 2501);
        // An older clear moves nothing back.
        front.cleared(L1idCounter::expected(wrap, 100));
        assert_eq!(front.get(), 2500);
        f.fill(&mut buf, 1);
        assert_eq!(f.inner.position(), 2502);
        let mut alone = Following::new(SlinkGenerator::new(config()), None);
        alone.fill(&mut buf, 3);
        assert_eq!(alone.inner.position(), 3);
    }
}
