//! Event assembly in a DCM: the ROB fragments of a reply filed into their slot, the full
//! event built from a slot's fragments (checksum, stream tag, FORCED_ACCEPT / PARTIAL_EVENT
//! status) and sent to its logger, and the loggers' acknowledgements that finish accepted
//! events.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rodeo_format::checksum::words_as_bytes;
use rodeo_format::fragment::{EventBuilder, RobFragment, SourceId, Status, StreamTag};
use rodeo_transport::message::{
    decode, header_bytes, Message, MessageType, Verdict as WireVerdict,
};
use rodeo_transport::socket::{Received, Socket};

use super::{Dcm, Filed, Phase, TraceStage, IN_ARENA};
use crate::error::DataflowError;

/// An empty vector with `v`'s allocation, for elements of another lifetime: the standard
/// library collects a `vec::IntoIter` in place when the layouts agree, so once the capacity
/// suffices the per-event views cost no allocation.
pub(super) fn relabel<T: Relabel<U>, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}

/// Types that differ only by a lifetime (same layout), for [`relabel`].
pub(super) trait Relabel<U> {}
impl Relabel<RobFragment<'_>> for RobFragment<'_> {}
impl Relabel<&[u32]> for &[u32] {}

impl Dcm {
    /// Files the ROB fragments of one reply from readout node `n` (`words`: fragments back to
    /// back) into slot `i`: a PENDING fragment is noted to ask again, a LOST one makes the
    /// event partial, a fragment already held is ignored; malformed ones are counted, and make
    /// the event partial (it goes without them: every written event carries every ROB or says
    /// so). A fragment of a ROB the configuration gives to another node is counted bad and
    /// not filed: a node (or anyone posing as one) cannot put foreign ROBs into an event, nor
    /// take the place of the genuine fragment that comes later.
    ///
    /// `kept`: the reply will be kept whole as the slot's reply number `.0`, `words` starting
    /// at byte `.1` of its data: each fragment is filed where it lies. `None`: each is copied
    /// into the slot's arena. Returns the fragments filed.
    pub(super) fn file_fragments(
        &mut self,
        i: usize,
        n: usize,
        words: &[u32],
        kept: Option<(u32, usize)>,
    ) -> usize {
        let mut filed = 0;
        let mut at = 0;
        while at < words.len() {
            let Some(&size) = words.get(at + 1) else {
                self.slots[i].partial = true;
                break;
            };
            let size = size as usize;
            let Some(frag) = words.get(at..at + size).filter(|_| size > 0) else {
                self.summary.bad_messages += 1;
                self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                self.slots[i].partial = true;
                break;
            };
            at += size;
            let Ok(rob) = RobFragment::parse(frag) else {
                self.summary.bad_messages += 1;
                self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                self.slots[i].partial = true;
                continue;
            };
            let id = rob.source_id().word();
            if self.node_of(id).is_some_and(|m| m != n) {
                self.summary.bad_messages += 1;
                self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.summary.fragments += 1;
            let status = rob.status();
            let s = &mut self.slots[i];
            if status.contains(Status::ROB_FRAGMENT_PENDING) {
                if !s.pending.contains(&id) {
                    s.pending.push(id);
                }
                continue;
            }
            if status.contains(Status::ROB_FRAGMENT_LOST) {
                s.partial = true;
            }
            if !s.has(id) {
                let (reply, start) = match kept {
                    // `frag` starts `at - size` words into `words`.
                    Some((reply, base)) => (reply, base + 4 * (at - size)),
                    None => {
                        let start = s.arena.len();
                        s.arena.extend_from_slice(frag);
                        (IN_ARENA, start)
                    }
                };
                s.frags.push(Filed {
                    rob: id,
                    reply,
                    start,
                    len: frag.len(),
                });
                filed += 1;
            }
        }
        filed
    }

    /// Builds the full event and sends it to its logger.
    pub(super) fn ship(&mut self, i: usize, loggers: &mut [Socket]) -> Result<(), DataflowError> {
        let s = &self.slots[i];
        let mut status = Status::OK;
        if s.forced {
            status.insert(Status::EVENT_FORCED_ACCEPT);
        }
        if s.partial {
            status.insert(Status::EVENT_PARTIAL);
        }
        let stream = s.stream.unwrap_or(0);
        let name = self
            .config
            .streams
            .get(stream as usize)
            .map_or("debug_unknown", String::as_str);
        let tags = [StreamTag {
            name,
            // The type is the stream name's prefix (`calibration_Beam`: calibration), as the
            // EventStorage file names have it; a name without one is physics.
            stream_type: if s.forced {
                "debug"
            } else {
                rodeo_files::eventstorage::split_stream(name).0
            },
        }];
        let mut pieces: Vec<&[u32]> = relabel(std::mem::take(&mut self.piece_views));
        pieces.extend(s.frags.iter().map(|f| s.fragment(f)));
        let status_words = [status.word()];
        let builder = EventBuilder {
            source_id: SourceId(self.config.source_id),
            status: &status_words,
            checksum: self.config.checksum,
            global_id: s.global_id,
            run_number: self.config.run_number,
            extended_l1id: s.l1id,
            bcid: s.bcid,
            l1_trigger_type: s.trigger_type,
            stream_tags: &tags,
            robs: &pieces,
            ..EventBuilder::default()
        };
        // Without compression the event is gathered where its pieces lie: the header and the
        // checksum word are written here, the ROB fragments go from the slot's arena straight
        // into the message's one frame (no full event assembled in between). With compression the
        // payload must be contiguous for the encoder: the event is built, then compressed here,
        // in the DCMs, in parallel, not in the logger's one thread.
        let written = if self.config.compress {
            self.event.clear();
            builder.write_vec(&mut self.event)
        } else {
            builder.write_around(&mut self.event, &mut self.event_tail)
        };
        if written.is_err() {
            self.piece_views = relabel(pieces);
            // Only a >4 GiB event or a bad stream name can fail: count and reject.
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            self.finish(i, WireVerdict::Reject);
            return Ok(());
        }
        let packed = if let Some(c) = self.compressor.as_mut() {
            let t0 = Instant::now();
            let r = c.compress(&self.event, &mut self.packed);
            self.summary.compress_ns += t0.elapsed().as_nanos() as u64;
            match r {
                Ok(()) => {
                    self.summary.compress_in_bytes += 4 * self.event.len() as u64;
                    self.summary.compress_out_bytes += 4 * self.packed.len() as u64;
                    true
                }
                Err(_) => {
                    // Cannot happen for an event just built; sent as it is, counted.
                    self.summary.compress_failures += 1;
                    false
                }
            }
        } else {
            false
        };
        let event_words = if packed {
            self.packed.len()
        } else if self.config.compress {
            self.event.len()
        } else {
            written.unwrap_or(0)
        };
        let global_id = s.global_id;
        let payload = 4 + 4 * event_words;
        let header = header_bytes(MessageType::Event, i as u32, payload as u32);
        let stream_word = stream.to_le_bytes();
        let k = (global_id % loggers.len() as u64) as usize;
        let whole: &[u32] = if packed { &self.packed } else { &self.event };
        let gathered = !self.config.compress;
        let tail: &[u32] = &self.event_tail;
        // One frame: the pieces copied once into the message, which the logger then reads where
        // ZeroMQ put it (several frames would be joined there, a second copy of the event).
        let parts = [&header[..], &stream_word[..], words_as_bytes(whole)]
            .into_iter()
            .chain(
                pieces
                    .iter()
                    .chain(std::iter::once(&tail))
                    .filter(|p| gathered && !p.is_empty())
                    .map(|p| words_as_bytes(p)),
            );
        let sent = loggers[k].send_joined(parts);
        if let (Some(sampler), true) = (self.sampler.as_mut(), sent.is_ok()) {
            if sampler.choose() {
                let rest = pieces.iter().chain(std::iter::once(&tail));
                let rest = rest.filter(|_| gathered).copied();
                sampler.publish(
                    std::iter::once(whole).chain(rest),
                    global_id,
                    &self.counters,
                );
            }
        }
        self.piece_views = relabel(pieces);
        if sent.is_err() {
            // The logger is gone or stuck: try shipping again shortly.
            self.summary.send_failures += 1;
            self.counters.send_failures.fetch_add(1, Ordering::Relaxed);
            let t = Instant::now() + self.config.retry_delay.max(Duration::from_millis(10));
            self.slots[i].retry_at = Some(t);
            self.arm(t);
            return Ok(());
        }
        self.summary.events_sent += 1;
        self.slots[i].phase = Phase::Logging;
        self.slots[i].shipped_at = self.turn_time;
        Ok(())
    }

    pub(super) fn on_ack(&mut self, msg: &Received) {
        let Ok(decoded) = decode(msg.data()) else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Message::EventAck { global_ids } = decoded.message else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return;
        };
        for gid in global_ids.iter() {
            let Some(i) = self
                .slots
                .iter()
                .position(|s| s.phase == Phase::Logging && s.global_id == gid)
            else {
                self.summary.stale_replies += 1;
                continue;
            };
            self.counters.trace.record(gid, TraceStage::Logged, 0);
            if self.slots[i].forced {
                self.summary.forced += 1;
                self.finish(i, WireVerdict::ForcedAccept);
            } else {
                self.summary.accepted += 1;
                self.finish(i, WireVerdict::Accept);
            }
            self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod relabel_tests {
    use super::*;

    #[test]
    fn relabel_keeps_the_allocation_and_empties_the_vector() {
        let words = [1u32, 2, 3];
        let mut v: Vec<&[u32]> = Vec::with_capacity(32);
        v.push(&words);
        let w: Vec<&'static [u32]> = relabel(v);
        assert!(w.is_empty());
        assert!(w.capacity() >= 32, "capacity {}", w.capacity());
        let mut again: Vec<&[u32]> = relabel(w);
        again.push(&words[1..]);
        assert_eq!(again, vec![&words[1..]]);
    }
}
