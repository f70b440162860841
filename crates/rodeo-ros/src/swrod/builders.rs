//! The `swrod` thread's work: every ROB's builder run on the builder pool until all have
//! returned, their counters published every 20 ms ([`run_builders`]), and what the cards had
//! handed over that no builder read counted at the end ([`CardsAtStop`]).

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::Duration;

use rodeo_cards::dma::{DmaChannel, EmulatedChannel};
use rodeo_memory::Superpage;
use rodeo_swrod::{DefaultFormat, FragmentBuilder, RobRun, SwRodCounters, SwRodError};

use super::parts::{SwRodParts, SwRodRob};
use super::sink::StoreSink;

/// The cards when they stopped: what they had handed over and no builder read (their
/// writing's CPU time is the builders' `input_cpu_ns`: the lazy channels write in the builder
/// threads, untimed).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CardsAtStop {
    /// FELIX blocks handed over and not read.
    pub(super) unread_blocks: u64,
    /// Bytes of those blocks.
    pub(super) unread_bytes: u64,
}

/// The builders' result: their counters summed (or the first error), and what they left
/// unread in the cards' queues.
pub(super) type BuildersResult = (Result<SwRodCounters, SwRodError>, CardsAtStop);

/// Runs every ROB's builder on the builder pool until all have returned, publishing their
/// counters into `live` every 20 ms; returns the final counters, summed, and counts what the
/// cards had handed over that no builder read (dropped at shutdown, never silently).
pub(super) fn run_builders(
    parts: SwRodParts,
    live: &Mutex<Vec<SwRodCounters>>,
    stop: &AtomicBool,
) -> BuildersResult {
    let SwRodParts {
        mut robs,
        pools,
        pool,
        ..
    } = parts;
    let builders = match robs
        .iter()
        .map(|r| FragmentBuilder::new(&r.config, &pools, DefaultFormat::default()))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(b) => b,
        Err(e) => return (Err(e), cards_at_stop(&mut robs)),
    };
    let runs: Vec<RobRun<'_, '_, _, EmulatedChannel<Superpage>, StoreSink>> = builders
        .iter()
        .zip(&robs)
        .map(|(b, r)| RobRun {
            builder: b,
            channels: vec![&r.card],
            sink: &r.sink,
        })
        .collect();
    let results = std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("swrod-pool".into())
            .spawn_scoped(s, || pool.run(&runs, stop));
        let publish = || {
            let mut l = live.lock().unwrap_or_else(|e| e.into_inner());
            for (slot, b) in l.iter_mut().zip(&builders) {
                *slot = b.counters();
            }
        };
        while handle.as_ref().is_ok_and(|h| !h.is_finished()) {
            publish();
            std::thread::sleep(Duration::from_millis(20));
        }
        publish();
        match handle {
            Ok(h) => h.join().unwrap_or(Err(SwRodError::Panicked(0))),
            Err(e) => Err(SwRodError::Spawn(e)),
        }
    });
    let mut total = SwRodCounters::default();
    let mut first_error = None;
    match results {
        Ok(per_rob) => {
            for r in per_rob {
                match r {
                    Ok(c) => total.add(&c),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        Err(e) => first_error = Some(e),
    }
    // The cards (and their threads) go with `robs`, after the builders returned and what
    // they left in the cards' queues is counted.
    drop(runs);
    drop(builders);
    let left = cards_at_stop(&mut robs);
    drop(robs);
    let result = match first_error {
        Some(e) => Err(e),
        None => Ok(total),
    };
    (result, left)
}

/// Stops the cards, then empties their ready queues, counting the blocks and bytes no builder
/// read. Stopped first: a lazy card's pop would
/// otherwise write new superpages for the count.
fn cards_at_stop(robs: &mut [SwRodRob]) -> CardsAtStop {
    let mut u = CardsAtStop::default();
    for r in robs {
        r.card.stop();
        while let Some(f) = r.card.pop_superpage() {
            u.unread_blocks += f.units;
            u.unread_bytes += f.bytes_used as u64;
        }
    }
    u
}
