//! Fuzz target: the data-file reader on arbitrary file contents, which dispatches on the first
//! record to the EventStorage reader (versions 2-6, zlib data blocks) or rodeo's container, and
//! decodes every event (eformat 5, or eformat 3/4 walked through sub-detector and ROS levels).
//! Every error must carry an offset inside the file, every ROB range must lie inside its event.
//! Every event decoded is lifted to eformat 5 (`convert::lift_to_v5`, what `rodeo convert` and
//! the replay do), which must give a valid eformat 5 event with the same ROBs; the whole file
//! goes through `verify::check_file`, whose error offset must lie inside the file.
#![no_main]

use std::io::Write as _;

use libfuzzer_sys::fuzz_target;
use rodeo_files::convert::lift_to_v5;
use rodeo_files::datafile::DataFileReader;
use rodeo_files::verify::check_file;
use rodeo_format::fragment::FullEvent;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("rodeo-fuzz-es-{}.data", std::process::id()));
    // Removed after each input (also on the early returns): a run leaves nothing in /tmp.
    let _remove = RemoveOnDrop(path.clone());
    {
        let Ok(mut f) = std::fs::File::create(&path) else {
            return;
        };
        if f.write_all(data).is_err() {
            return;
        }
    }
    let len = data.len() as u64;
    match DataFileReader::open(&path) {
        Ok(r) => {
            for ev in r {
                match ev {
                    Ok(e) => {
                        assert!(e.offset < len);
                        for rob in &e.robs {
                            assert_eq!(e.rob_words(rob).len(), rob.size);
                            assert_eq!(e.data_words(rob).len(), rob.data_len);
                        }
                        let mut v5 = Vec::new();
                        if e.eformat != 5 && lift_to_v5(&e, &mut v5).is_ok() {
                            let lifted = FullEvent::parse(&v5).expect("a lifted event parses");
                            assert_eq!(
                                lifted.validate_robs().expect("its ROBs parse"),
                                e.robs.len()
                            );
                        }
                    }
                    Err(e) => {
                        if let Some(o) = e.offset() {
                            assert!(o <= len, "error offset {o} beyond the file ({len})");
                        }
                        break;
                    }
                }
            }
        }
        Err(e) => {
            if let Some(o) = e.offset() {
                assert!(o <= len, "error offset {o} beyond the file ({len})");
            }
        }
    }
    let v = check_file(&path);
    if let Some(o) = v.error_offset {
        assert!(o <= len, "verdict offset {o} beyond the file ({len})");
    }
});

/// Removes its file when dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
