//! Typed errors of the memory crate.

use std::io;

/// Setting up or growing a pool failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot describe a pool (zero sizes, misaligned chunks, too many chunks).
    #[error("invalid pool configuration: {0}")]
    Config(String),
    /// The kernel refused to map a region.
    #[error("mmap of a {bytes}-byte region failed")]
    Map {
        /// Size of the region asked for.
        bytes: usize,
        /// The errno of `mmap`.
        #[source]
        source: io::Error,
    },
    /// `mlock` was required and failed (usually `RLIMIT_MEMLOCK`, see `ulimit -l`).
    #[error(
        "mlock of a {bytes}-byte region failed (RLIMIT_MEMLOCK soft limit: {limit}); \
         raise it with `ulimit -l` or in /etc/security/limits.conf"
    )]
    Mlock {
        /// Size of the region asked for.
        bytes: usize,
        /// The soft `RLIMIT_MEMLOCK`, as text (`unlimited` or a byte count).
        limit: String,
        /// The errno of `mlock`.
        #[source]
        source: io::Error,
    },
}

/// An allocation could not be served. Callers turn `Exhausted` into back-pressure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// Every chunk is in use and the pool has reached its configured limit.
    #[error("pool exhausted: all {chunks} chunks of {chunk_bytes} bytes are in use")]
    Exhausted {
        /// Chunks the pool holds at its limit.
        chunks: u64,
        /// Size of one chunk.
        chunk_bytes: usize,
    },
    /// The pool was below its limit but mapping a new region failed.
    #[error("growing the pool failed")]
    Grow(#[from] Error),
}
