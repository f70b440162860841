//! Events of raw-data files loaded for replay through a readout node.
//!
//! [`ReplayEvents::load`] reads data files of either container and any version
//! ([`DataFileReader`]) and keeps, per event, its L1ID and the ROD fragment of each ROB, keyed
//! by the ROB's source id (or the id a source-id map gives it). eformat 3/4 events are lifted
//! to eformat 5 first ([`crate::convert::lift_to_v5`]), so every ROD replayed has the eformat 5
//! layout. The whole set is held in memory (one vector of words), so replaying does no I/O: a
//! fragment costs one copy into a superpage, as a card's DMA would.
//!
//! A damaged file is refused (with the byte offset where reading stopped), not replayed in
//! part: a replay reproduces what the files hold.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::convert::{lift_to_v5, LiftError};
use crate::datafile::{DataFileError, DataFileReader};
use rodeo_format::fragment::FullEvent;

/// What the replayed fragments carry as their L1ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L1idMode {
    /// The L1IDs of the file's events (each ROD written with its event's L1ID).
    Keep,
    /// 0, 1, 2, ... in file order (continuing over loops), wrapping into the ECR like the
    /// emulated cards (`rodeo_format::l1id`): what an L1 emulator asks for.
    #[default]
    Renumber,
}

impl L1idMode {
    /// `keep` or `renumber`.
    pub fn name(self) -> &'static str {
        match self {
            L1idMode::Keep => "keep",
            L1idMode::Renumber => "renumber",
        }
    }
}

/// One event of a replay: its L1ID and its RODs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayEvent {
    /// The event's L1ID as the file has it (the full-event header's; eformat 5 extended).
    pub l1id: u32,
    /// Per ROB: its (mapped) source id and its ROD's word range in [`ReplayEvents::words`].
    pub robs: Vec<(u32, Range<usize>)>,
}

/// Why files could not be loaded for replay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// No file was given.
    #[error("no replay file given")]
    NoFiles,
    /// A file could not be read to its end (the error names the byte offset).
    #[error("replay file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: DataFileError,
    },
    /// An old event could not be lifted to eformat 5.
    #[error("replay file {}, event {index}: {source}", path.display())]
    Lift {
        /// The file.
        path: PathBuf,
        /// The event's index in it.
        index: u64,
        /// Why.
        #[source]
        source: LiftError,
    },
    /// An event holds two ROBs that go to the same channel.
    #[error(
        "replay file {}, event {index}: two ROBs for source id {source_id:#010x} (after the \
         source-id map); a channel takes one fragment per event",
        path.display()
    )]
    DuplicateRob {
        /// The file.
        path: PathBuf,
        /// The event's index in it.
        index: u64,
        /// The source id.
        source_id: u32,
    },
    /// The files hold no event.
    #[error("the replay files hold no event: nothing to replay")]
    Empty,
}

/// The events of the replay files, in order; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplayEvents {
    events: Vec<ReplayEvent>,
    words: Vec<u32>,
    files: Vec<PathBuf>,
}

impl ReplayEvents {
    /// Loads `files` in order; `map` renames source ids (file id -> channel id; ids not in it
    /// are kept).
    pub fn load(files: &[PathBuf], map: &HashMap<u32, u32>) -> Result<ReplayEvents, ReplayError> {
        if files.is_empty() {
            return Err(ReplayError::NoFiles);
        }
        let mut out = ReplayEvents {
            files: files.to_vec(),
            ..ReplayEvents::default()
        };
        let mut v5 = Vec::new();
        for path in files {
            out.load_file(path, map, &mut v5)?;
        }
        if out.events.is_empty() {
            return Err(ReplayError::Empty);
        }
        Ok(out)
    }

    fn load_file(
        &mut self,
        path: &Path,
        map: &HashMap<u32, u32>,
        v5: &mut Vec<u32>,
    ) -> Result<(), ReplayError> {
        let read = |source| ReplayError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut seen = HashSet::new();
        for ev in DataFileReader::open(path).map_err(read)? {
            let ev = ev.map_err(read)?;
            lift_to_v5(&ev, v5).map_err(|source| ReplayError::Lift {
                path: path.to_path_buf(),
                index: ev.index,
                source,
            })?;
            // The reader checked the event (and restored it); the lifted one is built here.
            let fe = FullEvent::parse(v5).map_err(|e| {
                read(DataFileError::Event {
                    index: ev.index,
                    offset: ev.offset,
                    error: e.into(),
                })
            })?;
            let mut robs: Vec<(u32, Range<usize>)> = Vec::new();
            // A set, not a scan of `robs`: an event of a million tiny ROBs (a 76 MB one, or a
            // small compressed one restored) would otherwise take 10^11 comparisons.
            seen.clear();
            for rob in fe.robs() {
                let rob = rob.map_err(|e| {
                    read(DataFileError::Event {
                        index: ev.index,
                        offset: ev.offset,
                        error: e.into(),
                    })
                })?;
                let id = rob.source_id().word();
                let id = map.get(&id).copied().unwrap_or(id);
                if !seen.insert(id) {
                    return Err(ReplayError::DuplicateRob {
                        path: path.to_path_buf(),
                        index: ev.index,
                        source_id: id,
                    });
                }
                let start = self.words.len();
                self.words.extend_from_slice(rob.rod().words());
                robs.push((id, start..self.words.len()));
            }
            self.events.push(ReplayEvent {
                l1id: ev.l1id,
                robs,
            });
        }
        Ok(())
    }

    /// The events in order.
    pub fn events(&self) -> &[ReplayEvent] {
        &self.events
    }

    /// Events loaded.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no event is loaded (never, after a successful [`ReplayEvents::load`]).
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The files loaded.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The ROD words of one ROB of an event (a range from [`ReplayEvent::robs`]).
    pub fn rod(&self, range: &Range<usize>) -> &[u32] {
        self.words.get(range.clone()).unwrap_or(&[])
    }

    /// Every (mapped) source id found, sorted.
    pub fn source_ids(&self) -> Vec<u32> {
        let set: BTreeSet<u32> = self
            .events
            .iter()
            .flat_map(|e| e.robs.iter().map(|r| r.0))
            .collect();
        set.into_iter().collect()
    }

    /// The largest ROD, in words.
    pub fn max_rod_words(&self) -> usize {
        self.events
            .iter()
            .flat_map(|e| e.robs.iter().map(|r| r.1.len()))
            .max()
            .unwrap_or(0)
    }

    /// Puts the events in the order a link delivers them: by extended L1ID, stable (a readout
    /// link carries L1IDs in increasing order and a store takes a fragment older than the
    /// newest as lost, while a logger writes events in the order they were built). What a
    /// replay keeping the L1IDs does before it starts.
    pub fn sort_by_l1id(&mut self) {
        self.events.sort_by_key(|e| e.l1id);
    }

    /// The events' L1IDs, in the current order.
    pub fn l1ids(&self) -> Vec<u32> {
        self.events.iter().map(|e| e.l1id).collect()
    }
}

/// The L1IDs of the events of `files` in link order (sorted, as
/// [`ReplayEvents::sort_by_l1id`] orders a replay that keeps them): what an L1 source issues
/// for such a replay. Read without keeping the events.
pub fn file_l1ids(files: &[PathBuf]) -> Result<Vec<u32>, ReplayError> {
    if files.is_empty() {
        return Err(ReplayError::NoFiles);
    }
    let mut out = Vec::new();
    for path in files {
        let read = |source| ReplayError::Read {
            path: path.clone(),
            source,
        };
        for ev in DataFileReader::open(path).map_err(read)? {
            out.push(ev.map_err(read)?.l1id);
        }
    }
    if out.is_empty() {
        return Err(ReplayError::Empty);
    }
    out.sort_unstable();
    Ok(out)
}
