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

/// The memory limit of this process's memory cgroup, and of every cgroup above it (the
/// smallest; None when none is set or none can be read): in a container `MemTotal` and
/// `MemAvailable` are the host's, and a partition that fits them is killed by the cgroup's
/// OOM killer (a QA pass: a 6 GB partition passed the check in a 3 GiB cgroup and was killed
/// 7.6 s into its run). cgroup v2 (`memory.max`) and v1 (`memory.limit_in_bytes`).
pub fn cgroup_memory_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_limit_from(&own, |p| std::fs::read_to_string(p).ok())
}

/// [`cgroup_memory_limit`] from the text of `/proc/self/cgroup` and a reader of files.
fn cgroup_limit_from(own: &str, read: impl Fn(&std::path::Path) -> Option<String>) -> Option<u64> {
    use std::path::{Path, PathBuf};
    // (hierarchy mount point, limit file, this process's cgroup path in it)
    let mut places: Vec<(PathBuf, &str, &str)> = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            places.push(("/sys/fs/cgroup".into(), "memory.max", path));
            places.push(("/sys/fs/cgroup/unified".into(), "memory.max", path));
        } else if controllers.split(',').any(|c| c == "memory") {
            places.push((
                "/sys/fs/cgroup/memory".into(),
                "memory.limit_in_bytes",
                path,
            ));
        }
    }
    let mut limit: Option<u64> = None;
    for (mount, file, path) in places {
        // The cgroup and each above it, up to the hierarchy's root (which, in a container's
        // cgroup namespace, is the container's own).
        let mut at = Some(Path::new(path.trim()));
        while let Some(dir) = at {
            let rel = dir.strip_prefix("/").unwrap_or(dir);
            if let Some(text) = read(&mount.join(rel).join(file)) {
                // "max", or v1's "no limit" (2^63 rounded down to a page), is no limit.
                if let Ok(v) = text.trim().parse::<u64>() {
                    if v < 1 << 60 {
                        limit = Some(limit.map_or(v, |l| l.min(v)));
                    }
                }
            }
            at = dir.parent();
        }
    }
    limit
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest limit on the path from the cgroup to its hierarchy's root, in v1 and v2;
    /// "max" and v1's huge "no limit" are none.
    #[test]
    fn the_cgroup_limit_is_the_smallest_on_the_way_up() {
        let files = |list: &'static [(&'static str, &'static str)]| {
            move |p: &std::path::Path| {
                list.iter()
                    .find(|(f, _)| std::path::Path::new(f) == p)
                    .map(|(_, v)| v.to_string())
            }
        };
        let v1 = "4:memory:/a/b\n3:cpu:/\n";
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "/sys/fs/cgroup/memory/a/memory.limit_in_bytes",
                "3221225472\n",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        assert_eq!(cgroup_limit_from(v1, read), Some(3 << 30));
        let v2 = "0::/user.slice/app\n";
        let read = files(&[
            ("/sys/fs/cgroup/user.slice/app/memory.max", "2147483648\n"),
            ("/sys/fs/cgroup/user.slice/memory.max", "max\n"),
        ]);
        assert_eq!(cgroup_limit_from(v2, read), Some(2 << 30));
        assert_eq!(cgroup_limit_from(v2, files(&[])), None);
        assert_eq!(cgroup_limit_from("garbage", files(&[])), None);
        // This process's own: whatever it is, it reads without a panic.
        let _ = cgroup_memory_limit();
    }

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
