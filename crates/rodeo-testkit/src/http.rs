//! A plain HTTP/1.1 client for tests of rodeo's HTTP API: one request per connection, the
//! whole answer read until the server closes, with a read deadline so a server that never
//! answers fails the test instead of hanging it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long a test waits for an answer.
const READ_LIMIT: Duration = Duration::from_secs(60);

/// Sends `method path` with `body` (and `Authorization: Bearer <auth>` when given) over a fresh
/// connection to `addr`; returns the status code and the body. Panics, naming the request, on a
/// connection failure, a timeout or an answer that is not HTTP.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> (u16, String) {
    let what = format!("{method} {path} on {addr}");
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{what}: connect: {e}"));
    s.set_read_timeout(Some(READ_LIMIT)).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(a) = auth {
        req.push_str(&format!("Authorization: Bearer {a}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())
        .unwrap_or_else(|e| panic!("{what}: send: {e}"));
    let mut out = String::new();
    s.read_to_string(&mut out)
        .unwrap_or_else(|e| panic!("{what}: read: {e}"));
    let status = out
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{what}: not an HTTP answer: {out:?}"));
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// `GET path` whose answer must be 200; the body.
pub fn get_ok(addr: SocketAddr, path: &str) -> String {
    let (code, body) = request(addr, "GET", path, None, "");
    assert_eq!(code, 200, "GET {path}: {body}");
    body
}
