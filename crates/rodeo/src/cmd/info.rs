//! `rodeo info`: the build and the machine, as a DAQ engineer checks them before a run: the
//! version and commit, the features built in, CPUs, page size, huge pages, the locked-memory
//! limit and the free space where the data will go.

use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

/// Arguments of `rodeo info`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The directory whose free space to show (default: the default partition's output).
    #[arg(long, short, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Info {
    version: &'static str,
    git_commit: &'static str,
    /// Features compiled in (`python`: Python trigger algorithms).
    features: Vec<&'static str>,
    cpus: usize,
    page_bytes: usize,
    /// Explicit huge pages reserved (HugePages_Total), and their size.
    huge_pages_total: Option<u64>,
    huge_page_bytes: Option<u64>,
    /// Transparent huge pages mode (the bracketed word of /sys/kernel/mm/transparent_hugepage/enabled).
    transparent_huge_pages: Option<String>,
    /// RLIMIT_MEMLOCK soft limit in bytes (None: unlimited).
    memlock_limit_bytes: Option<u64>,
    output_dir: PathBuf,
    /// Free bytes for an unprivileged writer in the output directory (or its nearest existing
    /// parent).
    output_free_bytes: Option<u64>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let output = args.output.unwrap_or_else(|| {
        PathBuf::from(rodeo_control::config::PartitionConfig::default().run.output)
    });
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let info = Info {
        version: env!("CARGO_PKG_VERSION"),
        git_commit: env!("RODEO_GIT_COMMIT"),
        features: features(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        page_bytes: page_bytes(),
        huge_pages_total: meminfo_field(&meminfo, "HugePages_Total:"),
        huge_page_bytes: meminfo_field(&meminfo, "Hugepagesize:").map(|kib| kib * 1024),
        transparent_huge_pages: thp_mode(),
        memlock_limit_bytes: memlock_limit(),
        output_free_bytes: free_bytes(&output),
        output_dir: output,
    };
    if args.json {
        println!("{}", serde_json::to_string(&info)?);
        return Ok(ExitCode::SUCCESS);
    }
    let opt = |v: Option<u64>| v.map_or_else(|| "unknown".to_string(), |n| n.to_string());
    println!("rodeo {} (commit {})", info.version, info.git_commit);
    println!(
        "features: {}",
        if info.features.is_empty() {
            "none".to_string()
        } else {
            info.features.join(", ")
        }
    );
    println!("cpus: {}", info.cpus);
    println!("page size: {} bytes", info.page_bytes);
    println!(
        "huge pages: {} reserved of {} bytes; transparent: {}",
        opt(info.huge_pages_total),
        opt(info.huge_page_bytes),
        info.transparent_huge_pages.as_deref().unwrap_or("unknown")
    );
    println!(
        "locked-memory limit: {}",
        info.memlock_limit_bytes
            .map_or_else(|| "unlimited".to_string(), |b| format!("{b} bytes"))
    );
    println!(
        "output {}: {} bytes free",
        info.output_dir.display(),
        opt(info.output_free_bytes)
    );
    Ok(ExitCode::SUCCESS)
}

/// The optional features this binary was built with.
fn features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(feature = "python") {
        f.push("python");
    }
    f
}

fn page_bytes() -> usize {
    // SAFETY: sysconf only reads a system constant; it has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

/// The number after `key` in /proc/meminfo's text.
fn meminfo_field(meminfo: &str, key: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn thp_mode() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_string())
}

/// The soft RLIMIT_MEMLOCK (None when unlimited or unreadable).
fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct through a valid pointer to a local.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Free bytes (for an unprivileged writer) of the file system holding `dir`, or its nearest
/// existing parent.
pub(crate) fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let existing = dir
        .ancestors()
        .find(|p| p.as_os_str().is_empty() || p.exists())
        .unwrap_or(dir);
    let existing = if existing.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        existing
    };
    let c = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct that statvfs fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid, writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_parse() {
        let text = "MemTotal: 100 kB\nHugePages_Total:       4\nHugepagesize:    2048 kB\n";
        assert_eq!(meminfo_field(text, "HugePages_Total:"), Some(4));
        assert_eq!(meminfo_field(text, "Hugepagesize:"), Some(2048));
        assert_eq!(meminfo_field(text, "Missing:"), None);
    }

    #[test]
    fn the_limits_and_free_space_of_this_machine_read() {
        // Exercises the getrlimit and statvfs calls (their unsafe blocks).
        let _ = memlock_limit();
        let free = free_bytes(&std::env::temp_dir().join("no/such/dir"));
        assert!(
            free.is_some_and(|b| b > 0),
            "the temp directory's free space"
        );
        assert!(page_bytes() >= 4096);
    }
}
