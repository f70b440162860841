//! The system calls std does not offer for the stream transport: a vectored send without
//! SIGPIPE (`sendmsg` with `MSG_NOSIGNAL`), `poll` over many sockets, and the socket buffer
//! sizes (`SO_SNDBUF`, `SO_RCVBUF`).

use std::io;
use std::os::fd::RawFd;
use std::sync::OnceLock;
use std::time::Duration;

/// Sends the bytes `iov` points to, in order, without waiting and without SIGPIPE; returns the
/// bytes the kernel took (a `WouldBlock` error when it took none because the buffer is full).
pub(super) fn send_vectored(fd: RawFd, iov: &[libc::iovec]) -> io::Result<usize> {
    // SAFETY: msghdr is plain old data; all-zero is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len() as _;
    loop {
        // SAFETY: `msg` points to `iov`, whose entries point to slices the caller keeps alive
        // for the call; the kernel only reads them. MSG_DONTWAIT keeps the call from blocking.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// An iovec for `b` (read only: the kernel does not write through it in a send).
pub(super) fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    }
}

/// `poll(2)` over `fds` for up to `timeout` (rounded up to a millisecond); returns how many
/// have events (0 on timeout or when a signal interrupted the wait: callers loop to their
/// deadline).
pub(super) fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
    // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()` pollfd entries that
    // the kernel fills in (revents) for the duration of the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::Interrupted {
        return Ok(0);
    }
    Err(e)
}

/// A pollfd for `fd` waiting for `events`.
pub(super) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// The kernel's caps on socket buffers a process may ask for (`net.core.wmem_max`,
/// `net.core.rmem_max`), read once.
fn kernel_caps() -> (usize, usize) {
    static CAPS: OnceLock<(usize, usize)> = OnceLock::new();
    *CAPS.get_or_init(|| {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        (
            read("/proc/sys/net/core/wmem_max"),
            read("/proc/sys/net/core/rmem_max"),
        )
    })
}

/// Asks for send and receive buffers of `bytes` each, where the kernel allows that much: a
/// fixed size turns Linux's buffer autotuning off, so a size above the kernel's cap (which
/// would be cut to the cap, often 208 KiB) is not set and autotuning keeps the buffer (it grows
/// to `net.ipv4.tcp_wmem`/`tcp_rmem`'s maximum). Returns whether each was set.
pub(super) fn set_buffers(fd: RawFd, bytes: usize) -> io::Result<(bool, bool)> {
    let (wcap, rcap) = kernel_caps();
    let mut set = (false, false);
    for (opt, cap, flag) in [
        (libc::SO_SNDBUF, wcap, &mut set.0),
        (libc::SO_RCVBUF, rcap, &mut set.1),
    ] {
        if bytes == 0 || bytes > cap {
            continue;
        }
        let v = bytes.min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `v` is a live c_int and we pass its exact size; the kernel only reads it.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        *flag = true;
    }
    Ok(set)
}

/// The socket's buffer size for `opt` (`SO_SNDBUF` or `SO_RCVBUF`) as the kernel reports it
/// (twice what was asked for: the kernel counts its bookkeeping).
#[cfg(test)]
fn buffer_size(fd: RawFd, opt: libc::c_int) -> io::Result<usize> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live and `len` holds `v`'s size; the kernel writes at most
    // `len` bytes into `v` and the written length into `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v.max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn buffers_within_the_kernel_cap_are_set_and_a_vectored_send_keeps_order() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        let (wcap, rcap) = kernel_caps();
        let want = wcap.min(rcap).min(1 << 20);
        let (ws, rs) = set_buffers(a.as_raw_fd(), want).unwrap();
        assert_eq!((ws, rs), (want > 0, want > 0));
        if want > 0 {
            assert!(buffer_size(a.as_raw_fd(), libc::SO_SNDBUF).unwrap() >= want);
            assert!(buffer_size(a.as_raw_fd(), libc::SO_RCVBUF).unwrap() >= want);
        }
        // Above the cap: nothing is set (autotuning stays).
        assert_eq!(
            set_buffers(a.as_raw_fd(), usize::MAX).unwrap(),
            (false, false)
        );
        let parts: [&[u8]; 3] = [b"head", b"", b"-payload"];
        let iov: Vec<libc::iovec> = parts.iter().map(|p| iovec(p)).collect();
        assert_eq!(send_vectored(a.as_raw_fd(), &iov).unwrap(), 12);
        let mut got = [0u8; 12];
        std::io::Read::read_exact(&mut b, &mut got).unwrap();
        assert_eq!(&got, b"head-payload");
        let mut fds = [pollfd(b.as_raw_fd(), libc::POLLIN)];
        assert_eq!(poll(&mut fds, Duration::from_millis(1)).unwrap(), 0);
    }
}
