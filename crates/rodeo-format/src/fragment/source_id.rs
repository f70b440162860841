//! Source identifiers: which part of the detector (or of the TDAQ system) a fragment comes from.

use std::fmt;

/// A sub-detector code (bits 23..16 of a source identifier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SubDetector(pub u8);

impl SubDetector {
    /// The full event (the writer of a full event fragment).
    pub const FULL_EVENT: SubDetector = SubDetector(0x00);
    /// First pixel code (pixel: 0x11-0x14).
    pub const PIXEL_BARREL: SubDetector = SubDetector(0x11);
    /// First SCT code (SCT: 0x21-0x24).
    pub const SCT_BARREL_A: SubDetector = SubDetector(0x21);
    /// First TRT code (TRT: 0x30-0x34).
    pub const TRT_ANCILLARY: SubDetector = SubDetector(0x30);
    /// First liquid-argon code (LAr: 0x41-0x48).
    pub const LAR_EM_BARREL_A: SubDetector = SubDetector(0x41);
    /// First tile-calorimeter code (Tile: 0x50-0x54).
    pub const TILE_LASER: SubDetector = SubDetector(0x50);
    /// First muon code (muon: 0x60-0x6A).
    pub const MUON_ANCILLARY: SubDetector = SubDetector(0x60);
    /// Central trigger processor.
    pub const TDAQ_CTP: SubDetector = SubDetector(0x77);
    /// Event filter (the writer of full events in rodeo).
    pub const TDAQ_EVENT_FILTER: SubDetector = SubDetector(0x7C);
    /// Other.
    pub const OTHER: SubDetector = SubDetector(0x81);

    /// The detector system this code belongs to, by the ranges of the format specification.
    pub fn system(self) -> Option<System> {
        Some(match self.0 {
            0x00 => System::FullEvent,
            0x11..=0x14 => System::Pixel,
            0x21..=0x24 => System::Sct,
            0x30..=0x34 => System::Trt,
            0x41..=0x48 => System::LAr,
            0x50..=0x54 => System::Tile,
            0x60..=0x6A => System::Muon,
            0x70..=0x7C => System::Tdaq,
            0x81 => System::Other,
            _ => return None,
        })
    }
}

/// A detector system: a range of sub-detector codes.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    /// 0x00.
    FullEvent,
    /// Pixel, 0x11-0x14.
    Pixel,
    /// SCT, 0x21-0x24.
    Sct,
    /// TRT, 0x30-0x34.
    Trt,
    /// Liquid argon calorimeter, 0x41-0x48.
    LAr,
    /// Tile calorimeter, 0x50-0x54.
    Tile,
    /// Muon spectrometer, 0x60-0x6A.
    Muon,
    /// TDAQ, 0x70-0x7C.
    Tdaq,
    /// Other, 0x81.
    Other,
}

impl System {
    /// The system's name as people write it (`Pixel`, `SCT`, `LAr`, ...).
    pub fn name(self) -> &'static str {
        match self {
            System::FullEvent => "full event",
            System::Pixel => "Pixel",
            System::Sct => "SCT",
            System::Trt => "TRT",
            System::LAr => "LAr",
            System::Tile => "Tile",
            System::Muon => "Muon",
            System::Tdaq => "TDAQ",
            System::Other => "other",
        }
    }
}

/// A source identifier: optional field (bits 31..24), sub-detector (23..16), module id (15..0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SourceId(pub u32);

impl SourceId {
    /// The identifier of `module` in `sub`, optional field 0.
    pub const fn new(sub: SubDetector, module: u16) -> SourceId {
        SourceId(((sub.0 as u32) << 16) | module as u32)
    }

    /// The identifier with all three fields.
    pub const fn with_optional(optional: u8, sub: SubDetector, module: u16) -> SourceId {
        SourceId(((optional as u32) << 24) | ((sub.0 as u32) << 16) | module as u32)
    }

    /// The identifier word.
    pub const fn word(self) -> u32 {
        self.0
    }

    /// The optional field (bits 31..24).
    pub const fn optional(self) -> u8 {
        (self.0 >> 24) as u8
    }

    /// The sub-detector (bits 23..16).
    pub const fn subdetector(self) -> SubDetector {
        SubDetector((self.0 >> 16) as u8)
    }

    /// The module id (bits 15..0).
    pub const fn module(self) -> u16 {
        self.0 as u16
    }
}

impl fmt::Debug for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SourceId({:#010x})", self.0)
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

impl From<u32> for SourceId {
    fn from(w: u32) -> SourceId {
        SourceId(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let s = SourceId::with_optional(0xAB, SubDetector::TDAQ_EVENT_FILTER, 0x1234);
        assert_eq!(s.word(), 0xAB7C_1234);
        assert_eq!(s.optional(), 0xAB);
        assert_eq!(s.subdetector(), SubDetector::TDAQ_EVENT_FILTER);
        assert_eq!(s.module(), 0x1234);
        assert_eq!(
            SourceId::new(SubDetector::TDAQ_EVENT_FILTER, 0).word(),
            0x007C_0000
        );
        assert_eq!(s.subdetector().system(), Some(System::Tdaq));
        assert_eq!(SubDetector(0x99).system(), None);
    }
}
