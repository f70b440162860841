//! Where the supervisor's L1 accepts come from: the L1 emulator (paced here), the RoIB (paced
//! by its Level-1 inputs), the readout (data-driven: the L1IDs every node has complete) or an
//! external trigger unit over TCP; one [`L1Input`] per run, chosen by the configuration.

use crate::error::DataflowError;
use crate::external::ExternalTrigger;
use crate::l1source::{L1Accept, L1Source, Pacer, ReadoutFeed};
use crate::roib::Roib;

use super::SupervisorConfig;

/// Where accepts come from: the emulator (paced here), the RoIB (paced by its inputs) or the
/// readout (data-driven: the L1IDs every node has complete).
pub(super) enum L1Input {
    Emulator(L1Source, Pacer),
    Roib(Box<Roib>),
    Readout {
        source: L1Source,
        feed: ReadoutFeed,
        /// The feed's last reading: L1IDs complete on every node, and whether all ended.
        complete: u64,
        ended: bool,
    },
    External(L1Source, Box<ExternalTrigger>),
}

impl L1Input {
    /// The input `config` asks for, started (the external trigger's listener, the RoIB's
    /// inputs).
    pub(super) fn start(config: &SupervisorConfig) -> Result<L1Input, DataflowError> {
        let app = &config.name;
        let l1 = match (&config.roib, &config.readout) {
            _ if config.external.is_some() => {
                let address = config.external.clone().unwrap_or_default();
                let ext = ExternalTrigger::start(&address).map_err(|e| DataflowError::Thread {
                    app: app.clone(),
                    what: format!(
                        "cannot listen for the trigger unit on {address} (l1.external_listen): \
                         {e}"
                    ),
                })?;
                tracing::info!(
                    "external L1: waiting for the trigger unit on {}",
                    ext.local_addr()
                );
                L1Input::External(L1Source::new(config.l1.clone()), Box::new(ext))
            }
            (_, Some(feed)) => {
                if feed.nodes.is_empty() {
                    return Err(DataflowError::Thread {
                        app: app.clone(),
                        what: "the data-driven L1 (l1.mode = \"readout\") reads the readout \
                           nodes' progress in this process, and none is here: run the \
                           partition in one process (without --processes)"
                            .into(),
                    });
                }
                L1Input::Readout {
                    source: L1Source::new(config.l1.clone()),
                    feed: feed.clone(),
                    complete: 0,
                    ended: false,
                }
            }
            (None, None) => L1Input::Emulator(
                L1Source::new(config.l1.clone()),
                Pacer::new(config.l1.rate_hz),
            ),
            (Some(rc), None) => L1Input::Roib(Box::new(
                Roib::start(rc.clone(), &config.l1).map_err(|_| DataflowError::Thread {
                    app: app.clone(),
                    what: "could not start the RoIB inputs".into(),
                })?,
            )),
        };
        Ok(l1)
    }

    pub(super) fn is_done(&self) -> bool {
        match self {
            L1Input::Emulator(s, _) => s.is_done(),
            L1Input::Roib(r) => r.is_done(),
            L1Input::Readout {
                source,
                complete,
                ended,
                ..
            } => source.is_done() || (*ended && source.produced() >= *complete),
            L1Input::External(s, ext) => s.is_done() || (ext.ended() && ext.waiting() == 0),
        }
    }

    pub(super) fn produced(&self) -> u64 {
        match self {
            L1Input::Emulator(s, _) => s.produced(),
            L1Input::Roib(r) => r.produced(),
            L1Input::Readout { source, .. } => source.produced(),
            L1Input::External(s, _) => s.produced(),
        }
    }

    /// Accepts that may be taken now.
    pub(super) fn available(&mut self) -> u64 {
        match self {
            L1Input::Emulator(_, p) => p.available(),
            L1Input::Roib(_) => u64::MAX,
            L1Input::Readout {
                source,
                feed,
                complete,
                ended,
            } => {
                (*complete, *ended) = feed.read();
                complete.saturating_sub(source.produced())
            }
            L1Input::External(_, ext) => ext.waiting() as u64,
        }
    }

    pub(super) fn next_accept(&mut self) -> Option<L1Accept> {
        match self {
            L1Input::Emulator(s, p) => {
                let a = s.next_accept()?;
                p.take(1);
                Some(a)
            }
            L1Input::Roib(r) => r.next_accept(),
            L1Input::Readout { source, .. } => source.next_accept(),
            L1Input::External(s, ext) => {
                let (l1id, trigger_type) = ext.pop()?;
                s.accept_for(l1id, trigger_type)
            }
        }
    }

    /// Seconds until the next accept may be due.
    pub(super) fn wait_s(&self) -> f64 {
        match self {
            L1Input::Emulator(_, p) => p.wait_s(),
            L1Input::Roib(_) => 0.0005,
            L1Input::Readout { .. } => 0.001,
            L1Input::External(..) => 0.0005,
        }
    }
}
