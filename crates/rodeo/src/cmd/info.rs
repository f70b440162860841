//! `rodeo info`: the build and the machine, as a DAQ engineer checks them before a run.

use std::process::ExitCode;

use serde::Serialize;

/// Arguments of `rodeo info`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Info {
    version: &'static str,
    cpus: usize,
    page_bytes: usize,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let info = Info {
        version: env!("CARGO_PKG_VERSION"),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        page_bytes: page_bytes(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&info)?);
    } else {
        println!("rodeo {}", info.version);
        println!("cpus: {}", info.cpus);
        println!("page size: {} bytes", info.page_bytes);
    }
    Ok(ExitCode::SUCCESS)
}

fn page_bytes() -> usize {
    // SAFETY: sysconf only reads a system constant; it has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}
