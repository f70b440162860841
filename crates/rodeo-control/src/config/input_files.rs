//! Checks on this host of the files a readout input reads: `ros.replay_files` (loaded as the
//! node loads them) and `ros.link_files` (regular files this process can open). `config
//! check` passed a replay file that did not exist, was a TOML file, a directory or
//! `/dev/zero`, and the run then failed at once; and a replay without `replay_loop` asked for
//! more events than its files hold built every event past their end partial, one request
//! timeout each (20,000 asked of a 2,021-event file: still running after 60 s).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rodeo_files::replay::ReplayEvents;

use super::error::{bad, ConfigError};
use super::{L1Mode, PartitionConfig, ReplayL1id, RosInput};

/// Replay files larger than this in all are opened, not loaded, by the check (the node loads
/// them at its start in any case).
const LOAD_AT_MOST_BYTES: u64 = 1 << 30;

impl PartitionConfig {
    /// Checks the readout inputs' files on this host (module docs). Readout nodes placed on
    /// other hosts (`[hosts]`) read their own disks and are not checked here.
    pub fn check_input_files(&self) -> Result<(), ConfigError> {
        if self.hosts.keys().any(|app| app.starts_with("ros-")) {
            return Ok(());
        }
        match self.ros.input {
            // No file at all is `validate`'s error, said once.
            RosInput::Replay if self.ros.replay_files.is_empty() => Ok(()),
            RosInput::Replay => self.check_replay_files(),
            RosInput::File => {
                // One file per ROB: the same capture for two channels would put one link's
                // data into both ROBs of every event (found by a QA pass: it ran "ok").
                // By device and inode: a path another way, a symbolic or a hard link all name
                // the same file.
                let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
                for (i, entry) in self.ros.link_files.iter().enumerate() {
                    regular_file(Path::new(entry))
                        .map_err(|why| bad("ros.link_files", format!("{entry:?}"), why))?;
                    let Ok(meta) = std::fs::metadata(entry) else {
                        continue;
                    };
                    check_link_file(Path::new(entry), meta.len())
                        .map_err(|why| bad("ros.link_files", format!("{entry:?}"), why))?;
                    use std::os::unix::fs::MetadataExt as _;
                    if let Some(first) = seen.insert((meta.dev(), meta.ino()), i) {
                        return Err(bad(
                            "ros.link_files",
                            format!("{entry:?}"),
                            format!(
                                "one capture per ROB: entry {i} is the same file as entry \
                                 {first} ({:?})",
                                self.ros.link_files[first]
                            ),
                        ));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn check_replay_files(&self) -> Result<(), ConfigError> {
        let r = &self.ros;
        let mut total = 0;
        for entry in &r.replay_files {
            regular_file(Path::new(entry))
                .map_err(|why| bad("ros.replay_files", format!("{entry:?}"), why))?;
            total += std::fs::metadata(entry).map_or(0, |m| m.len());
        }
        let files: Vec<PathBuf> = r.replay_files.iter().map(PathBuf::from).collect();
        if total > LOAD_AT_MOST_BYTES {
            for f in &files {
                rodeo_files::datafile::DataFileReader::open(f).map_err(|e| {
                    bad(
                        "ros.replay_files",
                        format!("{:?}", f.display().to_string()),
                        format!("raw-data files (rodeo or EventStorage): {e}"),
                    )
                })?;
            }
            return Ok(());
        }
        let map: HashMap<u32, u32> = r.replay_source_map.iter().map(|&[a, b]| (a, b)).collect();
        let events = ReplayEvents::load(&files, &map).map_err(|e| {
            bad(
                "ros.replay_files",
                format!("{:?}", r.replay_files),
                format!("raw-data files the replay can load: {e}"),
            )
        })?;
        // Every ROB of the files must have a channel somewhere in the partition: the others
        // were left out of every event, unsaid (a 12-ROB file into 6 channels ran "ok").
        let base = u32::from(r.subdetector) << 16;
        let robs = (r.nodes * r.channels) as u32;
        let orphans: Vec<u32> = events
            .source_ids()
            .into_iter()
            .filter(|id| !(base..base.saturating_add(robs)).contains(id))
            .collect();
        if let Some(first) = orphans.first() {
            return Err(bad(
                "ros.channels",
                format!(
                    "{} (ros.nodes x ros.channels = {robs} ROBs, 0x{base:08x}..; the replay files \
                     hold {} ROB(s) outside them, the first 0x{first:08x})",
                    r.channels,
                    orphans.len()
                ),
                "a channel for every ROB of ros.replay_files (the others would be left out of \
                 every event): more ros.channels or ros.nodes, the files' ros.subdetector, or \
                 ros.replay_source_map to rename them",
            ));
        }
        // And every channel a ROB of the files: one without is asked for fragments that never
        // come (16 channels for a 12-ROB file built every event partial, "degraded").
        let ids = events.source_ids();
        let empty = (base..base.saturating_add(robs))
            .filter(|id| !ids.contains(id))
            .count();
        if empty > 0 {
            return Err(bad(
                "ros.channels",
                format!(
                    "{} (ros.nodes x ros.channels = {robs} ROBs; {empty} of them are in no \
                     event of ros.replay_files)",
                    r.channels
                ),
                "as many channels as the replay files have ROBs (a channel without is asked \
                 for fragments that never come: every event built partial)",
            ));
        }
        // Kept L1IDs must each be once: the same file listed twice wrote every event twice,
        // unflagged (or, asked for the file's count, half of them twice and half not at all),
        // while the sheet said they were flagged (a QA pass).
        if r.replay_l1id == ReplayL1id::Keep {
            let mut l1ids = events.l1ids();
            l1ids.sort_unstable();
            if let Some(w) = l1ids.windows(2).find(|w| w[0] == w[1]) {
                return Err(bad(
                    "ros.replay_files",
                    format!("{:?}", r.replay_files),
                    format!(
                        "with ros.replay_l1id = \"keep\", events of L1IDs that are each once: \
                         L1ID {:#010x} is in them more than once (a file listed twice?), and \
                         its events would be built and written twice; or ros.replay_l1id = \
                         \"renumber\"",
                        w[0]
                    ),
                ));
            }
        }
        let held = events.len() as u64;
        let asks = self.run.events;
        // The L1 emulator and the RoI builder issue L1IDs from 0 whatever the files hold; the
        // data-driven and external L1s accept only what comes.
        let counted = matches!(self.l1.mode, L1Mode::Emulator | L1Mode::Roib);
        if counted
            && !r.replay_loop
            && r.replay_l1id == ReplayL1id::Renumber
            && (asks == 0 || asks > held)
        {
            let asked = if asks == 0 {
                "0 (no count: the run would go on past their end)".to_string()
            } else {
                asks.to_string()
            };
            return Err(bad(
                "run.events",
                asked,
                format!(
                    "at most {held}, the events of ros.replay_files, without ros.replay_loop \
                     (every event past their end would be built without fragments, one request \
                     timeout each); or set ros.replay_loop = true"
                ),
            ));
        }
        Ok(())
    }
}

/// Whether `path` is a regular file this process can open for reading (a link to one too).
fn regular_file(path: &Path) -> Result<(), String> {
    let m = std::fs::metadata(path).map_err(|e| format!("a file that exists: {e}"))?;
    if !m.is_file() {
        return Err("a regular file (this is a directory, a device or a pipe)".into());
    }
    std::fs::File::open(path)
        .map(|_| ())
        .map_err(|e| format!("a file this process can read: {e}"))
}

/// A link capture as the file player reads it: up to [`LOAD_AT_MOST_BYTES`] read whole
/// (every unit framed, at least one: an empty capture or one cut inside a unit passed the
/// check and failed the run at once), a larger one by its header.
fn check_link_file(path: &Path, len: u64) -> Result<(), String> {
    use rodeo_files::linkfile::{LinkFile, LINK_FILE_HEADER_WORDS};
    let what = |e: rodeo_files::linkfile::LinkFileError| format!("a link capture file: {e}");
    if len > LOAD_AT_MOST_BYTES {
        let mut header = vec![0u8; 4 * LINK_FILE_HEADER_WORDS];
        use std::io::Read as _;
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut header))
            .map_err(|e| format!("a link capture file: cannot read its header: {e}"))?;
        return LinkFile::from_bytes(path, header).map(|_| ()).map_err(what);
    }
    let file = LinkFile::read(path).map_err(what)?;
    if file.units() == 0 {
        return Err("a link capture file with at least one unit: it holds none".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rodeo_files::rawfile::{RawFileConfig, RawFileWriter};
    use rodeo_format::synth::{EventSynth, SynthConfig};

    use super::*;

    /// A raw-data file of `n` events (run 1) in `dir`.
    fn raw_file(dir: &Path, n: u64) -> PathBuf {
        let mut c = RawFileConfig::new(dir, 1, "test", "physics_Main");
        c.fsync_on_close = false;
        let mut w = RawFileWriter::create(c).unwrap();
        let mut synth = EventSynth::new(SynthConfig {
            robs: 12,
            run_number: 1,
            ..SynthConfig::default()
        });
        let mut out = Vec::new();
        for g in 0..n {
            out.clear();
            synth.event(g, &mut out).unwrap();
            w.write_event(&out, 0).unwrap();
        }
        w.finish().unwrap().pop().unwrap().path
    }

    /// `[ros] replay_source_map` lines renaming the test files' ROBs to the first `n`
    /// channels of the partition (`0x00410000`...).
    fn onto_channels(n: usize) -> String {
        let synth = EventSynth::new(SynthConfig {
            robs: 12,
            ..SynthConfig::default()
        });
        let pairs: Vec<String> = synth
            .source_ids()
            .take(n)
            .enumerate()
            .map(|(i, id)| format!("[{}, {}]", id.word(), 0x0041_0000 + i as u32))
            .collect();
        format!("replay_source_map = [{}]", pairs.join(", "))
    }

    fn config(body: &str) -> PartitionConfig {
        PartitionConfig::from_toml(body, "t.toml").unwrap()
    }

    /// A replay of `files` with `[run]` body `run` and more `[ros]` lines `ros`.
    fn replay(files: &[&Path], run: &str, ros: &str) -> PartitionConfig {
        let list: Vec<String> = files
            .iter()
            .map(|f| format!("{:?}", f.display().to_string()))
            .collect();
        config(&format!(
            "[run]\n{run}\n[ros]\ninput = \"replay\"\nreplay_files = [{}]\n{ros}\n",
            list.join(", ")
        ))
    }

    /// A replay file that is missing, a directory or not raw data is refused by name; so is
    /// a missing link file.
    #[test]
    fn input_files_that_cannot_be_read_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let toml = dir.path().join("p.toml");
        std::fs::write(&toml, "[run]\n").unwrap();
        for bad in [dir.path().join("none.data"), dir.path().to_path_buf(), toml] {
            let e = replay(&[&bad], "events = 10", "")
                .check_input_files()
                .unwrap_err();
            assert!(
                e.to_string().contains("ros.replay_files"),
                "{}: {e}",
                bad.display()
            );
        }
        // No file at all is `validate`'s error alone (it was said twice).
        let mut none = PartitionConfig::default();
        none.ros.input = RosInput::Replay;
        assert!(none.check_input_files().is_ok());
        let c = config(
            "[run]\nevents = 0\n[l1]\nmode = \"readout\"\n[ros]\nchannels = 1\ninput = \"file\"\n\
             link_files = [\"/nonexistent/l0\"]\n",
        );
        let e = c.check_input_files().unwrap_err().to_string();
        assert!(
            e.contains("ros.link_files") && e.contains("/nonexistent/l0"),
            "{e}"
        );
    }

    /// One capture for two channels (written alike, or another way to the same file: a
    /// relative path, a symbolic or a hard link) is refused naming both entries; two captures
    /// pass.
    #[test]
    fn one_link_file_for_two_channels_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("l0.bin"), dir.path().join("l1.bin"));
        link_file(&a, 1);
        link_file(&b, 1);
        let link = dir.path().join("alias.bin");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let hard = dir.path().join("hard.bin");
        std::fs::hard_link(&a, &hard).unwrap();
        let files = |x: &std::path::Path, y: &std::path::Path| {
            config(&format!(
                "[run]\nevents = 0\n[l1]\nmode = \"readout\"\n[ros]\nchannels = 2\n\
                 input = \"file\"\nlink_files = [{:?}, {:?}]\n",
                x.display().to_string(),
                y.display().to_string()
            ))
        };
        assert!(files(&a, &b).check_input_files().is_ok());
        for twin in [a.clone(), link, hard, dir.path().join(".").join("l0.bin")] {
            let e = files(&a, &twin)
                .check_input_files()
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("ros.link_files") && e.contains("entry 1 is the same file as entry 0"),
                "{}: {e}",
                twin.display()
            );
        }
    }

    /// An S-LINK link capture of `units` units of two words at `path`.
    fn link_file(path: &std::path::Path, units: usize) {
        use rodeo_files::linkfile::{LinkFileHeader, LinkFileWriter, LinkMode};
        let header = LinkFileHeader {
            mode: LinkMode::Slink,
            block_size: 0,
            framing: false,
            crc: false,
            l1id_wrap: 1 << 24,
        };
        let mut w = LinkFileWriter::create(path, &header).unwrap();
        for _ in 0..units {
            w.write_unit(&[0u8; 8]).unwrap();
        }
        w.finish().unwrap();
    }

    /// A link capture that is not one, holds no unit, or is cut inside a unit is refused by
    /// name (each passed the check and failed the run at once); a whole one passes.
    #[test]
    fn an_empty_or_truncated_link_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l0.bin");
        let check = || {
            config(&format!(
                "[run]\nevents = 0\n[l1]\nmode = \"readout\"\n[ros]\nchannels = 1\n\
                 input = \"file\"\nlink_files = [{:?}]\n",
                path.display().to_string()
            ))
            .check_input_files()
            .map_err(|e| e.to_string())
        };
        link_file(&path, 3);
        check().unwrap();
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 4]).unwrap();
        let e = check().unwrap_err();
        assert!(
            e.contains("ros.link_files") && e.contains("link capture"),
            "{e}"
        );
        link_file(&path, 0);
        let e = check().unwrap_err();
        assert!(e.contains("it holds none"), "{e}");
        std::fs::write(&path, b"not a capture").unwrap();
        assert!(check().unwrap_err().contains("ros.link_files"));
    }

    /// Keeping the files' L1IDs, a file listed twice (each L1ID twice) is refused naming the
    /// L1ID; once it passes, and renumbered twice too.
    #[test]
    fn a_replay_keeping_l1ids_refuses_an_l1id_twice() {
        let dir = tempfile::tempdir().unwrap();
        let f = raw_file(dir.path(), 30);
        let map = onto_channels(12);
        let keep = format!("replay_l1id = \"keep\"\n{map}");
        let e = replay(&[&f, &f], "events = 30", &keep)
            .check_input_files()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ros.replay_files") && e.contains("more than once"),
            "{e}"
        );
        replay(&[&f], "events = 30", &keep)
            .check_input_files()
            .unwrap();
        replay(&[&f, &f], "events = 60", &map)
            .check_input_files()
            .unwrap();
    }

    /// Without `replay_loop` the run asks for at most the events the files hold (no count
    /// would go past their end); with the loop, or fewer events, it passes.
    #[test]
    fn a_replay_without_its_loop_asks_for_no_more_events_than_its_files_hold() {
        let dir = tempfile::tempdir().unwrap();
        let f = raw_file(dir.path(), 30);
        let map = onto_channels(12);
        let e = replay(&[&f], "events = 31", &map)
            .check_input_files()
            .unwrap_err();
        let e = e.to_string();
        assert!(e.contains("run.events") && e.contains("at most 30"), "{e}");
        let e = replay(&[&f], "events = 0\nseconds = 5.0", &map).check_input_files();
        assert!(e.unwrap_err().to_string().contains("run.events"));
        replay(&[&f], "events = 30", &map)
            .check_input_files()
            .unwrap();
        // Its 12 ROBs need 12 channels: 6 (or 6 left unmapped) would leave half of each
        // event out.
        let six = format!("channels = 6\n{map}");
        let e = replay(&[&f], "events = 30", &six).check_input_files();
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("ros.channels") && e.contains("6 ROB(s) outside"),
            "{e}"
        );
        let half = onto_channels(6);
        assert!(replay(&[&f], "events = 30", &half)
            .check_input_files()
            .is_err());
        // And 16 channels for its 12 ROBs: 4 would wait for fragments that never come.
        let e = replay(&[&f], "events = 30", &format!("channels = 16\n{map}"));
        let e = e.check_input_files().unwrap_err().to_string();
        assert!(e.contains("ros.channels") && e.contains("4 of them"), "{e}");
        replay(&[&f], "events = 31", &format!("replay_loop = true\n{map}"))
            .check_input_files()
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
