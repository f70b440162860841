//! Why a fragment builder could not be built or run: [`SwRodError`].

/// Why a builder could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SwRodError {
    /// The configuration is inconsistent.
    #[error("bad fragment builder configuration: {0}")]
    Config(String),
    /// `run` got a different number of channel lists than there are threads.
    #[error("{found} channel lists for {threads} receiving threads")]
    Inputs {
        /// Threads configured.
        threads: usize,
        /// Channel lists given.
        found: usize,
    },
    /// A receiving thread could not be started.
    #[error("starting a receiving thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// A receiving thread panicked.
    #[error("receiving thread {0} panicked")]
    Panicked(usize),
}
