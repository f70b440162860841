//! Reading one HTTP/1.1 request, bounded: the head at most [`MAX_HEADER_BYTES`] in at most
//! [`MAX_HEADERS`] headers, the body at most [`MAX_BODY_BYTES`]; every malformed byte is a
//! typed [`RequestError`]. Strict where a lenient reading could be read two ways: at most one
//! `Content-Length`, digits only; no `Transfer-Encoding` (bodies are sized by
//! `Content-Length` only).

use std::io::{self, Read};

use super::{MAX_BODY_BYTES, MAX_HEADERS, MAX_HEADER_BYTES};

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
    /// A header that may come once came more than once (`Content-Length`).
    #[error("the header {0} is given more than once")]
    DuplicateHeader(&'static str),
    /// `Transfer-Encoding` (chunked bodies) is not supported.
    #[error("Transfer-Encoding is not supported: send the body with one Content-Length")]
    TransferEncoding,
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The query string: what follows the path's `?` (empty when none).
    pub query: String,
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
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (path, query) = (path.to_string(), query.to_string());
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
        query,
        headers,
        body: Vec::new(),
    };
    if request.header("transfer-encoding").is_some() {
        return Err(RequestError::TransferEncoding);
    }
    let length = body_length(
        request
            .headers
            .iter()
            .filter(|(k, _)| k == "content-length")
            .map(|(_, v)| v.as_str()),
    )?;
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

/// The body's length from the values of the request's `Content-Length` headers (trimmed): 0
/// without one; one, of digits only, at most [`MAX_BODY_BYTES`]. The one rule of the parser
/// and of [`Completion`], which hands a request the parser refuses on at once.
fn body_length<'a>(mut values: impl Iterator<Item = &'a str>) -> Result<usize, RequestError> {
    let length = match (values.next(), values.next()) {
        (None, _) => 0,
        (Some(_), Some(_)) => return Err(RequestError::DuplicateHeader("Content-Length")),
        (Some(v), None) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v
            .parse::<usize>()
            .map_err(|_| RequestError::BadContentLength)?,
        (Some(_), None) => return Err(RequestError::BadContentLength),
    };
    if length > MAX_BODY_BYTES {
        return Err(RequestError::BodyTooLarge(length));
    }
    Ok(length)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How far the search for a whole request in a connection's bytes has come: each readiness
/// event looks only at the bytes that arrived since the last (a client that sends its request
/// a byte at a time must not make the reader thread scan the whole buffer each time).
#[derive(Debug, Default)]
pub(super) struct Completion {
    /// Bytes already searched for the end of the head.
    scanned: usize,
    /// Once the head is whole: the length of the whole request.
    whole_at: Option<usize>,
}

impl Completion {
    /// Whether `buf` (the bytes so far, only ever grown since the last call) holds a whole
    /// request, or enough to know it can never be one (too large): either way it goes to a
    /// worker, which answers it or its [`RequestError`].
    pub(super) fn complete(&mut self, buf: &[u8]) -> bool {
        if let Some(n) = self.whole_at {
            return buf.len() >= n;
        }
        // The separator may straddle what was searched and what came since.
        let from = self.scanned.saturating_sub(3).min(buf.len());
        let Some(p) = find(&buf[from..], b"\r\n\r\n") else {
            self.scanned = buf.len();
            return buf.len() > MAX_HEADER_BYTES;
        };
        let head_end = from + p;
        if head_end > MAX_HEADER_BYTES {
            return true;
        }
        let head = String::from_utf8_lossy(&buf[..head_end]);
        let lengths = head.split("\r\n").skip(1).filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then_some(v.trim())
        });
        match body_length(lengths) {
            Ok(n) => {
                self.whole_at = Some(head_end + 4 + n);
                buf.len() >= head_end + 4 + n
            }
            // Two lengths, a malformed or a too large one: the parser's error, at once.
            Err(_) => true,
        }
    }
}

/// `body` as the JSON object `T` (an array or any other JSON value is refused: serde would
/// read a struct from an array too); the error says what was expected (`shape`).
pub(super) fn json_object<T: serde::de::DeserializeOwned>(
    body: &[u8],
    shape: &str,
) -> Result<T, String> {
    let expected = |e: &dyn std::fmt::Display| format!("expected a JSON object {shape}: {e}");
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| expected(&e))?;
    if !v.is_object() {
        return Err(expected(&"the body is not an object"));
    }
    serde_json::from_value(v).map_err(|e| expected(&e))
}
