//! `rodeo bench logger`: the logger's file writer alone, against dd-style direct writes to the
//! same directory in the same run.
//!
//! # Workload
//!
//! Per event size (1 KiB, 16 KiB, 96 KiB: twelve ROBs of 2,000 words, 1 MiB) the raw-file writer
//! (`rodeo_files::rawfile::RawFileWriter`, what the logger writes with) writes `--mib` MiB of
//! synthetic events into a fresh file in `--dir`, with the logger's group commit under load: an
//! `fdatasync` every `--batch` events, queued in the writer thread (`start_sync`) while the
//! events go on, as a logger whose batches are full commits them, the last one waited for,
//! the file closed (end record, fsync, rename) at the end.
//! The events come from a source ring larger than the caches (distinct events, as a logger
//! receives them), so the copy into the writer's buffer reads memory, as in a run. Rows with
//! `mode = "direct"` write with direct I/O (the logger's default), `mode = "buffered"` through
//! the page cache (the writer before direct I/O), for comparison.
//!
//! # Baseline
//!
//! `dd if=SRC of=DIR/x bs=4M count=N oflag=direct conv=fsync`, done in-process: 4 MiB blocks
//! of pseudo-random bytes from one aligned buffer written with `O_DIRECT` (buffered on a file
//! system that refuses it: `dd_direct` says which), then one `fdatasync`, as durable as the
//! writer's group commits; the same bytes as a row, before the rows and after them.
//! `dd_bytes_per_s` is their mean, and each row's `ratio` is its `bytes_per_s` over it: the
//! share of the disk's speed the writer reaches. Not zeros, and not without the sync: on a
//! VM the host's write cache takes direct writes at its own speed until a sync, and may skip
//! zero blocks altogether, so `dd if=/dev/zero` alone measures the host, not the disk
//! (docs/benchmarks-history.md, 2026-12-05).
//!
//! Figures are bytes of file (records and their headers) per second of wall time from the
//! first write to the file's close.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use rodeo_files::rawfile::{RawFileConfig, RawFileWriter, DIRECT_IO_ALIGN};
use serde::Serialize;
use serde_json::Value;

use crate::report::Report;

/// Event sizes of the rows, in bytes (96 KiB: the headline partition's twelve 2,000-word ROBs).
pub const EVENT_BYTES: [usize; 4] = [1 << 10, 16 << 10, 96 << 10, 1 << 20];

/// The event size whose direct row is the headline.
pub const HEADLINE_EVENT_BYTES: usize = 96 << 10;

/// Bytes of distinct source events the writer copies from (larger than any cache).
const SOURCE_BYTES: usize = 64 << 20;

/// The baseline's block (dd's `bs=4M`).
const DD_BLOCK: usize = 4 << 20;

/// Arguments of `rodeo bench logger`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Directory to write in (on the disk to measure; not tmpfs). A subdirectory is made and
    /// removed at the end.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,
    /// MiB written per row (and by each baseline).
    #[arg(long, default_value_t = 1024, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(1..=MAX_MIB))]
    pub mib: u64,
    /// Events per group commit (`fdatasync`), as the logger's `batch`.
    #[arg(long, default_value_t = 256, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// One event size instead of the default set, in bytes (a multiple of 4).
    #[arg(long, value_name = "BYTES")]
    pub event_bytes: Option<usize>,
    /// Only rows with direct I/O (no buffered comparison rows).
    #[arg(long)]
    pub direct_only: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    mode: &'static str,
    event_bytes: usize,
    events: u64,
    file_bytes: u64,
    commits: u64,
    seconds: f64,
    events_per_s: f64,
    bytes_per_s: f64,
    ratio: f64,
    direct_io: bool,
}

/// Most MiB a row may write: 16 TiB (`args.mib << 20` fits a u64 far below this).
const MAX_MIB: u64 = 1 << 24;

/// Runs the bench; see the module documentation.
pub fn measure_report(args: &Args) -> anyhow::Result<Report> {
    anyhow::ensure!(
        (1..=MAX_MIB).contains(&args.mib),
        "--mib {}: 1 to {MAX_MIB} needed",
        args.mib
    );
    anyhow::ensure!(args.batch > 0, "--batch must be at least 1");
    // A row (and each dd baseline) writes one file of `mib` MiB and a little more; refused
    // before anything is written when it would take most of the disk's free space.
    let need = (args.mib << 20) + (64 << 20);
    if let Some(room) = rodeo_files::space::room_near(&args.dir) {
        anyhow::ensure!(
            need <= room.allowed,
            "--mib {}: a row writes {need} bytes in {}, which has {} bytes free; give at \
             most {} MiB ({:.0}% of the free space) or another --dir",
            args.mib,
            args.dir.display(),
            room.free,
            room.allowed.saturating_sub(64 << 20) >> 20,
            rodeo_files::space::MAX_FREE_SHARE * 100.0,
        );
    }
    let sizes: Vec<usize> = match args.event_bytes {
        Some(b) => {
            anyhow::ensure!(
                b >= 4 && b % 4 == 0 && b <= SOURCE_BYTES,
                "--event-bytes {b}: a multiple of 4 bytes, from 4 to {SOURCE_BYTES}"
            );
            vec![b]
        }
        None => EVENT_BYTES.to_vec(),
    };
    let work = args
        .dir
        .join(format!("rodeo-bench-logger.{}", std::process::id()));
    fs::create_dir_all(&work)
        .with_context(|| format!("cannot create the bench directory {}", work.display()))?;
    let result = measure_in(&work, &sizes, args);
    let removed = fs::remove_dir_all(&work);
    let report = result?;
    removed.with_context(|| format!("cannot remove the bench directory {}", work.display()))?;
    Ok(report)
}

fn measure_in(dir: &Path, sizes: &[usize], args: &Args) -> anyhow::Result<Report> {
    let total = args.mib << 20;
    let mut report = Report::new("logger");
    report.fields.insert(
        "directory".into(),
        Value::from(args.dir.display().to_string()),
    );
    report
        .fields
        .insert("bytes_per_row".into(), Value::from(total));
    report
        .fields
        .insert("batch".into(), Value::from(args.batch));
    let source = source_ring();
    let (dd_before, dd_is_direct) = dd_direct(dir, total)?;
    let mut rows = Vec::new();
    let mut fallback = None;
    for &size in sizes {
        let modes: &[bool] = if args.direct_only {
            &[true]
        } else {
            &[true, false]
        };
        for &direct in modes {
            let (row, why) = write_row(dir, &source, size, total, args.batch, direct)?;
            if fallback.is_none() {
                fallback = why;
            }
            rows.push(row);
        }
    }
    let (dd_after, _) = dd_direct(dir, total)?;
    let dd = (dd_before + dd_after) / 2.0;
    for r in &mut rows {
        r.ratio = r.bytes_per_s / dd;
    }
    let headline = rows
        .iter()
        .find(|r| r.direct_io && r.event_bytes == HEADLINE_EVENT_BYTES)
        .or_else(|| rows.iter().find(|r| r.mode == "direct"));
    if let Some(h) = headline {
        report
            .fields
            .insert("headline_event_bytes".into(), Value::from(h.event_bytes));
        report
            .fields
            .insert("bytes_per_s".into(), Value::from(h.bytes_per_s));
        report.fields.insert("ratio".into(), Value::from(h.ratio));
    }
    report
        .fields
        .insert("dd_bytes_per_s".into(), Value::from(dd));
    report
        .fields
        .insert("dd_before_bytes_per_s".into(), Value::from(dd_before));
    report
        .fields
        .insert("dd_after_bytes_per_s".into(), Value::from(dd_after));
    report
        .fields
        .insert("dd_direct".into(), Value::from(dd_is_direct));
    report
        .fields
        .insert("direct_io_fallback".into(), Value::from(fallback));
    for r in &rows {
        report.push_row(r)?;
    }
    Ok(report)
}

/// Distinct synthetic source words: a counter, so every event differs.
fn source_ring() -> Vec<u32> {
    (0..(SOURCE_BYTES / 4) as u32)
        .map(|i| i.wrapping_mul(0x9E37_79B9))
        .collect()
}

/// One row: `total` bytes of `size`-byte events through the raw-file writer. Returns the row
/// and why direct I/O was refused, if it was.
fn write_row(
    dir: &Path,
    source: &[u32],
    size: usize,
    total: u64,
    batch: u64,
    direct: bool,
) -> anyhow::Result<(Row, Option<String>)> {
    let words = size / 4;
    let mode = if direct { "direct" } else { "buffered" };
    let stream = format!("bench{size}{mode}");
    let mut config = RawFileConfig::new(dir, 1, "benchlogger", stream.as_str());
    config.direct_io = direct;
    config.max_file_bytes = total + (64 << 20);
    let t0 = Instant::now();
    let mut writer = RawFileWriter::create(config)
        .with_context(|| format!("cannot create a raw-data file in {}", dir.display()))?;
    let used_direct = writer.direct_io();
    let why = writer.direct_io_fallback().map(str::to_string);
    let slots = (source.len() / words).max(1);
    let mut events = 0u64;
    let mut commits = 0u64;
    let mut written = 0u64;
    while written < total {
        let at = (events as usize % slots) * words;
        let event = &source[at..at + words];
        writer.write_event(event, 0).context("writing an event")?;
        written += 4 * (words as u64 + 4);
        events += 1;
        if events % batch == 0 {
            // A full batch: its commit queued, not waited for (the logger's rule); the queue's
            // depth holds the writer back when the disk falls behind.
            writer.start_sync().context("fdatasync")?;
            writer.synced().context("fdatasync")?;
            commits += 1;
        }
    }
    writer.sync().context("fdatasync")?;
    commits += 1;
    let closed = writer.finish().context("closing the file")?;
    let seconds = t0.elapsed().as_secs_f64();
    let file_bytes: u64 = closed.iter().map(|c| c.file_bytes).sum();
    for c in &closed {
        fs::remove_file(&c.path).with_context(|| format!("cannot remove {}", c.path.display()))?;
    }
    let row = Row {
        mode,
        event_bytes: size,
        events,
        file_bytes,
        commits,
        seconds,
        events_per_s: events as f64 / seconds,
        bytes_per_s: file_bytes as f64 / seconds,
        ratio: 0.0,
        direct_io: used_direct,
    };
    Ok((row, why))
}

/// `dd if=SRC of=DIR/x bs=4M count=N oflag=direct conv=fsync` with SRC non-zero bytes (one
/// 4 MiB block of pseudo-random words, written N times): bytes per second, and whether
/// `O_DIRECT` was taken. Not zeros: a VM's host may skip zero blocks (module docs).
fn dd_direct(dir: &Path, total: u64) -> anyhow::Result<(f64, bool)> {
    let path = dir.join("dd.x");
    let (file, direct) = match OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
    {
        Ok(f) => (f, true),
        Err(_) => (
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .with_context(|| format!("cannot create {}", path.display()))?,
            false,
        ),
    };
    let mut storage = vec![0u8; DD_BLOCK + DIRECT_IO_ALIGN];
    let start = storage.as_ptr().align_offset(DIRECT_IO_ALIGN);
    let block = &mut storage[start..start + DD_BLOCK];
    fill_pseudo_random(block);
    let block = &*block;
    let count = total.div_ceil(DD_BLOCK as u64);
    let t0 = Instant::now();
    for i in 0..count {
        file.write_all_at(block, i * DD_BLOCK as u64)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    file.sync_data()
        .with_context(|| format!("fdatasync {}", path.display()))?;
    let seconds = t0.elapsed().as_secs_f64();
    drop(file);
    fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    Ok(((count * DD_BLOCK as u64) as f64 / seconds, direct))
}

/// Fills `bytes` with a xorshift sequence (no zero word: the state never is 0).
fn fill_pseudo_random(bytes: &mut [u8]) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in bytes.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baseline's block has no zero 8-byte word, so no host can skip it as zeros.
    #[test]
    fn the_baseline_block_is_not_zeros() {
        let mut block = vec![0u8; 4096 + 3];
        fill_pseudo_random(&mut block);
        assert!(block[..4096].chunks(8).all(|w| w != [0u8; 8]));
        assert!(block.iter().filter(|&&b| b == 0).count() < 64);
    }

    #[test]
    fn a_small_run_writes_every_row_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let args = Args {
            json: true,
            dir: dir.path().to_path_buf(),
            mib: 4,
            batch: 16,
            event_bytes: Some(HEADLINE_EVENT_BYTES),
            direct_only: false,
        };
        let report = measure_report(&args).unwrap();
        assert_eq!(report.rows.len(), 2);
        for r in &report.rows {
            assert!(r["file_bytes"].as_u64().unwrap() >= 4 << 20, "{r:?}");
            assert!(r["ratio"].as_f64().unwrap() > 0.0, "{r:?}");
        }
        assert!(report.fields["dd_bytes_per_s"].as_f64().unwrap() > 0.0);
        // Nothing is left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
