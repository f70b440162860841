//! The stream transport's framing: every message is an 8-byte header (a 4-byte tag, then the
//! payload's length as a little-endian `u32`) followed by the payload. The header is checked
//! before a byte of the payload is buffered: a wrong tag or a length above the receiver's limit
//! is a [`FrameError`], and the connection is closed without allocating what it announced.

/// Bytes of a frame's header.
pub const HEADER_BYTES: usize = 8;

/// The tag that starts every frame: `RS`, the format version (1), and a reserved zero.
pub const TAG: [u8; 4] = [b'R', b'S', 1, 0];

/// What is wrong with a received frame (the connection that sent it is closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The header announces more bytes than the receiver accepts.
    #[error(
        "frame of {len} bytes is above the limit of {max} bytes (raise the receiver's \
         max_message, or find why the peer sends such frames)"
    )]
    TooLong {
        /// The announced payload length.
        len: u64,
        /// The receiver's limit.
        max: u64,
    },
    /// The header does not start with [`TAG`]: not a rodeo stream peer, another version, or a
    /// stream that lost its place.
    #[error(
        "frame header starts with {got:02x?}, not the rodeo stream tag {TAG:02x?} (is the peer \
         a rodeo stream socket of the same version?)"
    )]
    BadTag {
        /// The first four bytes received.
        got: [u8; 4],
    },
    /// The peer closed its connection in the middle of a frame.
    #[error("peer closed the connection {have} bytes into a frame of {want} bytes")]
    Truncated {
        /// Bytes of the frame (header included) received.
        have: u64,
        /// Bytes the frame needed (header included; the header's size when it was cut).
        want: u64,
    },
}

/// The header of a payload of `len` bytes.
pub fn encode_header(len: u32) -> [u8; HEADER_BYTES] {
    let l = len.to_le_bytes();
    [TAG[0], TAG[1], TAG[2], TAG[3], l[0], l[1], l[2], l[3]]
}

/// The payload length a header announces, checked against the tag and `max`.
pub fn decode_header(h: &[u8; HEADER_BYTES], max: usize) -> Result<usize, FrameError> {
    let got = [h[0], h[1], h[2], h[3]];
    if got != TAG {
        return Err(FrameError::BadTag { got });
    }
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > max {
        return Err(FrameError::TooLong {
            len: len as u64,
            max: max as u64,
        });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_bad_ones_are_typed_errors() {
        assert_eq!(decode_header(&encode_header(12_288), 1 << 20), Ok(12_288));
        assert_eq!(decode_header(&encode_header(0), 0), Ok(0));
        assert_eq!(
            decode_header(&encode_header(u32::MAX), 1 << 20),
            Err(FrameError::TooLong {
                len: u64::from(u32::MAX),
                max: 1 << 20
            })
        );
        let mut h = encode_header(5);
        h[0] = b'G';
        assert!(matches!(
            decode_header(&h, 10),
            Err(FrameError::BadTag { .. })
        ));
    }
}
