//! The HTTP/1.1 API of a partition or an application: status, commands, configuration,
//! Prometheus metrics and the web page, served for any [`RunControl`].
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /` | the web page (embedded in the binary, no external resources) |
//! | `GET /api/status` | [`PartitionStatus`](crate::control::PartitionStatus) as JSON |
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

use rodeo_memory::{Backoff, BackoffSpec, BoundedQueue, FullPolicy, Refused};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::control::RunControl;
use crate::lifecycle::{Command, TransitionError};
use crate::prometheus::MetricsWriter;

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

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The connection failed or closed early.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// The peer sent nothing within the timeout.
    #[error("timed out reading the request")]
    Timeout,
    /// The head exceeds [`MAX_HEADER_BYTES`] or [`MAX_HEADERS`].
    #[error("request head too large")]
    HeadTooLarge,
    /// The body exceeds [`MAX_BODY_BYTES`].
    #[error("request body of {0} bytes is too large")]
    BodyTooLarge(usize),
    /// The request line is not `METHOD PATH HTTP/1.x`.
    #[error("bad request line")]
    BadRequestLine,
    /// A header line without a colon, or not UTF-8.
    #[error("bad header line")]
    BadHeader,
    /// `Content-Length` is not a number.
    #[error("bad Content-Length")]
    BadContentLength,
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// The first header called `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one request from `r` (bounded: see the module docs).
pub fn read_request(r: &mut impl Read) -> Result<Request, RequestError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    // Where the search for the end of the head resumes (no rescan of what was searched).
    let mut scanned = 0usize;
    let head_end = loop {
        if let Some(p) = find(&buf[scanned..], b"\r\n\r\n") {
            break scanned + p;
        }
        scanned = buf.len().saturating_sub(3);
        if buf.len() > MAX_HEADER_BYTES {
            return Err(RequestError::HeadTooLarge);
        }
        let n = match r.read(&mut chunk) {
            Ok(0) => {
                return Err(RequestError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(RequestError::Timeout)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_end > MAX_HEADER_BYTES {
        return Err(RequestError::HeadTooLarge);
    }
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| RequestError::BadHeader)?;
    let mut lines = head.split("\r\n");
    let line = lines.next().ok_or(RequestError::BadRequestLine)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RequestError::BadRequestLine);
    };
    if method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !target.starts_with('/')
        || !version.starts_with("HTTP/1.")
    {
        return Err(RequestError::BadRequestLine);
    }
    let path = target.split('?').next().unwrap_or("/").to_string();
    let mut headers = Vec::new();
    for l in lines {
        if headers.len() >= MAX_HEADERS {
            return Err(RequestError::HeadTooLarge);
        }
        let (k, v) = l.split_once(':').ok_or(RequestError::BadHeader)?;
        if k.is_empty() || k.contains(' ') {
            return Err(RequestError::BadHeader);
        }
        headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut request = Request {
        method: method.to_string(),
        path,
        headers,
        body: Vec::new(),
    };
    let length = match request.header("content-length") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| RequestError::BadContentLength)?,
        None => 0,
    };
    if length > MAX_BODY_BYTES {
        return Err(RequestError::BodyTooLarge(length));
    }
    let mut body = buf.split_off(head_end + 4);
    body.truncate(length);
    while body.len() < length {
        let want = (length - body.len()).min(chunk.len());
        match r.read(&mut chunk[..want]) {
            Ok(0) => return Err(RequestError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(RequestError::Timeout)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    request.body = body;
    Ok(request)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
}

impl Response {
    fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
            headers: Vec::new(),
        }
    }

    fn json(status: u16, value: &serde_json::Value) -> Response {
        Response::new(status, "application/json", value.to_string())
    }

    fn error(status: u16, message: &str) -> Response {
        Response::json(status, &serde_json::json!({ "error": message }))
    }

    fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (k, v) in &self.headers {
            head.push_str(k);
            head.push_str(": ");
            head.push_str(v);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        w.write_all(head.as_bytes())?;
        w.write_all(&self.body)?;
        w.flush()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// The server's own counters (in `/metrics` as `rodeo_http_*`).
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Requests answered, by class: 2xx, 4xx, 5xx.
    pub ok: AtomicU64,
    /// Answers 4xx.
    pub client_errors: AtomicU64,
    /// Answers 5xx (503 when the queue was full included).
    pub server_errors: AtomicU64,
    /// Commands refused for a missing or wrong token.
    pub unauthorized: AtomicU64,
    /// Connections closed at their deadline without a complete request (answered 408).
    pub timed_out: AtomicU64,
    /// Connections closed unanswered to make room for a new one (`max_connections`).
    pub evicted: AtomicU64,
}

/// Answers `request` against `control` (the routing, without sockets: tests call it directly).
pub fn handle(
    control: &dyn RunControl,
    token: Option<&str>,
    counters: &HttpCounters,
    request: &Request,
) -> Response {
    let get = request.method == "GET";
    match request.path.as_str() {
        "/" | "/index.html" if get => Response::new(200, "text/html; charset=utf-8", INDEX_HTML),
        "/api/status" if get => match serde_json::to_value(control.status()) {
            Ok(v) => Response::json(200, &v),
            Err(e) => Response::error(500, &e.to_string()),
        },
        "/api/config" if get => Response::new(
            200,
            "application/toml; charset=utf-8",
            control.config_toml(),
        ),
        "/metrics" if get => {
            let mut w = MetricsWriter::new();
            control.write_metrics(&mut w);
            let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
            w.counter(
                "rodeo_http_responses_total",
                "HTTP answers of this server, by class.",
                &[
                    (&[("class", "2xx")], c(&counters.ok)),
                    (&[("class", "4xx")], c(&counters.client_errors)),
                    (&[("class", "5xx")], c(&counters.server_errors)),
                ],
            );
            w.counter(
                "rodeo_http_unauthorized_total",
                "Commands refused for a missing or wrong bearer token.",
                &[(&[], c(&counters.unauthorized))],
            );
            Response::new(200, "text/plain; version=0.0.4; charset=utf-8", w.finish())
        }
        "/api/command" if request.method == "POST" => {
            if !authorized(token, request.header("authorization")) {
                counters.unauthorized.fetch_add(1, Ordering::Relaxed);
                let mut r = Response::error(
                    401,
                    "commands need the header Authorization: Bearer <token> (RODEO_TOKEN)",
                );
                r.headers
                    .push(("WWW-Authenticate", "Bearer realm=\"rodeo\"".into()));
                return r;
            }
            let command = match parse_command(&request.body) {
                Ok(c) => c,
                Err(e) => return Response::error(400, &e),
            };
            tracing::info!(command = command.name(), "command over HTTP");
            match control.command(command) {
                Ok(state) => Response::json(200, &serde_json::json!({ "state": state })),
                Err(e @ TransitionError::Illegal { .. }) => Response::json(
                    409,
                    &serde_json::json!({ "error": e.to_string(), "state": control.status().state }),
                ),
                Err(e) => Response::json(
                    500,
                    &serde_json::json!({ "error": e.to_string(), "application": e.who(), "state": control.status().state }),
                ),
            }
        }
        "/api/config" if request.method == "PUT" => {
            if let Some(r) = refuse_unauthorized(token, counters, request) {
                return r;
            }
            let Ok(text) = std::str::from_utf8(&request.body) else {
                return Response::error(400, "the configuration must be UTF-8 TOML");
            };
            match control.replace_config(text) {
                Ok(()) => Response::json(200, &serde_json::json!({ "replaced": true })),
                Err(e) => {
                    let status = match e {
                        crate::control::ConfigChangeError::NotSupported => 405,
                        crate::control::ConfigChangeError::Invalid(_) => 400,
                        crate::control::ConfigChangeError::Busy(_) => 409,
                        crate::control::ConfigChangeError::Failed(_) => 500,
                    };
                    Response::error(status, &e.to_string())
                }
            }
        }
        "/api/history" | "/api/alarms" | "/api/histograms" | "/api/log" if get => {
            match control.view(request.path.trim_start_matches("/api/")) {
                Some(v) => Response::json(200, &v),
                None => Response::error(
                    404,
                    "this partition keeps no such view (`rodeo serve` does)",
                ),
            }
        }
        "/api/alarms/ack" if request.method == "POST" => {
            if let Some(r) = refuse_unauthorized(token, counters, request) {
                return r;
            }
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Ack {
                name: String,
            }
            match serde_json::from_slice::<Ack>(&request.body) {
                Ok(a) => match control.acknowledge_alarm(&a.name) {
                    Ok(()) => Response::json(200, &serde_json::json!({ "acknowledged": a.name })),
                    Err(e) => Response::error(404, &e),
                },
                Err(e) => Response::error(400, &format!("expected {{\"name\": \"alarm\"}}: {e}")),
            }
        }
        "/" | "/index.html" | "/api/status" | "/api/config" | "/metrics" | "/api/command" => {
            let mut r = Response::error(405, "method not allowed");
            let allow = match request.path.as_str() {
                "/api/command" => "POST",
                "/api/config" => "GET, PUT",
                _ => "GET",
            };
            r.headers.push(("Allow", allow.into()));
            r
        }
        _ => Response::error(404, "no such endpoint"),
    }
}

/// The 401 answer for a request without the right token (`None`: authorized).
fn refuse_unauthorized(
    token: Option<&str>,
    counters: &HttpCounters,
    request: &Request,
) -> Option<Response> {
    if authorized(token, request.header("authorization")) {
        return None;
    }
    counters.unauthorized.fetch_add(1, Ordering::Relaxed);
    let mut r = Response::error(
        401,
        "this request needs the header Authorization: Bearer <token> (RODEO_TOKEN)",
    );
    r.headers
        .push(("WWW-Authenticate", "Bearer realm=\"rodeo\"".into()));
    Some(r)
}

/// `{"command": "stop"}` -> the command.
fn parse_command(body: &[u8]) -> Result<Command, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        command: String,
    }
    let b: Body = serde_json::from_slice(body)
        .map_err(|e| format!("expected a JSON body {{\"command\": \"stop\"}}: {e}"))?;
    b.command.parse::<Command>().map_err(|e| e.to_string())
}

/// Whether the `Authorization` header carries `token` (compared in constant time).
fn authorized(token: Option<&str>, header: Option<&str>) -> bool {
    let (Some(token), Some(header)) = (token, header) else {
        return false;
    };
    let Some(given) = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
    else {
        return false;
    };
    let (a, b) = (token.as_bytes(), given.trim().as_bytes());
    if a.is_empty() || a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

/// A connection whose request is read (or failed to read) and waits for a worker.
struct ReadRequest {
    stream: TcpStream,
    request: Result<Request, RequestError>,
}

/// A connection being read: its bytes so far and its deadline.
struct Open {
    stream: TcpStream,
    buf: Vec<u8>,
    deadline: Instant,
    /// Accept sequence number: tells a live entry of `order` from a stale one.
    seq: u64,
}

/// Largest request in bytes (head, separator, body).
const MAX_REQUEST_BYTES: usize = MAX_HEADER_BYTES + 4 + MAX_BODY_BYTES;
/// The listener's token; connection `i` of the table is token `i + 1`.
const LISTENER: mio::Token = mio::Token(0);

/// The reader thread's state: the listener and the table of open connections.
struct Reader {
    poll: mio::Poll,
    listener: mio::net::TcpListener,
    open: Vec<Option<Open>>,
    free: Vec<usize>,
    /// (slot, seq) in accept order: deadlines are accept time + timeout, so the front is both
    /// the oldest connection and the next deadline. Entries of closed connections are skipped.
    order: VecDeque<(usize, u64)>,
    live: usize,
    next_seq: u64,
    timeout: Duration,
    max_connections: usize,
}

impl Reader {
    fn new(listener: TcpListener, config: &HttpConfig) -> io::Result<Reader> {
        let poll = mio::Poll::new()?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        poll.registry()
            .register(&mut listener, LISTENER, mio::Interest::READABLE)?;
        Ok(Reader {
            poll,
            listener,
            open: Vec::new(),
            free: Vec::new(),
            order: VecDeque::new(),
            live: 0,
            next_seq: 0,
            timeout: config.io_timeout,
            max_connections: config.max_connections.max(1),
        })
    }

    fn run(
        mut self,
        queue: &BoundedQueue<ReadRequest>,
        stop: &AtomicBool,
        counters: &HttpCounters,
    ) {
        let mut events = mio::Events::with_capacity(256);
        while !stop.load(Ordering::Relaxed) {
            let wait = self
                .next_deadline()
                .map_or(Duration::from_millis(50), |d| {
                    d.saturating_duration_since(Instant::now())
                })
                .min(Duration::from_millis(50));
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::warn!("HTTP reader: poll failed: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
                continue;
            }
            for ev in events.iter() {
                if ev.token() == LISTENER {
                    self.accept_all(counters);
                } else {
                    let slot = ev.token().0 - 1;
                    if let Some(ready) = self.read_ready(slot) {
                        hand_over(queue, ready, counters);
                    }
                }
            }
            self.expire(counters);
        }
        // Dropping `tx` (the caller's) when this returns ends the workers' loops.
    }

    /// The deadline of the oldest live connection.
    fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&(slot, seq)) = self.order.front() {
            match &self.open[slot] {
                Some(o) if o.seq == seq => return Some(o.deadline),
                _ => {
                    self.order.pop_front();
                }
            }
        }
        None
    }

    fn accept_all(&mut self, counters: &HttpCounters) {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, most likely: make room, take the next one later.
                    tracing::warn!("HTTP accept: {e}");
                    if self.live > 0 {
                        self.evict_oldest(counters);
                    }
                    return;
                }
            };
            if self.live >= self.max_connections {
                self.evict_oldest(counters);
            }
            let stream = TcpStream::from(stream);
            let slot = self.free.pop().unwrap_or_else(|| {
                self.open.push(None);
                self.open.len() - 1
            });
            let fd = stream.as_raw_fd();
            if let Err(e) = self.poll.registry().register(
                &mut mio::unix::SourceFd(&fd),
                mio::Token(slot + 1),
                mio::Interest::READABLE,
            ) {
                tracing::warn!("HTTP reader: cannot watch a connection: {e}");
                self.free.push(slot);
                continue;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            self.open[slot] = Some(Open {
                stream,
                buf: Vec::new(),
                deadline: Instant::now() + self.timeout,
                seq,
            });
            self.order.push_back((slot, seq));
            self.live += 1;
        }
    }

    /// Takes connection `slot` out of the table (and out of the poll set).
    fn close(&mut self, slot: usize) -> Option<Open> {
        let o = self.open.get_mut(slot)?.take()?;
        let fd = o.stream.as_raw_fd();
        let _ = self
            .poll
            .registry()
            .deregister(&mut mio::unix::SourceFd(&fd));
        self.free.push(slot);
        self.live -= 1;
        Some(o)
    }

    fn evict_oldest(&mut self, counters: &HttpCounters) {
        while let Some((slot, seq)) = self.order.pop_front() {
            if matches!(&self.open[slot], Some(o) if o.seq == seq) {
                self.close(slot);
                counters.evicted.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }

    /// Reads what connection `slot` has; returns it when its request is complete (or cannot
    /// become one).
    fn read_ready(&mut self, slot: usize) -> Option<ReadRequest> {
        let o = self.open.get_mut(slot)?.as_mut()?;
        let mut chunk = [0u8; 4096];
        let mut closed = false;
        loop {
            let room = MAX_REQUEST_BYTES + 1 - o.buf.len().min(MAX_REQUEST_BYTES);
            match (&o.stream).read(&mut chunk[..room.min(4096)]) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    o.buf.extend_from_slice(&chunk[..n]);
                    if o.buf.len() > MAX_REQUEST_BYTES {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        if request_complete(&o.buf) {
            let o = self.close(slot)?;
            let request = read_request(&mut o.buf.as_slice());
            return Some(ReadRequest {
                stream: o.stream,
                request,
            });
        }
        if closed {
            // Gone before its request was whole: nobody to answer.
            self.close(slot);
        }
        None
    }

    /// Answers 408 to, and closes, every connection past its deadline.
    fn expire(&mut self, counters: &HttpCounters) {
        let now = Instant::now();
        while let Some(deadline) = self.next_deadline() {
            if deadline > now {
                return;
            }
            let Some((slot, _)) = self.order.pop_front() else {
                return;
            };
            if let Some(mut o) = self.close(slot) {
                counters.timed_out.fetch_add(1, Ordering::Relaxed);
                counters.client_errors.fetch_add(1, Ordering::Relaxed);
                // Best effort, never waiting: the answer fits the socket's buffer.
                let _ = Response::error(408, &RequestError::Timeout.to_string())
                    .write_to(&mut o.stream);
                let _ = o.stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// `GET /api/runs` and `GET /api/runs/N` from the run database.
fn runs_response(db: Option<&std::path::Path>, path: &str) -> Response {
    let Some(db) = db.filter(|p| p.exists()) else {
        return Response::error(404, "no run database here");
    };
    let db = match crate::rundb::RunDb::open(db) {
        Ok(d) => d,
        Err(e) => return Response::error(500, &e.to_string()),
    };
    let rest = path.trim_start_matches("/api/runs").trim_matches('/');
    if rest.is_empty() {
        return match db.list() {
            Ok(runs) => Response::json(200, &serde_json::json!({ "runs": runs })),
            Err(e) => Response::error(500, &e.to_string()),
        };
    }
    let Ok(n) = rest.parse::<u32>() else {
        return Response::error(400, "a run number is a decimal integer: /api/runs/N");
    };
    match db.get(n) {
        Ok(Some(run)) => Response::json(200, &run),
        Ok(None) => Response::error(404, &format!("no run {n} in the run database")),
        Err(e) => Response::error(500, &e.to_string()),
    }
}

/// Whether `buf` holds a whole request, or enough to know it can never be one (too large):
/// either way it goes to a worker, which answers it or its [`RequestError`].
fn request_complete(buf: &[u8]) -> bool {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return buf.len() > MAX_HEADER_BYTES;
    };
    if head_end > MAX_HEADER_BYTES {
        return true;
    }
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let length = head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
    });
    match length {
        // No length: no body. A malformed one: the parser's error.
        None | Some(None) => true,
        Some(Some(n)) => n > MAX_BODY_BYTES || buf.len() >= head_end + 4 + n,
    }
}

/// Gives a read request to the workers, or answers 503 when their queue is full.
fn hand_over(queue: &BoundedQueue<ReadRequest>, ready: ReadRequest, counters: &HttpCounters) {
    match queue.push(ready) {
        Ok(_) => {}
        Err(Refused { item: mut r, .. }) => {
            counters.server_errors.fetch_add(1, Ordering::Relaxed);
            // Best effort, never waiting (the stream is still non-blocking).
            let _ = Response::error(503, "busy").write_to(&mut r.stream);
            let _ = r.stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn worker(
    queue: &BoundedQueue<ReadRequest>,
    stop: &AtomicBool,
    control: &dyn RunControl,
    token: Option<&str>,
    counters: &HttpCounters,
    timeout: Duration,
    runs_db: Option<&std::path::Path>,
) {
    let mut idle = Backoff::new(BackoffSpec::IDLE_SERVER);
    loop {
        let Some(ReadRequest {
            mut stream,
            request,
        }) = queue.pop()
        else {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            idle.wait();
            continue;
        };
        idle.reset();
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(timeout));
        let response = match request {
            Ok(req) if req.method == "GET" && req.path.starts_with("/api/runs") => {
                runs_response(runs_db, &req.path)
            }
            Ok(req) => handle(control, token, counters, &req),
            Err(RequestError::Io(_)) => continue,
            Err(e @ RequestError::Timeout) => Response::error(408, &e.to_string()),
            Err(e @ (RequestError::HeadTooLarge | RequestError::BodyTooLarge(_))) => {
                Response::error(413, &e.to_string())
            }
            Err(e) => Response::error(400, &e.to_string()),
        };
        let class = match response.status {
            200..=299 => &counters.ok,
            400..=499 => &counters.client_errors,
            _ => &counters.server_errors,
        };
        class.fetch_add(1, Ordering::Relaxed);
        let _ = response.write_to(&mut stream);
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_request_with_a_body() {
        let raw = b"POST /api/command?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 19\r\nAuthorization: Bearer s3\r\n\r\n{\"command\":\"stop\"}XTRA";
        let r = read_request(&mut &raw[..]).unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/api/command");
        assert_eq!(r.header("authorization"), Some("Bearer s3"));
        assert_eq!(r.body, b"{\"command\":\"stop\"}X");
    }

    #[test]
    fn bad_requests_are_typed_errors() {
        let cases: [(&[u8], &str); 6] = [
            (b"GET\r\n\r\n", "BadRequestLine"),
            (b"get / HTTP/1.1\r\n\r\n", "BadRequestLine"),
            (b"GET / HTTP/1.1\r\nnocolon\r\n\r\n", "BadHeader"),
            (
                b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                "BadContentLength",
            ),
            (
                b"GET / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
                "BodyTooLarge",
            ),
            (b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", "Io"),
        ];
        for (raw, kind) in cases {
            let e = read_request(&mut &raw[..]).unwrap_err();
            assert!(format!("{e:?}").starts_with(kind), "{e:?} for {raw:?}");
        }
        let huge = format!(
            "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEADER_BYTES)
        );
        assert!(matches!(
            read_request(&mut huge.as_bytes()),
            Err(RequestError::HeadTooLarge)
        ));
    }

    #[test]
    fn the_token_is_checked_exactly() {
        assert!(authorized(Some("abc"), Some("Bearer abc")));
        assert!(!authorized(Some("abc"), Some("Bearer abd")));
        assert!(!authorized(Some("abc"), Some("Bearer ab")));
        assert!(!authorized(Some("abc"), Some("Basic abc")));
        assert!(!authorized(Some("abc"), None));
        assert!(!authorized(None, Some("Bearer abc")));
        assert!(!authorized(Some(""), Some("Bearer ")));
    }

    #[test]
    fn commands_parse_from_json() {
        assert_eq!(parse_command(br#"{"command":"stop"}"#), Ok(Command::Stop));
        assert!(parse_command(br#"{"command":"halt"}"#)
            .unwrap_err()
            .contains("unknown command"));
        assert!(parse_command(b"stop").is_err());
        assert!(parse_command(br#"{"command":"stop","x":1}"#).is_err());
    }
}
