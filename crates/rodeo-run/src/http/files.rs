//! `GET /api/files`: the files of the run prepared or in progress as they grow (name, bytes,
//! still being written) and the free space of the output directory's file system, for the
//! page's top bar. Read from the run directory at each request (files under further
//! `[logger] directories` are not listed; the disk-full alarm watches those).

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::output::data_files;

use super::Response;

/// Files listed at most (the newest, by name: sequence numbers grow).
const FILES_SERVED: usize = 20;

/// How long one listing of the run directory answers: a day's run has ~80,000 files, and
/// anyone may ask, every second per page open.
const LISTING_KEPT: Duration = Duration::from_secs(1);

/// The last answer of [`files_response`] (when, for which run), given again for
/// [`LISTING_KEPT`].
#[derive(Default)]
pub(super) struct FilesCache(Mutex<Option<(Instant, u32, Vec<u8>)>>);

impl FilesCache {
    /// The answer for run `run_number`: the last one if it is younger than [`LISTING_KEPT`]
    /// and of that run, else a new listing (one at a time: other requests wait for it and
    /// take it).
    pub(super) fn response(&self, output: Option<&Path>, run_number: u32) -> Response {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, run, body)) = last.as_ref() {
            if *run == run_number && at.elapsed() < LISTING_KEPT {
                return Response::new(200, "application/json", body.clone());
            }
        }
        let r = files_response(output, run_number);
        if r.status == 200 {
            *last = Some((Instant::now(), run_number, r.body.clone()));
        }
        r
    }
}

/// The answer for run `run_number` of the output directory `output` (None: no run database,
/// so no output directory known).
pub(super) fn files_response(output: Option<&Path>, run_number: u32) -> Response {
    let Some(output) = output else {
        return Response::error(404, "no output directory here");
    };
    let dir = output.join(format!("run-{run_number:08}"));
    let all = data_files(&dir);
    let first = all.len().saturating_sub(FILES_SERVED);
    let files: Vec<Value> = all[first..]
        .iter()
        .map(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            json!({
                "name": name.trim_end_matches(".writing"),
                "bytes": std::fs::metadata(p).map(|m| m.len()).ok(),
                "writing": name.ends_with(".writing"),
            })
        })
        .collect();
    let space = rodeo_files::space::free_space(output).ok();
    Response::json(
        200,
        &json!({
            "run_number": run_number,
            "directory": dir,
            "count": all.len(),
            "files": files,
            "disk_free_bytes": space.map(|s| s.available),
            "disk_total_bytes": space.map(|s| s.total),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_directory_files_with_their_sizes_and_the_disk() {
        let out = tempfile::tempdir().unwrap();
        let run = out.path().join("run-00000007");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("a.0001.data"), [0u8; 100]).unwrap();
        std::fs::write(run.join("a.0002.data.writing"), [0u8; 40]).unwrap();
        std::fs::write(run.join("partition.toml"), "x").unwrap();
        let r = files_response(Some(out.path()), 7);
        assert_eq!(r.status, 200);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["count"], 2);
        assert_eq!(v["files"][0]["name"], "a.0001.data");
        assert_eq!(v["files"][0]["bytes"], 100);
        assert_eq!(v["files"][0]["writing"], false);
        assert_eq!(v["files"][1]["name"], "a.0002.data");
        assert_eq!(v["files"][1]["writing"], true);
        assert!(v["disk_free_bytes"].as_u64().unwrap() > 0);
        assert_eq!(files_response(None, 7).status, 404);
        let empty: Value =
            serde_json::from_slice(&files_response(Some(out.path()), 8).body).unwrap();
        assert_eq!(empty["count"], 0);
    }

    /// A listing answers for a second, for its run only.
    #[test]
    fn a_listing_is_kept_for_a_second_and_its_run() {
        let out = tempfile::tempdir().unwrap();
        let run = out.path().join("run-00000007");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("a.0001.data"), [0u8; 100]).unwrap();
        let cache = FilesCache::default();
        let count = |r: Response| -> u64 {
            serde_json::from_slice::<Value>(&r.body).unwrap()["count"]
                .as_u64()
                .unwrap()
        };
        assert_eq!(count(cache.response(Some(out.path()), 7)), 1);
        std::fs::write(run.join("a.0002.data"), [0u8; 100]).unwrap();
        assert_eq!(
            count(cache.response(Some(out.path()), 7)),
            1,
            "the kept listing"
        );
        assert_eq!(
            count(cache.response(Some(out.path()), 8)),
            0,
            "another run: listed"
        );
        std::thread::sleep(LISTING_KEPT);
        assert_eq!(
            count(cache.response(Some(out.path()), 7)),
            2,
            "listed again"
        );
    }
}
