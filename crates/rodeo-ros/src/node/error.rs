//! Why a readout node could not start ([`NodeError`]): also the error of building its inputs
//! ([`crate::inputs`], [`crate::swrod`]).

use rodeo_files::replay::ReplayError;
use rodeo_swrod::SwRodError;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The configuration is unusable.
    #[error("readout node: {0}")]
    Config(String),
    /// Memory could not be mapped.
    #[error("readout node memory: {0}")]
    Memory(#[from] rodeo_memory::Error),
    /// The store rejected its configuration.
    #[error("readout node store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The server could not start.
    #[error("readout node server: {0}")]
    Server(#[from] crate::server::ServerError),
    /// A fragment builder rejected its configuration.
    #[error("readout node fragment builder: {0}")]
    SwRod(#[from] SwRodError),
    /// The replay files could not be loaded.
    #[error("readout node replay: {0}")]
    Replay(#[from] ReplayError),
    /// A card thread or the error file could not be set up.
    #[error("readout node: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}
