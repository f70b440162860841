//! A running dataflow application: [`AppHandle`], its stop flag and its thread, which is how a
//! controller stops it and collects its summary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::DataflowError;

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
