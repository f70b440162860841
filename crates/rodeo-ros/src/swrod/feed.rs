//! A running SW ROD input ([`SwRodFeed`]): the `swrod` thread started from the built parts,
//! its live counters, and its shutdown, producers first (see the module docs of [`super`],
//! "Shutdown").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rodeo_swrod::SwRodCounters;

use super::builders::{run_builders, BuildersResult, CardsAtStop};
use super::counters::SwRodInputCounters;
use super::monitor::{link_counters, swrod_counters, SwRodMonitor};
use super::parts::SwRodParts;
use super::sink::StoreSink;
use crate::node::error::NodeError;

impl SwRodParts {
    /// Starts the `swrod` thread running the builder pool.
    pub(crate) fn start(self) -> Result<SwRodFeed, NodeError> {
        let live = Arc::new(Mutex::new(vec![SwRodCounters::default(); self.robs.len()]));
        let stop = Arc::new(AtomicBool::new(false));
        let sinks: Vec<StoreSink> = self.robs.iter().map(|r| r.sink.clone()).collect();
        let finish = Arc::clone(&self.finish);
        let (thread_live, thread_stop) = (Arc::clone(&live), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("swrod".into())
            .spawn(move || run_builders(self, &thread_live, &thread_stop))
            .map_err(|source| NodeError::Io {
                what: "starting the fragment builder thread".into(),
                source,
            })?;
        Ok(SwRodFeed {
            finish,
            stop,
            live,
            sinks,
            thread: Some(thread),
        })
    }
}

/// A running SW ROD input: the `swrod` thread and what stops it (see the module docs).
pub(crate) struct SwRodFeed {
    /// Tells the cards' generators to finish.
    finish: Arc<AtomicBool>,
    /// The builders' stop flag.
    stop: Arc<AtomicBool>,
    /// The builders' counters, published by the `swrod` thread.
    live: Arc<Mutex<Vec<SwRodCounters>>>,
    /// Clones of the builders' sinks (the links' counters, and to abandon them).
    sinks: Vec<StoreSink>,
    thread: Option<JoinHandle<BuildersResult>>,
}

impl SwRodFeed {
    /// The builders' (as last published) and links' counters, summed over the ROBs.
    pub(crate) fn counters(&self) -> SwRodInputCounters {
        swrod_counters(&self.live, &self.sinks)
    }

    /// A shared handle reading the same live counters, for monitors that must not hold the
    /// node.
    pub(crate) fn monitor(&self) -> SwRodMonitor {
        SwRodMonitor {
            live: Arc::clone(&self.live),
            sinks: self.sinks.clone(),
        }
    }

    /// The input's final counters, once [`SwRodFeed::shutdown`] gave `builder` and `cards`
    /// and the core thread has stopped: the links' are read now, after the core thread
    /// dropped its input (what it still held is counted).
    pub(crate) fn final_counters(
        &self,
        builder: SwRodCounters,
        cards: CardsAtStop,
    ) -> SwRodInputCounters {
        SwRodInputCounters {
            builder,
            link: link_counters(&self.sinks),
            unread_blocks: cards.unread_blocks,
            unread_bytes: cards.unread_bytes,
            card_cpu_ns: builder.input_cpu_ns,
        }
    }

    /// Stops producers, then builders (module docs); returns the builders' final counters,
    /// what the cards had handed over that no builder read, and the first error, if one failed
    /// (the counters are then the last published). Idempotent: once stopped, returns the last
    /// published counters, nothing unread and no error.
    pub(crate) fn shutdown(&mut self) -> (SwRodCounters, CardsAtStop, Option<String>) {
        let Some(thread) = self.thread.take() else {
            return (self.counters().builder, CardsAtStop::default(), None);
        };
        self.finish.store(true, Ordering::Release);
        // The builders drain their cards while the core thread stores, as long as they move.
        let deadline = Instant::now() + Duration::from_secs(2);
        let progress = |f: &SwRodFeed| {
            let c = f.counters();
            c.builder.superpages + c.link.fragments + c.link.dropped_no_consumer
        };
        let (mut last, mut since) = (progress(self), Instant::now());
        while !thread.is_finished()
            && Instant::now() < deadline
            && since.elapsed() < Duration::from_millis(100)
        {
            std::thread::sleep(Duration::from_millis(2));
            let now = progress(self);
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        for s in &self.sinks {
            s.abandon();
        }
        self.stop.store(true, Ordering::Release);
        match thread.join() {
            Ok((Ok(c), cards)) => (c, cards, None),
            Ok((Err(e), cards)) => (self.counters().builder, cards, Some(e.to_string())),
            Err(_) => (
                self.counters().builder,
                CardsAtStop::default(),
                Some("the SW ROD builders' thread panicked".into()),
            ),
        }
    }
}

impl Drop for SwRodFeed {
    fn drop(&mut self) {
        self.shutdown();
    }
}
