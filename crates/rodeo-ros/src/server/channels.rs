//! Per-channel figures of a readout node for monitors: each ROB channel's fragments, what it
//! holds now, its buffer occupancy (the store's fill; pages lent to DMA or ahead of the L1 apart,
//! see [`crate::store`]) and its errors by kind.
//!
//! The store belongs to the core thread alone (nothing on the request path is shared), so the
//! core thread copies each channel's counters into a table of atomics: when it starts, on its
//! idle turns, at most every [`PUBLISH_TURNS`] busy turns, and when it stops. A monitor reads
//! the table ([`ChannelStats::snapshot`]) without touching the store. The copies are relaxed
//! stores of a few words per channel, a few hundred nanoseconds per publish on a 24-channel
//! node, once per thousand turns when busy: nothing a request waits for.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::EventStore;

/// Busy turns of the core loop between two publishes (idle turns always publish).
pub const PUBLISH_TURNS: u64 = 1024;

/// One channel's figures at a publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelFigures {
    /// The channel's ROB source id.
    pub rob: u32,
    /// Fragments stored since the node started.
    pub fragments: u64,
    /// Fragments held now (stored, not yet cleared).
    pub stored: u64,
    /// Pages in use now (fill and lent).
    pub pages_in_use: u64,
    /// Of those, pages lent: to a writer with nothing adopted yet, or holding fragments ahead
    /// of the L1 (an emulated input's run-ahead; [`crate::store`]).
    pub lent_pages: u64,
    /// Pages the channel owns.
    pub pages: u64,
    /// Fragments whose L1ID was already stored (the first copy kept).
    pub duplicates: u64,
    /// Fragments dropped because their L1ID had been cleared before they arrived.
    pub dropped_after_clear: u64,
    /// Clears of L1IDs the channel never had.
    pub unknown_clears: u64,
    /// Ingest attempts refused for lack of room with no page ahead of the L1 (back-pressure:
    /// the input waits for the farm).
    pub full: u64,
    /// Ingest attempts refused while pages were ahead of the L1 (an emulated card's normal
    /// run-ahead, not back-pressure).
    pub full_ahead: u64,
    /// Times the occupancy crossed the alarm level upwards.
    pub alarms: u64,
}

impl ChannelFigures {
    /// The store's fill: pages in use but not lent, over pages owned, 0.0 ..= 1.0.
    pub fn occupancy(&self) -> f64 {
        if self.pages == 0 {
            0.0
        } else {
            self.pages_in_use.saturating_sub(self.lent_pages) as f64 / self.pages as f64
        }
    }

    /// Pages lent over pages owned, 0.0 ..= 1.0.
    pub fn lent_ratio(&self) -> f64 {
        if self.pages == 0 {
            0.0
        } else {
            self.lent_pages as f64 / self.pages as f64
        }
    }
}

#[derive(Debug, Default)]
struct Cell {
    fragments: AtomicU64,
    stored: AtomicU64,
    pages_in_use: AtomicU64,
    lent_pages: AtomicU64,
    duplicates: AtomicU64,
    dropped_after_clear: AtomicU64,
    unknown_clears: AtomicU64,
    full: AtomicU64,
    full_ahead: AtomicU64,
    alarms: AtomicU64,
}

/// The shared table of per-channel figures; see the module docs.
#[derive(Debug)]
pub struct ChannelStats {
    robs: Box<[u32]>,
    pages: u64,
    cells: Box<[Cell]>,
}

impl ChannelStats {
    /// A table for the channels of `store`, filled with its figures now.
    pub fn for_store(store: &EventStore) -> ChannelStats {
        let n = store.channels();
        let stats = ChannelStats {
            robs: (0..n).map(|c| store.source_id(c).unwrap_or(0)).collect(),
            pages: store.pages_per_channel() as u64,
            cells: (0..n).map(|_| Cell::default()).collect(),
        };
        stats.publish(store);
        stats
    }

    /// Copies every channel's counters of `store` into the table (the core thread).
    pub(crate) fn publish(&self, store: &EventStore) {
        for (c, cell) in self.cells.iter().enumerate().take(store.channels()) {
            let k = store.counters(c);
            let put = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
            put(&cell.fragments, k.fragments);
            put(&cell.stored, k.stored);
            put(&cell.pages_in_use, k.pages_in_use);
            put(&cell.lent_pages, k.lent_pages);
            put(&cell.duplicates, k.duplicates);
            put(&cell.dropped_after_clear, k.dropped_after_clear);
            put(&cell.unknown_clears, k.unknown_clears);
            put(&cell.full, k.full);
            put(&cell.full_ahead, k.full_ahead);
            put(&cell.alarms, k.alarms);
        }
    }

    /// Every channel's figures as last published, in channel order.
    pub fn snapshot(&self) -> Vec<ChannelFigures> {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.robs
            .iter()
            .zip(self.cells.iter())
            .map(|(&rob, c)| ChannelFigures {
                rob,
                fragments: ld(&c.fragments),
                stored: ld(&c.stored),
                pages_in_use: ld(&c.pages_in_use),
                lent_pages: ld(&c.lent_pages),
                pages: self.pages,
                duplicates: ld(&c.duplicates),
                dropped_after_clear: ld(&c.dropped_after_clear),
                unknown_clears: ld(&c.unknown_clears),
                full: ld(&c.full),
                full_ahead: ld(&c.full_ahead),
                alarms: ld(&c.alarms),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;
    use rodeo_format::fragment::{RodBuilder, SourceId, Status};
    use rodeo_memory::{PagePool, PagePoolConfig, RegionOptions};

    fn rod(source: u32, l1id: u32) -> Vec<u32> {
        let mut out = Vec::new();
        RodBuilder {
            source_id: SourceId(source),
            extended_l1id: l1id,
            status: &[0],
            data: &[&[1, 2, 3]],
            ..RodBuilder::default()
        }
        .write_vec(&mut out)
        .unwrap();
        out
    }

    #[test]
    fn a_snapshot_shows_each_channel_as_last_published_not_live() {
        let pool = PagePool::new(PagePoolConfig {
            page_bytes: 1024,
            pages: 64,
            region: RegionOptions::default(),
        })
        .unwrap();
        let mut store =
            EventStore::new(&pool, &StoreConfig::with_channels(3, 0x0041_0000, 8)).unwrap();
        let stats = ChannelStats::for_store(&store);
        let robs: Vec<u32> = stats.snapshot().iter().map(|f| f.rob).collect();
        assert_eq!(robs, vec![0x0041_0000, 0x0041_0001, 0x0041_0002]);

        // Channel 1: three fragments, one of them twice; channel 2: two.
        for l1id in [0u32, 1, 2, 2] {
            store
                .ingest(1, &rod(0x0041_0001, l1id), Status::OK)
                .unwrap();
        }
        for l1id in [0u32, 1] {
            store
                .ingest(2, &rod(0x0041_0002, l1id), Status::OK)
                .unwrap();
        }
        assert!(
            stats.snapshot().iter().all(|f| f.fragments == 0),
            "nothing shows before the core thread publishes"
        );
        stats.publish(&store);
        let s = stats.snapshot();
        assert_eq!((s[0].fragments, s[0].stored, s[0].pages_in_use), (0, 0, 0));
        assert_eq!((s[1].fragments, s[1].stored, s[1].duplicates), (3, 3, 1));
        assert_eq!((s[2].fragments, s[2].stored), (2, 2));
        assert!(s[1].pages_in_use >= 1 && s[1].pages == 8);
        assert!(s[1].occupancy() > 0.0 && s[1].occupancy() <= 1.0);

        // A clear releases what channels 1 and 2 held; the next publish shows it.
        store.clear([0u32, 1]);
        store.reclaim();
        stats.publish(&store);
        let s = stats.snapshot();
        assert_eq!((s[1].fragments, s[1].stored), (3, 1), "L1ID 2 not cleared");
        assert_eq!((s[2].fragments, s[2].stored), (2, 0));
    }
}
