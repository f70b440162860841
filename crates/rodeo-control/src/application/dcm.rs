//! The data-collection node (DCM) as an [`Application`]: connect starts its thread (sockets
//! connected to the supervisor, the readout nodes and the loggers), disconnect stops it and
//! hands back its summary.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rodeo_dataflow::dcm::{self, DcmConfig, DcmCounters, DcmSummary};
use rodeo_dataflow::trace::TraceRecord;
use rodeo_dataflow::trigger::{AcceptFraction, TriggerAlgorithm};
use rodeo_dataflow::AppHandle;

use super::logger::finished_thread;
use super::{not_in_layout, AppContext, AppError, Application, Poll, Probe, Role, TRACE_CAPACITY};
use crate::metrics::{histogram, AppMetrics, DcmMetrics};
use crate::partition::Layout;
use crate::summary::AppSummary;

/// A DCM under lifecycle control.
pub struct DcmApp {
    name: String,
    ctx: AppContext,
    config: Option<(DcmConfig, AcceptFraction)>,
    running: Option<AppHandle<DcmSummary>>,
    counters: Option<Arc<DcmCounters>>,
}

impl DcmApp {
    /// The DCM `name`, not yet configured.
    pub fn new(name: &str, ctx: &AppContext) -> DcmApp {
        DcmApp {
            name: name.to_string(),
            ctx: ctx.clone(),
            config: None,
            running: None,
            counters: None,
        }
    }
}

impl Application for DcmApp {
    fn name(&self) -> &str {
        &self.name
    }

    fn role(&self) -> Role {
        Role::Dcm
    }

    fn configure(&mut self, layout: &Layout) -> Result<(), AppError> {
        let c = layout
            .dcms
            .iter()
            .find(|d| d.name == self.name)
            .ok_or_else(|| not_in_layout(Role::Dcm, &self.name))?;
        self.config = Some((c.clone(), layout.trigger.clone()));
        Ok(())
    }

    fn connect(&mut self) -> Result<(), AppError> {
        let (c, trigger) = self.config.clone().ok_or("not configured")?;
        let counters = Arc::new(DcmCounters::default());
        if let Some(every) = self.ctx.trace_every {
            counters.trace.enable(every, TRACE_CAPACITY);
        }
        let algorithm: Box<dyn TriggerAlgorithm> = match &self.ctx.trigger {
            Some(make) => make(&self.name),
            None => Box::new(trigger),
        };
        let h = dcm::spawn(c, &self.ctx.transport, algorithm, Arc::clone(&counters))
            .map_err(|e| e.to_string())?;
        self.running = Some(h);
        self.counters = Some(counters);
        Ok(())
    }

    fn disconnect(&mut self) -> Result<Option<AppSummary>, AppError> {
        match self.running.take() {
            Some(h) => {
                let s = h.stop().map_err(|e| e.to_string())?;
                Ok(Some(AppSummary::Dcm(s)))
            }
            None => Ok(None),
        }
    }

    fn unconfigure(&mut self) {
        self.config = None;
    }

    fn abort(&mut self) {
        if let Some(h) = self.running.take() {
            let _ = h.stop();
        }
    }

    fn probe(&self) -> Option<Probe> {
        let c = Arc::clone(self.counters.as_ref()?);
        let slots = self.config.as_ref().map_or(0, |(d, _)| d.slots as u64);
        Some(Arc::new(move || {
            let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            AppMetrics::Dcm(Box::new(DcmMetrics {
                slots,
                events: ld(&c.events),
                accepted: ld(&c.accepted),
                requests: ld(&c.requests),
                bytes_received: ld(&c.bytes_received),
                busy_slots: ld(&c.busy_slots),
                outstanding_requests: ld(&c.outstanding_requests),
                queued_requests: ld(&c.queued_requests),
                bad_messages: ld(&c.bad_messages),
                stale_replies: ld(&c.stale_replies),
                send_failures: ld(&c.send_failures),
                request_latency: histogram(&c.request_latency),
                decision_latency: histogram(&c.decision_latency),
                build_latency: histogram(&c.build_latency),
                sampled: ld(&c.sampled),
                sample_dropped: ld(&c.sample_dropped),
            }))
        }))
    }

    fn poll(&mut self) -> Poll {
        finished_thread(&mut self.running, Role::Dcm)
    }

    fn drain_traces(&self, out: &mut Vec<TraceRecord>) {
        if let Some(c) = &self.counters {
            c.trace.drain(out);
        }
    }
}
