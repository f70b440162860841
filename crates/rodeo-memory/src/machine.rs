//! What this machine offers the data path's memory: page size, physical memory, huge pages,
//! the locked-memory limit, CPUs (`rodeo info` shows them; the configuration check weighs a
//! partition's memory against them).

/// The kernel's page size in bytes.
pub fn page_bytes() -> usize {
    // SAFETY: sysconf only reads a system constant; it has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

/// CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The memory figures of `/proc/meminfo` rodeo looks at (None: not found).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// Physical memory (MemTotal), bytes.
    pub total_bytes: Option<u64>,
    /// Memory available to new work without swapping (MemAvailable), bytes.
    pub available_bytes: Option<u64>,
    /// Explicit huge pages reserved (HugePages_Total).
    pub huge_pages_total: Option<u64>,
    /// Their size (Hugepagesize), bytes.
    pub huge_page_bytes: Option<u64>,
}

impl MemInfo {
    /// This machine's figures (all None where /proc/meminfo cannot be read).
    pub fn read() -> MemInfo {
        MemInfo::parse(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default())
    }

    /// The figures in a /proc/meminfo text.
    pub fn parse(text: &str) -> MemInfo {
        let kib = |key: &str| field(text, key).map(|k| k.saturating_mul(1024));
        MemInfo {
            total_bytes: kib("MemTotal:"),
            available_bytes: kib("MemAvailable:"),
            huge_pages_total: field(text, "HugePages_Total:"),
            huge_page_bytes: kib("Hugepagesize:"),
        }
    }
}

/// The number after `key` in a /proc/meminfo text.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The transparent huge pages mode (the bracketed word of
/// /sys/kernel/mm/transparent_hugepage/enabled).
pub fn transparent_huge_pages() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_string())
}

/// The soft RLIMIT_MEMLOCK (None when unlimited or unreadable).
pub fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct through a valid pointer to a local.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_parse() {
        let text = "MemTotal: 100 kB\nMemAvailable:  50 kB\nHugePages_Total:       4\n\
                    Hugepagesize:    2048 kB\n";
        let m = MemInfo::parse(text);
        assert_eq!(m.total_bytes, Some(102_400));
        assert_eq!(m.available_bytes, Some(51_200));
        assert_eq!(m.huge_pages_total, Some(4));
        assert_eq!(m.huge_page_bytes, Some(2048 * 1024));
        assert_eq!(MemInfo::parse("").total_bytes, None);
    }

    #[test]
    fn the_limits_of_this_machine_read() {
        // Exercises the getrlimit and sysconf calls (their unsafe blocks).
        let _ = memlock_limit();
        assert!(page_bytes() >= 4096);
        assert!(cpus() >= 1);
        assert!(MemInfo::read().total_bytes.is_some_and(|b| b > 0));
    }
}
