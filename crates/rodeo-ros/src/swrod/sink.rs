//! The builder's end of a SW ROD link: [`StoreSink`], the [`FragmentSink`] that writes each
//! fragment into the link's open batch and reports room (back-pressure) to its builder.

use std::sync::Arc;

use rodeo_memory::sync::Ordering;
use rodeo_swrod::{Flow, Fragment, FragmentSink, SwRodCounters};

use super::counters::SwRodLinkCounters;
use super::handover::Link;

/// The builder's end: a [`FragmentSink`] that hands the fragments to the core thread in
/// batches.
#[derive(Debug, Clone)]
pub struct StoreSink {
    pub(super) link: Arc<Link>,
}

impl StoreSink {
    /// The builder's end of `link`.
    pub(super) fn new(link: Arc<Link>) -> StoreSink {
        StoreSink { link }
    }

    /// The link's counters.
    pub fn counters(&self) -> SwRodLinkCounters {
        self.link.counters()
    }

    /// From now on a fragment that finds no free batch is dropped (counted in
    /// [`SwRodLinkCounters::dropped_no_consumer`]) instead of waiting, as when the input is
    /// gone, and so is a batch the sink would hand over; a sink waiting now gives up. For
    /// shutting a builder down while the core thread runs on and may never free a batch again
    /// (see the module docs).
    pub fn abandon(&self) {
        self.link.consumer_gone.store(true, Ordering::Release);
    }
}

impl<'p> FragmentSink<'p> for StoreSink {
    /// Room for what one more superpage may complete: as many free batches (besides the open
    /// one) as a superpage has taken at most, so that the builder does not wait in the
    /// middle of a superpage, holding up the thread's other ROBs.
    fn has_room(&self) -> bool {
        let link = &*self.link;
        let room = link.free.len() >= link.need.load(Ordering::Relaxed)
            || link.consumer_gone.load(Ordering::Relaxed);
        // Each episode without room is back-pressure from the store, counted once.
        if room == link.no_room.load(Ordering::Relaxed) {
            link.no_room.store(!room, Ordering::Relaxed);
            if !room {
                link.sink_waits.fetch_add(1, Ordering::Relaxed);
            }
        }
        room
    }

    /// Writes the fragment into the open batch (into a lent store page, or the batch's own
    /// words) and lets the builder keep its blocks: they go back to the calling thread's pool
    /// caches in batches, not one shared free per block.
    fn inspect(&self, fragment: &Fragment<'p>) -> Option<Flow> {
        self.link.append_run(std::slice::from_ref(fragment));
        Some(Flow::Continue)
    }

    /// Writes the run into the open batch (or batches) under one lock, as `inspect` does
    /// each fragment.
    fn inspect_run(&self, fragments: &[Fragment<'p>]) -> Option<Flow> {
        self.link.append_run(fragments);
        Some(Flow::Continue)
    }

    fn fragment(&self, fragment: Fragment<'p>) -> Flow {
        // The pool blocks go back when `fragment` drops, after the copy.
        self.inspect(&fragment).unwrap_or(Flow::Continue)
    }

    fn flush(&self) {
        self.link.flush();
    }

    fn finish(&self, _counters: &SwRodCounters) {
        self.link.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::input::Input;
    use crate::store::{EventStore, StoreConfig};
    use crate::swrod::link::BATCHES;
    use crate::swrod::swrod_link;
    use rodeo_format::fragment::Status;
    use rodeo_format::fragment::{RodBuilder, SourceId};
    use rodeo_memory::{PagePool, PagePoolConfig};
    use rodeo_swrod::{SwRodConfig, ROB_HEADER_WORDS};

    /// The sink has room while as many batches are free as one superpage has taken (so its
    /// builder never waits in the middle of one); reading the batches gives it room again.
    #[test]
    fn room_is_what_a_superpage_took() {
        let config = SwRodConfig {
            window: 4,
            ..SwRodConfig::default()
        };
        // An odd number of batches (`BATCHES` and one or two more) of 64 fragments of 16
        // words: superpages of two take all but one.
        let extra = 1 + BATCHES % 2;
        let (sink, mut input) = swrod_link(0, &config, extra, 16);
        let batches = sink.link.free.capacity();
        assert_eq!(batches, BATCHES + extra);
        let mut l1id = 0u32;
        // One "superpage" of 128 fragments: two batches, handed over when full.
        let superpage = |l1id: &mut u32| {
            for _ in 0..128 {
                let mut words = Vec::new();
                RodBuilder {
                    source_id: SourceId(9),
                    extended_l1id: *l1id,
                    status: &[0],
                    data: &[&[1, 2, 3]],
                    ..RodBuilder::default()
                }
                .write_vec(&mut words)
                .unwrap();
                let rob = [0u32; ROB_HEADER_WORDS];
                sink.link.append(
                    ROB_HEADER_WORDS + words.len(),
                    [&rob[..], &words[..]].into_iter(),
                    Status::OK,
                );
                *l1id += 1;
            }
            FragmentSink::flush(&sink);
        };
        assert!(sink.has_room());
        superpage(&mut l1id);
        let mut taken = 2;
        assert_eq!(sink.link.need.load(Ordering::Relaxed), 2);
        // Room for another superpage of two while two batches are free.
        while batches - taken >= 2 {
            assert!(sink.has_room(), "{taken} of {batches} batches taken");
            superpage(&mut l1id);
            taken += 2;
        }
        assert_eq!(batches - taken, 1);
        assert!(!sink.has_room(), "one batch free, a superpage takes two");
        assert_eq!(sink.counters().sink_waits, 1);
        let pool = PagePool::new(PagePoolConfig {
            page_bytes: 256,
            pages: 4096,
            ..PagePoolConfig::default()
        })
        .unwrap();
        let mut store = EventStore::new(&pool, &StoreConfig::with_channels(1, 9, 4096)).unwrap();
        let want = 64 * taken as u64;
        let mut stored = 0;
        while stored < want {
            match input.poll(&mut store) {
                0 => break,
                n => stored += n,
            }
        }
        assert_eq!(stored, want);
        assert!(sink.has_room());
        assert_eq!(sink.counters().sink_waits, 1, "counted once per episode");
    }
}
