//! One accepted connection, plain or TLS: read without waiting by the reader thread (the TLS
//! handshake included, driven by readiness), written by a worker once its request is whole.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

/// An accepted connection.
pub(super) enum Conn {
    /// Plain HTTP.
    Plain(TcpStream),
    /// HTTPS: rustls's state over the socket.
    Tls(Box<TlsConn>),
}

/// rustls's server state and its socket.
pub(super) struct TlsConn {
    tls: rustls::ServerConnection,
    tcp: TcpStream,
}

/// What a read without waiting found.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Readiness {
    /// The peer closed, the connection failed, or TLS refused it: nothing more will come.
    pub closed: bool,
    /// TLS output (the handshake) waits for the socket to take it: watch for writability.
    pub wants_write: bool,
}

impl Conn {
    /// A connection over `tcp` (non-blocking), HTTPS when `tls` is given.
    pub(super) fn new(
        tcp: TcpStream,
        tls: Option<&Arc<rustls::ServerConfig>>,
    ) -> Result<Conn, rustls::Error> {
        Ok(match tls {
            None => Conn::Plain(tcp),
            Some(config) => Conn::Tls(Box::new(TlsConn {
                tls: rustls::ServerConnection::new(Arc::clone(config))?,
                tcp,
            })),
        })
    }

    /// The socket.
    pub(super) fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(t) => &t.tcp,
        }
    }

    /// Appends what the peer sent (plaintext) to `buf`, without waiting, until the socket has
    /// nothing more or `buf` holds more than `limit` bytes; with TLS, also moves the handshake
    /// on and sends what it has to send as far as the socket takes it.
    pub(super) fn read_available(&mut self, buf: &mut Vec<u8>, limit: usize) -> Readiness {
        match self {
            Conn::Plain(s) => Readiness {
                closed: read_plain(s, buf, limit),
                wants_write: false,
            },
            Conn::Tls(t) => t.read_available(buf, limit),
        }
    }

    /// Sends the TLS output that waits (without waiting); whether some still waits.
    pub(super) fn flush_pending(&mut self) -> Readiness {
        match self {
            Conn::Plain(_) => Readiness::default(),
            Conn::Tls(t) => t.flush_tls(),
        }
    }

    /// The end of an answer: TLS's close_notify sent (best effort), the socket shut down.
    pub(super) fn close(&mut self) {
        if let Conn::Tls(t) = self {
            t.tls.send_close_notify();
            let _ = t.flush_tls();
        }
        let _ = self.tcp().shutdown(std::net::Shutdown::Both);
    }
}

/// Reads a plain socket into `buf` until it would block or `buf` passed `limit`; whether the
/// peer is gone.
fn read_plain(s: &mut TcpStream, buf: &mut Vec<u8>, limit: usize) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        let room = (limit + 1).saturating_sub(buf.len()).clamp(1, chunk.len());
        match s.read(&mut chunk[..room]) {
            Ok(0) => return true,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > limit {
                    return false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

impl TlsConn {
    fn read_available(&mut self, buf: &mut Vec<u8>, limit: usize) -> Readiness {
        let mut out = Readiness::default();
        loop {
            let mut would_block = false;
            match self.tls.read_tls(&mut self.tcp) {
                Ok(0) => out.closed = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => would_block = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => out.closed = true,
            }
            if let Err(e) = self.tls.process_new_packets() {
                // A bad record or handshake: rustls has queued an alert; send it and stop.
                tracing::debug!("HTTPS connection refused: {e}");
                let _ = self.flush_tls();
                out.closed = true;
                return out;
            }
            if self.read_plaintext(buf, limit) {
                out.closed = true;
            }
            let flushed = self.flush_tls();
            out.closed |= flushed.closed;
            out.wants_write = flushed.wants_write;
            if out.closed || would_block || buf.len() > limit {
                return out;
            }
        }
    }

    /// Moves the plaintext rustls decrypted into `buf` (up to `limit`); whether the peer
    /// closed its side (close_notify).
    fn read_plaintext(&mut self, buf: &mut Vec<u8>, limit: usize) -> bool {
        let mut chunk = [0u8; 4096];
        while buf.len() <= limit {
            match self.tls.reader().read(&mut chunk) {
                Ok(0) => return true,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
        false
    }

    /// Writes what rustls has to send until the socket would block.
    fn flush_tls(&mut self) -> Readiness {
        let mut out = Readiness::default();
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    out.wants_write = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    out.closed = true;
                    break;
                }
            }
        }
        out
    }
}

/// Writes the answer: plain bytes, or TLS records (the socket's own timeouts bound it; a
/// non-blocking socket makes it best effort).
impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(t) => rustls::Stream::new(&mut t.tls, &mut t.tcp).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(t) => rustls::Stream::new(&mut t.tls, &mut t.tcp).flush(),
        }
    }
}
