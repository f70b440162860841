//! The UDP receiver: one datagram is one unit, received straight into the superpage.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Instant;

use super::drops::KernelDrops;
use super::wait::wait_readable;
use super::{
    set_receive_buffer, LinkState, NetCounters, UnitRule, FLUSH_INTERVAL, POLL_INTERVAL,
    UDP_RECEIVE_BUFFER,
};
use crate::dma::{Fill, Generator};

/// Receives units as UDP datagrams; see the parent module's docs.
#[derive(Debug)]
pub struct UdpReceiver {
    socket: UdpSocket,
    rule: UnitRule,
    counters: Arc<NetCounters>,
    drops: KernelDrops,
}

impl UdpReceiver {
    /// Binds `addr` (port 0 picks a free port; see [`UdpReceiver::local_addr`]) and asks for
    /// a [`UDP_RECEIVE_BUFFER`] socket buffer, so a card stall of milliseconds loses nothing.
    pub fn bind(addr: SocketAddr, rule: UnitRule) -> io::Result<UdpReceiver> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        set_receive_buffer(&socket, UDP_RECEIVE_BUFFER);
        Ok(UdpReceiver {
            drops: KernelDrops::of(&socket),
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

    /// Copies the kernel's drop count of the socket into the counters.
    fn note_kernel_drops(&self, dropped: Option<u64>) {
        if let Some(n) = dropped {
            self.counters
                .kernel_dropped_units
                .store(n, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for UdpReceiver {
    /// The last counts: datagrams dropped since the last read are losses of this run too, and
    /// so are the bytes still queued unread.
    fn drop(&mut self) {
        if let Some((dropped, unread)) = self.drops.read_with_queue() {
            self.note_kernel_drops(Some(dropped));
            self.counters
                .unread_bytes
                .store(unread, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Receives one datagram into `dst`: the bytes copied, and the datagram's whole length (larger
/// when it did not fit and was cut: `MSG_TRUNC` has the kernel report it).
fn recv_whole_len(socket: &UdpSocket, dst: &mut [u8]) -> io::Result<(usize, usize)> {
    use std::os::fd::AsRawFd;
    // SAFETY: `dst` is a live, writable buffer of `dst.len()` bytes for the whole call, and
    // the kernel writes at most that many bytes into it (MSG_TRUNC only changes the length
    // returned, not what is copied); the descriptor is the socket's own, open while borrowed.
    let r = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            dst.as_mut_ptr().cast(),
            dst.len(),
            libc::MSG_TRUNC,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let whole = r as usize;
    Ok((whole.min(dst.len()), whole))
}

impl Generator for UdpReceiver {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        self.fill_until(buf, max_units, &mut None)
    }

    fn fill_until(
        &mut self,
        buf: &mut [u8],
        max_units: u64,
        flush_by: &mut Option<Instant>,
    ) -> Fill {
        let mut fill = Fill::default();
        // One byte more than the largest unit tells an oversize datagram (cut by recv; its
        // whole length is counted).
        let room = self.rule.max_bytes() + 1;
        let mut now = Instant::now();
        self.counters.look(now);
        let mut waited = false;
        let dropped = self.drops.due(now);
        self.note_kernel_drops(dropped);
        while fill.units < max_units {
            let Some(dst) = buf.get_mut(fill.bytes..fill.bytes + room) else {
                break;
            };
            match recv_whole_len(&self.socket, dst) {
                Ok((n, whole)) => {
                    now = Instant::now();
                    if self.counters.state() == LinkState::Waiting {
                        self.counters.set_state(LinkState::Connected, now);
                    }
                    self.counters.data(now);
                    if self.rule.accepts(n) {
                        fill.bytes += n;
                        fill.units += 1;
                        self.counters.accept_unit(n);
                        flush_by.get_or_insert(now + FLUSH_INTERVAL);
                    } else {
                        // The datagram's own length: an oversize one counts all its bytes.
                        self.counters.drop_unit(whole.max(n));
                    }
                    if flush_by.is_some_and(|d| now >= d) {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let limit = match *flush_by {
                        Some(d) if now >= d => break,
                        Some(d) => d - now,
                        // Nothing to hand over: wait once, then let the channel look at its
                        // stop flag.
                        None if waited => break,
                        None => POLL_INTERVAL,
                    };
                    self.counters.quiet(now);
                    if wait_readable(&self.socket, limit).is_err() {
                        break;
                    }
                    waited = true;
                    now = Instant::now();
                    self.counters.look(now);
                }
                // An error queued on the socket (an ICMP message): nothing was received.
                Err(_) => break,
            }
        }
        fill
    }

    fn waits_for_input(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::net::drops::SAMPLE_EVERY;

    /// Datagrams sent faster than the receiver reads overflow the socket buffer: the kernel's
    /// drops are counted, and with the datagrams received they make up every one sent
    /// (loopback loses nothing else).
    #[test]
    fn datagrams_the_kernel_dropped_are_counted() {
        let mut rx =
            UdpReceiver::bind("127.0.0.1:0".parse().unwrap(), UnitRule::Words(1024)).unwrap();
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        // Far more than the 8 MiB buffer holds, none read while they are sent.
        const SENT: u64 = 40_000;
        let datagram = [0u8; 1024];
        for _ in 0..SENT {
            tx.send_to(&datagram, to).unwrap();
        }
        let counters = rx.counters();
        let mut buf = vec![0u8; 1 << 20];
        // Read until the socket is empty, then once more after a sample is due.
        loop {
            if rx.fill(&mut buf, u64::MAX).units == 0 {
                break;
            }
        }
        std::thread::sleep(SAMPLE_EVERY);
        rx.fill(&mut buf, u64::MAX);
        let units = counters.units.load(Ordering::Relaxed);
        let dropped = counters.kernel_dropped_units.load(Ordering::Relaxed);
        assert!(
            dropped > 0,
            "{units} received, none dropped: the buffer held all"
        );
        assert_eq!(units + dropped, SENT, "{units} received, {dropped} dropped");
        // Drops after the last sample are read when the receiver ends, and the bytes left
        // unread in the buffer are counted.
        for _ in 0..SENT {
            tx.send_to(&datagram, to).unwrap();
        }
        drop(rx);
        assert!(counters.kernel_dropped_units.load(Ordering::Relaxed) > dropped);
        assert!(counters.unread_bytes.load(Ordering::Relaxed) >= 1024);
    }
}
