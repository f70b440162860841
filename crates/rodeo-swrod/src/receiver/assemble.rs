//! Fragment completion: a thread publishes its mark (its parts of every event below its base
//! are written), assembles the complete events of its own groups from every thread's parts
//! (ROB and ROD header, trailer with the missing E-links), hands the fragments to the sink, a
//! run at a time (a publication's worth, at most `RUN_FRAGMENTS`), and recycles the blocks of
//! those the sink does not keep.

use rodeo_format::fragment::{RodBuilder, Status, StatusPosition, FORMAT_VERSION, ROB_MARKER};

use super::{receiver_backoff, Aggregator, RUN_FRAGMENTS};
use crate::decoder::PacketDecoder;
use crate::exchange::GROUP;
use crate::fragment::{Flow, Fragment, FragmentSink, HEADER_WORDS, MAX_THREADS, ROB_HEADER_WORDS};

impl<'b, 'p, D: PacketDecoder, K: FragmentSink<'p>> Aggregator<'b, 'p, D, K> {
    /// Publishes this thread's mark (its parts of every event below `base` are written) and
    /// assembles the complete events of this thread's groups.
    #[inline(never)]
    pub(crate) fn publish(&mut self) {
        for (p, cache) in self.caches.iter_mut().enumerate() {
            if self.shared.starved(p) {
                cache.flush();
            }
        }
        self.shared.publish(self.t, self.base);
        self.published = self.base;
        if self.assembling {
            // Called again from inside an assembly (a pool wait): the mark is enough.
            return;
        }
        let end = self.shared.complete_end();
        if end <= self.cursor {
            return;
        }
        self.assembling = true;
        let mut seq = self.cursor;
        while seq < end {
            let group_end = ((seq / GROUP + 1) * GROUP).min(end);
            if self.shared.assembler_of(seq) == self.t as u64 {
                for s in seq..group_end {
                    // SAFETY: `s` is in one of our groups, below the `complete_end` we read,
                    // taken once (our cursor moves past it below), and the cursor is stored
                    // after.
                    unsafe { self.assemble(s) };
                }
            }
            seq = group_end;
        }
        self.hand_run();
        self.cursor = end;
        self.shared.set_cursor(self.t, end);
        self.assembling = false;
    }

    /// Hands the fragments assembled since the last hand-over to the sink: as one run when it
    /// takes runs ([`FragmentSink::inspect_run`]), else one by one; recycles the blocks of
    /// those it does not keep. Called at the end of each publication, when the run is full,
    /// and before the assembly takes a block (so no wait for the pool holds a run's blocks).
    fn hand_run(&mut self) {
        if self.run.is_empty() {
            return;
        }
        let mut run = std::mem::take(&mut self.run);
        let mut stop = false;
        match self.sink.inspect_run(&run) {
            Some(flow) => {
                stop = flow == Flow::Stop;
                for f in run.drain(..) {
                    self.recycle(f);
                }
            }
            None => {
                for f in run.drain(..) {
                    let flow = match self.sink.inspect(&f) {
                        Some(flow) => {
                            self.recycle(f);
                            flow
                        }
                        None => self.sink.fragment(f),
                    };
                    stop |= flow == Flow::Stop;
                }
            }
        }
        self.run = run;
        if stop {
            self.shared
                .stop
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Publishes and assembles until every event below `end` is complete (end of run: every
    /// thread's final mark is `end`). False when the run is aborting.
    pub(crate) fn complete_until(&mut self, end: u64) -> bool {
        let mut backoff = receiver_backoff();
        loop {
            self.publish();
            if self.shared.complete_end() >= end {
                self.publish();
                return true;
            }
            if self.aborted() {
                return false;
            }
            backoff.wait();
        }
    }

    /// Builds the fragment of `seq` from every thread's part and hands it to the sink.
    ///
    /// # Safety
    ///
    /// As [`PartExchange::take`](crate::exchange::PartExchange::take) for `seq`: this thread assembles `seq`, every mark is past it, and
    /// it is assembled once.
    unsafe fn assemble(&mut self, seq: u64) {
        let plan = self.plan;
        let mut status = Status::OK;
        let mut bcid: Option<u16> = None;
        let mut packets = 0;
        let mut l1id = None;
        self.missing.clear();
        let mut frag = Fragment {
            blocks: Default::default(),
            ends: [HEADER_WORDS as u32; MAX_THREADS],
            first: usize::MAX,
            last: 0,
            trailer_words: 0,
            data_words: 0,
            l1id: 0,
            bcid: 0,
            status: Status::OK,
            packets: 0,
            missing: 0,
            thread: self.t,
        };
        for t in 0..plan.threads().min(MAX_THREADS) {
            // SAFETY: the caller's guarantee, for each thread's cell of `seq` once.
            let Some(part) = (unsafe { self.shared.take(t, seq) }) else {
                continue;
            };
            l1id.get_or_insert(part.l1id);
            status |= part.status;
            packets += part.packets;
            if let Some(b) = part.bcid {
                match bcid {
                    None => bcid = Some(b),
                    Some(x) if x != b => {
                        status |= Status::BCID_CHECK_FAIL;
                        self.c.bcid_mismatches += 1;
                    }
                    Some(_) => {}
                }
            }
            match part.chunk {
                Some(c) => {
                    if part.missing > 0 {
                        let end = part.end as usize;
                        let list = c
                            .words()
                            .get(end..end + part.missing as usize)
                            .unwrap_or(&[]);
                        self.missing.extend_from_slice(list);
                    }
                    if frag.first == usize::MAX {
                        frag.first = t;
                    }
                    frag.last = t;
                    frag.ends[t] = part.end;
                    frag.data_words += part.end as usize - HEADER_WORDS;
                    frag.blocks[t] = Some(c);
                }
                None => self
                    .missing
                    .extend(plan.thread_elinks[t].iter().map(|&e| u32::from(e))),
            }
        }
        frag.l1id = l1id.unwrap_or_else(|| plan.extended_l1id(seq));
        if frag.blocks[self.t].is_some() {
            // Header and trailer go into this thread's own block: the other threads' blocks
            // are only read, never written, by the thread that completes the fragment.
            frag.first = self.t;
            frag.last = self.t;
        }
        if frag.first == usize::MAX {
            // No thread had a packet: one empty block carries header and trailer. The run goes
            // first: a wait for the pool must not hold its blocks.
            self.hand_run();
            let Some(chunk) = self.alloc_block() else {
                return;
            };
            frag.first = 0;
            frag.last = 0;
            frag.blocks[0] = Some(chunk);
        }
        if !self.missing.is_empty() {
            status |= Status::TIMEOUT | Status::ROB_FRAGMENT_LOST;
            self.c.incomplete_fragments += 1;
            self.c.missing_packets += self.missing.len() as u64;
        }
        let bcid = bcid.unwrap_or(0);
        let nmissing = self.missing.len();
        let trailer_words = 1 + nmissing + 3;
        let size = HEADER_WORDS + frag.data_words + trailer_words;
        let rod = RodBuilder {
            source_id: plan.source_id,
            run_number: plan.run_number,
            extended_l1id: frag.l1id,
            bcid,
            status_position: StatusPosition::AfterData,
            ..RodBuilder::default()
        };
        let rob = [
            ROB_MARKER,
            size as u32,
            ROB_HEADER_WORDS as u32,
            FORMAT_VERSION,
            plan.source_id.word(),
            1,
            status.word(),
            rodeo_format::checksum::ChecksumType::None.to_word(),
        ];
        if let Some(c) = frag.blocks[frag.first].as_mut() {
            let w = c.words_mut();
            w[..ROB_HEADER_WORDS].copy_from_slice(&rob);
            w[ROB_HEADER_WORDS..HEADER_WORDS].copy_from_slice(&rod.header_words());
        }
        let end = frag.ends[frag.last] as usize;
        if let Some(c) = frag.blocks[frag.last].as_mut() {
            // Every block reserves room for the longest trailer (all E-links missing).
            if let Some(w) = c.words_mut().get_mut(end..end + trailer_words) {
                w[0] = status.word();
                w[1..1 + nmissing].copy_from_slice(&self.missing);
                w[1 + nmissing] = 1 + nmissing as u32;
                w[2 + nmissing] = frag.data_words as u32;
                w[3 + nmissing] = StatusPosition::AfterData.to_word();
            }
        }
        frag.trailer_words = trailer_words;
        frag.bcid = bcid;
        frag.status = status;
        frag.packets = packets;
        frag.missing = nmissing as u32;
        self.c.fragments += 1;
        self.run.push(frag);
        if self.run.len() >= RUN_FRAGMENTS {
            self.hand_run();
        }
    }

    /// Gives the blocks of a fragment the sink did not keep to this thread's caches, each to a
    /// cache of its own pool: no shared atomic per block, and a block of another thread goes
    /// back to its pool in a batch of 32 that its owner takes with one CAS.
    #[inline]
    fn recycle(&mut self, f: Fragment<'p>) {
        // Only the first `threads` entries can hold a block (thread `t` fills entry `t`; a
        // fragment with no packet at all uses entry 0).
        let n = self.plan.threads().min(MAX_THREADS);
        let Fragment { mut blocks, .. } = f;
        for block in &mut blocks[..n] {
            if let Some(c) = block.take() {
                match self.caches.iter_mut().find(|k| k.owns(&c)) {
                    Some(k) => k.free(c),
                    None => drop(c),
                }
            }
        }
    }

    /// Publishes how far this thread has seen.
    pub(crate) fn publish_horizon(&self) {
        self.shared
            .horizon
            .fetch_max(self.end_seen, std::sync::atomic::Ordering::AcqRel);
    }
}
