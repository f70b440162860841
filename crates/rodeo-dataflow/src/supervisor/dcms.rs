//! The DCMs as the supervisor knows them (module docs of the supervisor, "Nodes that die"):
//! each DCM's `Update` (its credits, and its decisions, which finish events and feed the clear
//! group), and the DCMs silent for `dcm_timeout`, declared dead, their events taken back.

use std::time::{Duration, Instant};

use rodeo_transport::message::{decode, Message, Verdict};
use rodeo_transport::socket::Received;

use crate::trace::Stage as TraceStage;

use super::Supervisor;
use crate::error::DataflowError;

/// A DCM the supervisor has heard from.
#[derive(Debug)]
pub(super) struct Dcm {
    /// Its identity at the ROUTER.
    pub(super) id: Vec<u8>,
    /// When its last `Update` arrived.
    pub(super) last_seen: Instant,
    /// Not declared dead.
    pub(super) alive: bool,
    /// Its credits in the queue.
    pub(super) credits: u64,
}

impl Supervisor {
    pub(super) fn handle(&mut self, msg: &Received) {
        let Ok(decoded) = decode(msg.data()) else {
            self.bad_message();
            return;
        };
        let Message::Update { credits, decisions } = decoded.message else {
            self.bad_message();
            return;
        };
        let now = Instant::now();
        let dcm = match self.by_id.get(msg.peer.as_slice()) {
            Some(&i) => i,
            None if self.dcms.len() >= self.config.max_dcms.max(1) => {
                // The table is full: a DCM declared dead gives its place (it holds no credit
                // and no event: both were taken back), so identities made up by the thousand
                // keep new DCMs out only until they are declared dead themselves.
                let Some(i) = self.dcms.iter().position(|d| !d.alive) else {
                    self.bad_message();
                    return;
                };
                let old = std::mem::replace(&mut self.dcms[i].id, msg.peer.clone());
                self.by_id.remove(&old);
                self.by_id.insert(msg.peer.clone(), i);
                let d = &mut self.dcms[i];
                d.last_seen = now;
                d.alive = true;
                d.credits = 0;
                i
            }
            None => {
                self.dcms.push(Dcm {
                    id: msg.peer.clone(),
                    last_seen: now,
                    alive: true,
                    credits: 0,
                });
                self.by_id.insert(msg.peer.clone(), self.dcms.len() - 1);
                self.dcms.len() - 1
            }
        };
        // Credits are free slots: more than a DCM can have is a corrupt or hostile Update,
        // counted and dropped whole (4 billion credits were a 32 GiB queue).
        let most = crate::dcm::MAX_SLOTS as u64;
        if u64::from(credits) > most || self.dcms[dcm].credits + u64::from(credits) > 2 * most {
            self.bad_message();
            return;
        }
        let d = &mut self.dcms[dcm];
        d.last_seen = now;
        if !d.alive {
            // A DCM declared dead spoke again: its old credits were dropped, its events
            // reassigned; it starts afresh with the credits it announces now.
            d.alive = true;
        }
        for dec in decisions.iter() {
            match self.assigned.get(&dec.global_id) {
                Some(a) if a.dcm == dcm => {
                    self.counters
                        .decision_latency
                        .record(now.saturating_duration_since(a.at));
                    self.counters
                        .trace
                        .record(dec.global_id, TraceStage::Done, 0);
                    let forced = a.forced;
                    let l1id = a.accept.l1id;
                    self.assigned.remove(&dec.global_id);
                    match (dec.verdict, forced) {
                        (_, true) | (Verdict::ForcedAccept, _) => self.summary.forced_accepts += 1,
                        (Verdict::Accept, false) => self.summary.accepted += 1,
                        (Verdict::Reject, false) => self.summary.rejected += 1,
                    }
                    self.add_clear(l1id, now);
                }
                _ => self.summary.late_decisions += 1,
            }
        }
        self.offered |= credits > 0;
        for _ in 0..credits {
            self.credits.push_back(dcm);
        }
        self.dcms[dcm].credits += u64::from(credits);
    }

    /// Called at every turn of the loop, `gap` after the last one (a few ms by design). A gap
    /// of a quarter of `dcm_timeout` (at least 250 ms) or more is the supervisor's own stall (a
    /// loaded machine, or a VM whose CPUs were held for seconds): the DCMs' silence and the
    /// events' time during it are not theirs, so every live DCM counts as heard at `now`, and
    /// every event's deadline and the start (for `start_timeout`) move on by the gap. Returns
    /// whether it was such a stall.
    pub(super) fn after_own_stall(&mut self, gap: Duration, now: Instant) -> bool {
        if gap < (self.config.dcm_timeout / 4).max(Duration::from_millis(250)) {
            return false;
        }
        for d in self.dcms.iter_mut().filter(|d| d.alive) {
            d.last_seen = d.last_seen.max(now);
        }
        for entry in self.deadlines.iter_mut() {
            entry.0 += gap;
        }
        self.started += gap;
        if gap >= Duration::from_secs(1) {
            tracing::warn!(
                gap_ms = gap.as_millis() as u64,
                "the supervisor was held up for {} ms (a loaded or frozen machine?): the DCMs' \
                 silence and the events' timeouts are counted from now",
                gap.as_millis()
            );
        }
        true
    }

    /// Fails the run when no DCM has offered a slot `start_timeout` after the start: nothing
    /// could ever be assigned, and the run would wait at 0 L1 accepts until stopped by hand.
    pub(super) fn check_start(&self, now: Instant) -> Result<(), DataflowError> {
        let waited = now.saturating_duration_since(self.started);
        if waited < self.config.start_timeout {
            return Ok(());
        }
        let heard: Vec<String> = self
            .dcms
            .iter()
            .map(|d| String::from_utf8_lossy(&d.id).into_owned())
            .collect();
        let heard = if heard.is_empty() {
            "none".to_string()
        } else {
            format!("{}, each with 0 slots", heard.join(", "))
        };
        tracing::error!(
            waited_s = waited.as_secs(),
            heard = %heard,
            "no DCM offered a processing slot since the start: the run fails"
        );
        Err(DataflowError::NoSlots {
            app: self.config.name.clone(),
            waited_s: waited.as_secs(),
            heard,
        })
    }

    /// Declares silent DCMs dead and takes their events back.
    pub(super) fn check_dcms(&mut self, now: Instant) {
        for i in 0..self.dcms.len() {
            let d = &self.dcms[i];
            if d.alive && now.duration_since(d.last_seen) > self.config.dcm_timeout {
                self.dcms[i].alive = false;
                self.dcms[i].credits = 0;
                self.summary.dead_dcms += 1;
                self.credits.retain(|&c| c != i);
                let mut taken: Vec<u64> = self
                    .assigned
                    .iter()
                    .filter(|(_, a)| a.dcm == i)
                    .map(|(&g, _)| g)
                    .collect();
                taken.sort_unstable();
                for g in taken {
                    if let Some(a) = self.assigned.remove(&g) {
                        self.summary.reassignments += 1;
                        self.reassign.push_back((a.accept, i));
                    }
                }
            }
        }
    }
}
