//! The supervisor (with its L1 source) as an [`Application`]: it binds and starts the L1 source
//! at start (data flows only once everything downstream is connected), and at stop stops the
//! L1 source, drains every assigned event, sends the last clears and hands back the run's
//! counts.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rodeo_dataflow::supervisor::{self, SupervisorConfig, SupervisorCounters, SupervisorSummary};
use rodeo_dataflow::trace::TraceRecord;
use rodeo_dataflow::AppHandle;

use super::{AppContext, AppError, Application, Poll, Probe, Role, RunEnd, TRACE_CAPACITY};
use crate::metrics::{histogram, AppMetrics, SupervisorMetrics};
use crate::partition::Layout;
use crate::summary::AppSummary;

/// The supervisor under lifecycle control.
pub struct SupervisorApp {
    name: String,
    ctx: AppContext,
    config: Option<SupervisorConfig>,
    /// The readout nodes' names (for the data-driven L1).
    nodes: Option<Vec<String>>,
    running: Option<AppHandle<SupervisorSummary>>,
    /// Live across the run and after it (the last values stay on the page).
    counters: Option<Arc<SupervisorCounters>>,
}

impl SupervisorApp {
    /// The supervisor `name`, not yet configured.
    pub fn new(name: &str, ctx: &AppContext) -> SupervisorApp {
        SupervisorApp {
            name: name.to_string(),
            ctx: ctx.clone(),
            config: None,
            nodes: None,
            running: None,
            counters: None,
        }
    }

    fn fresh_counters(&mut self) {
        let c = Arc::new(SupervisorCounters::default());
        if let Some(every) = self.ctx.trace_every {
            c.trace.enable(every, TRACE_CAPACITY);
        }
        self.counters = Some(c);
    }
}

impl Application for SupervisorApp {
    fn name(&self) -> &str {
        &self.name
    }

    fn role(&self) -> Role {
        Role::Supervisor
    }

    fn configure(&mut self, layout: &Layout) -> Result<(), AppError> {
        if layout.supervisor.name != self.name {
            return Err(super::not_in_layout(Role::Supervisor, &self.name));
        }
        let mut config = layout.supervisor.clone();
        if !layout.replay_l1id_files.is_empty() {
            // A replay keeping its files' L1IDs: the L1 source issues them in the same order.
            let l1ids = rodeo_files::replay::file_l1ids(&layout.replay_l1id_files)
                .map_err(|e| format!("L1IDs of the replay files: {e}"))?;
            config.l1.l1ids = Some(l1ids.into());
        }
        self.config = Some(config);
        self.nodes = Some(layout.nodes.iter().map(|(n, ..)| n.clone()).collect());
        Ok(())
    }

    fn connect(&mut self) -> Result<(), AppError> {
        // The supervisor binds when it starts: its L1 source runs from then on. Its counters
        // exist from now, so the page shows zeros rather than nothing.
        self.fresh_counters();
        Ok(())
    }

    fn start(&mut self) -> Result<(), AppError> {
        let mut c = self.config.clone().ok_or("not configured")?;
        if let (Some(feed), Some(want)) = (c.readout.as_mut(), self.nodes.as_ref()) {
            // Data-driven L1: the readout nodes of this process, every one of the partition's.
            let board = self
                .ctx
                .readout
                .lock()
                .map_err(|_| "readout board poisoned")?;
            feed.nodes.clear();
            for name in want {
                if let Some(p) = board.get(name) {
                    let p = Arc::clone(p);
                    feed.nodes.push(Arc::new(move || {
                        let ended = p.ended();
                        (p.complete(), ended)
                    }));
                }
            }
            if feed.nodes.len() != want.len() {
                return Err(format!(
                    "l1.mode = \"readout\" reads the progress of every readout node in the \
                     supervisor's process, and {} of {} are elsewhere: run the partition in one \
                     process (without --processes)",
                    want.len() - feed.nodes.len(),
                    want.len()
                ));
            }
        }
        if self
            .counters
            .as_ref()
            .is_some_and(|c| c.l1_accepts.load(Ordering::Relaxed) > 0)
        {
            self.fresh_counters();
        }
        let counters = Arc::clone(self.counters.as_ref().ok_or("not connected")?);
        let h = supervisor::spawn(c, &self.ctx.transport, counters).map_err(|e| e.to_string())?;
        self.running = Some(h);
        Ok(())
    }

    fn stop(&mut self, run: RunEnd) -> Result<Option<AppSummary>, AppError> {
        if run.abandon_drain {
            if let Some(c) = &self.counters {
                c.abandon_drain.store(true, Ordering::Release);
            }
        }
        match self.running.take() {
            Some(h) => {
                let s = h.stop().map_err(|e| e.to_string())?;
                Ok(Some(AppSummary::Supervisor(s)))
            }
            None => Ok(None),
        }
    }

    fn disconnect(&mut self) -> Result<Option<AppSummary>, AppError> {
        Ok(None)
    }

    fn unconfigure(&mut self) {
        self.config = None;
    }

    fn abort(&mut self) {
        if let Some(h) = self.running.take() {
            let _ = h.stop();
        }
    }

    fn abandoner(&self) -> Option<super::Abandoner> {
        let c = Arc::clone(self.counters.as_ref()?);
        Some(Arc::new(move || {
            c.abandon_drain.store(true, Ordering::Release)
        }))
    }

    fn probe(&self) -> Option<Probe> {
        let c = Arc::clone(self.counters.as_ref()?);
        Some(Arc::new(move || {
            let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            AppMetrics::Supervisor(Box::new(SupervisorMetrics {
                l1_accepts: ld(&c.l1_accepts),
                l1_missed: ld(&c.l1_missed),
                accepted: ld(&c.accepted),
                rejected: ld(&c.rejected),
                forced_accepts: ld(&c.forced_accepts),
                in_flight: ld(&c.in_flight),
                credits: ld(&c.credits),
                decision_latency: histogram(&c.decision_latency),
                bad_messages: ld(&c.bad_messages),
            }))
        }))
    }

    fn poll(&mut self) -> Poll {
        // The L1 source reached its event count: the run ended by itself.
        if self.running.as_ref().is_some_and(|h| h.is_finished()) {
            Poll::Finished
        } else {
            Poll::Running
        }
    }

    fn drain_traces(&self, out: &mut Vec<TraceRecord>) {
        if let Some(c) = &self.counters {
            c.trace.drain(out);
        }
    }
}
