//! The HTTP/1.1 API of a partition or an application: status, commands, configuration,
//! Prometheus metrics and the web page, served for any [`RunControl`].
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /` | the web page (embedded in the binary, no external resources) |
//! | `GET /api/status` | [`PartitionStatus`](rodeo_control::run_control::PartitionStatus) as JSON |
//! | `GET /api/config` | the configuration in effect (TOML) |
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `POST /api/command` | `{"command":"stop"}`; operator. A `start` may carry the run's words: `{"command":"start","comment":"…","run_type":"physics","shifter":"…"}` (`rodeo serve`; 405 elsewhere) |
//! | `GET /api/conditions` | `{"latest": {key: {value, at_ns, run_number}}, "run_number": N, "run": [...]}`: the latest value of every condition (at most 1,000 keys are kept), and the newest 1,000 posted during the current run |
//! | `POST /api/conditions` | `{"hv_volts": 1500, "beam": "pi+ 120 GeV"}`: conditions of the current run, kept with their time; operator; 409 when new keys would pass 1,000 |
//! | `GET /api/files` | the current run's files (name, bytes, still being written) and the output directory's free space |
//! | `GET /api/runs?limit=N&before=R` | `{"runs": [...], "next_before": R}` from the run database, newest first: a page of `limit` runs (100; 1 to 1,000) numbered below `before`, each with its first 10 files and newest 10 comments and conditions (`files_total`, `comments_total`, `conditions_total`); `next_before` starts the next page (null on the last) |
//! | `GET /api/runs/N` | run N with its configuration, balance sheet, first 10,000 files, comments and newest 1,000 conditions; 404 if unknown |
//! | `POST /api/runs/N/comment` | `{"text":"…"}`: a comment on run N (at most 1,000 per run: 409 then); operator |
//! | `GET /api/audit` | `{"audit": [...]}`: the audit trail, newest first |
//! | `PUT /api/config` | replaces the next run's configuration (TOML body); expert; 400 names the bad field (or one HTTP may not change), 409 while running |
//! | `GET /api/history`, `/api/alarms`, `/api/histograms`, `/api/log` | a service's views ([`crate::observe`]); 404 elsewhere |
//! | `POST /api/alarms/ack` | `{"name":"…"}` acknowledges an alarm; operator |
//!
//! Roles ([`auth`]): observer (no token, every `GET`), operator (`RODEO_TOKEN`), expert
//! (`RODEO_EXPERT_TOKEN`). 401 without a token or with a wrong one, 403 with a lower role's
//! (naming the role needed) or with a token over plain HTTP from another host (over plain
//! HTTP tokens are taken from loopback peers only; [`HttpConfig::tls`] serves HTTPS). Every
//! request above an observer's is recorded, accepted or refused, in the audit trail.
//!
//! Command answers: 200 `{"state":…}`; 400 for a body that is not the JSON object
//! `{"command": name}` or an unknown command; 409 with the [`TransitionError`] text for an
//! illegal one (it names the state); 500 when the transition failed (the error names the
//! application).
//!
//! Each request's handling is isolated: a panic is answered 500, logged and counted
//! (`rodeo_http_handler_panics_total`), and the worker goes on.
//!
//! # Threads, bounds and shutdown
//!
//! One reader thread accepts connections and reads every open one as its bytes arrive
//! (readiness through `mio`: an idle or slow client costs a table entry, never a thread); with
//! HTTPS it also drives each TLS handshake there, without waiting ([`conn`]).
//! Only a complete request (head at most [`MAX_HEADER_BYTES`], body at most
//! [`MAX_BODY_BYTES`]) goes to a bounded queue served by a fixed number of worker threads
//! (default 4); when that queue is full the request is answered 503 at once. Requests
//! whose token proves a role above an observer's have their own queue, taken first
//! ([`reader::Queues`]): a flood of reads or wrong tokens cannot keep an operator waiting.
//! A connection has one deadline for its whole request ([`HttpConfig::io_timeout`]): past
//! it, 408 and closed; and one for its whole answer: a client that reads slowly is cut off,
//! and the worker free.
//! At most [`HttpConfig::max_connections`] connections are open: a new one beyond that
//! closes the oldest (counted `evicted`), so a flood of idle connections can never lock an
//! operator out of `/api/status` and `/api/command`. A worker answers and closes the
//! connection (`Connection: close`): no keep-alive state to bound. A parser error is typed
//! ([`RequestError`]), answered 400/413/408 and counted. Dropping the [`HttpServer`] stops the
//! reader within its poll interval, closes the queue and joins the workers (a worker in a long
//! command — `stop` drains the dataflow — finishes it first).

mod audit;
pub mod auth;
pub mod client;
mod conn;
mod files;
mod reader;
mod request;
mod response;
mod routes;
mod start;
pub mod tls;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rodeo_control::run_control::RunControl;

use reader::{worker, Reader};
pub use request::{read_request, Request, RequestError};
pub use response::Response;
pub(crate) use routes::panic_message;
pub use routes::HttpCounters;
use routes::Shared;
pub use start::{serve_section, HttpsFiles};

/// Largest request head (request line and headers) accepted.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most headers in one request.
pub const MAX_HEADERS: usize = 64;

/// The web page served at `/`.
pub const INDEX_HTML: &str = include_str!("web/index.html");

/// Settings of an [`HttpServer`].
#[derive(Clone)]
pub struct HttpConfig {
    /// The operator's bearer token (`None`: operator requests are refused with 401).
    pub token: Option<String>,
    /// The expert's bearer token (`None`: `PUT /api/config` is refused).
    pub expert_token: Option<String>,
    /// Serve HTTPS with these settings ([`tls::server_config`]); `None`: plain HTTP, where a
    /// token is taken from loopback peers only.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Worker threads.
    pub workers: usize,
    /// Requests waiting for a worker before new ones get 503, in each of the two queues (the
    /// operators' and the rest: `reader::Queues`).
    pub queue: usize,
    /// Deadline of a connection's whole request (from accept), and of its whole answer (from
    /// the worker's first byte).
    pub io_timeout: Duration,
    /// Most connections open at once; a new one beyond this closes the oldest. At most a
    /// quarter of the process's open-file limit (which the server first raises to its hard
    /// limit), so that connections never take the files and sockets the run needs.
    pub max_connections: usize,
    /// The run database served at `GET /api/runs` and `GET /api/runs/N`, where the audit
    /// trail and comments are written (None: 404, the trail in the log only).
    pub runs_db: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |t: &Option<String>| t.as_ref().map(|_| rodeo_control::config::HIDDEN_TOKEN);
        f.debug_struct("HttpConfig")
            .field("token", &hidden(&self.token))
            .field("expert_token", &hidden(&self.expert_token))
            .field("tls", &self.tls.is_some())
            .field("workers", &self.workers)
            .field("queue", &self.queue)
            .field("io_timeout", &self.io_timeout)
            .field("max_connections", &self.max_connections)
            .field("runs_db", &self.runs_db)
            .finish()
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            token: None,
            expert_token: None,
            tls: None,
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
        let credentials = auth::Credentials {
            operator: config.token.as_deref().and_then(auth::Token::new),
            expert: config.expert_token.as_deref().and_then(auth::Token::new),
        };
        let shared = Arc::new(Shared::new(
            control,
            credentials,
            Arc::clone(&counters),
            config.runs_db.clone(),
            config.io_timeout,
        ));
        let queue = {
            let shared = Arc::clone(&shared);
            Arc::new(reader::Queues::new(
                config.queue,
                Box::new(move |peer, request| routes::proves_its_role(&shared, peer, request)),
            ))
        };
        let mut workers = Vec::new();
        for i in 0..config.workers.max(1) {
            let queue = Arc::clone(&queue);
            let stop = Arc::clone(&stop);
            let shared = Arc::clone(&shared);
            workers.push(
                std::thread::Builder::new()
                    .name(format!("http-{i}"))
                    .spawn(move || worker(&queue, &stop, &shared))?,
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
        tracing::info!(%addr, https = config.tls.is_some(), "HTTP API listening");
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
