//! Waiting for a socket to become readable, for at most a given time: `poll(2)` on one
//! descriptor. The receivers read non-blocking and wait here only when a read found nothing,
//! so a busy link costs one system call per read, and a quiet one wakes up at its deadline.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Waits until `socket` is readable (data, a connection to accept, an end or an error: the
/// next read or accept tells which) or `timeout` passed. True when readable; false at the
/// timeout or on a signal. The timeout is rounded up to whole milliseconds, as `poll(2)`
/// takes it.
pub(crate) fn wait_readable(socket: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
    let mut fd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `fd` is a live, initialised pollfd on this stack frame and we pass a count of 1,
    // so poll(2) reads and writes exactly that one struct; the descriptor belongs to `socket`,
    // which the caller keeps open for the whole call.
    let r = unsafe { libc::poll(&mut fd, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(r > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Instant;

    #[test]
    fn waits_until_data_or_the_timeout() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let t0 = Instant::now();
        assert!(!wait_readable(&rx, Duration::from_millis(20)).unwrap());
        assert!(t0.elapsed() >= Duration::from_millis(20));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        assert!(wait_readable(&rx, Duration::from_secs(10)).unwrap());
        // A zero timeout only looks.
        assert!(wait_readable(&rx, Duration::ZERO).unwrap());
    }
}
