//! Error injection for link streams (QuestNP style): every error kind of links.md, on purpose.
//!
//! A [`Corruptor`] takes the units of a clean stream one at a time (FELIX blocks or S-LINK
//! fragments, as a [`UnitSource`] draws them from a generator) and passes each on unchanged or,
//! with probability `fraction`, corrupted with the next kind in turn, so every applicable kind
//! appears. After a corrupted unit the next one always passes clean: each injected error then
//! has one cause, and a receiver's counters can be compared with [`Corruptor::injected`] kind by
//! kind. What each kind does, and what a receiver counts for it, is listed on
//! [`CorruptionKind`].

use rodeo_files::linkfile::LinkMode;
use rodeo_format::checksum::{crc16_words, CRC16_INIT};
use rodeo_format::felix::{BlockDecoder, SubchunkType, Trailer, TrailerFlags, TrailerSize};
use rodeo_format::fragment::{ROD_MARKER, SLINK_BEGIN, SLINK_END};

use crate::dma::Generator;
use crate::generator::Rng;

/// One kind of injected error. S-LINK kinds apply to ROD-fragment streams, FELIX kinds to
/// block streams; [`CorruptionKind::applicable`] says which apply to a given stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CorruptionKind {
    /// S-LINK: the begin control word is removed (missing begin-of-fragment).
    MissingBegin,
    /// S-LINK: the end control word is removed (missing end-of-fragment).
    MissingEnd,
    /// S-LINK: the ROD marker is damaged (invalid header marker).
    BadMarker,
    /// S-LINK: the trailer's data count is off by one (fragment size error).
    SizeMismatch,
    /// S-LINK: the fragment is cut to 4 words, its L1ID unreadable (dropped; the next fragment
    /// then also shows an L1ID sequence error).
    Short,
    /// S-LINK: a header bit flipped after the CRC was computed (transmission error).
    CrcError,
    /// S-LINK: the fragment is not sent (the next one shows an L1ID sequence error).
    Lost,
    /// S-LINK: the fragment is sent twice (duplicate event).
    Duplicate,
    /// S-LINK: 1..16 garbage words before the fragment (dropped words).
    Garbage,
    /// FELIX: the start-of-block marker is damaged (unusable block).
    BadBlockHeader,
    /// FELIX: the block is not sent (sequence gap on its E-link).
    LostBlock,
    /// FELIX: the last trailer claims more payload than the block holds (damaged block).
    DamagedTrailer,
    /// FELIX: the CRC-error bit is set on a subchunk.
    CrcFlag,
    /// FELIX: the error bit is set on a subchunk.
    ErrorFlag,
    /// FELIX: a subchunk becomes TIMEOUT with the truncation bit (truncated chunk).
    Truncation,
    /// FELIX: a subchunk's type becomes MIDDLE (a MIDDLE without FIRST: sequence error).
    OrphanMiddle,
    /// FELIX: a block of random bytes is sent before the block (unusable block).
    GarbageBlock,
}

impl CorruptionKind {
    /// Every kind, S-LINK kinds first.
    pub const ALL: [CorruptionKind; 17] = [
        CorruptionKind::MissingBegin,
        CorruptionKind::MissingEnd,
        CorruptionKind::BadMarker,
        CorruptionKind::SizeMismatch,
        CorruptionKind::Short,
        CorruptionKind::CrcError,
        CorruptionKind::Lost,
        CorruptionKind::Duplicate,
        CorruptionKind::Garbage,
        CorruptionKind::BadBlockHeader,
        CorruptionKind::LostBlock,
        CorruptionKind::DamagedTrailer,
        CorruptionKind::CrcFlag,
        CorruptionKind::ErrorFlag,
        CorruptionKind::Truncation,
        CorruptionKind::OrphanMiddle,
        CorruptionKind::GarbageBlock,
    ];

    /// A snake_case name (for tables and JSON).
    pub fn name(self) -> &'static str {
        match self {
            CorruptionKind::MissingBegin => "missing_begin",
            CorruptionKind::MissingEnd => "missing_end",
            CorruptionKind::BadMarker => "bad_marker",
            CorruptionKind::SizeMismatch => "size_mismatch",
            CorruptionKind::Short => "short",
            CorruptionKind::CrcError => "crc_error",
            CorruptionKind::Lost => "lost",
            CorruptionKind::Duplicate => "duplicate",
            CorruptionKind::Garbage => "garbage",
            CorruptionKind::BadBlockHeader => "bad_block_header",
            CorruptionKind::LostBlock => "lost_block",
            CorruptionKind::DamagedTrailer => "damaged_trailer",
            CorruptionKind::CrcFlag => "crc_flag",
            CorruptionKind::ErrorFlag => "error_flag",
            CorruptionKind::Truncation => "truncation",
            CorruptionKind::OrphanMiddle => "orphan_middle",
            CorruptionKind::GarbageBlock => "garbage_block",
        }
    }

    /// Whether the kind applies to a stream of `mode` (S-LINK `framing` / `crc` settings;
    /// FELIX blocks of `block_size` bytes with `trailer`s).
    pub fn applicable(self, stream: &StreamShape) -> bool {
        use CorruptionKind::*;
        match (stream.mode, self) {
            (LinkMode::Slink, MissingBegin | MissingEnd) => stream.framing,
            (LinkMode::Slink, CrcError) => stream.crc,
            (LinkMode::Slink, BadMarker | SizeMismatch | Short | Lost | Duplicate | Garbage) => {
                true
            }
            (LinkMode::Felix, DamagedTrailer) => {
                // Only when one trailer can claim more than the block holds.
                let t = stream.trailer.bytes();
                stream.trailer.max_payload().next_multiple_of(t) > stream.block_size - 4 - t
            }
            (
                LinkMode::Felix,
                BadBlockHeader | LostBlock | CrcFlag | ErrorFlag | Truncation | OrphanMiddle
                | GarbageBlock,
            ) => true,
            _ => false,
        }
    }
}

/// What a stream looks like: enough to know which corruptions apply and how to apply them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamShape {
    /// FELIX blocks or S-LINK fragments.
    pub mode: LinkMode,
    /// S-LINK: control words frame each fragment.
    pub framing: bool,
    /// S-LINK: a CRC word follows each fragment.
    pub crc: bool,
    /// FELIX: block size in bytes.
    pub block_size: usize,
    /// FELIX: trailer width.
    pub trailer: TrailerSize,
}

/// Injects errors into a unit stream; see the module docs.
#[derive(Debug, Clone)]
pub struct Corruptor {
    shape: StreamShape,
    fraction: f64,
    kinds: Vec<CorruptionKind>,
    next_kind: usize,
    rng: Rng,
    cooldown: bool,
    injected: [u64; CorruptionKind::ALL.len()],
    units_in: u64,
    units_out: u64,
    scratch: Vec<u8>,
    decoder: BlockDecoder,
}

impl Corruptor {
    /// Corrupts a `fraction` (0..=1) of the units of a stream shaped `shape`, drawing from a
    /// PRNG seeded with `seed`, cycling through every applicable kind.
    pub fn new(shape: StreamShape, fraction: f64, seed: u64) -> Corruptor {
        let kinds: Vec<CorruptionKind> = CorruptionKind::ALL
            .into_iter()
            .filter(|k| k.applicable(&shape))
            .collect();
        Corruptor {
            shape,
            fraction: fraction.clamp(0.0, 1.0),
            kinds,
            next_kind: 0,
            rng: Rng::new(seed),
            cooldown: false,
            injected: [0; CorruptionKind::ALL.len()],
            units_in: 0,
            units_out: 0,
            scratch: Vec::new(),
            decoder: BlockDecoder::new(),
        }
    }

    /// The kinds this corruptor cycles through.
    pub fn kinds(&self) -> &[CorruptionKind] {
        &self.kinds
    }

    /// How many errors of `kind` were injected.
    pub fn injected(&self, kind: CorruptionKind) -> u64 {
        let i = CorruptionKind::ALL
            .iter()
            .position(|&k| k == kind)
            .unwrap_or(0);
        self.injected[i]
    }

    /// Every kind with its count (applicable kinds only).
    pub fn report(&self) -> Vec<(CorruptionKind, u64)> {
        self.kinds.iter().map(|&k| (k, self.injected(k))).collect()
    }

    /// Units taken in and handed out.
    pub fn units(&self) -> (u64, u64) {
        (self.units_in, self.units_out)
    }

    /// Passes one unit on, clean or corrupted: `emit` is called zero, one or two times.
    pub fn process(&mut self, unit: &[u8], mut emit: impl FnMut(&[u8])) {
        self.units_in += 1;
        let corrupt = !self.cooldown
            && !self.kinds.is_empty()
            && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= self.fraction
            && self.fraction > 0.0;
        if !corrupt {
            self.cooldown = false;
            self.units_out += 1;
            emit(unit);
            return;
        }
        self.cooldown = true;
        let kind = self.kinds[self.next_kind % self.kinds.len()];
        self.next_kind += 1;
        if let Some(i) = CorruptionKind::ALL.iter().position(|&k| k == kind) {
            self.injected[i] += 1;
        }
        let mut out = |bytes: &[u8], n: &mut u64| {
            *n += 1;
            emit(bytes);
        };
        let mut n = 0u64;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend_from_slice(unit);
        match kind {
            CorruptionKind::Lost | CorruptionKind::LostBlock => {}
            CorruptionKind::Duplicate => {
                out(unit, &mut n);
                out(unit, &mut n);
            }
            CorruptionKind::Garbage => {
                let words = 1 + (self.rng.next_u64() % 16) as usize;
                let mut garbage = Vec::with_capacity(4 * words);
                for _ in 0..words {
                    let mut w = self.rng.next_u64() as u32;
                    while matches!(w, SLINK_BEGIN | SLINK_END | ROD_MARKER) {
                        w = w.wrapping_add(1);
                    }
                    garbage.extend_from_slice(&w.to_le_bytes());
                }
                out(&garbage, &mut n);
                out(unit, &mut n);
            }
            CorruptionKind::GarbageBlock => {
                let mut garbage = vec![0u8; self.shape.block_size];
                for b in garbage.chunks_mut(8) {
                    let r = self.rng.next_u64().to_le_bytes();
                    b.copy_from_slice(&r[..b.len()]);
                }
                // Never a valid start-of-block marker.
                garbage[2..4].copy_from_slice(&0x1234u16.to_le_bytes());
                out(&garbage, &mut n);
                out(unit, &mut n);
            }
            _ => {
                if self.corrupt_in_place(kind, &mut scratch) {
                    out(&scratch, &mut n);
                } else {
                    out(unit, &mut n);
                }
            }
        }
        self.scratch = scratch;
        self.units_out += n;
    }

    /// Applies a kind that changes the unit's own bytes. False if the unit offers no place for
    /// it (the unit then passes unchanged, and the kind is still counted as attempted).
    fn corrupt_in_place(&mut self, kind: CorruptionKind, unit: &mut Vec<u8>) -> bool {
        let framed = usize::from(self.shape.framing);
        let crc = usize::from(self.shape.crc);
        let word_at = |u: &[u8], i: usize| -> Option<u32> {
            u.get(4 * i..4 * i + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let set = |u: &mut Vec<u8>, i: usize, w: u32| {
            if let Some(b) = u.get_mut(4 * i..4 * i + 4) {
                b.copy_from_slice(&w.to_le_bytes());
            }
        };
        let words = unit.len() / 4;
        match kind {
            CorruptionKind::MissingBegin => {
                unit.drain(..4);
                true
            }
            CorruptionKind::MissingEnd => {
                unit.truncate(unit.len() - 4);
                true
            }
            CorruptionKind::BadMarker => {
                let Some(w) = word_at(unit, framed) else {
                    return false;
                };
                set(unit, framed, w ^ 0x0000_FF00);
                self.reseal_crc(unit);
                true
            }
            CorruptionKind::SizeMismatch => {
                // The data count is the second-to-last ROD word.
                let at = words - framed - crc - 2;
                let Some(w) = word_at(unit, at) else {
                    return false;
                };
                set(unit, at, w.wrapping_add(1));
                self.reseal_crc(unit);
                true
            }
            CorruptionKind::Short => {
                let mut cut: Vec<u8> = unit[..4 * (framed + 4)].to_vec();
                if crc == 1 {
                    cut.extend_from_slice(&[0; 4]);
                }
                if framed == 1 {
                    cut.extend_from_slice(&SLINK_END.to_le_bytes());
                }
                *unit = cut;
                self.reseal_crc(unit);
                true
            }
            CorruptionKind::CrcError => {
                // Word 8 of the ROD header (detector event type): covered by the CRC only.
                let at = framed + 8;
                let Some(w) = word_at(unit, at) else {
                    return false;
                };
                set(unit, at, w ^ 0x10);
                true
            }
            CorruptionKind::BadBlockHeader => {
                unit[2..4].copy_from_slice(&0x1234u16.to_le_bytes());
                true
            }
            CorruptionKind::DamagedTrailer => {
                let t = self.shape.trailer;
                let at = unit.len() - t.bytes();
                let word = t.encode(Trailer {
                    kind: SubchunkType::Both,
                    length: t.max_payload(),
                    flags: TrailerFlags::NONE,
                });
                write_trailer(unit, at, t, word);
                true
            }
            CorruptionKind::CrcFlag
            | CorruptionKind::ErrorFlag
            | CorruptionKind::Truncation
            | CorruptionKind::OrphanMiddle => self.edit_subchunk(kind, unit),
            _ => false,
        }
    }

    /// Recomputes an S-LINK fragment's CRC word after an edit: the errors that model a front-end
    /// writing a bad fragment reach the link with a valid CRC, so each has exactly one symptom.
    fn reseal_crc(&self, unit: &mut [u8]) {
        if !self.shape.crc {
            return;
        }
        let framed = usize::from(self.shape.framing);
        let words: Vec<u32> = unit
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let Some(end) = words.len().checked_sub(framed + 1) else {
            return;
        };
        let Some(rod) = words.get(framed..end) else {
            return;
        };
        let crc = u32::from(crc16_words(CRC16_INIT, rod));
        unit[4 * end..4 * end + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Edits the trailer of the block's first subchunk that carries payload.
    fn edit_subchunk(&mut self, kind: CorruptionKind, block: &mut [u8]) -> bool {
        let t = self.shape.trailer;
        let target = match self.decoder.decode(block) {
            Ok(b) => b.subchunks().flatten().find(|s| s.kind.has_payload()),
            Err(_) => None,
        };
        let Some(sub) = target else {
            return false;
        };
        let at = sub.offset;
        let mut trailer = Trailer {
            kind: sub.kind,
            length: sub.payload.len(),
            flags: sub.flags,
        };
        match kind {
            CorruptionKind::CrcFlag => trailer.flags.crc_error = true,
            CorruptionKind::ErrorFlag => trailer.flags.error = true,
            CorruptionKind::Truncation => {
                trailer.kind = SubchunkType::Timeout;
                trailer.flags.truncation = true;
            }
            _ => trailer.kind = SubchunkType::Middle,
        }
        write_trailer(block, at, t, t.encode(trailer));
        true
    }
}

fn write_trailer(block: &mut [u8], at: usize, t: TrailerSize, word: u32) {
    match t {
        TrailerSize::Bits16 => {
            if let Some(b) = block.get_mut(at..at + 2) {
                b.copy_from_slice(&(word as u16).to_le_bytes());
            }
        }
        TrailerSize::Bits32 => {
            if let Some(b) = block.get_mut(at..at + 4) {
                b.copy_from_slice(&word.to_le_bytes());
            }
        }
    }
}

/// Draws units one at a time from a generator (for recording, sending and corrupting
/// streams, where unit boundaries matter).
pub struct UnitSource<G> {
    generator: G,
    scratch: Vec<u8>,
}

impl<G: Generator> UnitSource<G> {
    /// A source over `generator`, whose units are at most `max_unit_bytes` long.
    pub fn new(generator: G, max_unit_bytes: usize) -> UnitSource<G> {
        UnitSource {
            generator,
            scratch: vec![0u8; max_unit_bytes.max(1)],
        }
    }

    /// The next unit, or `None` when the generator is finished (or its unit does not fit).
    pub fn next_unit(&mut self) -> Option<&[u8]> {
        if self.generator.is_finished() {
            return None;
        }
        let f = self.generator.fill(&mut self.scratch, 1);
        (f.units == 1).then(|| &self.scratch[..f.bytes])
    }

    /// The generator.
    pub fn generator(&self) -> &G {
        &self.generator
    }
}
