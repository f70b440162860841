//! Network input channels: link units over UDP or TCP, for real front-ends or an emulator on
//! another host (`rodeo gen link --send udp://HOST:PORT`).
//!
//! Both receivers are [`Generator`]s that [wait for input](Generator::waits_for_input), so an
//! [`crate::dma::EmulatedChannel`] runs them on its card thread exactly like an emulator: they
//! write whole units into the channel's superpages, and a partly filled superpage is handed over
//! as soon as input pauses (bounded by [`POLL_INTERVAL`]).
//!
//! - **UDP** ([`UdpReceiver`]): one datagram is one unit (a FELIX block or a ROD fragment),
//!   received straight into the superpage (no intermediate copy). UDP has no back-pressure:
//!   when the card stalls, the kernel's socket buffer fills and drops datagrams, and the loss
//!   shows downstream as FELIX block-sequence gaps or S-LINK L1ID sequence errors. Datagrams of
//!   the wrong size (not the block size in FELIX mode, not whole words in S-LINK mode, larger
//!   than the largest unit) are dropped and counted in [`NetCounters`].
//! - **TCP** ([`TcpReceiver`]): a listening socket accepts one sender at a time; the stream is
//!   a sequence of records, `u32` length in bytes then the unit zero-padded to a multiple of 4
//!   (the unit records of a link capture file). TCP has back-pressure: a stalled card stops
//!   reading, the window closes, the sender blocks; nothing is lost. A record with an invalid
//!   length ends the connection (counted): a byte stream cannot be resynchronised safely.
//!
//! # Shutdown
//!
//! Every wait is bounded by [`POLL_INTERVAL`], so the channel's stop takes effect within it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::dma::{Fill, Generator};

/// Longest wait of a receiver for input before it hands control back to its channel.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Largest unit a network receiver accepts (a UDP datagram's limit).
pub const MAX_NET_UNIT: usize = 65_507;

/// Where link units travel: `udp://HOST:PORT` or `tcp://HOST:PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkAddress {
    /// Datagrams, one unit each.
    Udp(SocketAddr),
    /// A stream of length-prefixed unit records.
    Tcp(SocketAddr),
}

/// A link address that could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    /// No `udp://` or `tcp://` prefix.
    #[error("link address {0:?}: expected udp://HOST:PORT or tcp://HOST:PORT")]
    Scheme(String),
    /// The host and port do not resolve.
    #[error("link address {address:?}: cannot resolve {host:?}: {reason}")]
    Resolve {
        /// The whole address.
        address: String,
        /// The HOST:PORT part.
        host: String,
        /// Why.
        reason: String,
    },
}

impl LinkAddress {
    /// Parses and resolves an address (the first resolved socket address is used).
    pub fn parse(address: &str) -> Result<LinkAddress, AddressError> {
        let (udp, rest) = if let Some(rest) = address.strip_prefix("udp://") {
            (true, rest)
        } else if let Some(rest) = address.strip_prefix("tcp://") {
            (false, rest)
        } else {
            return Err(AddressError::Scheme(address.to_string()));
        };
        let resolve_err = |reason: String| AddressError::Resolve {
            address: address.to_string(),
            host: rest.to_string(),
            reason,
        };
        let addr = rest
            .to_socket_addrs()
            .map_err(|e| resolve_err(e.to_string()))?
            .next()
            .ok_or_else(|| resolve_err("no address".to_string()))?;
        Ok(if udp {
            LinkAddress::Udp(addr)
        } else {
            LinkAddress::Tcp(addr)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_buffer_grows() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let small = set_receive_buffer(&s, 4096);
        let large = set_receive_buffer(&s, 1 << 20);
        assert!(small > 0 && large > small, "{small} -> {large}");
    }

    #[test]
    fn addresses_parse() {
        assert!(matches!(
            LinkAddress::parse("udp://127.0.0.1:5000"),
            Ok(LinkAddress::Udp(_))
        ));
        assert!(matches!(
            LinkAddress::parse("tcp://localhost:5000"),
            Ok(LinkAddress::Tcp(_))
        ));
        assert!(matches!(
            LinkAddress::parse("http://x:1"),
            Err(AddressError::Scheme(_))
        ));
        assert!(LinkAddress::parse("udp://no-port").is_err());
    }
}

impl std::fmt::Display for LinkAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkAddress::Udp(a) => write!(f, "udp://{a}"),
            LinkAddress::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

/// What a receiver accepts as a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitRule {
    /// FELIX blocks: exactly this many bytes.
    Block(usize),
    /// S-LINK fragments: whole 32-bit words, up to this many bytes.
    Words(usize),
}

impl UnitRule {
    /// The largest unit.
    pub fn max_bytes(self) -> usize {
        match self {
            UnitRule::Block(n) | UnitRule::Words(n) => n.min(MAX_NET_UNIT),
        }
    }

    fn accepts(self, len: usize) -> bool {
        match self {
            UnitRule::Block(n) => len == n,
            UnitRule::Words(n) => len > 0 && len % 4 == 0 && len <= n,
        }
    }
}

/// Counters of a network receiver (64-bit, shared with monitoring).
#[derive(Debug, Default)]
pub struct NetCounters {
    /// Units received and written into superpages.
    pub units: AtomicU64,
    /// Bytes of those units.
    pub bytes: AtomicU64,
    /// Units dropped for their size.
    pub dropped_units: AtomicU64,
    /// Bytes dropped (those units, and the rest of a broken TCP stream's last read).
    pub dropped_bytes: AtomicU64,
    /// TCP connections accepted.
    pub connections: AtomicU64,
    /// TCP connections ended by an invalid record.
    pub broken_connections: AtomicU64,
}

impl NetCounters {
    fn drop_unit(&self, bytes: usize) {
        self.dropped_units.fetch_add(1, Ordering::Relaxed);
        self.dropped_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn accept_unit(&self, bytes: usize) {
        self.units.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// The socket receive buffer a UDP receiver asks for (the kernel may grant less: without
/// privileges it caps the size at `net.core.rmem_max`).
pub const UDP_RECEIVE_BUFFER: usize = 8 << 20;

/// Asks for a receive buffer of `bytes`: first beyond the system limit (`SO_RCVBUFFORCE`,
/// which needs `CAP_NET_ADMIN`), then within it. Returns the size granted (the kernel reports
/// twice the usable size), or 0 if it cannot be read.
pub fn set_receive_buffer(socket: &UdpSocket, bytes: usize) -> usize {
    use std::os::fd::AsRawFd;
    let fd = socket.as_raw_fd();
    let value = bytes.min(i32::MAX as usize) as libc::c_int;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `fd` is an open socket owned by `socket` for the whole call; the option value
        // points to a live c_int and `len` is its size, as setsockopt(2) requires.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&value as *const libc::c_int).cast(),
                len,
            )
        };
        if r == 0 {
            break;
        }
    }
    let mut granted: libc::c_int = 0;
    let mut glen = len;
    // SAFETY: as above; `granted` and `glen` are live locals that getsockopt(2) writes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut granted as *mut libc::c_int).cast(),
            &mut glen,
        )
    };
    if r == 0 {
        granted.max(0) as usize
    } else {
        0
    }
}

/// Receives units as UDP datagrams; see the module docs.
#[derive(Debug)]
pub struct UdpReceiver {
    socket: UdpSocket,
    rule: UnitRule,
    counters: Arc<NetCounters>,
}

impl UdpReceiver {
    /// Binds `addr` (port 0 picks a free port; see [`UdpReceiver::local_addr`]) and asks for
    /// a [`UDP_RECEIVE_BUFFER`] socket buffer, so a card stall of milliseconds loses nothing.
    pub fn bind(addr: SocketAddr, rule: UnitRule) -> io::Result<UdpReceiver> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_read_timeout(Some(POLL_INTERVAL))?;
        set_receive_buffer(&socket, UDP_RECEIVE_BUFFER);
        Ok(UdpReceiver {
            socket,
            rule,
            counters: Arc::default(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The counters (shared: keep a clone to read them while the channel runs).
    pub fn counters(&self) -> Arc<NetCounters> {
        Arc::clone(&self.counters)
    }
}

impl Generator for UdpReceiver {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let mut fill = Fill::default();
        // One byte more than the largest unit tells an oversize datagram (truncated by recv).
        let room = self.rule.max_bytes() + 1;
        while fill.units < max_units {
            let Some(dst) = buf.get_mut(fill.bytes..fill.bytes + room) else {
                break;
            };
            match self.socket.recv(dst) {
                Ok(n) if self.rule.accepts(n) => {
                    fill.bytes += n;
                    fill.units += 1;
                    self.counters.accept_unit(n);
                }
                Ok(n) => self.counters.drop_unit(n),
                Err(e) if is_timeout(&e) => break,
                Err(_) => break,
            }
        }
        fill
    }

    fn waits_for_input(&self) -> bool {
        true
    }
}

/// Receives units as length-prefixed records over TCP; see the module docs.
#[derive(Debug)]
pub struct TcpReceiver {
    listener: TcpListener,
    stream: Option<TcpStream>,
    rule: UnitRule,
    counters: Arc<NetCounters>,
    /// The record being read (length word included), sized for the largest record.
    carry: Box<[u8]>,
    /// Bytes of `carry` received so far (a record may arrive across pauses).
    have: usize,
    /// Finish (no more input) once a sender has ended its connection cleanly.
    end_with_sender: bool,
    /// A sender ended cleanly while `end_with_sender` was set.
    finished: bool,
}

impl TcpReceiver {
    /// Listens on `addr` (port 0 picks a free port; see [`TcpReceiver::local_addr`]).
    pub fn bind(addr: SocketAddr, rule: UnitRule) -> io::Result<TcpReceiver> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(TcpReceiver {
            listener,
            stream: None,
            rule,
            counters: Arc::default(),
            carry: vec![0u8; 4 + rule.max_bytes().next_multiple_of(4)].into_boxed_slice(),
            have: 0,
            end_with_sender: false,
            finished: false,
        })
    }

    /// Makes the receiver finish ([`Generator::is_finished`]) when its first sender ends its
    /// connection cleanly (between records): the channel then hands over its last superpage
    /// and takes its link down, so a run fed by a finite sender ends with it. Off by default:
    /// a receiver then waits for the next sender.
    pub fn end_with_sender(mut self, on: bool) -> TcpReceiver {
        self.end_with_sender = on;
        self
    }

    /// The listening address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The counters (shared: keep a clone to read them while the channel runs).
    pub fn counters(&self) -> Arc<NetCounters> {
        Arc::clone(&self.counters)
    }

    /// Waits (bounded) for a sender; true when one is connected.
    fn ensure_stream(&mut self) -> bool {
        if self.stream.is_some() {
            return true;
        }
        match self.listener.accept() {
            Ok((s, _)) => {
                if s.set_nonblocking(false).is_err()
                    || s.set_read_timeout(Some(POLL_INTERVAL)).is_err()
                {
                    return false;
                }
                let _ = s.set_nodelay(true);
                self.counters.connections.fetch_add(1, Ordering::Relaxed);
                self.have = 0;
                self.stream = Some(s);
                true
            }
            Err(_) => {
                std::thread::sleep(POLL_INTERVAL);
                false
            }
        }
    }

    /// Reads until `self.carry` holds `want` bytes. `Ok(false)`: paused (timeout), try later.
    fn read_carry(&mut self, want: usize) -> io::Result<bool> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(false);
        };
        while self.have < want {
            match stream.read(&mut self.carry[self.have..want]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => self.have += k,
                Err(e) if is_timeout(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn close(&mut self, broken: bool) {
        if broken {
            self.counters
                .broken_connections
                .fetch_add(1, Ordering::Relaxed);
            self.counters
                .dropped_bytes
                .fetch_add(self.have as u64, Ordering::Relaxed);
        }
        self.have = 0;
        self.stream = None;
    }
}

impl Generator for TcpReceiver {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let mut fill = Fill::default();
        if !self.ensure_stream() {
            return fill;
        }
        while fill.units < max_units {
            match self.read_carry(4) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    // A clean end between records is a sender that finished, not an error.
                    let clean = e.kind() == io::ErrorKind::UnexpectedEof && self.have == 0;
                    self.close(!clean);
                    self.finished |= clean && self.end_with_sender;
                    break;
                }
            }
            let len =
                u32::from_le_bytes([self.carry[0], self.carry[1], self.carry[2], self.carry[3]])
                    as usize;
            if len == 0 || len > self.rule.max_bytes() {
                self.close(true);
                break;
            }
            let record = 4 + len.next_multiple_of(4);
            if buf.len() - fill.bytes < len {
                break; // the unit goes into the next superpage
            }
            match self.read_carry(record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {
                    self.close(true);
                    break;
                }
            }
            if self.rule.accepts(len) {
                buf[fill.bytes..fill.bytes + len].copy_from_slice(&self.carry[4..4 + len]);
                fill.bytes += len;
                fill.units += 1;
                self.counters.accept_unit(len);
            } else {
                self.counters.drop_unit(len);
            }
            self.have = 0;
        }
        fill
    }

    fn waits_for_input(&self) -> bool {
        true
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}

/// Sends link units to a receiver: datagrams (UDP) or length-prefixed records (TCP).
#[derive(Debug)]
pub enum LinkSender {
    /// A connected UDP socket.
    Udp(UdpSocket),
    /// A TCP connection (blocks when the receiver applies back-pressure).
    Tcp(io::BufWriter<TcpStream>),
}

impl LinkSender {
    /// Connects to `address`.
    pub fn connect(address: LinkAddress) -> io::Result<LinkSender> {
        match address {
            LinkAddress::Udp(a) => {
                let local: SocketAddr = if a.is_ipv4() {
                    "0.0.0.0:0".parse().map_err(io::Error::other)?
                } else {
                    "[::]:0".parse().map_err(io::Error::other)?
                };
                let s = UdpSocket::bind(local)?;
                s.connect(a)?;
                Ok(LinkSender::Udp(s))
            }
            LinkAddress::Tcp(a) => {
                let s = TcpStream::connect_timeout(&a, Duration::from_secs(5))?;
                s.set_nodelay(true)?;
                Ok(LinkSender::Tcp(io::BufWriter::with_capacity(1 << 16, s)))
            }
        }
    }

    /// Sends one unit.
    pub fn send(&mut self, unit: &[u8]) -> io::Result<()> {
        match self {
            LinkSender::Udp(s) => s.send(unit).map(|_| ()),
            LinkSender::Tcp(w) => {
                let pad = unit.len().next_multiple_of(4) - unit.len();
                w.write_all(&(unit.len() as u32).to_le_bytes())?;
                w.write_all(unit)?;
                w.write_all(&[0u8; 3][..pad])
            }
        }
    }

    /// Flushes buffered TCP records.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            LinkSender::Udp(_) => Ok(()),
            LinkSender::Tcp(w) => w.flush(),
        }
    }
}
