//! The HTTP/1.1 API of a partition or an application: status, commands, configuration,
//! Prometheus metrics and the web page, served for any [`RunControl`].
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /` | the web page (embedded in the binary, no external resources) |
//! | `GET /api/status` | [`PartitionStatus`](rodeo_control::run_control::PartitionStatus) as JSON |
//! | `GET /api/config` | the configuration in effect (TOML) |
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `POST /api/command` | `{"command":"stop"}`; needs `Authorization: Bearer <token>` |
//! | `GET /api/runs` | `{"runs": [...]}` from the run database, newest first (`rodeo runs --json`) |
//! | `GET /api/runs/N` | run N with its files, configuration and balance sheet; 404 if unknown |
//! | `PUT /api/config` | replaces the next run's configuration (TOML body, token); 400 names the bad field, 409 while running |
//! | `GET /api/history`, `/api/alarms`, `/api/histograms`, `/api/log` | a service's views ([`crate::observe`]); 404 elsewhere |
//! | `POST /api/alarms/ack` | `{"name":"…"}` acknowledges an alarm (token) |
//!
//! Command answers: 200 `{"state":…}`; 401 without the right token (or when no token is
//! configured: commands are then refused); 400 for a body that is not `{"command": name}` or
//! an unknown command; 409 with the [`TransitionError`] text for an illegal one (it names the
//! state); 500 when the transition failed (the error names the application).
//!
//! # Threads, bounds and shutdown
//!
//! One reader thread accepts connections and reads every open one as its bytes arrive
//! (readiness through `mio`: an idle or slow client costs a table entry, never a thread).
//! Only a complete request (head at most [`MAX_HEADER_BYTES`], body at most
//! [`MAX_BODY_BYTES`]) goes to the bounded queue served by a fixed number of worker threads
//! (default 4); when that queue is full the request is answered 503 at once. A connection has
//! one deadline for its whole request ([`HttpConfig::io_timeout`]): past it, 408 and closed.
//! At most [`HttpConfig::max_connections`] connections are open: a new one beyond that
//! closes the oldest (counted `evicted`), so a flood of idle connections can never lock an
//! operator out of `/api/status` and `/api/command`. A worker answers and closes the
//! connection (`Connection: close`): no keep-alive state to bound. A parser error is typed
//! ([`RequestError`]), answered 400/413/408 and counted. Dropping the [`HttpServer`] stops the
//! reader within its poll interval, closes the queue and joins the workers (a worker in a long
//! command — `stop` drains the dataflow — finishes it first).

mod reader;
mod request;
mod response;
mod routes;
mod start;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rodeo_control::run_control::RunControl;
use rodeo_memory::{BoundedQueue, FullPolicy};

use reader::{worker, ReadRequest, Reader};
pub use request::{read_request, Request, RequestError};
pub use response::Response;
pub use routes::{handle, HttpCounters};
pub use start::serve_section;

/// Largest request head (request line and headers) accepted.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most headers in one request.
pub const MAX_HEADERS: usize = 64;

/// The web page served at `/`.
pub const INDEX_HTML: &str = include_str!("web/index.html");

/// Settings of an [`HttpServer`].
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The bearer token commands need (`None`: every command is refused with 401).
    pub token: Option<String>,
    /// Worker threads.
    pub workers: usize,
    /// Connections waiting for a worker before new ones get 503.
    pub queue: usize,
    /// Deadline of a connection's whole request (from accept), and the write timeout of its
    /// answer.
    pub io_timeout: Duration,
    /// Most connections open at once; a new one beyond this closes the oldest.
    pub max_connections: usize,
    /// The run database served at `GET /api/runs` and `GET /api/runs/N` (None: 404).
    pub runs_db: Option<std::path::PathBuf>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            token: None,
            workers: 4,
            queue: 64,
            io_timeout: Duration::from_secs(5),
            max_connections: 1024,
            runs_db: None,
        }
    }
}

/// A running HTTP server; stops when dropped (see the module docs).
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    counters: Arc<HttpCounters>,
    accept: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl HttpServer {
    /// Binds `addr` (port 0: any free port) and starts serving `control`.
    pub fn start(
        addr: &str,
        control: Arc<dyn RunControl>,
        config: HttpConfig,
    ) -> io::Result<HttpServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(HttpCounters::default());
        let queue = Arc::new(BoundedQueue::<ReadRequest>::new(
            "control.http.requests",
            config.queue.max(1),
            FullPolicy::Refuse,
        ));
        let token: Option<Arc<str>> = config.token.as_deref().map(Arc::from);
        let mut workers = Vec::new();
        for i in 0..config.workers.max(1) {
            let queue = Arc::clone(&queue);
            let stop = Arc::clone(&stop);
            let control = Arc::clone(&control);
            let counters = Arc::clone(&counters);
            let token = token.clone();
            let timeout = config.io_timeout;
            let runs_db = config.runs_db.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("http-{i}"))
                    .spawn(move || {
                        worker(
                            &queue,
                            &stop,
                            &*control,
                            token.as_deref(),
                            &counters,
                            timeout,
                            runs_db.as_deref(),
                        )
                    })?,
            );
        }
        let reader = Reader::new(listener, &config)?;
        let accept = {
            let stop = Arc::clone(&stop);
            let counters = Arc::clone(&counters);
            std::thread::Builder::new()
                .name("http-reader".into())
                .spawn(move || reader.run(&queue, &stop, &counters))?
        };
        tracing::info!(%addr, "HTTP API listening");
        Ok(HttpServer {
            addr,
            stop,
            counters,
            accept: Some(accept),
            workers,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's counters.
    pub fn counters(&self) -> &HttpCounters {
        &self.counters
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests;
