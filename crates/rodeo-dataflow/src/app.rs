//! What every dataflow application shares: its handle (stop, join) and its error type.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rodeo_transport::endpoint::EndpointError;
use rodeo_transport::socket::TransportError;

/// Why a dataflow application failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataflowError {
    /// A socket operation failed.
    #[error("{app}: {what}: {source}")]
    Transport {
        /// The application.
        app: String,
        /// What it was doing.
        what: String,
        /// The error.
        #[source]
        source: TransportError,
    },
    /// An endpoint in the configuration is invalid.
    #[error("{app}: {source}")]
    Endpoint {
        /// The application.
        app: String,
        /// The error.
        #[source]
        source: EndpointError,
    },
    /// The configuration is invalid.
    #[error("{app}: invalid configuration: {reason}")]
    Config {
        /// The application.
        app: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing events failed.
    #[error("{app}: {source}")]
    Files {
        /// The application.
        app: String,
        /// The error.
        #[source]
        source: rodeo_files::rawfile::RawFileError,
    },
    /// Writing EventStorage files failed.
    #[error("{app}: {source}")]
    EventStorage {
        /// The application.
        app: String,
        /// The error.
        #[source]
        source: rodeo_files::eventstorage::EsError,
    },
    /// The application's thread could not start or panicked.
    #[error("{app}: thread {what}")]
    Thread {
        /// The application.
        app: String,
        /// "could not start" or "panicked".
        what: String,
    },
}

/// A running application: a stop flag and its thread, which returns the application's summary.
#[derive(Debug)]
pub struct AppHandle<T> {
    name: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<T, DataflowError>>>,
}

impl<T: Send + 'static> AppHandle<T> {
    /// Runs `body` on a thread named `name`; `body` gets the stop flag and must return soon
    /// after it is set (every wait in rodeo is bounded).
    pub fn spawn(
        name: &str,
        body: impl FnOnce(Arc<AtomicBool>) -> Result<T, DataflowError> + Send + 'static,
    ) -> Result<AppHandle<T>, DataflowError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || body(flag))
            .map_err(|_| DataflowError::Thread {
                app: name.to_string(),
                what: "could not start".into(),
            })?;
        Ok(AppHandle {
            name: name.to_string(),
            stop,
            thread: Some(thread),
        })
    }

    /// The application's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks the application to stop (it finishes what it must: drains, flushes, closes).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Whether the thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the application and waits for its summary.
    pub fn stop(mut self) -> Result<T, DataflowError> {
        self.request_stop();
        self.join_inner()
    }

    /// Waits for the application to end by itself (e.g. an L1 source with an event count).
    pub fn join(mut self) -> Result<T, DataflowError> {
        self.join_inner()
    }

    fn join_inner(&mut self) -> Result<T, DataflowError> {
        let name = self.name.clone();
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(DataflowError::Thread {
                    app: name,
                    what: "panicked".into(),
                })
            }),
            None => Err(DataflowError::Thread {
                app: name,
                what: "already joined".into(),
            }),
        }
    }
}

impl<T> Drop for AppHandle<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
