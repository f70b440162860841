//! The logger (SFO) as an [`Application`]: configure makes its output directory, connect binds
//! and starts writing, disconnect closes its files and hands back its summary.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rodeo_dataflow::logger::{self, LoggerConfig, LoggerCounters, LoggerSummary};
use rodeo_dataflow::AppHandle;
use rodeo_transport::socket::Transport;

use super::{not_in_layout, AppContext, AppError, Application, Poll, Probe, Role};
use crate::metrics::{AppMetrics, LoggerMetrics};
use crate::partition::Layout;
use crate::summary::AppSummary;

/// A logger under lifecycle control.
pub struct LoggerApp {
    name: String,
    transport: Transport,
    config: Option<LoggerConfig>,
    running: Option<AppHandle<LoggerSummary>>,
    counters: Option<Arc<LoggerCounters>>,
}

impl LoggerApp {
    /// The logger `name`, not yet configured.
    pub fn new(name: &str, ctx: &AppContext) -> LoggerApp {
        LoggerApp {
            name: name.to_string(),
            transport: ctx.transport.clone(),
            config: None,
            running: None,
            counters: None,
        }
    }
}

impl Application for LoggerApp {
    fn name(&self) -> &str {
        &self.name
    }

    fn role(&self) -> Role {
        Role::Logger
    }

    fn configure(&mut self, layout: &Layout) -> Result<(), AppError> {
        let c = layout
            .loggers
            .iter()
            .find(|l| l.name == self.name)
            .ok_or_else(|| not_in_layout(Role::Logger, &self.name))?;
        std::fs::create_dir_all(&c.directory).map_err(|e| {
            format!(
                "cannot create output directory {}: {e}",
                c.directory.display()
            )
        })?;
        self.config = Some(c.clone());
        Ok(())
    }

    fn connect(&mut self) -> Result<(), AppError> {
        let c = self.config.clone().ok_or("not configured")?;
        let counters = Arc::new(LoggerCounters::default());
        let h =
            logger::spawn(c, &self.transport, Arc::clone(&counters)).map_err(|e| e.to_string())?;
        self.running = Some(h);
        self.counters = Some(counters);
        Ok(())
    }

    fn disconnect(&mut self) -> Result<Option<AppSummary>, AppError> {
        match self.running.take() {
            Some(h) => {
                let s = h.stop().map_err(|e| e.to_string())?;
                Ok(Some(AppSummary::Logger(s)))
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
        Some(Arc::new(move || {
            AppMetrics::Logger(LoggerMetrics {
                events_written: c.events_written.load(Ordering::Relaxed),
                bytes_written: c.bytes_written.load(Ordering::Relaxed),
                disk_full: c.disk_full.load(Ordering::Relaxed),
                directory_moves: c.directory_moves.load(Ordering::Relaxed),
                events_refused: c.events_refused.load(Ordering::Relaxed),
                bad_messages: c.bad_messages.load(Ordering::Relaxed),
            })
        }))
    }

    fn poll(&mut self) -> Poll {
        match finished_thread(&mut self.running, Role::Logger) {
            Poll::Running => match self.counters.as_ref().and_then(|c| c.halted.get()) {
                Some(why) => Poll::Halted(why.clone()),
                None => Poll::Running,
            },
            other => other,
        }
    }
}

/// A DCM's or logger's thread only ends by itself when it failed: [`Poll::Failed`] with its
/// error (the handle is joined and dropped).
pub(super) fn finished_thread<T: Send + 'static>(
    running: &mut Option<AppHandle<T>>,
    role: Role,
) -> Poll {
    if !running.as_ref().is_some_and(|h| h.is_finished()) {
        return Poll::Running;
    }
    let why = running
        .take()
        .and_then(|h| h.join().err())
        .map_or_else(|| "without an error".to_string(), |e| e.to_string());
    Poll::Failed(format!("{role} thread ended: {why}"))
}
