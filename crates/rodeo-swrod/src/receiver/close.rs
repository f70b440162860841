//! Closing events in order: a thread closes its part of the event at `base` when every one of
//! its E-links delivered, when it is older than the timeout, when the window moves past it, or
//! at the end of the run, and writes the part into its ring cell in
//! [`PartExchange`](crate::exchange::PartExchange) for the assembler.

use rodeo_format::fragment::Status;
use rodeo_memory::Chunk;

use super::slot::{ColdSlot, HotSlot};
use super::{Aggregator, HI_MARK, LOW_ELINKS};
use crate::decoder::PacketDecoder;
use crate::exchange::Part;
use crate::fragment::{FragmentSink, HEADER_WORDS};

impl<'b, 'p, D: PacketDecoder, K: FragmentSink<'p>> Aggregator<'b, 'p, D, K> {
    /// E-links of slot `si` that delivered a packet (counted once per event: no `popcnt` in
    /// the x86-64 baseline).
    fn arrived_count(&self, si: usize) -> u32 {
        let w = self.hi_words;
        (self.hot[si].bits & !HI_MARK).count_ones()
            + self.hi_bits[si * w..(si + 1) * w]
                .iter()
                .map(|b| b.count_ones())
                .sum::<u32>()
    }

    /// Whether local E-link `local` delivered a packet to slot `si`, whose hot bits are `bits`.
    fn has_arrived(&self, bits: u64, si: usize, local: usize) -> bool {
        if local < LOW_ELINKS {
            bits & (1 << local) != 0
        } else {
            let h = local - LOW_ELINKS;
            self.hi_bits
                .get(si * self.hi_words + h / 64)
                .is_some_and(|w| w & (1 << (h % 64)) != 0)
        }
    }

    /// Whether the slot `si` is open and has every E-link's packet.
    fn complete(&self, si: usize) -> bool {
        let w = self.hi_words;
        let s = &self.hot[si];
        s.open
            && s.bits == self.low_full
            && self.hi_bits[si * w..(si + 1) * w]
                .iter()
                .zip(&self.hi_full)
                .all(|(b, f)| b == f)
    }

    /// Whether the base event may be complete: the cheap test the walker makes after each
    /// block before calling [`drain`](Self::drain).
    #[inline(always)]
    pub(crate) fn base_may_be_complete(&self) -> bool {
        // SAFETY: `mask` is `hot.len() - 1`.
        let s = unsafe { self.hot.get_unchecked(self.base as usize & self.mask) };
        s.bits == self.low_full
    }

    /// Finalizes complete events at the base.
    #[inline(never)]
    pub(crate) fn drain(&mut self) {
        loop {
            if !self.complete(self.base as usize & self.mask) {
                return;
            }
            if !self.finalize_base() {
                return;
            }
            self.waiting_since = self.now;
        }
    }

    /// Closes this thread's part of the base event and writes it into this thread's ring (the
    /// fragment is assembled once every thread has published its part). False when the run is
    /// aborting.
    pub(super) fn finalize_base(&mut self) -> bool {
        let seq = self.base;
        let si = seq as usize & self.mask;
        // Usually every E-link arrived: no population count then.
        let count = if self.complete(si) {
            self.nlocal
        } else {
            self.arrived_count(si)
        };
        let hot = std::mem::replace(&mut self.hot[si], HotSlot::CLOSED);
        let mut cold = std::mem::replace(&mut self.cold[si], ColdSlot::closed());
        let part = if hot.open {
            self.open_events -= 1;
            // Counted here, once per event, rather than once per packet.
            let placed = count - cold.dropped;
            if hot.mismatches > 0 {
                cold.status |= Status::BCID_CHECK_FAIL;
                self.c.bcid_mismatches += u64::from(hot.mismatches);
            }
            let mut chunk = cold.chunk;
            let mut end = HEADER_WORDS;
            let mut missing = 0;
            self.c.packets += u64::from(placed);
            if let Some(c) = chunk.as_mut() {
                let pos = (hot.wp as usize).wrapping_sub(c.as_ptr() as usize);
                self.c.packet_bytes += (pos - HEADER_WORDS * 4 - 8 * placed as usize) as u64;
                if hot.unordered {
                    self.reorder(c, pos);
                }
                end = pos / 4;
                if count < self.nlocal {
                    for local in 0..self.elinks.len() {
                        if !self.has_arrived(hot.bits, si, local) {
                            if let Some(w) = c.words_mut().get_mut(end + missing) {
                                *w = u32::from(self.elinks[local]);
                                missing += 1;
                            }
                        }
                    }
                }
            }
            Part {
                chunk,
                end: end as u32,
                missing: missing as u32,
                status: cold.status,
                bcid: Some(hot.bcid),
                packets: placed,
                l1id: self.base_raw,
            }
        } else {
            Part {
                chunk: None,
                end: HEADER_WORDS as u32,
                missing: self.nlocal,
                status: Status::OK,
                bcid: None,
                packets: 0,
                l1id: self.base_raw,
            }
        };
        let w = self.hi_words;
        if w > 0 {
            self.hi_bits[si * w..(si + 1) * w].fill(0);
        }
        if seq >= self.released_seen + self.window {
            self.released_seen = self.shared.released();
            if seq >= self.released_seen + self.window && !self.wait_for_ring(seq) {
                return false;
            }
        }
        // SAFETY: this is thread `self.t` (one Aggregator per thread index); `seq` is below the
        // `released` we read plus the window (checked just above), and it is this thread's next
        // event: `base` moves past it right after, and marks publish `base`.
        unsafe { self.shared.write(self.t, seq, part) };
        self.base += 1;
        self.base_mod += 1;
        if self.base_mod == self.plan.modulus {
            self.base_mod = 0;
        }
        self.base_l1 += 1;
        if self.base_l1 == self.wrap {
            // L1ID wrap: the ECR byte increments.
            self.base_l1 = 0;
            self.base_raw = ((self.base_raw >> 24).wrapping_add(1) & 0xFF) << 24;
        } else {
            self.base_raw = self.base_raw.wrapping_add(1);
        }
        self.set_fast_span();
        true
    }

    /// Waits until the ring cell of `seq` is free (this thread is a window ahead of the
    /// assembly), publishing and assembling meanwhile. False when the run is aborting.
    #[cold]
    #[inline(never)]
    fn wait_for_ring(&mut self, seq: u64) -> bool {
        self.c.slot_waits += 1;
        self.shared.horizon.fetch_max(
            self.end_seen.max(seq + 1),
            std::sync::atomic::Ordering::AcqRel,
        );
        // The slower thread is usually only a little behind (or was preempted): spin and yield
        // for a while before sleeping.
        let mut backoff = rodeo_memory::Backoff::new(rodeo_memory::BackoffSpec::PEERS);
        loop {
            self.publish();
            self.released_seen = self.shared.released();
            if seq < self.released_seen + self.window {
                return true;
            }
            if self.aborted() {
                return false;
            }
            backoff.wait();
        }
    }

    /// Puts the packets of a part into E-link order (rare: only when they arrived out of order).
    #[cold]
    fn reorder(&mut self, chunk: &mut Chunk<'p>, end: usize) {
        self.c.reordered_parts += 1;
        self.order.clear();
        let start = HEADER_WORDS * 4;
        let bytes: &mut [u8] = chunk;
        let mut at = start;
        while at + 8 <= end {
            let w0 = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
            let elink = u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]);
            let len = (w0 & 0xFFFF) as usize;
            if len < 8 || at + len > end {
                return;
            }
            let local = self
                .plan
                .local_of(elink)
                .map_or(u32::MAX, |(_, l)| l as u32);
            self.order.push((local, at as u32, len as u32));
            at += len;
        }
        self.order.sort_unstable_by_key(|&(local, ..)| local);
        let mut out = 0;
        for &(_, from, len) in &self.order {
            let (from, len) = (from as usize, len as usize);
            self.scratch[out..out + len].copy_from_slice(&bytes[from..from + len]);
            out += len;
        }
        bytes[start..start + out].copy_from_slice(&self.scratch[..out]);
    }

    /// Closes base events older than the timeout (and the complete ones behind them).
    pub(crate) fn check_timeouts(&mut self) {
        loop {
            let si = self.base as usize & self.mask;
            let since = if self.hot[si].open {
                self.cold[si].opened_at
            } else if self.open_events > 0 {
                self.waiting_since
            } else if self.shared.others_past(self.t, self.base) {
                // Another thread has its part of our base event, for which we have no packet:
                // the timeout runs from when we first saw that.
                if self.behind.0 != self.base {
                    self.behind = (self.base, self.now);
                }
                self.behind.1
            } else {
                return;
            };
            if self.now.saturating_sub(since) < self.plan.timeout_ns {
                return;
            }
            self.c.timeouts += 1;
            if !self.finalize_base() {
                return;
            }
            self.drain();
        }
    }

    /// Closes every event before `end` (end of run: no more data will come for them).
    pub(crate) fn flush_until(&mut self, end: u64) {
        while self.base < end {
            if !self.complete(self.base as usize & self.mask) {
                self.c.end_of_run_parts += 1;
            }
            if !self.finalize_base() {
                return;
            }
        }
    }
}
