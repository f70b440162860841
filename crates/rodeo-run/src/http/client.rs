//! A client of the HTTP API (`rodeo ctl`, tests): one request per connection over
//! `http://HOST:PORT` or `https://HOST:PORT`. Over HTTPS the server's certificate is verified
//! against `--ca FILE` (a private CA) or the system's trusted roots, and must name the host of
//! the URL.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;

use super::tls::{client_config, TlsError};

/// Largest answer taken (a page of 100 runs is at most a few MB); a larger one is an error,
/// not an answer cut short.
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

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
    /// The answer is not HTTP.
    #[error("not an HTTP answer from {0}")]
    NotHttp(String),
    /// The answer is larger than [`MAX_ANSWER_BYTES`].
    #[error(
        "the answer from {0} is larger than {MAX_ANSWER_BYTES} bytes: not read (ask for less, \
         e.g. a page of runs)"
    )]
    TooLarge(String),
}

/// A TCP stream whose every read and write waits at most until one deadline: a server that
/// sends its answer a byte at a time cannot hold the client beyond it.
struct Timed {
    tcp: TcpStream,
    deadline: Instant,
}

impl Timed {
    /// The time left, or a `TimedOut` error when none is.
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

/// The socket's timeout said as what it is (Linux reports it as `WouldBlock`).
fn timed_out(e: std::io::Error) -> std::io::Error {
    if e.kind() == std::io::ErrorKind::WouldBlock {
        return std::io::Error::new(std::io::ErrorKind::TimedOut, "the request's time is up");
    }
    e
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.tcp.set_read_timeout(Some(self.left()?))?;
        self.tcp.read(buf).map_err(timed_out)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tcp.set_write_timeout(Some(self.left()?))?;
        self.tcp.write(buf).map_err(timed_out)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
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
/// at `url`, waits at most `timeout` for the whole exchange (connecting included), and returns
/// the answer. `ca`: the CA that
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
    let deadline = Instant::now() + timeout;
    let tcp = connect(hostport, deadline).map_err(io("cannot connect to"))?;
    let tcp = Timed { tcp, deadline };
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
    if raw.len() as u64 > MAX_ANSWER_BYTES {
        return Err(ClientError::TooLarge(url.into()));
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
    match s.take(MAX_ANSWER_BYTES + 1).read_to_end(out) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => Ok(()),
        Err(e) => Err(("no answer from", e)),
    }
}

/// A connection to `hostport` (each of its addresses in turn) made before `deadline`.
fn connect(hostport: &str, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for addr in hostport.to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server that answers `GET` with what `answer` writes, once, on 127.0.0.1.
    fn one_answer(answer: impl FnOnce(&mut TcpStream) + Send + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut head = [0u8; 1024];
                let _ = s.read(&mut head);
                answer(&mut s);
            }
        });
        format!("http://{addr}")
    }

    /// A server that sends its answer a byte at a time holds the client no longer than its
    /// timeout (it was a timeout per read: a byte each 100 ms kept it forever).
    #[test]
    fn a_trickling_server_ends_at_the_deadline() {
        let url = one_answer(|s| {
            for _ in 0..600 {
                if s.write_all(b"H").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let began = Instant::now();
        let got = request(
            &url,
            None,
            "GET",
            "/api/status",
            None,
            "",
            Duration::from_secs(1),
        );
        match &got {
            Err(ClientError::Io { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::TimedOut, "{source}");
            }
            other => panic!("a trickling answer ended otherwise: {other:?}"),
        }
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
    }

    /// An answer past the limit is an error, not an answer cut short.
    #[test]
    fn an_answer_past_the_limit_is_refused() {
        let url = one_answer(|s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n");
            let chunk = vec![b' '; 1 << 20];
            for _ in 0..(MAX_ANSWER_BYTES >> 20) + 2 {
                if s.write_all(&chunk).is_err() {
                    return;
                }
            }
        });
        let got = request(
            &url,
            None,
            "GET",
            "/api/runs",
            None,
            "",
            Duration::from_secs(30),
        );
        assert!(matches!(got, Err(ClientError::TooLarge(_))), "{got:?}");
    }
}
