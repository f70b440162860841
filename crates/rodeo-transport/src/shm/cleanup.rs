//! The process's iceoryx2 node, and the clean-up of what dead processes left in shared memory.
//!
//! # Why rodeo drives the clean-up itself
//!
//! iceoryx2 finds a dead process by a file lock its node held (the kernel releases it however
//! the process ended) and removes the dead node's ports from every service it used, so that a
//! restarted application can make the same ports again (a readout node's inbox has one
//! subscriber: its dead predecessor's must be gone first). Three things make its own automatic
//! clean-up (at node creation and destruction, off here) unfit for a restart:
//!
//! - Only one clean-up may run in a process at a time; a second one is refused with
//!   `AnotherInstanceIsCleaningUpTheNode`, and so is one while another *process* cleans the same
//!   node. Counted as a failure, that is not one: the node is being cleaned, and removing its
//!   files then (what an earlier version did for failures) orphaned its ports for good: every
//!   later restart met `ExceedsMaxSupportedSubscribers`, and the services' files stayed.
//!   [`clean_dead_nodes`] runs one pass at a time per process (a lock) and waits, bounded, for
//!   another process's pass over the same node.
//! - It runs while a port is made only if asked; a restarted application must clean before
//!   it makes its ports, and again if a port is refused for a dead one's (the services call
//!   [`clean_dead_nodes`] and retry: `services`).
//! - An empty segment (a process killed between creating and sizing it) makes iceoryx2 0.10's
//!   clean-up wait without end ([`remove_abandoned_segments`]); those are removed first, and only
//!   when there is a dead node to clean (so a start with nothing dead never waits).

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use iceoryx2::node::{DeadNodeView, NodeCleanupFailure, NodeView};
use iceoryx2::prelude::*;
use iceoryx2_bb_system_types::path::Path;

use super::{shm_err, Svc};
use crate::frame::TransportError;

/// The process's node while any socket uses it: when the last shared-memory socket goes, the
/// node goes with it (its files removed), so a process that exits leaves nothing behind.
static NODE: OnceLock<Mutex<Weak<Node<Svc>>>> = OnceLock::new();
/// One clean-up pass at a time in this process (iceoryx2 refuses a second one).
static CLEANING: Mutex<()> = Mutex::new(());

/// How long one pass waits for another process that is cleaning the same dead node.
pub(crate) const CLEANUP_WAIT: Duration = Duration::from_secs(2);

/// What one clean-up pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cleanup {
    /// Dead processes whose shared-memory resources this pass removed.
    pub removed: u64,
    /// Dead processes another process was still cleaning when this pass gave up waiting.
    pub busy: u64,
    /// Dead processes iceoryx2 could not clean up twice in a row, whose node files this pass
    /// removed ([`remove_node_files`]).
    pub forced: u64,
    /// Empty segments removed ([`remove_abandoned_segments`]).
    pub segments: u64,
}

impl Cleanup {
    /// Whether the pass changed anything.
    pub fn did_anything(&self) -> bool {
        self.removed + self.forced + self.segments > 0
    }

    /// The one log line of a pass that did something ("rodeo: removed ...").
    pub fn line(&self) -> String {
        let mut s = format!(
            "rodeo: removed the shared-memory resources of {} dead process(es)",
            self.removed + self.forced
        );
        if self.forced > 0 {
            s.push_str(&format!(
                " ({} by removing their node files: iceoryx2 could not clean them up)",
                self.forced
            ));
        }
        if self.segments > 0 {
            s.push_str(&format!(
                " and {} empty segment(s) left by a process killed while creating them",
                self.segments
            ));
        }
        if self.busy > 0 {
            s.push_str(&format!(
                "; {} more being cleaned up by another process",
                self.busy
            ));
        }
        s
    }
}

/// The process's iceoryx2 node, created on first use. Creating it first cleans up after dead
/// processes ([`clean_dead_nodes`], one log line if anything was removed): a restarted
/// application finds its predecessor's ports gone before it makes its own.
pub(crate) fn node() -> Result<Arc<Node<Svc>>, TransportError> {
    let cell = NODE.get_or_init(|| Mutex::new(Weak::new()));
    let mut guard = cell.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = guard.upgrade() {
        return Ok(n);
    }
    quiet_logs();
    let n = NodeBuilder::new()
        .config(config())
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<Svc>()
        .map_err(|e| shm_err("create node", "(process)", e))?;
    let n = Arc::new(n);
    *guard = Arc::downgrade(&n);
    drop(guard);
    let done = clean_dead_nodes(CLEANUP_WAIT);
    if done.did_anything() {
        eprintln!("{}", done.line());
    }
    Ok(n)
}

/// iceoryx2 logs only what is fatal (`IOX2_LOG_LEVEL` overrides it, for debugging): rodeo
/// says what it did itself, once.
fn quiet_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| set_log_level_from_env_or(LogLevel::Fatal));
}

/// Where rodeo's iceoryx2 nodes and services keep their records: a directory on the
/// shared-memory tmpfs, not iceoryx2's default `/tmp/iceoryx2/`. iceoryx2 writes a service's
/// record with an fsync; on a disk that other jobs keep busy (a build, a logger writing) one
/// fsync took seconds, and a DCM making its ports spent 10-60 s in them (its `connect`
/// answered after the controller's command timeout). On tmpfs an fsync costs nothing, and the
/// records are gone at a reboot, as the segments they describe.
pub const ROOT_DIR: &str = "/dev/shm/iceoryx2/";

/// The iceoryx2 configuration of every rodeo process: [`ROOT_DIR`], and the automatic
/// clean-up off (it is ours: module docs).
pub(crate) fn config() -> &'static iceoryx2::config::Config {
    static CONFIG: OnceLock<iceoryx2::config::Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let mut config = iceoryx2::config::Config::global_config().clone();
        // A constant absolute path, well below the limit of a path's length.
        if let Ok(root) = Path::new(ROOT_DIR.as_bytes()) {
            config.global.set_root_path(&root);
        }
        config.global.node.cleanup_dead_nodes_on_creation = false;
        config.global.node.cleanup_dead_nodes_on_destruction = false;
        config
    })
}

/// A copy of rodeo's iceoryx2 configuration ([`ROOT_DIR`], clean-up left to rodeo), for a
/// tool that uses iceoryx2 itself beside rodeo's sockets (`rodeo bench transport`'s
/// `iceoryx2_raw` row): its records go where rodeo's go, not to iceoryx2's default
/// `/tmp/iceoryx2/`, and rodeo's clean-up finds what a crashed one leaves.
pub fn iceoryx2_config() -> iceoryx2::config::Config {
    config().clone()
}

/// The dead nodes iceoryx2 lists now (their process is gone).
fn dead_nodes() -> Vec<DeadNodeView<Svc>> {
    let mut dead = Vec::new();
    let _ = Node::<Svc>::list(config(), |state| {
        if let NodeState::Dead(view) = state {
            dead.push(view);
        }
        CallbackProgression::Continue
    });
    dead
}

/// One clean-up pass (module docs): removes every dead node's resources, waiting up to `wait`
/// for each one another process is cleaning. A node iceoryx2 fails to clean up twice in a row
/// for another reason has its node files removed ([`remove_node_files`]). Never runs two passes
/// at once in this process.
pub fn clean_dead_nodes(wait: Duration) -> Cleanup {
    quiet_logs();
    let _one = CLEANING.lock().unwrap_or_else(|p| p.into_inner());
    let mut done = Cleanup::default();
    let dead = dead_nodes();
    if dead.is_empty() {
        return done;
    }
    done.segments = settle_abandoned_segments();
    let mut failed = Vec::new();
    for view in dead {
        let id = view.id().value();
        match view.blocking_remove_stale_resources(wait) {
            Ok(()) => done.removed += 1,
            Err(NodeCleanupFailure::ResourcesAlreadyCleanedUp) => {}
            Err(NodeCleanupFailure::AnotherInstanceIsCleaningUpTheNode) => done.busy += 1,
            Err(_) => failed.push(id),
        }
    }
    if failed.is_empty() {
        return done;
    }
    // Once more for those (an interrupted pass may succeed now); what fails again is a node
    // iceoryx2 will never clean (it names a port or service that is no longer there).
    for view in dead_nodes() {
        let id = view.id().value();
        if !failed.contains(&id) {
            continue;
        }
        match view.blocking_remove_stale_resources(wait) {
            Ok(()) => done.removed += 1,
            Err(NodeCleanupFailure::ResourcesAlreadyCleanedUp) => {}
            Err(NodeCleanupFailure::AnotherInstanceIsCleaningUpTheNode) => done.busy += 1,
            Err(_) => done.forced += u64::from(remove_node_files(id)),
        }
    }
    done
}

/// Removes the shared-memory resources of every dead process (killed with -9, crashed) on this
/// host; returns how many were removed. The run calls it when it ends.
pub fn cleanup_dead_nodes() -> Result<u64, TransportError> {
    // Without a node of our own (the controller has none), listing and cleaning need none.
    let done = clean_dead_nodes(CLEANUP_WAIT);
    if done.forced > 0 || done.segments > 0 {
        eprintln!("{}", done.line());
    }
    Ok(done.removed + done.forced)
}

/// Removes the files of the dead node `id` (its directory and its monitor), after iceoryx2
/// failed to clean it up twice for a reason other than another process cleaning it: a process
/// killed with -9 while it was making a port or opening a service leaves a node naming a port or
/// service that is no longer there, and iceoryx2's clean-up of such a node fails every time, so
/// its files would stay for good. Returns whether anything was removed.
fn remove_node_files(id: u128) -> bool {
    let id = id.to_string();
    let monitor = format!("iox2_{id}.");
    let mut any = false;
    let nodes = std::path::Path::new(ROOT_DIR).join("nodes");
    for e in std::fs::read_dir(nodes).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == id || name.starts_with(&monitor) {
            let path = e.path();
            let gone = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            any |= gone.is_ok();
        }
    }
    any
}

/// Waits (at most [`ABANDONED_SEGMENT_AGE`]) until every empty iceoryx2 segment is old enough
/// to count as abandoned, then removes them ([`remove_abandoned_segments`]); returns how many.
fn settle_abandoned_segments() -> u64 {
    if let Some(youngest) = empty_segments().iter().map(|&(_, age)| age).min() {
        std::thread::sleep(ABANDONED_SEGMENT_AGE.saturating_sub(youngest));
    }
    abandoned_segments_removed()
}

/// The empty iceoryx2 segments (`/dev/shm/iox2_*` of size zero) and how old each is.
fn empty_segments() -> Vec<(std::path::PathBuf, Duration)> {
    std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("iox2_"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let age = m.modified().ok()?.elapsed().ok()?;
            (m.is_file() && m.len() == 0).then(|| (e.path(), age))
        })
        .collect()
}

/// How old an empty iceoryx2 segment must be to count as abandoned: its creator sizes it
/// microseconds after creating it, so one still empty after this was left by a process killed
/// in between.
const ABANDONED_SEGMENT_AGE: Duration = Duration::from_secs(2);

fn abandoned_segments_removed() -> u64 {
    empty_segments()
        .into_iter()
        .filter(|(path, age)| *age >= ABANDONED_SEGMENT_AGE && std::fs::remove_file(path).is_ok())
        .count() as u64
}

/// Removes iceoryx2 shared-memory segments (`/dev/shm/iox2_*`) of size zero older than
/// [`ABANDONED_SEGMENT_AGE`]; returns how many. A process killed between creating a segment
/// and sizing it leaves one, and iceoryx2 0.10's dead-node cleanup then waits for it to be
/// sized without a timeout (`MappingSizeIsZero` in `posix_shared_memory::open_impl`): the next
/// process to clean up would hang there (seen: a logger restarted after kill -9). Nothing
/// alive uses such a segment, so removing it first is safe.
pub fn remove_abandoned_segments() -> u64 {
    let removed = abandoned_segments_removed();
    if removed > 0 {
        eprintln!(
            "rodeo: removed {removed} empty shared-memory segment(s) left by a process killed \
             while creating them"
        );
    }
    removed
}
