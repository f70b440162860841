//! What every input of a node is built for ([`ChannelSetup`]): the node's channels, their
//! fragments, the error file and the CPU of its emulated cards, taken from its
//! [`crate::node::NodeConfig`]; what each input's builder hands back ([`BuiltInput`]); and
//! where an emulated S-LINK card's engine thread runs ([`start_card`]).
//!
//! # The emulated cards' CPU
//!
//! A node with a CPU of its own (`run.cpu_plan = "auto"`: [`ChannelSetup::card_cpu`]) runs its
//! emulated S-LINK cards' engine threads there, beside its core thread, instead of on the CPUs
//! the rest of the partition shares: a real card's DMA costs the host no CPU and its writes land
//! in the cache the reader reads them from (DDIO); an emulated card on the reader's CPU comes
//! closest to both (its writes stay in that CPU's cache, and it takes nothing from the other
//! applications). Measured (`rodeo bench partition`, default partition, 300,000 events, two
//! rounds, docs/benchmarks-history-2026-12a.md, "eleventh session"): one process 7.1 us per
//! L1 accept at 247 kHz against 8.5 us at 217 kHz with the card on the shared CPU, `--processes`
//! 8.2-8.3 us at 223-225 kHz against 9.2-9.4 us at 205-208 kHz; the card thread 0.74-0.87 us per
//! L1 accept against 1.17-1.26, the core thread 3.2-3.6 against 4.0-4.4.

use std::path::Path;
use std::sync::Arc;

use rodeo_cards::dma::{EmulatedChannel, EmulatedConfig, Generator, SuperpageBuffer};
use rodeo_cards::net::NetCounters;
use rodeo_memory::SuperpagePool;

use super::watch::{LaneErrors, LaneProbe};
use crate::node::error::NodeError;
use crate::server::input::Input;

/// An input built for a node: what the core thread polls, the memory it reads, and what the
/// node's input watch reads of it.
pub(crate) struct BuiltInput {
    /// What the core thread polls.
    pub(crate) input: Box<dyn Input>,
    /// The DMA superpages its cards fill (kept as long as the node).
    pub(crate) superpages: Option<SuperpagePool>,
    /// Per channel, where its data comes from and how to read its figures.
    pub(crate) lanes: Vec<LaneProbe>,
    /// Per channel, the S-LINK check errors (DMA inputs).
    pub(crate) errors: Option<Arc<LaneErrors>>,
    /// The network receivers' counters (network inputs).
    pub(crate) net: Vec<Arc<NetCounters>>,
}

/// The part of a node's configuration every input is built from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChannelSetup<'a> {
    /// ROB channels.
    pub(crate) channels: usize,
    /// Data words per ROD fragment.
    pub(crate) fragment_words: u32,
    /// Source (ROB) id of channel 0; channel i has this + i.
    pub(crate) base_source_id: u32,
    /// L1ID wrap of the emulated inputs.
    pub(crate) l1id_wrap: u32,
    /// The event the emulated inputs (S-LINK and FELIX) start at.
    pub(crate) first_event: u64,
    /// File receiving unreadable fragments (rate-limited).
    pub(crate) error_file: Option<&'a Path>,
    /// The CPU the emulated S-LINK cards' engine threads run on: the node's core CPU (module
    /// docs); `None`: wherever the thread that builds the input may run.
    pub(crate) card_cpu: Option<usize>,
    /// A rejoined node's run front, which its emulated S-LINK inputs follow
    /// ([`super::follow`]); `None` for a node that was not restarted.
    pub(crate) front: Option<&'a super::follow::RunFront>,
}

/// Starts emulated S-LINK card `k` of the node (its engine thread `slink{k}`) with `channels`,
/// on [`ChannelSetup::card_cpu`] when set (module docs; a CPU the kernel refuses leaves the
/// thread where its starter may run).
pub(crate) fn start_card<S: SuperpageBuffer, G: Generator>(
    config: &ChannelSetup<'_>,
    k: usize,
    channels: Vec<(EmulatedConfig, G)>,
) -> Result<Vec<EmulatedChannel<S>>, NodeError> {
    // The engine thread inherits its starter's CPUs: the starter's are narrowed for the start
    // and restored when the guard drops.
    let _placed = config
        .card_cpu
        .and_then(|cpu| rodeo_memory::cpu::narrow_thread(&[cpu]));
    EmulatedChannel::start_card(&format!("slink{k}"), channels).map_err(|source| NodeError::Io {
        what: format!("starting card thread slink{k}"),
        source,
    })
}

/// The error file of unreadable words, created if configured.
pub(crate) fn error_file(config: &ChannelSetup<'_>) -> Result<Option<std::fs::File>, NodeError> {
    match config.error_file {
        Some(p) => Ok(Some(std::fs::File::create(p).map_err(|source| {
            NodeError::Io {
                what: format!("creating error file {}", p.display()),
                source,
            }
        })?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use rodeo_cards::generator::{SlinkConfig, SlinkGenerator};
    use rodeo_memory::Superpage;

    use super::*;

    /// The CPUs a task may run on, from the `Cpus_allowed_list` of its `/proc` directory.
    fn allowed(task: &str) -> String {
        let status = std::fs::read_to_string(format!("{task}/status")).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list:"))
            .unwrap();
        line.split(':').nth(1).unwrap().trim().to_string()
    }

    /// The `/proc` directory of this process's one thread named `name`, once it has named
    /// itself.
    fn thread_named(name: &str) -> String {
        let found = rodeo_testkit::wait_for(name, std::time::Duration::from_secs(5), || {
            Some(rodeo_testkit::threads_named(name)).filter(|t| !t.is_empty())
        });
        assert_eq!(found.len(), 1, "{found:?}");
        found[0].to_string_lossy().into_owned()
    }

    fn setup(card_cpu: Option<usize>) -> ChannelSetup<'static> {
        ChannelSetup {
            channels: 1,
            fragment_words: 10,
            base_source_id: 0x0041_0000,
            l1id_wrap: 1 << 24,
            first_event: 0,
            error_file: None,
            card_cpu,
            front: None,
        }
    }

    #[test]
    fn a_card_runs_on_the_card_cpu_and_its_starter_keeps_its_cpus() {
        let cpus = rodeo_memory::cpu::thread_cpus();
        let Some(&cpu) = cpus.last() else {
            return; // the kernel does not say (not Linux)
        };
        let me = allowed("/proc/thread-self");
        let card = |c: Option<usize>, k: usize| {
            let g = SlinkGenerator::new(SlinkConfig::default());
            start_card::<Superpage, _>(&setup(c), k, vec![(EmulatedConfig::default(), g)]).unwrap()
        };
        // Card 7 on the last CPU: its engine thread `slink7` may run there only.
        let placed = card(Some(cpu), 7);
        assert_eq!(allowed(&thread_named("slink7")), cpu.to_string());
        // Card 8 without a CPU: where its starter may run, which the first start left as it was.
        let free = card(None, 8);
        assert_eq!(allowed(&thread_named("slink8")), me);
        assert_eq!(allowed("/proc/thread-self"), me);
        drop((placed, free));
    }
}
