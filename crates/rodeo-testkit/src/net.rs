//! TCP helpers for tests: [`close_with_reset`].

use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Closes `stream` with a reset (SO_LINGER on, 0 s) instead of a FIN: what a crashed sender's
/// link, a killed sender's kernel with data pending, or a health probe closing with bytes
/// unread sends.
///
/// # Panics
///
/// When the kernel refuses the option.
pub fn close_with_reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the descriptor is `stream`'s, open for the call; the option value points to a
    // live `linger` and the length is its size, as setsockopt(2) requires.
    let r = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(
        r,
        0,
        "setsockopt(SO_LINGER): {}",
        std::io::Error::last_os_error()
    );
    drop(stream);
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::Duration;

    use super::*;

    /// The peer of a stream closed with a reset reads a reset, not an end of stream.
    #[test]
    fn the_peer_reads_a_reset() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut theirs, _) = listener.accept().unwrap();
        theirs
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        close_with_reset(ours);
        let err = theirs.read(&mut [0u8; 1]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    }
}
