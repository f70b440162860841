//! The kernel's count of datagrams a UDP socket dropped (its receive buffer was full when they
//! arrived): the `drops` column of `/proc/net/udp` (`udp6` for an IPv6 socket), found by the
//! socket's inode. UDP has no back-pressure, so these are input losses the receiver never sees;
//! [`KernelDrops`] reads the count off the hot path, at most every [`SAMPLE_EVERY`].

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How often a receiver reads its socket's drop count while it runs.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Reads one UDP socket's kernel drop count; see the module docs.
#[derive(Debug)]
pub(super) struct KernelDrops {
    table: &'static str,
    inode: Option<u64>,
    next: Instant,
}

impl KernelDrops {
    /// The drop counter of `socket` (none to read when its inode cannot be found: then
    /// [`KernelDrops::read`] gives `None`).
    pub(super) fn of(socket: &UdpSocket) -> KernelDrops {
        let table = match socket.local_addr() {
            Ok(a) if a.is_ipv6() => "/proc/net/udp6",
            _ => "/proc/net/udp",
        };
        let link = std::fs::read_link(format!("/proc/self/fd/{}", socket.as_raw_fd()));
        let inode = link.ok().and_then(|l| socket_inode(&l.to_string_lossy()));
        KernelDrops {
            table,
            inode,
            next: Instant::now(),
        }
    }

    /// The count now, if it is time to read it again (`now` past the last read plus
    /// [`SAMPLE_EVERY`]) and it can be read.
    pub(super) fn due(&mut self, now: Instant) -> Option<u64> {
        if now < self.next {
            return None;
        }
        self.next = now + SAMPLE_EVERY;
        self.read()
    }

    /// The count now, if it can be read.
    pub(super) fn read(&self) -> Option<u64> {
        let table = std::fs::read_to_string(self.table).ok()?;
        drops_of(&table, self.inode?)
    }

    /// The count and the bytes queued unread in the socket now (`rx_queue`), if they can be
    /// read: at the end, what the readout never read.
    pub(super) fn read_with_queue(&self) -> Option<(u64, u64)> {
        let table = std::fs::read_to_string(self.table).ok()?;
        let inode = self.inode?;
        Some((drops_of(&table, inode)?, rx_queue_of(&table, inode)?))
    }
}

/// The `rx_queue` half (hex bytes) of the `tx_queue:rx_queue` column of the socket's line.
fn rx_queue_of(table: &str, inode: u64) -> Option<u64> {
    let fields = line_of(table, inode)?;
    let (_, rx) = fields.get(4)?.split_once(':')?;
    u64::from_str_radix(rx, 16).ok()
}

/// The fields of the line of `table` (the text of `/proc/net/udp`) whose `inode` column (the
/// tenth) is `inode`.
fn line_of(table: &str, inode: u64) -> Option<Vec<&str>> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(9)?.parse::<u64>().ok()? == inode).then_some(fields)
    })
}

/// The inode of a `socket:[N]` link of `/proc/self/fd`.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The `drops` column (the last) of the socket's line of `table`.
fn drops_of(table: &str, inode: u64) -> Option<u64> {
    line_of(table, inode)?.last()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drops_column_of_the_socket_s_line() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
            \x20 40: 0100007F:A1B2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 5551 2 0000000000000000 0\n\
            \x20 41: 0100007F:C3D4 00000000:0000 07 00000000:00080000 00:00000000 00000000     0        0 5552 2 0000000000000000 6937\n";
        assert_eq!(drops_of(table, 5552), Some(6937));
        assert_eq!(rx_queue_of(table, 5552), Some(0x80000));
        assert_eq!(rx_queue_of(table, 5551), Some(0));
        assert_eq!(drops_of(table, 5551), Some(0));
        assert_eq!(drops_of(table, 9), None);
        assert_eq!(drops_of("header only\n", 5552), None);
        assert_eq!(drops_of("h\n  1: short line\n", 5552), None);
        assert_eq!(socket_inode("socket:[5552]"), Some(5552));
        assert_eq!(socket_inode("pipe:[5552]"), None);
        assert_eq!(socket_inode("socket:[x]"), None);
    }

    /// A live socket's line is found, with no drops yet.
    #[test]
    fn a_bound_socket_reads_zero_drops() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(KernelDrops::of(&socket).read(), Some(0));
    }
}
