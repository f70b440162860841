//! rodeo's data formats.
//!
//! The bytes on the links and in memory are defined here (the files are `rodeo-files`, built on
//! this crate).
//!
//! **Must not depend on** any other rodeo crate, nor on threads, sockets, files or hardware:
//! it is the bottom of the graph, and every other crate reads and writes fragments through it.
//!
//! The event format:
//!
//! - [`fragment`]: ROD, ROB and full event fragments: validating zero-copy views over `&[u32]`,
//!   typed errors with word offsets, source identifiers, status words, scatter-gather builders.
//! - [`checksum`]: the three checksum types of the event format (none, CRC16-CCITT, Adler-32),
//!   incremental so a fragment can be summed while it is assembled from pieces; SIMD Adler-32
//!   (AVX2, detected at run time) and slicing-by-16 CRC16.
//! - [`compress`]: zstd-compressed full events (compression type 1), compressed and restored;
//!   zlib payloads of ATLAS files restored.
//! - [`synth`]: synthetic events with checkable counter payloads and a realistic ROB mix.
//!
//! The bytes on the links:
//!
//! - [`felix`]: FELIX to-host blocks (encoder, decoder, per-E-link chunk reassembler) and the
//!   default E-link packet format.
//! - [`l1id`]: the extended L1ID's wrap rule (`L1idCounter`), shared by emulators, checks and
//!   the L1 source.
//! - [`slink`]: S-LINK streams of ROD fragments checked per links.md (framing, CRC, L1ID
//!   sequence), every problem as status bits and counted by kind.
//!
//! Every parser in this crate takes bytes or words from outside and returns a typed error on
//! malformed input: none of them panics or reads out of bounds, whatever it is given. The fuzz
//! targets in `fuzz/` hold them to that.

pub mod checksum;
pub mod compress;
pub mod felix;
pub mod fragment;
pub mod l1id;
pub mod slink;
pub mod synth;
