//! `rodeo bench queue`: what rodeo's one in-process queue ([`rodeo_memory::BoundedQueue`], a
//! named full policy and a registry entry around crossbeam's `ArrayQueue`) costs against the
//! bare `ArrayQueue` it wraps, measured in the same run, the two interleaved per repetition so
//! that a loaded machine shifts both alike: one thread pushing and popping (the uncontended
//! cost of one operation), and a producer/consumer pair on two threads (the hand-over the
//! readout's queues do). The ratio `bounded / bare` is the figure; 1.0 means no cost added.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_queue::ArrayQueue;
use rodeo_memory::{BoundedQueue, FullPolicy};
use serde::Serialize;

use crate::report::Report;

/// Arguments of `rodeo bench queue`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Operations per measurement (1..=1000000000).
    #[arg(long, default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub ops: u64,
    /// Repetitions (each measures both queues; the median is reported; 1..=1000).
    #[arg(long, default_value_t = 7, value_parser = rodeo_ros::cli_values::count(1..=1000))]
    pub reps: usize,
    /// Queue capacity (1..=16777216: larger ones panicked allocating, or grew without end).
    #[arg(long, default_value_t = 64, value_parser = rodeo_ros::cli_values::count(1..=1 << 24))]
    pub capacity: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The two queues behind one interface, so both run the same loop.
trait Queue: Send + Sync + 'static {
    fn put(&self, v: u64) -> bool;
    fn take(&self) -> Option<u64>;
}

impl Queue for ArrayQueue<u64> {
    #[inline]
    fn put(&self, v: u64) -> bool {
        self.push(v).is_ok()
    }
    #[inline]
    fn take(&self) -> Option<u64> {
        self.pop()
    }
}

impl Queue for BoundedQueue<u64> {
    #[inline]
    fn put(&self, v: u64) -> bool {
        self.push(v).is_ok()
    }
    #[inline]
    fn take(&self) -> Option<u64> {
        self.pop()
    }
}

/// Nanoseconds per push+pop on one thread.
fn single<Q: Queue>(q: &Q, ops: u64) -> f64 {
    let t0 = Instant::now();
    let mut sum = 0u64;
    for i in 0..ops {
        q.put(i);
        sum = sum.wrapping_add(q.take().unwrap_or(0));
    }
    std::hint::black_box(sum);
    t0.elapsed().as_nanos() as f64 / ops as f64
}

/// Nanoseconds per item handed from a producer thread to this one (the producer retries a full
/// queue, the consumer an empty one, both with a spin hint: the bare hand-over).
fn pair<Q: Queue>(q: Arc<Q>, ops: u64) -> f64 {
    let go = Arc::new(AtomicBool::new(false));
    let producer = {
        let (q, go) = (Arc::clone(&q), Arc::clone(&go));
        std::thread::spawn(move || {
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            for i in 0..ops {
                while !q.put(i) {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let t0 = Instant::now();
    go.store(true, Ordering::Release);
    let mut got = 0u64;
    while got < ops {
        match q.take() {
            Some(_) => got += 1,
            None => std::hint::spin_loop(),
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / ops as f64;
    let _ = producer.join();
    ns
}

#[derive(Debug, Serialize)]
struct Row {
    case: &'static str,
    bare_ns_per_op: f64,
    bounded_ns_per_op: f64,
    ratio_bounded_to_bare: f64,
    reps: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the measurement and returns its report.
pub fn measure_report(args: &Args) -> anyhow::Result<Report> {
    anyhow::ensure!(
        args.reps >= 1 && args.ops >= 1,
        "--reps and --ops must be at least 1"
    );
    let mut report = Report::new("queue");
    let cap = args.capacity.max(1);
    let (mut s_bare, mut s_bounded, mut p_bare, mut p_bounded) = (vec![], vec![], vec![], vec![]);
    for rep in 0..args.reps {
        let bare = ArrayQueue::<u64>::new(cap);
        let bounded = BoundedQueue::<u64>::new("bench.queue", cap, FullPolicy::Refuse);
        // Alternate which goes first, so a drift in the machine's load hits both alike.
        if rep % 2 == 0 {
            s_bare.push(single(&bare, args.ops));
            s_bounded.push(single(&bounded, args.ops));
        } else {
            s_bounded.push(single(&bounded, args.ops));
            s_bare.push(single(&bare, args.ops));
        }
        let ops = args.ops / 4;
        let bare = Arc::new(ArrayQueue::<u64>::new(cap));
        let bounded = Arc::new(BoundedQueue::<u64>::new(
            "bench.queue",
            cap,
            FullPolicy::Refuse,
        ));
        if rep % 2 == 0 {
            p_bare.push(pair(bare, ops));
            p_bounded.push(pair(bounded, ops));
        } else {
            p_bounded.push(pair(bounded, ops));
            p_bare.push(pair(bare, ops));
        }
    }
    for (case, bare, bounded) in [
        ("push_pop_one_thread", s_bare, s_bounded),
        ("handover_two_threads", p_bare, p_bounded),
    ] {
        let (b, q) = (median(bare), median(bounded));
        report.push_row(&Row {
            case,
            bare_ns_per_op: b,
            bounded_ns_per_op: q,
            ratio_bounded_to_bare: q / b,
            reps: args.reps,
        })?;
    }
    Ok(report)
}
