//! Link monitoring: decode what a channel delivers and count every problem by kind.
//!
//! A [`LinkMonitor`] reads a channel's filled superpages as the receiving side would — FELIX
//! blocks through the block decoder and per-E-link reassembler, then the default packet
//! decoder; S-LINK data through [`rodeo_format::slink::SlinkChecker`], then the counter payload
//! check — and keeps the counters. `rodeo cards` shows them per channel; tests compare them
//! with what a [`crate::corrupt::Corruptor`] injected. It is a checking reader, not the data
//! path: the fragment builder and event store do their own decoding on their hot paths.

use rodeo_files::linkfile::LinkMode;
use rodeo_format::checksum::bytes_as_words;
use rodeo_format::felix::{check_packet, FelixCounters, Reassembler};
use rodeo_format::slink::{SlinkCheckConfig, SlinkChecker, SlinkCounters, SlinkItem};
use rodeo_format::synth::check_counter;

/// Decodes one channel's stream; see the module docs.
#[derive(Debug)]
pub struct LinkMonitor {
    decoder: Decoder,
    block_size: usize,
    /// Packets (FELIX) or fragments (S-LINK) whose payload failed its check.
    bad_payloads: u64,
    /// Packets or fragments whose payload checked out.
    good_payloads: u64,
    /// Bytes that could not be decoded at all (a FELIX tail shorter than a block, S-LINK data
    /// that is not whole words).
    undecodable_bytes: u64,
    scratch: Vec<u32>,
}

#[derive(Debug)]
enum Decoder {
    Felix(Box<Reassembler>),
    Slink(Box<SlinkChecker>),
}

/// The counters of a monitored link, as `(name, value)` pairs in a fixed order.
pub type LinkCounts = Vec<(&'static str, u64)>;

impl LinkMonitor {
    /// A monitor for FELIX blocks of `block_size` bytes.
    pub fn felix(block_size: usize) -> LinkMonitor {
        LinkMonitor::new(
            Decoder::Felix(Box::new(Reassembler::new(
                rodeo_format::felix::DEFAULT_MAX_CHUNK_BYTES,
            ))),
            block_size,
        )
    }

    /// A monitor for S-LINK fragments framed and checked as `config` says.
    pub fn slink(config: SlinkCheckConfig) -> LinkMonitor {
        LinkMonitor::new(Decoder::Slink(Box::new(SlinkChecker::new(config))), 0)
    }

    /// A monitor for a stream of `mode` (FELIX `block_size`; S-LINK `config`).
    pub fn for_mode(mode: LinkMode, block_size: usize, config: SlinkCheckConfig) -> LinkMonitor {
        match mode {
            LinkMode::Felix => LinkMonitor::felix(block_size),
            LinkMode::Slink => LinkMonitor::slink(config),
        }
    }

    fn new(decoder: Decoder, block_size: usize) -> LinkMonitor {
        LinkMonitor {
            decoder,
            block_size,
            bad_payloads: 0,
            good_payloads: 0,
            undecodable_bytes: 0,
            scratch: Vec::new(),
        }
    }

    /// Decodes the data of one filled superpage (whole units).
    pub fn consume(&mut self, data: &[u8]) {
        match &mut self.decoder {
            Decoder::Felix(r) => {
                let mut blocks = data.chunks_exact(self.block_size.max(1));
                for block in &mut blocks {
                    // Errors are counted by the reassembler; the data goes on.
                    let _ = r.push_block(block, |c| match check_packet(c.elink, c.data) {
                        Ok(_) if c.flags.is_empty() => self.good_payloads += 1,
                        _ => self.bad_payloads += 1,
                    });
                }
                self.undecodable_bytes += blocks.remainder().len() as u64;
            }
            Decoder::Slink(checker) => {
                let whole = data.len() / 4 * 4;
                self.undecodable_bytes += (data.len() - whole) as u64;
                let words = match bytes_as_words(&data[..whole]) {
                    Some(w) => w,
                    None => {
                        self.scratch.clear();
                        self.scratch.extend(
                            data[..whole]
                                .chunks_exact(4)
                                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                        );
                        &self.scratch
                    }
                };
                let (good, bad) = (&mut self.good_payloads, &mut self.bad_payloads);
                checker.check(words, |item| {
                    if let SlinkItem::Fragment(f) = item {
                        let data =
                            rodeo_format::fragment::RodFragment::parse(f.rod)
                                .ok()
                                .map(|rod| {
                                    check_counter(
                                        rod.data(),
                                        rod.source_id().word(),
                                        rod.extended_l1id(),
                                    )
                                });
                        match data {
                            Some(None) if f.status.is_ok() => *good += 1,
                            _ => *bad += 1,
                        }
                    }
                });
            }
        }
    }

    /// FELIX counters (FELIX monitors only).
    pub fn felix_counters(&self) -> Option<FelixCounters> {
        match &self.decoder {
            Decoder::Felix(r) => Some(r.counters()),
            Decoder::Slink(_) => None,
        }
    }

    /// S-LINK counters (S-LINK monitors only).
    pub fn slink_counters(&self) -> Option<SlinkCounters> {
        match &self.decoder {
            Decoder::Slink(c) => Some(*c.counters()),
            Decoder::Felix(_) => None,
        }
    }

    /// Packets or fragments whose payload checked out (and carried no error flag).
    pub fn good(&self) -> u64 {
        self.good_payloads
    }

    /// Packets or fragments with an error flag or a payload that failed its check.
    pub fn bad(&self) -> u64 {
        self.bad_payloads
    }

    /// Every counter by name: the good/bad totals, then the decoder's counters by kind.
    pub fn counts(&self) -> LinkCounts {
        let mut v = vec![
            ("good", self.good_payloads),
            ("bad", self.bad_payloads),
            ("undecodable_bytes", self.undecodable_bytes),
        ];
        match &self.decoder {
            Decoder::Felix(r) => {
                let c = r.counters();
                v.extend([
                    ("blocks", c.blocks),
                    ("bad_blocks", c.bad_blocks),
                    ("damaged_blocks", c.damaged_blocks),
                    ("block_gaps", c.block_gaps),
                    ("lost_blocks", c.lost_blocks),
                    ("chunks", c.chunks),
                    ("sequence_errors", c.sequence_errors),
                    ("crc_errors", c.crc_errors),
                    ("errors", c.errors),
                    ("truncations", c.truncations),
                    ("timeouts", c.timeouts),
                    ("oversize_chunks", c.oversize_chunks),
                    ("dropped_bytes", c.dropped_bytes),
                ]);
            }
            Decoder::Slink(ch) => {
                let c = ch.counters();
                v.extend([
                    ("fragments", c.fragments),
                    ("flagged_fragments", c.flagged_fragments),
                    ("missing_begin", c.missing_begin),
                    ("missing_end", c.missing_end),
                    ("truncated", c.truncated),
                    ("crc_errors", c.crc_errors),
                    ("bad_markers", c.bad_markers),
                    ("format_errors", c.format_errors),
                    ("duplicates", c.duplicates),
                    ("l1id_sequence_errors", c.l1id_sequence_errors),
                    ("source_mismatches", c.source_mismatches),
                    ("short_fragments", c.short_fragments),
                    ("garbage_spans", c.garbage_spans),
                    ("dropped_words", c.dropped_words),
                ]);
            }
        }
        v
    }
}
