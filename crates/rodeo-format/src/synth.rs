//! Synthetic events and fragments with checkable payloads, for `rodeo gen`, emulators and tests.
//!
//! Every data word is a function of the fragment's source id, its L1ID and the word's index
//! ([`counter_word`]), so a reader can check any word of any fragment without a reference copy.
//! The ROB mix imitates a real detector: ROBs of several sub-detectors, each with its own typical
//! fragment size, varying by up to ±25% from event to event (deterministically, from the L1ID).

use crate::checksum::ChecksumType;
use crate::fragment::{
    EventBuilder, FragmentError, RobBuilder, RobPayload, RodBuilder, SourceId, StatusPosition,
    StreamTag, SubDetector,
};

/// Word `i` of the data block of the fragment from `source` for `l1id`.
pub fn counter_word(source: u32, l1id: u32, i: u32) -> u32 {
    mix(source ^ l1id.rotate_left(16)).wrapping_add(i)
}

/// Fills `data` with the counter payload of (`source`, `l1id`).
pub fn fill_counter(data: &mut [u32], source: u32, l1id: u32) {
    let base = mix(source ^ l1id.rotate_left(16));
    for (i, w) in data.iter_mut().enumerate() {
        *w = base.wrapping_add(i as u32);
    }
}

/// Index of the first word of `data` that is not the counter payload of (`source`, `l1id`).
pub fn check_counter(data: &[u32], source: u32, l1id: u32) -> Option<usize> {
    let base = mix(source ^ l1id.rotate_left(16));
    data.iter()
        .enumerate()
        .position(|(i, &w)| w != base.wrapping_add(i as u32))
}

/// A 32-bit integer hash (a few multiply-xorshift rounds): cheap, well spread, deterministic.
fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7FEB_352D);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846C_A68B);
    x ^ (x >> 16)
}

/// Sub-detectors of the synthetic ROB mix and their typical ROD data size in words.
const MIX: [(SubDetector, u32); 7] = [
    (SubDetector::PIXEL_BARREL, 180),
    (SubDetector::SCT_BARREL_A, 220),
    (SubDetector(0x31), 300),
    (SubDetector::LAR_EM_BARREL_A, 420),
    (SubDetector(0x51), 260),
    (SubDetector(0x61), 140),
    (SubDetector::TDAQ_CTP, 60),
];

/// Configuration of synthetic events.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Number of ROBs per event.
    pub robs: usize,
    /// Checksum type of each ROB fragment and of the event.
    pub checksum: ChecksumType,
    /// Run number written into every fragment.
    pub run_number: u32,
    /// Multiplies every sub-detector's typical size (1.0: the built-in mix, ~270 words per ROB).
    pub size_scale: f64,
    /// Stream tag written into every event (name, type).
    pub stream: (String, String),
}

impl Default for SynthConfig {
    fn default() -> SynthConfig {
        SynthConfig {
            robs: 16,
            checksum: ChecksumType::Adler32,
            run_number: 1,
            size_scale: 1.0,
            stream: ("physics_Main".into(), "physics".into()),
        }
    }
}

/// Writes synthetic full events, reusing its word buffers from event to event.
#[derive(Debug)]
pub struct EventSynth {
    cfg: SynthConfig,
    sources: Vec<(SourceId, u32)>,
    data: Vec<u32>,
    robs: Vec<u32>,
    rob_ranges: Vec<(usize, usize)>,
}

impl EventSynth {
    /// A generator for `cfg`; ROB source ids are assigned round-robin over the sub-detector mix.
    pub fn new(cfg: SynthConfig) -> EventSynth {
        let sources = (0..cfg.robs)
            .map(|i| {
                let (sub, words) = MIX[i % MIX.len()];
                let module = (i / MIX.len()) as u16;
                let typical = ((f64::from(words) * cfg.size_scale).round() as u32).max(1);
                (SourceId::new(sub, module), typical)
            })
            .collect();
        EventSynth {
            cfg,
            sources,
            data: Vec::new(),
            robs: Vec::new(),
            rob_ranges: Vec::new(),
        }
    }

    /// The ROB source ids of every event, in payload order.
    pub fn source_ids(&self) -> impl Iterator<Item = SourceId> + '_ {
        self.sources.iter().map(|(s, _)| *s)
    }

    /// Data words of the ROD from `source` (index `rob`) for `l1id`: typical size ±25%.
    fn data_words(&self, rob: usize, l1id: u32) -> usize {
        let (source, typical) = self.sources[rob];
        let spread = typical / 2;
        let jitter = if spread == 0 {
            0
        } else {
            mix(source.word() ^ l1id) % (spread + 1)
        };
        (typical - typical / 4 + jitter) as usize
    }

    /// Writes the ROB fragment of ROB index `rob` for `l1id` at the end of `out`.
    pub fn rob(
        &mut self,
        rob: usize,
        l1id: u32,
        bcid: u16,
        out: &mut Vec<u32>,
    ) -> Result<usize, FragmentError> {
        let n = self.data_words(rob, l1id);
        let source = self.sources[rob].0;
        self.data.clear();
        self.data.resize(n, 0);
        fill_counter(&mut self.data, source.word(), l1id);
        let pieces: [&[u32]; 1] = [&self.data];
        let rod = RodBuilder {
            source_id: source,
            run_number: self.cfg.run_number,
            extended_l1id: l1id,
            bcid,
            trigger_type: 1,
            status: &[0],
            status_position: StatusPosition::AfterData,
            data: &pieces,
            ..RodBuilder::default()
        };
        RobBuilder {
            source_id: source,
            status: &[0],
            checksum: self.cfg.checksum,
            payload: RobPayload::Rod(rod),
        }
        .write_vec(out)
    }

    /// Writes the full event `global_id` (L1ID = low 32 bits) into `out`, replacing its contents.
    pub fn event(&mut self, global_id: u64, out: &mut Vec<u32>) -> Result<(), FragmentError> {
        // The extended L1ID is the low 32 bits: L1ID in 23..0, the ECR count in 31..24.
        let l1id = global_id as u32;
        let bcid = (mix(l1id) % 3564) as u16;
        let mut robs = std::mem::take(&mut self.robs);
        robs.clear();
        self.rob_ranges.clear();
        for i in 0..self.sources.len() {
            let start = robs.len();
            self.rob(i, l1id, bcid, &mut robs)?;
            self.rob_ranges.push((start, robs.len()));
        }
        let pieces: Vec<&[u32]> = self.rob_ranges.iter().map(|&(a, b)| &robs[a..b]).collect();
        let tags = [StreamTag {
            name: &self.cfg.stream.0,
            stream_type: &self.cfg.stream.1,
        }];
        out.clear();
        let result = EventBuilder {
            source_id: SourceId::new(SubDetector::TDAQ_EVENT_FILTER, 0),
            checksum: self.cfg.checksum,
            global_id,
            run_type: 0,
            run_number: self.cfg.run_number,
            lumi_block: (global_id / 10_000) as u32,
            extended_l1id: l1id,
            bcid: u32::from(bcid),
            l1_trigger_type: 1,
            stream_tags: &tags,
            robs: &pieces,
            ..EventBuilder::default()
        }
        .write_vec(out)
        .map(|_| ());
        drop(pieces);
        self.robs = robs;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragment::FullEvent;

    #[test]
    fn events_parse_and_payloads_check() {
        let mut synth = EventSynth::new(SynthConfig {
            robs: 9,
            ..SynthConfig::default()
        });
        let mut ev = Vec::new();
        for gid in [0u64, 1, 77, (3 << 24) + 5] {
            synth.event(gid, &mut ev).unwrap();
            let e = FullEvent::parse(&ev).unwrap();
            e.verify_checksum().unwrap();
            assert_eq!(e.global_id(), gid);
            assert_eq!(e.validate_robs().unwrap(), 9);
            for rob in e.robs() {
                let rob = rob.unwrap();
                rob.verify_checksum().unwrap();
                let rod = rob.rod();
                assert_eq!(
                    check_counter(rod.data(), rod.source_id().word(), rod.extended_l1id()),
                    None
                );
            }
        }
    }

    #[test]
    fn counter_check_finds_a_changed_word() {
        let mut d = vec![0; 50];
        fill_counter(&mut d, 0x0011_0002, 9);
        assert_eq!(check_counter(&d, 0x0011_0002, 9), None);
        d[17] ^= 4;
        assert_eq!(check_counter(&d, 0x0011_0002, 9), Some(17));
        assert_eq!(counter_word(0x0011_0002, 9, 3), d[3]);
    }
}
