//! A client of the HTTP API (`rodeo ctl`, tests): one request per connection over
//! `http://HOST:PORT` or `https://HOST:PORT`. Over HTTPS the server's certificate is verified
//! against `--ca FILE` (a private CA) or the system's trusted roots, and must name the host of
//! the URL.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use rustls::pki_types::ServerName;

use super::tls::{client_config, TlsError};

/// Largest answer read (`GET /api/runs` of a long shift is a few MB).
const MAX_ANSWER_BYTES: u64 = 256 << 20;

/// Why a request got no HTTP answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The URL is not `http://HOST:PORT` or `https://HOST:PORT`.
    #[error("{0:?} is not a URL of the API: use http://HOST:PORT or https://HOST:PORT")]
    BadUrl(String),
    /// The TLS settings (the CA file, the system's roots).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Connecting, sending or reading failed (over HTTPS: also a certificate the client does
    /// not trust, or one for another name).
    #[error("{what} {url}: {source}")]
    Io {
        /// connect, send, read.
        what: &'static str,
        /// The URL.
        url: String,
        /// The error (rustls's inside for a refused certificate).
        source: std::io::Error,
    },
    /// The answer is not HTTP, or too large.
    #[error("not an HTTP answer from {0}")]
    NotHttp(String),
}

/// An answer: its status code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: String,
}

/// Sends `method path` with `body` (and `Authorization: Bearer <token>` when given) to the API
/// at `url`, waits at most `timeout` for each read, and returns the answer. `ca`: the CA that
/// signed an HTTPS server's certificate (else the system's roots).
pub fn request(
    url: &str,
    ca: Option<&Path>,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    let (tls, hostport) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return Err(ClientError::BadUrl(url.into())),
    };
    let hostport = hostport.trim_end_matches('/');
    let host = match hostport.rsplit_once(':') {
        Some((h, port)) if !h.is_empty() && port.parse::<u16>().is_ok() => {
            h.trim_start_matches('[').trim_end_matches(']')
        }
        _ => return Err(ClientError::BadUrl(url.into())),
    };
    let io = |what| {
        move |source| ClientError::Io {
            what,
            url: url.into(),
            source,
        }
    };
    let tcp = TcpStream::connect(hostport).map_err(io("cannot connect to"))?;
    tcp.set_read_timeout(Some(timeout))
        .and_then(|()| tcp.set_write_timeout(Some(timeout)))
        .map_err(io("cannot connect to"))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw = Vec::new();
    if tls {
        let name =
            ServerName::try_from(host.to_string()).map_err(|_| ClientError::BadUrl(url.into()))?;
        let conn = rustls::ClientConnection::new(client_config(ca)?, name)
            .map_err(|e| ClientError::Tls(e.into()))?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        exchange(&mut s, &head, body, &mut raw).map_err(|(what, e)| io(what)(e))?;
    } else {
        let mut s = tcp;
        exchange(&mut s, &head, body, &mut raw).map_err(|(what, e)| io(what)(e))?;
    }
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .strip_prefix("HTTP/1.")
        .and_then(|t| t.get(2..5))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| ClientError::NotHttp(url.into()))?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok(Answer {
        status,
        body: body.to_string(),
    })
}

/// Writes the request and reads the answer to its end (the server closes); a TLS peer that
/// closes without close_notify after a whole answer is taken as the end.
fn exchange(
    s: &mut (impl Read + Write),
    head: &str,
    body: &str,
    out: &mut Vec<u8>,
) -> Result<(), (&'static str, std::io::Error)> {
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body.as_bytes()))
        .and_then(|()| s.flush())
        .map_err(|e| ("cannot send to", e))?;
    match s.take(MAX_ANSWER_BYTES).read_to_end(out) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => Ok(()),
        Err(e) => Err(("no answer from", e)),
    }
}
