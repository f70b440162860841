//! The readout node (ROS) as an [`Application`]: configure allocates and warms its page pool,
//! connect builds the store, starts its input (the emulated cards, or SW ROD builders) and binds
//! its request endpoint (a network input listens from here on, so a partition is RUNNING only
//! once every input listens); start marks the run's start for its inputs; stop judges its
//! inputs as the run ends and waits (bounded) for the clears of every L1 accept of the run;
//! disconnect stops it and hands back its summary, with every input's state and problem.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_ros::inputs::{InputStatus, InputWatch};
use rodeo_ros::node::{NodeConfig, NodeMemory, ReadoutNode, SwRodMonitor};
use rodeo_ros::server::{ChannelStats, PeerDrops, ServerStats};
use rodeo_transport::socket::Transport;

use super::{not_in_layout, AppContext, AppError, Application, Probe, Role, RunEnd};
use crate::metrics::{AppMetrics, ChannelMetrics, RosMetrics, SwRodMetrics};
use crate::partition::Layout;
use crate::summary::{AppSummary, NodeSummary};

/// How long `stop` waits for the last clears of the run.
const CLEAR_WAIT: Duration = Duration::from_secs(5);
/// How long `stop` waits for the next clear before it takes the clears as all in: the
/// supervisor stopped first, having sent every clear, so two seconds without one mean the
/// rest are not coming (an overloaded partition's eight nodes, none of which got its clears,
/// took 5 s each, one after another).
const CLEAR_IDLE: Duration = Duration::from_secs(2);

/// What the probe reads of a running node.
type Monitor = (
    Arc<ServerStats>,
    Arc<PeerDrops>,
    Option<SwRodMonitor>,
    Arc<ChannelStats>,
    InputWatch,
);

/// A readout node under lifecycle control.
pub struct RosApp {
    name: String,
    transport: Transport,
    board: super::ReadoutBoard,
    config: Option<(String, NodeConfig)>,
    memory: Option<NodeMemory>,
    node: Option<ReadoutNode>,
    /// What the probe reads; kept after the node stops, so the last values stay on the page.
    monitor: Option<Monitor>,
    /// The inputs as the run ended (their problems judged then), for the summary.
    inputs_at_end: Option<Vec<InputStatus>>,
}

impl RosApp {
    /// The readout node `name`, not yet configured.
    pub fn new(name: &str, ctx: &AppContext) -> RosApp {
        RosApp {
            name: name.to_string(),
            transport: ctx.transport.clone(),
            board: Arc::clone(&ctx.readout),
            config: None,
            memory: None,
            node: None,
            monitor: None,
            inputs_at_end: None,
        }
    }
}

impl Application for RosApp {
    fn name(&self) -> &str {
        &self.name
    }

    fn role(&self) -> Role {
        Role::Ros
    }

    fn configure(&mut self, layout: &Layout) -> Result<(), AppError> {
        let (_, ep, nc) = layout
            .nodes
            .iter()
            .find(|(n, ..)| *n == self.name)
            .ok_or_else(|| not_in_layout(Role::Ros, &self.name))?;
        self.memory = Some(NodeMemory::allocate(nc).map_err(|e| e.to_string())?);
        self.config = Some((ep.clone(), nc.clone()));
        Ok(())
    }

    fn connect(&mut self) -> Result<(), AppError> {
        let (ep, nc) = self.config.as_ref().ok_or("not configured")?;
        let memory = self.memory.clone().ok_or("not configured")?;
        let node =
            ReadoutNode::start_in(memory, &self.transport, nc, ep).map_err(|e| e.to_string())?;
        if let Ok(mut board) = self.board.lock() {
            board.insert(self.name.clone(), node.progress());
        }
        self.monitor = Some((
            node.shared_stats(),
            node.peer_drops(),
            node.swrod_monitor(),
            node.channel_stats(),
            node.input_watch(),
        ));
        self.inputs_at_end = None;
        self.node = Some(node);
        Ok(())
    }

    fn start(&mut self) -> Result<(), AppError> {
        if let Some(node) = &self.node {
            node.input_watch().run_started();
        }
        Ok(())
    }

    fn stop(&mut self, run: RunEnd) -> Result<Option<AppSummary>, AppError> {
        // The run's end: each input is judged now (a sender may close after the run).
        if let Some(node) = &self.node {
            self.inputs_at_end = Some(node.input_watch().at_run_end(&self.name));
        }
        // The supervisor's last clears are on their way: wait for them (bounded).
        if let (Some(node), Some(n)) = (&self.node, run.l1_accepts) {
            let start = Instant::now();
            let (mut seen, mut last) = (node.stats().cleared_l1ids, start);
            while seen < n && start.elapsed() < CLEAR_WAIT && last.elapsed() < CLEAR_IDLE {
                std::thread::sleep(Duration::from_millis(5));
                let now = node.stats().cleared_l1ids;
                if now > seen {
                    (seen, last) = (now, Instant::now());
                }
            }
        }
        Ok(None)
    }

    fn disconnect(&mut self) -> Result<Option<AppSummary>, AppError> {
        let Some(node) = self.node.take() else {
            return Ok(None);
        };
        // Stopped after a start (`stop` noted the inputs): a partition brought down without a
        // run (a served one shut down in CONNECTED) lost nothing of a run, and its inputs'
        // read-ahead is no warning.
        let ran = self.inputs_at_end.is_some();
        let net_counters = node.net_counters();
        let watch = node.input_watch();
        let s = node.stop();
        // After the stop: the receivers' last counts (a UDP receiver reads its kernel drops
        // as it ends; a stalled one had not read them for the whole stall).
        let net = rodeo_ros::inputs::NetTotals::of(&net_counters);
        if net.dropped_units > 0 || net.broken_connections > 0 {
            tracing::warn!(
                node = %self.name,
                units = net.units,
                dropped_units = net.dropped_units,
                broken_connections = net.broken_connections,
                "network input: units of the wrong size were dropped or a TCP sender broke a \
                 record (docs/test-beam.md)"
            );
        }
        if net.kernel_dropped_units > 0 {
            tracing::warn!(
                node = %self.name,
                units = net.units,
                kernel_dropped_units = net.kernel_dropped_units,
                "network input: the kernel dropped datagrams, the UDP socket buffer full (the \
                 node read slower than the sender sent; docs/test-beam.md)"
            );
        }
        if net.unread_bytes > 0 {
            tracing::warn!(
                node = %self.name,
                unread_bytes = net.unread_bytes,
                "network input: datagrams were left unread in the UDP socket buffer when the \
                 input ended (received by the kernel, never read: the run stopped first)"
            );
        }
        let k = s.store.total_counters();
        // A detector's fragments never built (an emulator's run ahead by design).
        let at_end = if s.store.runs_ahead() {
            rodeo_ros::store::StoredAtEnd::default()
        } else {
            s.store.stored_around_l1_front()
        };
        let inputs = final_inputs(watch.at_run_end(&self.name), self.inputs_at_end.take());
        let input_errors = s.slink.errors() + net.dropped_units + net.kernel_dropped_units;
        // Only a detector's inputs: an emulated card's units run ahead of the store by design.
        let received_not_stored = if s.input_from_outside {
            received_not_stored(&inputs, &k, s.slink.dropped_words, s.input_units_left)
        } else {
            0
        };
        if received_not_stored > 0 && ran {
            tracing::warn!(
                node = %self.name,
                received_not_stored,
                "fragments received from the detector were never stored (still in the input's \
                 queues at the stop)"
            );
        }
        Ok(Some(AppSummary::Ros(NodeSummary {
            name: self.name.clone(),
            requests: s.counters.requests,
            cleared: s.counters.cleared_l1ids,
            clear_gaps: s.counters.clear_gaps,
            stored: k.fragments,
            stored_now: k.stored,
            stored_behind_l1: at_end.behind,
            stored_ahead_of_l1: at_end.ahead,
            stored_ahead_incomplete: at_end.ahead_incomplete,
            swrod_built: s.swrod.map_or(0, |c| c.builder.fragments),
            received_not_stored,
            store_duplicates: k.duplicates,
            store_dropped_after_clear: k.dropped_after_clear,
            swrod_error: s.swrod_error,
            input_errors,
            input_dropped_words: s.slink.dropped_words,
            input_source_mismatches: s.slink.source_mismatches,
            restarted: false,
            died_at_stop: false,
            inputs,
            earlier_lives: None,
        })))
    }

    fn unconfigure(&mut self) {
        self.config = None;
        self.memory = None;
    }

    fn abort(&mut self) {
        if let Some(n) = self.node.take() {
            let _ = n.stop();
        }
    }

    fn probe(&self) -> Option<Probe> {
        let (stats, drops, swrod, channels, watch) = self.monitor.clone()?;
        let name = self.name.clone();
        Some(Arc::new(move || {
            let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            // The store's fill and its lent pages over all its pages (rodeo_ros::store); the
            // page pool itself is all the store's from the start.
            let figures = channels.snapshot();
            let pages = figures.iter().map(|c| c.pages).sum::<u64>().max(1) as f64;
            let lent = figures.iter().map(|c| c.lent_pages).sum::<u64>();
            let in_use = figures.iter().map(|c| c.pages_in_use).sum::<u64>();
            let occupancy = in_use.saturating_sub(lent) as f64 / pages;
            AppMetrics::Ros(Box::new(RosMetrics {
                requests: ld(&stats.requests),
                fragments_sent: ld(&stats.fragments_sent),
                bytes_sent: ld(&stats.bytes_sent),
                cleared_l1ids: ld(&stats.cleared_l1ids),
                pending_now: ld(&stats.pending_now),
                input_fragments: ld(&stats.input_fragments),
                lost_fragments: ld(&stats.lost_fragments),
                pending_fragments: ld(&stats.pending_fragments),
                timeouts: ld(&stats.timeouts),
                clear_gaps: ld(&stats.clear_gaps),
                buffer_occupancy: occupancy,
                buffer_lent: lent as f64 / pages,
                send_dropped: ld(&stats.send_dropped),
                send_dropped_by_peer: drops
                    .snapshot()
                    .into_iter()
                    .map(|p| (p.peer, p.dropped))
                    .collect(),
                rejected_requests: ld(&stats.rejected_requests),
                pending_overflow: ld(&stats.pending_overflow),
                bad_messages: ld(&stats.bad_messages),
                channels: figures
                    .iter()
                    .map(|c| ChannelMetrics {
                        rob: c.rob,
                        fragments: c.fragments,
                        stored: c.stored,
                        occupancy: c.occupancy(),
                        lent_pages: c.lent_pages,
                        duplicates: c.duplicates,
                        dropped_after_clear: c.dropped_after_clear,
                        unknown_clears: c.unknown_clears,
                        backpressure: c.full,
                    })
                    .collect(),
                swrod: swrod.as_ref().map(|m| {
                    let c = m.counters();
                    SwRodMetrics {
                        builder: c
                            .builder
                            .fields()
                            .iter()
                            .map(|(k, v)| (k.to_string(), *v))
                            .collect(),
                        link: c
                            .link
                            .fields()
                            .iter()
                            .map(|(k, v)| (k.to_string(), *v))
                            .collect(),
                    }
                }),
                inputs: watch.snapshot(&name),
            }))
        }))
    }
}

/// Fragments a detector's inputs counted as received that the store neither took in nor
/// dropped as a duplicate or already cleared ([`NodeSummary::received_not_stored`]); 0 without
/// such inputs. Errors that drop nothing (L1ID sequence errors, a CRC flagged) keep one
/// fragment per unit, and datagrams the kernel or the receiver dropped were never counted as
/// received: a run with kernel drops counts what it received and did not store (a QA pass
/// found 901 unsaid). When the checks dropped words a damaged unit is not one fragment, and
/// the count is the units the links still held at the stop (`units_left`, counted by the
/// cards: 16 dropped words had hidden 932 of them).
fn received_not_stored(
    inputs: &[InputStatus],
    store: &rodeo_ros::store::ChannelCounters,
    dropped_words: u64,
    units_left: u64,
) -> u64 {
    if inputs.is_empty() {
        return 0;
    }
    if dropped_words > 0 {
        return units_left;
    }
    let received: u64 = inputs.iter().map(|i| i.fragments).sum();
    received.saturating_sub(store.fragments + store.duplicates + store.dropped_after_clear)
}

/// The inputs of the summary: their counters after the node stopped (what it read in at its
/// stop included), their states, problems, last data and rates as judged when the run ended
/// (`at_end`), when it ended in order: a link file the stop cut in the middle was still being
/// played ("ended" only after the node's stop, which made its read-ahead lost rather than cut
/// by the stop).
fn final_inputs(now: Vec<InputStatus>, at_end: Option<Vec<InputStatus>>) -> Vec<InputStatus> {
    let Some(at_end) = at_end else {
        return now;
    };
    now.into_iter()
        .zip(at_end)
        .map(|(mut n, e)| {
            n.problem = e.problem;
            n.state = e.state;
            n.last_data_age_ms = e.last_data_age_ms;
            n.rate_hz = e.rate_hz;
            n
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rodeo_ros::inputs::{InputState, InputStatus};
    use rodeo_ros::store::ChannelCounters;

    use super::{final_inputs, received_not_stored};

    fn input(fragments: u64) -> InputStatus {
        InputStatus {
            node: "ros-1".into(),
            rob: 0x0051_0000,
            address: "udp://127.0.0.1:5001".into(),
            state: InputState::Connected,
            fragments,
            bytes: 0,
            errors: 0,
            last_data_age_ms: None,
            rate_hz: 0.0,
            problem: None,
        }
    }

    /// What the receivers counted less what the store took in, dropped as duplicates or as
    /// cleared; the units the links still held when the checks dropped words; nothing without
    /// a detector's input.
    #[test]
    fn received_not_stored_is_what_the_store_never_saw() {
        let store = ChannelCounters {
            fragments: 61_454,
            duplicates: 3,
            dropped_after_clear: 2,
            ..ChannelCounters::default()
        };
        let inputs = [input(31_049), input(30_710)];
        assert_eq!(received_not_stored(&inputs, &store, 0, 0), 300);
        assert_eq!(
            received_not_stored(&inputs, &store, 16, 932),
            932,
            "words dropped: the units the links held"
        );
        assert_eq!(
            received_not_stored(&[], &store, 0, 0),
            0,
            "an emulated input"
        );
        assert_eq!(received_not_stored(&[input(10)], &store, 0, 0), 0);
    }

    /// The counters after the stop, the state and problem at the run's end: a link file cut
    /// in the middle by the stop stays "connected" (flowing), not "ended".
    #[test]
    fn the_summary_takes_the_state_at_the_run_s_end_and_the_counts_after_the_stop() {
        let mut after = input(5_445);
        after.state = InputState::Ended;
        let mut at_end = input(5_400);
        at_end.problem = Some("silent".into());
        let got = final_inputs(vec![after.clone()], Some(vec![at_end]));
        assert_eq!(got[0].fragments, 5_445);
        assert_eq!(got[0].state, InputState::Connected);
        assert_eq!(got[0].problem.as_deref(), Some("silent"));
        assert_eq!(final_inputs(vec![after.clone()], None), vec![after]);
    }
}
