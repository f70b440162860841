//! Data generators of the emulated cards (the "Dozolar" / firmware generator of links.md).
//!
//! Two modes, both [`Generator`](crate::dma::Generator)s that write whole units only:
//!
//! - [`SlinkGenerator`]: S-LINK mode; one unit is one ROD fragment (optionally framed by the
//!   S-LINK begin/end control words), written as little-endian words.
//! - [`FelixGenerator`]: FELIX mode; per L1ID one default-format packet per E-link, packed into
//!   fixed-size blocks per E-link; one unit is one block.
//!
//! Both follow the generator rules of links.md: per channel the L1ID starts at 0 and increments by
//! one per event, wrapping at a configurable value (default 2^24), when the ECR counter in bits
//! 31..24 of the extended L1ID increments ([`L1idCounter`]). Sizes are fixed or drawn uniformly
//! from a range ([`WordRange`]) by a deterministic PRNG, so a run is reproducible from its
//! configuration. Payload words are counters seeded from the source (or E-link) and the extended
//! L1ID, so a reader checks every word without a reference copy.
//!
//! Neither generator allocates per unit: buffers are sized when the generator is built (the
//! FELIX overflow queue grows to its high-water mark once, then is reused).

mod felix;
mod slink;

pub use rodeo_format::l1id::{L1idCounter, DEFAULT_L1ID_WRAP};

pub use felix::{FelixConfig, FelixGenerator};
pub use slink::{SlinkConfig, SlinkGenerator};

/// Why a generator could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum GeneratorError {
    /// A FELIX generator needs at least one E-link.
    #[error("a FELIX generator needs at least one E-link")]
    NoElinks,
    /// The FELIX encoder rejected the configuration (block size).
    #[error(transparent)]
    Felix(#[from] rodeo_format::felix::FelixError),
}

/// A size in 32-bit words: fixed (`min == max`) or uniform in `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordRange {
    /// Smallest size.
    pub min: u32,
    /// Largest size (inclusive); values below `min` are treated as `min`.
    pub max: u32,
}

impl WordRange {
    /// A fixed size.
    pub const fn fixed(words: u32) -> WordRange {
        WordRange {
            min: words,
            max: words,
        }
    }

    /// A uniform range `min..=max`.
    pub const fn uniform(min: u32, max: u32) -> WordRange {
        WordRange { min, max }
    }

    /// The range clamped to at most `limit` words.
    pub(crate) fn clamp(self, limit: u32) -> WordRange {
        let min = self.min.min(limit);
        WordRange {
            min,
            max: self.max.clamp(min, limit),
        }
    }

    /// Draws a size.
    pub(crate) fn draw(self, rng: &mut Rng) -> u32 {
        if self.max <= self.min {
            return self.min;
        }
        let span = u64::from(self.max - self.min) + 1;
        // Multiply-shift: uniform enough for sizes, no division.
        self.min + (((rng.next_u64() >> 32) * span) >> 32) as u32
    }
}

/// The deterministic PRNG of the generators (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (the same seed gives the same sequence).
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_stay_in_bounds() {
        let mut rng = Rng::new(1);
        let r = WordRange::uniform(5, 9);
        let mut hit = [false; 10];
        for _ in 0..1000 {
            let v = r.draw(&mut rng);
            assert!((5..=9).contains(&v));
            hit[v as usize] = true;
        }
        assert!(hit[5] && hit[9]);
        assert_eq!(WordRange::fixed(4).draw(&mut rng), 4);
        assert_eq!(
            WordRange::uniform(10, 20).clamp(12),
            WordRange::uniform(10, 12)
        );
    }
}
