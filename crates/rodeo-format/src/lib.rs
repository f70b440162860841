//! rodeo's data formats.
//!
//! Everything that crosses a boundary of rodeo as bytes is defined here, in one crate with no
//! knowledge of threads, sockets or hardware:
//!
//! - [`checksum`]: the three checksum types of the event format (none, CRC16-CCITT, Adler-32),
//!   incremental so a fragment can be summed while it is assembled from pieces; SIMD Adler-32
//!   (AVX2, detected at run time) and slicing-by-16 CRC16.
//! - [`compress`]: zstd-compressed full events (compression type 1), compressed and restored;
//!   zlib payloads of ATLAS files restored.
//! - [`fragment`]: ROD, ROB and full event fragments: validating zero-copy views over `&[u32]`,
//!   typed errors with word offsets, source identifiers, status words, scatter-gather builders.
//! - [`synth`]: synthetic events with checkable counter payloads and a realistic ROB mix.
//! - [`felix`]: FELIX to-host blocks (encoder, decoder, per-E-link chunk reassembler) and the
//!   default E-link packet format.
//! - [`l1id`]: the extended L1ID's wrap rule (`L1idCounter`), shared by emulators, checks and
//!   the L1 source.
//! - [`linkfile`]: link capture files, recorded streams of FELIX blocks or S-LINK fragments.
//! - [`slink`]: S-LINK streams of ROD fragments checked per links.md (framing, CRC, L1ID
//!   sequence), every problem as status bits and counted by kind.
//! - [`rawfile`]: raw-data files (writer with rotation and free-space check, streaming reader
//!   with checksum validation and recovery of damaged files).
//! - [`eventstorage`]: ATLAS EventStorage files, the experiments' container: a version-5 writer
//!   (ATLAS file names, metadata records, zlib data blocks) and a reader of versions 2 to 6.
//! - [`legacy`]: eformat v3/v4 full events (BESIII, ATLAS before 2009) walked through their
//!   sub-detector and ROS fragments down to the ROBs.
//! - [`datafile`]: one reader for every data file, whichever container it is (chosen by the
//!   first record) and whichever eformat version its events are: run number, L1ID, ROBs.
//! - [`convert`]: a data file into either container, eformat 3/4 events lifted to eformat 5.
//! - [`replay`]: the RODs of data files' events loaded for replay through a readout node.
//!
//! Every parser in this crate takes bytes or words from outside and returns a typed error on
//! malformed input: none of them panics or reads out of bounds, whatever it is given. The fuzz
//! targets in `fuzz/` hold them to that.

pub mod checksum;
pub mod compress;
pub mod convert;
pub mod datafile;
pub mod eventstorage;
pub mod felix;
pub mod fragment;
pub mod l1id;
pub mod legacy;
pub mod linkfile;
pub mod rawfile;
pub mod replay;
pub mod slink;
pub mod synth;
pub mod verify;
