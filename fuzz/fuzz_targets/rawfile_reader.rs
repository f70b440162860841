//! Fuzz target: the raw-data file reader on arbitrary file contents. The input is written to a
//! temporary file (the reader streams from files), read to the end, and every error must carry
//! an offset inside the file.
#![no_main]

use std::io::Write as _;

use libfuzzer_sys::fuzz_target;
use rodeo_files::rawfile::RawFileReader;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("rodeo-fuzz-rawfile-{}.data", std::process::id()));
    {
        let Ok(mut f) = std::fs::File::create(&path) else {
            return;
        };
        if f.write_all(data).is_err() {
            return;
        }
    }
    if let Ok(mut r) = RawFileReader::open(&path) {
        while let Some(ev) = r.next_event() {
            match ev {
                Ok(e) => assert!(e.offset < data.len() as u64),
                Err(e) => {
                    if let Some(o) = e.offset() {
                        assert!(
                            o <= data.len() as u64,
                            "error offset {o} beyond the file ({})",
                            data.len()
                        );
                    }
                    break;
                }
            }
        }
    }
});
