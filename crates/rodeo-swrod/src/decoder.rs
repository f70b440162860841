//! The packet-decoder plugin: how the builder learns a packet's L1ID and BCID.
//!
//! Front-end packet formats are detector-specific. The builder calls a [`PacketDecoder`] once per
//! packet, on the packet's bytes as they lie in the superpage (or in the reassembly buffer when
//! the packet was split over blocks), and uses only the returned [`PacketInfo`]. The decoder is a
//! generic parameter of the builder, so the call is inlined into the hot loop: keep it small and
//! branch-light, and check only what must be checked per packet.

use rodeo_format::felix::{packet_seed, PacketHeader, PACKET_HEADER_BYTES};

/// What the builder needs from a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    /// Extended L1ID (ECR in bits 31..24, L1ID in bits 23..0).
    pub l1id: u32,
    /// Bunch-crossing id (12 bits).
    pub bcid: u16,
}

/// Why a decoder rejected a packet. The builder drops the packet and counts it
/// (`corrupt_packets`); its E-link is then listed as missing in the packet's fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// Too short to hold the header fields.
    #[error("packet of {len} bytes is too short")]
    TooShort {
        /// Length of the packet.
        len: usize,
    },
    /// The declared length disagrees with the packet's length.
    #[error("packet declares {declared} bytes but has {found}")]
    Length {
        /// Bytes the header declares.
        declared: usize,
        /// Bytes present.
        found: usize,
    },
    /// A payload word differs from the expected pattern (integrity check).
    #[error("payload word {word} is {found:#010x}, expected {expected:#010x}")]
    Payload {
        /// Index of the payload word.
        word: u32,
        /// Expected value.
        expected: u32,
        /// Found value.
        found: u32,
    },
}

/// Extracts the L1ID and BCID of a packet and checks its integrity.
///
/// Implementations must not panic on any input: the bytes come from the links.
pub trait PacketDecoder: Sync {
    /// Decodes the packet of `elink`.
    fn decode(&self, elink: u16, packet: &[u8]) -> Result<PacketInfo, PacketError>;
}

/// The built-in default E-link packet format (links.md): word 0 extended L1ID, word 1 BCID in
/// bits 11..0 and the payload word count in bits 31..16, then the payload.
///
/// The default check is the length: the declared payload must fill the packet exactly.
/// `check_payload` also compares every payload word with the emulator's pattern (a full pass
/// over the data: for tests and commissioning, not for the 100 MHz path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultFormat {
    /// Check every payload word against the emulator's counter pattern.
    pub check_payload: bool,
}

impl PacketDecoder for DefaultFormat {
    #[inline]
    fn decode(&self, elink: u16, packet: &[u8]) -> Result<PacketInfo, PacketError> {
        // The same checks as `rodeo_format::felix::decode_packet`, written out here so that they
        // inline into the builder's loop.
        let Some(&[a0, a1, a2, a3, b0, b1, b2, b3]) = packet.first_chunk::<8>() else {
            return Err(PacketError::TooShort { len: packet.len() });
        };
        let l1id = u32::from_le_bytes([a0, a1, a2, a3]);
        let w1 = u32::from_le_bytes([b0, b1, b2, b3]);
        let declared = PACKET_HEADER_BYTES + 4 * (w1 >> 16) as usize;
        if declared != packet.len() {
            return Err(PacketError::Length {
                declared,
                found: packet.len(),
            });
        }
        let h = PacketHeader {
            l1id,
            bcid: (w1 & 0xFFF) as u16,
            payload_words: w1 >> 16,
        };
        if self.check_payload {
            let seed = packet_seed(elink, h.l1id);
            for (i, w) in packet[PACKET_HEADER_BYTES..].chunks_exact(4).enumerate() {
                let found = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                let expected = seed.wrapping_add(i as u32);
                if found != expected {
                    return Err(PacketError::Payload {
                        word: i as u32,
                        expected,
                        found,
                    });
                }
            }
        }
        Ok(PacketInfo {
            l1id: h.l1id,
            bcid: h.bcid,
        })
    }
}

#[cfg(test)]
mod tests {
    use rodeo_format::felix::encode_packet;

    use super::*;

    #[test]
    fn default_format_decodes_and_rejects() {
        let mut buf = [0u8; 64];
        let n = encode_packet(&mut buf, 7, 0x0100_0005, 99, 4).unwrap();
        let d = DefaultFormat {
            check_payload: true,
        };
        assert_eq!(
            d.decode(7, &buf[..n]),
            Ok(PacketInfo {
                l1id: 0x0100_0005,
                bcid: 99
            })
        );
        assert!(matches!(
            d.decode(8, &buf[..n]),
            Err(PacketError::Payload { word: 0, .. })
        ));
        assert!(DefaultFormat::default().decode(8, &buf[..n]).is_ok());
        assert_eq!(
            d.decode(7, &buf[..n - 4]),
            Err(PacketError::Length {
                declared: n,
                found: n - 4
            })
        );
        assert_eq!(
            d.decode(7, &buf[..5]),
            Err(PacketError::TooShort { len: 5 })
        );
    }
}
