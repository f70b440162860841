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
    use rodeo_memory::machine;
    let meminfo = machine::MemInfo::read();
    let info = Info {
        version: env!("CARGO_PKG_VERSION"),
        git_commit: env!("RODEO_GIT_COMMIT"),
        features: features(),
        cpus: machine::cpus(),
        page_bytes: machine::page_bytes(),
        huge_pages_total: meminfo.huge_pages_total,
        huge_page_bytes: meminfo.huge_page_bytes,
        transparent_huge_pages: machine::transparent_huge_pages(),
        memlock_limit_bytes: machine::memlock_limit(),
        output_free_bytes: rodeo_files::space::available_near(&output),
        output_dir: output,
    };
    if args.json {
        outln!("{}", serde_json::to_string(&info)?);
        return Ok(ExitCode::SUCCESS);
    }
    let opt = |v: Option<u64>| v.map_or_else(|| "unknown".to_string(), |n| n.to_string());
    outln!("rodeo {} (commit {})", info.version, info.git_commit);
    outln!(
        "features: {}",
        if info.features.is_empty() {
            "none".to_string()
        } else {
            info.features.join(", ")
        }
    );
    outln!("cpus: {}", info.cpus);
    outln!("page size: {} bytes", info.page_bytes);
    outln!(
        "huge pages: {} reserved of {} bytes; transparent: {}",
        opt(info.huge_pages_total),
        opt(info.huge_page_bytes),
        info.transparent_huge_pages.as_deref().unwrap_or("unknown")
    );
    outln!(
        "locked-memory limit: {}",
        info.memlock_limit_bytes
            .map_or_else(|| "unlimited".to_string(), |b| format!("{b} bytes"))
    );
    outln!(
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
