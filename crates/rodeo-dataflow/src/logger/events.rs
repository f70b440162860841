//! An `Event` message from a DCM in a logger: decoded and parsed (bad input counted and
//! dropped), a repeat dropped and still acknowledged (module docs of the logger, "Exactly
//! once"), refused when every directory is full, compressed with zstd if asked, and written to
//! its stream's file, moving on to the next directory when the disk is full.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rodeo_format::checksum::{
    adler32, adler32_concat, bytes_as_words, words_as_bytes, ChecksumType, ADLER32_INIT,
};
use rodeo_format::compress::{EventCompressor, DEFAULT_ZSTD_LEVEL};
use rodeo_format::fragment::{FullEvent, Status};
use rodeo_transport::message::{decode, Message};
use rodeo_transport::socket::Received;

use super::config::LoggerCompression;
use super::disk_full::{disk_full_reason, FullKind};
use super::writer::{is_bad_event, StreamWriter};
use super::Logger;
use super::Pending;
use crate::error::DataflowError;

/// Stream indexes past the configured list that still get files of their own.
const MAX_UNKNOWN_STREAMS: usize = 16;

impl Logger {
    pub(super) fn handle(
        &mut self,
        msg: &Received,
        scratch: &mut Vec<u32>,
        packed: &mut Vec<u32>,
    ) -> Result<(), DataflowError> {
        let Ok(decoded) = decode(msg.data()) else {
            self.bad_message();
            return Ok(());
        };
        let Message::Event { stream, event } = decoded.message else {
            self.bad_message();
            return Ok(());
        };
        let words: &[u32] = match bytes_as_words(event) {
            Some(w) => w,
            None if event.len() % 4 == 0 => {
                scratch.clear();
                scratch.extend(
                    event
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
                scratch
            }
            None => {
                self.bad_message();
                return Ok(());
            }
        };
        // Exactly one event: words after it (a DCM never sends any) would go into the file's
        // record and make it unreadable as an event.
        let Ok(parsed) = FullEvent::parse(words) else {
            self.bad_message();
            return Ok(());
        };
        if parsed.words().len() != words.len() {
            self.bad_message();
            return Ok(());
        }
        // A stream beyond the configured list gets files of its own (`stream<N>`), for a few
        // such indexes: a wild one (a trigger's bug, a hostile peer) would size the tables by
        // it (4 billion streams) and open a file per index.
        if stream as usize >= self.config.streams.len() + MAX_UNKNOWN_STREAMS {
            self.bad_message();
            return Ok(());
        }
        let gid = parsed.global_id();
        let rob_check = self.rob_check(&parsed);
        let peer = match self.peers.get(msg.peer.as_slice()) {
            Some(&p) => p,
            None if self.peer_ids.len() >= self.config.max_senders.max(1) => {
                // The table is full: an idle sender gives its place (nothing of it waits for
                // a commit, so no acknowledgement is owed to it), the least recently heard
                // first, so identities made up by the thousand keep a new DCM out only while
                // they all have events in flight.
                let Some(p) = self.idle_sender() else {
                    self.bad_message();
                    return Ok(());
                };
                let old = std::mem::replace(&mut self.peer_ids[p], msg.peer.clone());
                self.peers.remove(&old);
                self.peers.insert(msg.peer.clone(), p);
                self.summary.senders_replaced += 1;
                p
            }
            None => {
                self.peer_ids.push(msg.peer.clone());
                self.peer_heard.push(0);
                self.peers.insert(msg.peer.clone(), self.peer_ids.len() - 1);
                self.peer_ids.len() - 1
            }
        };
        self.heard += 1;
        self.peer_heard[peer] = self.heard;
        if self.written.contains(gid) {
            self.summary.duplicates += 1;
            self.pending.push(Pending {
                peer,
                gid,
                stream: None,
                bytes: 0,
            });
            return Ok(());
        }
        if self.halted.is_some() {
            // Every directory is full: not written, not acknowledged (back-pressure), counted.
            self.summary.events_refused += 1;
            self.counters.events_refused.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let s = stream as usize;
        if self.writers.len() <= s {
            self.writers.resize_with(s + 1, || None);
            self.touched.resize(s + 1, false);
            self.next_sequence.resize(s + 1, 1);
        }
        let mut words = words;
        let mut summed = record_checksum(&parsed);
        let mut compressed = parsed.compression() != 0;
        if self.config.compression == LoggerCompression::Zstd && !compressed {
            let c = match self.compressor.as_mut() {
                Some(c) => c,
                None => {
                    let c = EventCompressor::new(DEFAULT_ZSTD_LEVEL).map_err(|e| {
                        DataflowError::Config {
                            app: self.config.name.clone(),
                            reason: format!("cannot make the zstd encoder: {e}"),
                        }
                    })?;
                    self.compressor.insert(c)
                }
            };
            if c.compress(words, packed).is_err() {
                self.bad_message();
                return Ok(());
            }
            words = packed;
            compressed = true;
            summed = None;
        }
        // A full directory is left for the next one and the event written there: at most one
        // try per directory.
        let bytes = loop {
            match self.write(s, words, compressed, summed) {
                Ok(bytes) => break bytes,
                Err(e) => match disk_full_reason(&e) {
                    Some((why, kind)) => {
                        self.full((kind == FullKind::Failed).then_some(s), why)?;
                        if self.halted.is_some() {
                            self.summary.events_refused += 1;
                            self.counters.events_refused.fetch_add(1, Ordering::Relaxed);
                            return Ok(());
                        }
                    }
                    // An event the EventStorage writer cannot take (an unknown compression,
                    // a zstd payload that does not decode) is the sender's fault: counted and
                    // dropped, as any bad message, not the logger's end.
                    None if is_bad_event(&e) => {
                        self.bad_message();
                        return Ok(());
                    }
                    None => return Err(e),
                },
            }
        };
        self.written.insert(gid);
        let now = Instant::now();
        self.first_write.get_or_insert(now);
        self.last_write = Some(now);
        self.touched[s] = true;
        self.summary.events_written += 1;
        self.summary.bytes_written += bytes;
        if let Some((partial, short)) = rob_check {
            self.summary.events_rob_checked += 1;
            self.summary.events_partial += u64::from(partial);
            self.summary.events_short_unflagged += u64::from(short && !partial);
        }
        self.counters.events_written.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_add(bytes, Ordering::Relaxed);
        self.pending.push(Pending {
            peer,
            gid,
            stream: Some(s),
            bytes,
        });
        if self.disks.wrote(bytes) {
            if let Err(why) = self.disks.check() {
                self.full(None, why)?;
            }
        }
        Ok(())
    }

    /// The sender whose place a new identity takes in a full table: the least recently heard
    /// of those with no event waiting for a commit (pending or in flight); `None` when every
    /// one has. A scan of the table, only when it is full.
    fn idle_sender(&mut self) -> Option<usize> {
        let busy = &mut self.peer_busy;
        busy.clear();
        busy.resize(self.peer_ids.len(), false);
        let waiting = self.commits.queue.iter().flat_map(|c| c.pending.iter());
        for p in self.pending.iter().chain(waiting) {
            if let Some(b) = busy.get_mut(p.peer) {
                *b = true;
            }
        }
        (0..self.peer_ids.len())
            .filter(|&i| !self.peer_busy[i])
            .min_by_key(|&i| self.peer_heard[i])
    }

    /// Whether an event carries the partial flag and whether it is short of the partition's
    /// ROBs (None: not checked: a compressed payload, or no expected count). A walk over the
    /// ROB headers of an event already in the cache.
    fn rob_check(&self, event: &FullEvent<'_>) -> Option<(bool, bool)> {
        let expected = self.config.expected_robs;
        if expected == 0 || event.compression() != 0 {
            return None;
        }
        let partial = event.status().contains(Status::EVENT_PARTIAL);
        // A ROB that does not parse is there, damaged: its input counted the errors (and the
        // ROBs after it cannot be walked), so only an event that parses whole can be short.
        let mut robs = 0;
        for rob in event.robs() {
            if rob.is_err() {
                return Some((partial, false));
            }
            robs += 1;
        }
        Some((partial, robs < expected))
    }

    /// Writes one event to stream `s` in the directory in use, opening its file first if
    /// need be (`summed`: the Adler-32 of its bytes, when known); returns the bytes stored.
    fn write(
        &mut self,
        s: usize,
        words: &[u32],
        compressed: bool,
        summed: Option<u32>,
    ) -> Result<u64, DataflowError> {
        if self.writers[s].is_none() {
            let Some(dir) = self.disks.current().map(Path::to_path_buf) else {
                return Err(DataflowError::Config {
                    app: self.config.name.clone(),
                    reason: "every output directory is full".into(),
                });
            };
            let name = self
                .config
                .streams
                .get(s)
                .cloned()
                .unwrap_or_else(|| format!("stream{s}"));
            let margin = self.disks.margin_bytes();
            self.writers[s] = Some(StreamWriter::create(
                &self.config,
                &dir,
                &name,
                self.next_sequence[s],
                margin,
            )?);
        }
        let Some(writer) = self.writers[s].as_mut() else {
            return Ok(0);
        };
        writer.write(&self.config.name, words, compressed, summed)
    }
}

/// The Adler-32 of every byte of an uncompressed event, from the Adler-32 its DCM computed
/// over the payload (the event's checksum word) and the header and checksum words summed
/// here: the payload, nearly all of the event, is not read again (module docs, "Record
/// checksums"). `None` when the event carries no Adler-32 of its payload (another checksum
/// type, none, or a compressed payload): the file writer then sums the bytes itself.
pub(super) fn record_checksum(event: &FullEvent<'_>) -> Option<u32> {
    if event.checksum_type() != ChecksumType::Adler32 || event.compression() != 0 {
        return None;
    }
    let payload_sum = event.checksum_word()?;
    let words = event.words();
    let payload_words = event.payload().len();
    let head = words.get(..event.header_size())?;
    if head.len() + payload_words + 1 != words.len() {
        return None;
    }
    let sum = adler32_concat(
        adler32(ADLER32_INIT, words_as_bytes(head)),
        payload_sum,
        4 * payload_words as u64,
    );
    Some(adler32_concat(
        sum,
        adler32(ADLER32_INIT, &payload_sum.to_le_bytes()),
        4,
    ))
}

#[cfg(test)]
mod tests {
    use rodeo_format::fragment::{EventBuilder, StreamTag};

    use super::*;

    fn event(checksum: ChecksumType, compression: u32) -> Vec<u32> {
        let robs: Vec<Vec<u32>> = (0..3u32)
            .map(|r| {
                (0..500 + r)
                    .map(|i| i.wrapping_mul(2_654_435_761) ^ r)
                    .collect()
            })
            .collect();
        let pieces: Vec<&[u32]> = robs.iter().map(Vec::as_slice).collect();
        let tags = [StreamTag {
            name: "Main",
            stream_type: "physics",
        }];
        let mut out = Vec::new();
        EventBuilder {
            checksum,
            compression,
            global_id: 42,
            stream_tags: &tags,
            robs: &pieces,
            ..EventBuilder::default()
        }
        .write_vec(&mut out)
        .unwrap();
        out
    }

    #[test]
    fn the_record_checksum_from_the_dcms_is_the_sum_of_every_byte() {
        let words = event(ChecksumType::Adler32, 0);
        let parsed = FullEvent::parse(&words).unwrap();
        assert_eq!(
            record_checksum(&parsed),
            Some(adler32(ADLER32_INIT, words_as_bytes(&words)))
        );
        // A payload word damaged after the DCM summed it: the record keeps the DCM's sum, so
        // it disagrees with the bytes written and the file's readers find it.
        let mut damaged = words.clone();
        damaged[parsed.header_size() + 7] ^= 0x100;
        let parsed = FullEvent::parse(&damaged).unwrap();
        assert_ne!(
            record_checksum(&parsed),
            Some(adler32(ADLER32_INIT, words_as_bytes(&damaged)))
        );
    }

    #[test]
    fn without_an_adler32_of_the_payload_the_writer_sums_it() {
        for (checksum, compression) in [
            (ChecksumType::None, 0),
            (ChecksumType::Crc16, 0),
            (ChecksumType::Adler32, 1),
        ] {
            let words = event(checksum, compression);
            let parsed = FullEvent::parse(&words).unwrap();
            assert_eq!(record_checksum(&parsed), None, "{checksum:?} {compression}");
        }
    }
}
