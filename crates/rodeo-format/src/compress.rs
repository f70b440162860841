//! Compressed full events (compression type 1: zstd), written by the logger, read back here.
//!
//! A compressed event keeps its whole header (status, ids, trigger info, stream tags) readable
//! and replaces its payload (the ROB fragments) by one zstd frame, zero-padded to a word
//! boundary; the header's compression type is 1 and its uncompressed-size field holds the
//! payload's size in words. The event's checksum, if any, covers the compressed payload (what is
//! stored), so a file can be verified without decompressing. [`decompress_event`] rebuilds the
//! plain event, with the checksum computed again over the restored payload.
//!
//! The encoder is libzstd's (the `zstd` crate, [`EventCompressor`], any level): `ruzstd`'s
//! pure-Rust encoder compressed at about 16 MB/s, which cost a partition 15x its event rate
//! (issue 22). Decoding stays with `ruzstd` (pure Rust, fast enough for reading back).

use std::io::Read;

use crate::checksum::words_as_bytes;
use crate::fragment::{ErrorKind, EventBuilder, FragmentError, FragmentKind, FullEvent, StreamTag};

/// The compression type word of a zstd-compressed event (rodeo's own container).
pub const COMPRESSION_ZSTD: u32 = 1;
/// The compression type word of a zlib-compressed payload in ATLAS files (`eformat/
/// compression.h`: `UNCOMPRESSED = 0, ZLIB = 1`). The same value as rodeo's zstd: which codec
/// a 1 means depends on the container the event came from (EventStorage: zlib, rodeo: zstd).
pub const EFORMAT_COMPRESSION_ZLIB: u32 = 1;

/// Why an event could not be compressed or decompressed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompressError {
    /// The event does not parse.
    #[error(transparent)]
    Fragment(#[from] FragmentError),
    /// The compression type is not one this crate reads.
    #[error("unsupported compression type {0} (0 none, 1 zstd)")]
    Unsupported(u32),
    /// The zstd frame is damaged or shorter than the declared size.
    #[error("zstd payload: {0}")]
    Zstd(String),
    /// The zlib stream is damaged or does not restore the declared size.
    #[error("zlib payload: {0}")]
    Zlib(String),
    /// The header declares a plain size larger than any event this crate restores.
    #[error(
        "the event declares {words} uncompressed words, more than the {} bytes an event may \
         restore to",
        MAX_DECOMPRESSED_BYTES
    )]
    TooLarge {
        /// The declared size, in words.
        words: u64,
    },
}

/// The largest plain event, in bytes, that [`decompress_event`] and [`decompress_zlib_event`]
/// restore: the header's size word is read from outside, and nothing is allocated for it past
/// this (1 GiB, as the EventStorage reader's limit). A restored event is held twice at most
/// (its words, then the plain event with its header), each only as far as the frame restores.
pub const MAX_DECOMPRESSED_BYTES: usize = 1 << 30;

/// The plain size, in bytes, that `e` declares, if within [`MAX_DECOMPRESSED_BYTES`].
fn declared_bytes(e: &FullEvent<'_>) -> Result<usize, CompressError> {
    let words = e.uncompressed_size();
    (words as usize)
        .checked_mul(4)
        .filter(|&b| b <= MAX_DECOMPRESSED_BYTES)
        .ok_or(CompressError::TooLarge {
            words: u64::from(words),
        })
}

fn header_of<'a>(
    e: &FullEvent<'a>,
    tags: &'a [StreamTag<'a>],
    payload: &'a [&'a [u32]],
    compression: u32,
    uncompressed: Option<u32>,
) -> EventBuilder<'a> {
    EventBuilder {
        source_id: e.source_id(),
        status: e.status_words(),
        checksum: e.checksum_type(),
        bc_time_seconds: e.bc_time_seconds(),
        bc_time_nanoseconds: e.bc_time_nanoseconds(),
        global_id: e.global_id(),
        run_type: e.run_type(),
        run_number: e.run_number(),
        lumi_block: e.lumi_block(),
        extended_l1id: e.extended_l1id(),
        bcid: e.bcid(),
        l1_trigger_type: e.l1_trigger_type(),
        compression,
        uncompressed_size: uncompressed,
        l1_info: e.l1_info(),
        l2_info: e.l2_info(),
        ef_info: e.ef_info(),
        stream_tags: tags,
        robs: payload,
    }
}

fn tags_of<'a>(e: &FullEvent<'a>) -> Result<Vec<StreamTag<'a>>, FragmentError> {
    e.stream_tags().collect()
}

/// The zstd level a logger's events are compressed at by default: measured on the default
/// partition's events (docs/benchmarks.md, "Compression"): level 1 keeps the ratio of the
/// higher levels on counter payloads at a fraction of their time.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

/// A zstd encoder for events, kept from event to event (its context and buffers are allocated
/// once): what a DCM or logger compressing every event holds.
pub struct EventCompressor {
    cx: zstd::bulk::Compressor<'static>,
    frame: Vec<u8>,
    words: Vec<u32>,
    level: i32,
}

impl std::fmt::Debug for EventCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventCompressor")
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl EventCompressor {
    /// An encoder at zstd `level` (1..=22; negative levels are faster still, 0 is zstd's
    /// default, 3).
    pub fn new(level: i32) -> Result<EventCompressor, CompressError> {
        let cx = zstd::bulk::Compressor::new(level).map_err(|e| {
            CompressError::Zstd(format!("cannot make a level {level} encoder: {e}"))
        })?;
        Ok(EventCompressor {
            cx,
            frame: Vec::new(),
            words: Vec::new(),
            level,
        })
    }

    /// The level it compresses at.
    pub fn level(&self) -> i32 {
        self.level
    }

    /// Writes the zstd-compressed form of the plain event `words` into `out` (cleared first);
    /// an event that is already compressed is copied as it is.
    pub fn compress(&mut self, words: &[u32], out: &mut Vec<u32>) -> Result<(), CompressError> {
        out.clear();
        let e = FullEvent::parse(words)?;
        if e.compression() != 0 {
            out.extend_from_slice(words);
            return Ok(());
        }
        let payload = e.payload();
        let bytes = words_as_bytes(payload);
        self.frame.clear();
        self.frame
            .reserve(zstd::zstd_safe::compress_bound(bytes.len()));
        self.cx
            .compress_to_buffer(bytes, &mut self.frame)
            .map_err(|err| CompressError::Zstd(err.to_string()))?;
        self.words.clear();
        self.words.extend(self.frame.chunks(4).map(|b| {
            let mut x = [0u8; 4];
            x[..b.len()].copy_from_slice(b);
            u32::from_le_bytes(x)
        }));
        let tags = tags_of(&e)?;
        let pieces: [&[u32]; 1] = [&self.words];
        let n = u32::try_from(payload.len()).map_err(|_| {
            FragmentError::new(
                FragmentKind::FullEvent,
                0,
                ErrorKind::TooLarge {
                    words: payload.len() as u64,
                },
            )
        })?;
        header_of(&e, &tags, &pieces, COMPRESSION_ZSTD, Some(n)).write_vec(out)?;
        Ok(())
    }
}

/// Writes the zstd-compressed form of the plain event `words` into `out` (cleared first), at
/// [`DEFAULT_ZSTD_LEVEL`]. An event that is already compressed is copied as it is. Compressing
/// many events: keep an [`EventCompressor`].
pub fn compress_event(words: &[u32], out: &mut Vec<u32>) -> Result<(), CompressError> {
    EventCompressor::new(DEFAULT_ZSTD_LEVEL)?.compress(words, out)
}

/// Writes the plain form of the event `words` into `out` (cleared first): a compressed event is
/// decompressed, a plain one copied.
pub fn decompress_event(words: &[u32], out: &mut Vec<u32>) -> Result<(), CompressError> {
    out.clear();
    let e = FullEvent::parse(words)?;
    match e.compression() {
        0 => {
            out.extend_from_slice(words);
            return Ok(());
        }
        COMPRESSION_ZSTD => {}
        other => return Err(CompressError::Unsupported(other)),
    }
    let n = e.uncompressed_size();
    let mut dec = ruzstd::decoding::StreamingDecoder::new(words_as_bytes(e.payload()))
        .map_err(|err| CompressError::Zstd(err.to_string()))?;
    let plain = read_le_words(&mut dec, WordsExpected::Exactly(declared_bytes(&e)? / 4))
        .map_err(|err| CompressError::Zstd(format!("{err} (expected {n} words)")))?;
    let tags = tags_of(&e)?;
    let pieces: [&[u32]; 1] = [&plain];
    header_of(&e, &tags, &pieces, 0, None).write_vec(out)?;
    Ok(())
}

/// Writes the plain form of an event from an ATLAS file into `out` (cleared first): a payload
/// marked [`EFORMAT_COMPRESSION_ZLIB`] is one zlib stream of the ROB fragments, restored to the
/// header's uncompressed size (words) and checked against it; a plain event is copied.
pub fn decompress_zlib_event(words: &[u32], out: &mut Vec<u32>) -> Result<(), CompressError> {
    out.clear();
    let e = FullEvent::parse(words)?;
    match e.compression() {
        0 => {
            out.extend_from_slice(words);
            return Ok(());
        }
        EFORMAT_COMPRESSION_ZLIB => {}
        other => return Err(CompressError::Unsupported(other)),
    }
    let n = e.uncompressed_size();
    let mut dec = flate2::read::ZlibDecoder::new(words_as_bytes(e.payload()));
    let plain = read_le_words(&mut dec, WordsExpected::Exactly(declared_bytes(&e)? / 4))
        .map_err(|reason| CompressError::Zlib(format!("{reason} (expected {n} words)")))?;
    let tags = tags_of(&e)?;
    let pieces: [&[u32]; 1] = [&plain];
    header_of(&e, &tags, &pieces, 0, None).write_vec(out)?;
    Ok(())
}

/// Bytes a decoder restores per read into [`read_le_words`]' buffer (stays in the cache).
const RESTORE_CHUNK: usize = 64 << 10;

/// What [`read_le_words`] expects of a decoder's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordsExpected {
    /// Exactly this many words (a length declared beforehand, e.g. an event header's
    /// uncompressed size): fewer is a stream cut short, more a damaged one.
    Exactly(usize),
    /// A positive number of whole words, at most this many bytes (no length declared: an
    /// EventStorage data block).
    AtMostBytes(u64),
}

/// Restores the little-endian words of the decoder `r`, read to its end, in cache-sized
/// chunks straight into the words (a partial word carried to the next chunk): the event's
/// bytes are held once, not as bytes and then as words. Reading to the end matters: a decoder
/// checks its trailer (zlib's Adler-32) and a cut stream only there, so an error then is the
/// stream's. A stream that does not restore what `expect` says is an error.
pub fn read_le_words(r: &mut impl Read, expect: WordsExpected) -> Result<Vec<u32>, String> {
    let (limit, declared) = match expect {
        WordsExpected::Exactly(words) => ((words as u64).saturating_mul(4), Some(words)),
        WordsExpected::AtMostBytes(bytes) => (bytes, None),
    };
    // Capacity reserved, not touched, until restored; never more than the limit.
    let mut out = Vec::with_capacity(declared.unwrap_or(0));
    // At least a few words: a stream declared empty must still be read to its end.
    let mut chunk = vec![0u8; (limit.min(RESTORE_CHUNK as u64) as usize).max(16)];
    // Bytes of a partial word at the chunk's start, carried from the read before.
    let mut held = 0usize;
    let mut total = 0u64;
    loop {
        let n = match r.read(&mut chunk[held..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        };
        total += n as u64;
        if total > limit {
            return Err(match declared {
                Some(words) => format!("restores more than the {words} words declared"),
                None => format!("restores more than the {limit} bytes accepted"),
            });
        }
        let have = held + n;
        let whole = have - have % 4;
        out.extend(
            chunk[..whole]
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        chunk.copy_within(whole..have, 0);
        held = have - whole;
    }
    match declared {
        Some(words) if total != limit => Err(format!(
            "restores {total} bytes, not the {words} words declared (cut short)"
        )),
        None if total == 0 || held != 0 => Err(format!(
            "restores {total} bytes, not a positive number of 32-bit words"
        )),
        _ => Ok(out),
    }
}

/// Little-endian words of `bytes` (a multiple of 4 long; a partial last word is dropped).
pub fn bytes_to_words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::ChecksumType;
    use crate::synth::{EventSynth, SynthConfig};

    #[test]
    fn round_trip_keeps_header_and_payload() {
        let mut synth = EventSynth::new(SynthConfig {
            robs: 12,
            checksum: ChecksumType::Adler32,
            ..SynthConfig::default()
        });
        let mut plain = Vec::new();
        let (mut packed, mut back) = (Vec::new(), Vec::new());
        for gid in 0..20 {
            synth.event(gid, &mut plain).unwrap();
            compress_event(&plain, &mut packed).unwrap();
            let c = FullEvent::parse(&packed).unwrap();
            assert_eq!(c.compression(), COMPRESSION_ZSTD);
            assert_eq!(c.global_id(), gid);
            c.verify_checksum().unwrap();
            assert!(packed.len() < plain.len(), "counter payloads compress");
            assert!(
                c.validate_robs().is_err(),
                "a compressed payload has no ROB views"
            );
            decompress_event(&packed, &mut back).unwrap();
            assert_eq!(back, plain);
        }
    }

    /// The header's plain size is read from outside: a size past the limit is refused before
    /// anything is allocated for it (4 billion words were a 16 GiB buffer).
    #[test]
    fn a_declared_size_past_the_limit_is_refused_not_allocated() {
        let mut synth = EventSynth::new(SynthConfig::default());
        let (mut plain, mut packed, mut back) = (Vec::new(), Vec::new(), Vec::new());
        synth.event(1, &mut plain).unwrap();
        compress_event(&plain, &mut packed).unwrap();
        let declared = |w: &[u32]| FullEvent::parse(w).ok().map(|e| e.uncompressed_size());
        let want = declared(&packed).unwrap();
        // The header word that holds the plain size.
        let at = (0..packed.len())
            .find(|&i| {
                let mut p = packed.clone();
                p[i] = u32::MAX;
                packed[i] == want && declared(&p) == Some(u32::MAX)
            })
            .unwrap();
        for words in [u32::MAX, (MAX_DECOMPRESSED_BYTES / 4) as u32 + 1] {
            packed[at] = words;
            match decompress_event(&packed, &mut back) {
                Err(CompressError::TooLarge { words: w }) => assert_eq!(w, u64::from(words)),
                other => panic!("{other:?}"),
            }
        }
        // A size below what the frame restores: damaged, not cut short quietly.
        packed[at] = want - 1;
        match decompress_event(&packed, &mut back) {
            Err(CompressError::Zstd(why)) => assert!(why.contains("more than"), "{why}"),
            other => panic!("{other:?}"),
        }
        packed[at] = want;
        decompress_event(&packed, &mut back).unwrap();
        assert_eq!(back, plain);
    }

    #[test]
    fn one_compressor_serves_many_events_at_any_level() {
        let mut synth = EventSynth::new(SynthConfig::default());
        let (mut plain, mut packed, mut back) = (Vec::new(), Vec::new(), Vec::new());
        for level in [-1, 1, 3] {
            let mut c = EventCompressor::new(level).unwrap();
            assert_eq!(c.level(), level);
            for gid in 0..20 {
                synth.event(gid, &mut plain).unwrap();
                c.compress(&plain, &mut packed).unwrap();
                assert_eq!(
                    FullEvent::parse(&packed).unwrap().compression(),
                    COMPRESSION_ZSTD
                );
                decompress_event(&packed, &mut back).unwrap();
                assert_eq!(back, plain, "level {level}, event {gid}");
            }
        }
    }

    #[test]
    fn zlib_payloads_are_restored() {
        use std::io::Write as _;
        let mut synth = EventSynth::new(SynthConfig::default());
        let (mut plain, mut back) = (Vec::new(), Vec::new());
        synth.event(3, &mut plain).unwrap();
        let e = FullEvent::parse(&plain).unwrap();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(words_as_bytes(e.payload())).unwrap();
        let mut stream = z.finish().unwrap();
        stream.resize(stream.len().next_multiple_of(4), 0);
        let packed_words = bytes_to_words(&stream);
        let tags = tags_of(&e).unwrap();
        let pieces: [&[u32]; 1] = [&packed_words];
        let n = e.payload().len() as u32;
        let mut packed = Vec::new();
        header_of(&e, &tags, &pieces, EFORMAT_COMPRESSION_ZLIB, Some(n))
            .write_vec(&mut packed)
            .unwrap();
        decompress_zlib_event(&packed, &mut back).unwrap();
        assert_eq!(back, plain);
        // A damaged stream is an error.
        let at = packed.len() - packed_words.len() - e.checksum_type().trailer_words();
        let mut wrong = packed.clone();
        wrong[at] ^= 0xFFFF_FFFF;
        assert!(decompress_zlib_event(&wrong, &mut back).is_err());
    }

    #[test]
    fn damaged_frames_are_errors() {
        let mut synth = EventSynth::new(SynthConfig::default());
        let (mut plain, mut packed, mut back) = (Vec::new(), Vec::new(), Vec::new());
        synth.event(7, &mut plain).unwrap();
        compress_event(&plain, &mut packed).unwrap();
        let e = FullEvent::parse(&packed).unwrap();
        let start = packed.len() - e.payload().len() - e.checksum_type().trailer_words();
        for w in &mut packed[start..start + 4] {
            *w = 0xDEAD_BEEF;
        }
        assert!(decompress_event(&packed, &mut back).is_err());
    }

    /// The restored words are exactly the declared ones, across chunk boundaries; a stream
    /// cut short or one with bytes past the declared words is an error.
    #[test]
    fn words_are_restored_exactly_and_in_chunks() {
        let words: Vec<u32> = (0..(RESTORE_CHUNK as u32 / 4) * 2 + 3)
            .map(|i| i.wrapping_mul(0x9E37_79B9))
            .collect();
        let bytes = words_as_bytes(&words);
        assert_eq!(
            read_le_words(&mut &bytes[..], WordsExpected::Exactly(words.len())).unwrap(),
            words
        );
        assert!(
            read_le_words(&mut &bytes[..], WordsExpected::Exactly(words.len() + 1)).is_err(),
            "cut short"
        );
        let err =
            read_le_words(&mut &bytes[..], WordsExpected::Exactly(words.len() - 1)).unwrap_err();
        assert!(err.contains("restores more"), "{err}");
        assert_eq!(
            read_le_words(&mut &[][..], WordsExpected::Exactly(0)).unwrap(),
            Vec::<u32>::new()
        );
        // No length declared: any positive number of whole words up to the limit.
        let up_to = |bytes: &[u8], limit: u64| {
            read_le_words(&mut &bytes[..], WordsExpected::AtMostBytes(limit))
        };
        assert_eq!(up_to(bytes, bytes.len() as u64).unwrap(), words);
        let err = up_to(bytes, bytes.len() as u64 - 4).unwrap_err();
        assert!(err.contains("more than"), "{err}");
        let err = up_to(&bytes[..bytes.len() - 1], u64::MAX).unwrap_err();
        assert!(err.contains("not a positive number"), "{err}");
        assert!(up_to(&[], u64::MAX).is_err(), "no words");
    }

    /// A zlib stream whose trailer is damaged (its Adler-32), or that stops after its data,
    /// is an error even when every declared word came out: the decoder tells only at the end.
    #[test]
    fn a_zlib_stream_damaged_after_its_data_is_an_error() {
        use std::io::Write;
        let words: Vec<u32> = (0..1000).collect();
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(words_as_bytes(&words)).unwrap();
        let stream = enc.finish().unwrap();
        let restore = |bytes: &[u8], n: usize| {
            read_le_words(
                &mut flate2::read::ZlibDecoder::new(bytes),
                WordsExpected::Exactly(n),
            )
        };
        assert_eq!(restore(&stream, words.len()).unwrap(), words);
        // Word padding after a whole stream is not more data.
        let mut padded = stream.clone();
        padded.extend_from_slice(&[0, 0, 0]);
        assert_eq!(restore(&padded, words.len()).unwrap(), words);
        let mut bad_sum = stream.clone();
        *bad_sum.last_mut().unwrap() ^= 0xFF;
        assert!(restore(&bad_sum, words.len()).is_err(), "Adler-32");
        assert!(
            restore(&stream[..stream.len() - 4], words.len()).is_err(),
            "no trailer"
        );
        assert!(
            restore(b"not zlib at all", 0).is_err(),
            "nothing declared, garbage sent"
        );
    }
}
