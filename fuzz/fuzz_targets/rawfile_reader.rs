//! Fuzz target: the raw-data file reader on arbitrary file contents. The input is written to a
//! temporary file (the reader streams from files), read to the end, and every error must carry
//! an offset inside the file. A start record the reader accepts (version 1 or 2) must be
//! canonical: encoding the fields read gives back the file's first bytes (sizes, zero padding
//! and, for version 2, the checksum word all as read).
#![no_main]

use std::io::Write as _;

use libfuzzer_sys::fuzz_target;
use rodeo_files::rawfile::RawFileReader;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("rodeo-fuzz-rawfile-{}.data", std::process::id()));
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
    if let Ok(mut r) = RawFileReader::open(&path) {
        let mut start = Vec::new();
        r.start().encode(&mut start);
        assert_eq!(
            data.get(..start.len()),
            Some(&start[..]),
            "the start record read does not encode to the file's bytes"
        );
        assert_eq!(r.position(), start.len() as u64);
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

/// Removes its file when dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
