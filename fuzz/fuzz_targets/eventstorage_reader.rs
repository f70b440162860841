//! Fuzz target: the data-file reader on arbitrary file contents, which dispatches on the first
//! record to the EventStorage reader (versions 2-6, zlib data blocks) or rodeo's container, and
//! decodes every event (eformat 5, or eformat 3/4 walked through sub-detector and ROS levels).
//! Every error must carry an offset inside the file, every ROB range must lie inside its event.
#![no_main]

use std::io::Write as _;

use libfuzzer_sys::fuzz_target;
use rodeo_format::datafile::DataFileReader;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("rodeo-fuzz-es-{}.data", std::process::id()));
    {
        let Ok(mut f) = std::fs::File::create(&path) else { return };
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
});
