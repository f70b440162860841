//! The file-player channel: replays a recorded link stream into superpages.
//!
//! A [`FilePlayer`] is a [`Generator`] over a [`LinkFile`] (FELIX blocks or S-LINK fragments
//! as `rodeo gen link --output` recorded them, corrupt ones included): it writes the file's
//! units, whole and in order, into the superpages of an [`crate::dma::EmulatedChannel`], once
//! or looping. The channel's limits set the pace (`max_units_per_s`, `max_bytes_per_s`) or none
//! (as fast as memory allows). The file is read and validated once, before the run, so
//! replaying does no I/O and no allocation: a unit costs one copy into the superpage, as a DMA
//! would.

use std::sync::Arc;

use rodeo_files::linkfile::LinkFile;

use crate::dma::{Fill, Generator};

/// Why a player could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PlayerError {
    /// The file holds no unit: nothing to play (and a loop would spin).
    #[error("the link file holds no unit: nothing to replay")]
    Empty,
}

/// Replays a link file; see the module docs.
#[derive(Debug, Clone)]
pub struct FilePlayer {
    file: Arc<LinkFile>,
    looping: bool,
    position: usize,
    passes: u64,
    units: u64,
    finished: bool,
}

impl FilePlayer {
    /// A player at the file's first unit; `looping` starts again after the last one.
    pub fn new(file: Arc<LinkFile>, looping: bool) -> Result<FilePlayer, PlayerError> {
        if file.units() == 0 {
            return Err(PlayerError::Empty);
        }
        let position = file.iter().position();
        Ok(FilePlayer {
            file,
            looping,
            position,
            passes: 0,
            units: 0,
            finished: false,
        })
    }

    /// Complete passes over the file so far.
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// Units written so far.
    pub fn units(&self) -> u64 {
        self.units
    }
}

impl Generator for FilePlayer {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let mut fill = Fill::default();
        while fill.units < max_units && !self.finished {
            let mut it = self.file.iter_from(self.position);
            let Some(unit) = it.next() else {
                self.passes += 1;
                if self.looping {
                    self.position = self.file.iter().position();
                    continue;
                }
                self.finished = true;
                break;
            };
            let Some(dst) = buf.get_mut(fill.bytes..fill.bytes + unit.len()) else {
                break;
            };
            dst.copy_from_slice(unit);
            fill.bytes += unit.len();
            fill.units += 1;
            self.position = it.position();
        }
        self.units += fill.units;
        fill
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rodeo_files::linkfile::{LinkFileHeader, LinkMode, LINK_FILE_MARKER};

    use super::*;

    fn file(units: &[&[u8]]) -> Arc<LinkFile> {
        let header = LinkFileHeader {
            mode: LinkMode::Slink,
            block_size: 0,
            framing: false,
            crc: false,
            l1id_wrap: 1 << 24,
        };
        let mut bytes = Vec::new();
        for w in [LINK_FILE_MARKER, 8, 1, 2, 0, 0, header.l1id_wrap, 0] {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        for u in units {
            bytes.extend_from_slice(&(u.len() as u32).to_le_bytes());
            bytes.extend_from_slice(u);
            bytes.resize(bytes.len().next_multiple_of(4), 0);
        }
        Arc::new(LinkFile::from_bytes(Path::new("t"), bytes).unwrap())
    }

    #[test]
    fn plays_once_then_finishes_and_loops_when_asked() {
        let f = file(&[&[1, 2, 3, 4], &[5, 6, 7, 8, 9, 10, 11, 12]]);
        let mut once = FilePlayer::new(Arc::clone(&f), false).unwrap();
        let mut buf = [0u8; 64];
        let fill = once.fill(&mut buf, u64::MAX);
        assert_eq!((fill.bytes, fill.units), (12, 2));
        assert_eq!(&buf[..12], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(once.is_finished());
        assert_eq!(once.fill(&mut buf, u64::MAX), Fill::default());

        let mut looping = FilePlayer::new(f, true).unwrap();
        let fill = looping.fill(&mut buf[..30], u64::MAX);
        // 4 + 8 + 4 + 8 = 24 bytes; the next unit (4) fits too: 28; then 8 does not.
        assert_eq!((fill.bytes, fill.units), (28, 5));
        assert_eq!(looping.passes(), 2);
        assert!(!looping.is_finished());
    }

    #[test]
    fn an_empty_file_is_refused() {
        assert!(matches!(
            FilePlayer::new(file(&[]), true),
            Err(PlayerError::Empty)
        ));
    }
}
