//! Network input channels: link units over UDP or TCP, for real front-ends or an emulator on
//! another host (`rodeo gen link --send udp://HOST:PORT`).
//!
//! Both receivers are [`Generator`]s that [wait for input](Generator::waits_for_input), so an
//! [`crate::dma::EmulatedChannel`] runs them on its card thread exactly like an emulator: they
//! write whole units into the channel's superpages.
//!
//! - **UDP** ([`UdpReceiver`], `udp.rs`): one datagram is one unit (a FELIX block or a ROD
//!   fragment), received straight into the superpage (no intermediate copy). UDP has no
//!   back-pressure: when the card stalls, the kernel's socket buffer fills and drops datagrams,
//!   and the loss shows downstream as FELIX block-sequence gaps or S-LINK L1ID sequence errors.
//!   Datagrams of the wrong size (not the block size in FELIX mode, not whole words in S-LINK
//!   mode, larger than the largest unit) are dropped and counted in [`NetCounters`]; so are the
//!   datagrams the kernel dropped because the socket buffer was full (its own count for the
//!   socket, `drops` in `/proc/net/udp`, read every 100 ms and when the receiver ends:
//!   `drops.rs`).
//! - **TCP** ([`TcpReceiver`], `tcp.rs`): a listening socket accepts one sender at a time; the
//!   stream is a sequence of records, `u32` length in bytes then the unit zero-padded to a
//!   multiple of 4 (the unit records of a link capture file). TCP has back-pressure: a stalled
//!   card stops reading, the window closes, the sender blocks; nothing is lost. A record with an
//!   invalid length ends the connection (counted): a byte stream cannot be resynchronised safely.
//!
//! # Live: a unit is handed over within [`FLUSH_INTERVAL`]
//!
//! The sockets are read non-blocking: while data is there, a read system call takes whatever
//! the kernel holds (TCP: up to 256 KiB of records at once; UDP: one datagram), and the clock is
//! read once per read, never per unit. When a read finds nothing the receiver waits in
//! `poll(2)` (`wait.rs`) until data comes or the superpage's deadline: the channel hands a
//! superpage over at the latest [`FLUSH_INTERVAL`] after its first unit arrived
//! ([`Generator::fill_until`]), so a sender at a steady 200 Hz is read, checked and stored as it
//! sends, not when it pauses or its superpage fills.
//!
//! # State
//!
//! [`NetCounters`] (`watch.rs`) carries the link's [`LinkState`] (waiting, connected, closed,
//! lost), the age of its last data and its silences, for the readout node's input status.
//!
//! # Shutdown
//!
//! Every wait is bounded by [`POLL_INTERVAL`], so the channel's stop takes effect within it.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

mod drops;
mod tcp;
mod udp;
mod wait;
mod watch;

#[cfg(doc)]
use crate::dma::Generator;
pub use crate::dma::FLUSH_INTERVAL;
pub use tcp::{TcpReceiver, TAKEOVER_SILENCE};
pub use udp::UdpReceiver;
pub use watch::{LinkState, NetCounters, STALL_GAP};

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

    pub(crate) fn accepts(self, len: usize) -> bool {
        match self {
            UnitRule::Block(n) => len == n,
            UnitRule::Words(n) => len > 0 && len % 4 == 0 && len <= n,
        }
    }
}

/// A read that found nothing (or was interrupted): not an error of the link.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
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

/// Sends link units to a receiver: datagrams (UDP) or length-prefixed records (TCP).
#[derive(Debug)]
pub enum LinkSender {
    /// A connected UDP socket.
    Udp(UdpSocket),
    /// A TCP connection (blocks when the receiver applies back-pressure).
    Tcp(io::BufWriter<TcpStream>),
}

impl LinkSender {
    /// Connects to `address`, retrying for up to `retry` while the receiver is not there yet
    /// (refused, unreachable, timed out, reset): a sender started with its partition does not
    /// depend on which comes up first. Every 100 ms; the last error after `retry`.
    pub fn connect_retrying(address: LinkAddress, retry: Duration) -> io::Result<LinkSender> {
        let deadline = Instant::now() + retry;
        loop {
            match LinkSender::connect(address) {
                Ok(s) => return Ok(s),
                Err(e) if Instant::now() < deadline && retryable(&e) => {
                    std::thread::sleep(Duration::from_millis(100).min(retry));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Connects to `address` (TCP: one attempt, at most 5 s).
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

/// Connection errors a sender retries: the receiver is not listening yet, or not reachable yet.
fn retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::TimedOut
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::AddrNotAvailable
    )
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
    fn a_sender_retries_until_its_receiver_listens() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = LinkAddress::parse(&format!("tcp://127.0.0.1:{port}")).unwrap();
        // Nobody listens: one attempt fails at once.
        assert!(LinkSender::connect_retrying(address, Duration::ZERO).is_err());
        // A receiver that comes up 300 ms late (the scenario, not a synchronisation).
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
            l.accept().map(|_| ()).unwrap();
        });
        let t0 = Instant::now();
        LinkSender::connect_retrying(address, Duration::from_secs(20)).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(20));
        late.join().unwrap();
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
