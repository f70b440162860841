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
//!
//! Command answers: 200 `{"state":…}`; 401 without the right token (or when no token is
//! configured: commands are then refused); 400 for a body that is not `{"command": name}` or
//! an unknown command; 409 with the [`TransitionError`] text for an illegal one (it names the
//! state); 500 when the transition failed (the error names the application).
//!
//! # Threads, bounds and shutdown
//!
//! One accept thread polls a non-blocking listener and hands each connection to a bounded
//! queue served by a fixed number of worker threads (default 4); when the queue is full the
//! connection is answered 503 at once. A worker reads one request (headers at most
//! [`MAX_HEADER_BYTES`], a body at most [`MAX_BODY_BYTES`], each read with a timeout), answers
//! it and closes the connection (`Connection: close`): no keep-alive state to bound. A parser
//! error is typed ([`RequestError`]), answered 400/413/408 and counted. Dropping the
//! [`HttpServer`] stops the accept thread within its poll interval, closes the queue and joins
//! the workers (a worker in a long command — `stop` drains the dataflow — finishes it first).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
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
    /// Read and write timeout of a connection.
    pub io_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            token: None,
            workers: 4,
            queue: 64,
            io_timeout: Duration::from_secs(5),
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
        "/" | "/index.html" | "/api/status" | "/api/config" | "/metrics" | "/api/command" => {
            let mut r = Response::error(405, "method not allowed");
            let allow = if request.path == "/api/command" {
                "POST"
            } else {
                "GET"
            };
            r.headers.push(("Allow", allow.into()));
            r
        }
        _ => Response::error(404, "no such endpoint"),
    }
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
        let (tx, rx) = sync_channel::<TcpStream>(config.queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let token: Option<Arc<str>> = config.token.as_deref().map(Arc::from);
        let mut workers = Vec::new();
        for i in 0..config.workers.max(1) {
            let rx = Arc::clone(&rx);
            let control = Arc::clone(&control);
            let counters = Arc::clone(&counters);
            let token = token.clone();
            let timeout = config.io_timeout;
            workers.push(
                std::thread::Builder::new()
                    .name(format!("http-{i}"))
                    .spawn(move || worker(&rx, &*control, token.as_deref(), &counters, timeout))?,
            );
        }
        let accept = {
            let stop = Arc::clone(&stop);
            let counters = Arc::clone(&counters);
            std::thread::Builder::new()
                .name("http-accept".into())
                .spawn(move || accept_loop(&listener, &tx, &stop, &counters))?
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

fn accept_loop(
    listener: &TcpListener,
    tx: &SyncSender<TcpStream>,
    stop: &AtomicBool,
    counters: &HttpCounters,
) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                match tx.try_send(stream) {
                    Ok(()) => {}
                    Err(TrySendError::Full(mut s)) => {
                        counters.server_errors.fetch_add(1, Ordering::Relaxed);
                        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                        let _ = Response::error(503, "busy").write_to(&mut s);
                    }
                    Err(TrySendError::Disconnected(_)) => return,
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::warn!("HTTP accept: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    // Dropping `tx` (the caller's) when this returns ends the workers' loops.
}

/// Reads from a socket until a deadline for the whole request; past it, reads fail with
/// `TimedOut`.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut s = self.stream;
        s.read(buf)
    }
}

fn worker(
    rx: &Mutex<Receiver<TcpStream>>,
    control: &dyn RunControl,
    token: Option<&str>,
    counters: &HttpCounters,
    timeout: Duration,
) {
    loop {
        let next = match rx.lock() {
            Ok(guard) => guard.recv_timeout(Duration::from_millis(100)),
            Err(_) => return,
        };
        let mut stream = match next {
            Ok(s) => s,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let _ = stream.set_write_timeout(Some(timeout));
        // One deadline for the whole request, not per read: a client trickling a byte every
        // few seconds cannot hold a worker for longer than `timeout`.
        let mut reader = DeadlineReader {
            stream: &stream,
            deadline: Instant::now() + timeout,
        };
        let response = match read_request(&mut reader) {
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
