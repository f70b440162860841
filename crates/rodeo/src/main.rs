//! The `rodeo` command: a thin layer that parses arguments and wires the library crates.

#[macro_use]
mod out;

mod cmd;
mod logging;
mod progress;
mod signal;
mod status;

use clap::Parser;

/// jemalloc for the whole process: Rust's allocations through this, C and C++ (libzmq) through
/// its `malloc`, which the `unprefixed_malloc_on_supported_platforms` feature puts in place of
/// glibc's. Measured in docs/benchmarks.md (issue 41): the full-event partition's CPU per event.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let cli = cmd::Cli::parse();
    // The parser took the arguments: a `--json` among them is the flag.
    let json = std::env::args_os().any(|a| a == "--json");
    logging::init();
    match cmd::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return std::process::ExitCode::SUCCESS;
            }
            print_error(&err);
            if json {
                print_json_error(&err);
            }
            std::process::ExitCode::from(2)
        }
    }
}

/// With `--json`, a command that ends in `err` also says so on stdout as one object,
/// `{"error": "..."}`, so that `| jq` finds the reason (dump, convert, runs, gen and serve
/// printed nothing there on a missing file or a damaged run database).
fn print_json_error(err: &anyhow::Error) {
    let text = rodeo_run::error_text::error_text(err);
    outln!("{}", serde_json::json!({ "error": text }));
}

/// The `rodeo: error:` line of a command that ends in `err`, each cause said once.
pub(crate) fn print_error(err: &anyhow::Error) {
    eprintln!("rodeo: error: {}", rodeo_run::error_text::error_text(err));
}

/// A closed stdout (`rodeo dump f | head`) ends the command quietly, as ripgrep does.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
