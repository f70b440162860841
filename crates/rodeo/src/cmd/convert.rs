//! `rodeo convert IN OUT --format eventstorage|rodeo`: one raw-data file into the other
//! container (or the same), eformat 3/4 events lifted to eformat 5
//! (`rodeo_files::convert::convert_file`). Prints what was written; on a damaged input the
//! events before the damage are converted, the output closed, and the exit code is 1.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use rodeo_files::convert::{convert_file, ConvertCompression, ConvertError, ConvertOptions};
use rodeo_files::datafile::Container;
use serde_json::json;

/// The output container as `--format` spells it.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    /// ATLAS EventStorage version 5.
    Eventstorage,
    /// rodeo's own container.
    Rodeo,
}

/// Compression of the output as `--compression` spells it.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Compression {
    /// Plain events.
    None,
    /// zstd event payloads (rodeo's container only).
    Zstd,
    /// zlib data blocks (EventStorage only).
    Zlib,
}

/// Arguments of `rodeo convert`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The input file: rodeo's container or EventStorage v2-v6 (eformat 3, 4 or 5 events).
    input: PathBuf,
    /// The output: a file that does not exist yet, or a directory (the file then takes its
    /// container's own name there).
    output: PathBuf,
    /// The output container.
    #[arg(long, value_enum)]
    format: Format,
    /// Compression of the output.
    #[arg(long, value_enum, default_value = "none")]
    compression: Compression,
    /// EventStorage project tag (file name, `Project=`); default: the input's, else data_test.
    #[arg(long)]
    project: Option<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut options = ConvertOptions::new(match args.format {
        Format::Eventstorage => Container::EventStorage,
        Format::Rodeo => Container::Rodeo,
    });
    options.compression = match args.compression {
        Compression::None => ConvertCompression::None,
        Compression::Zstd => ConvertCompression::Zstd,
        Compression::Zlib => ConvertCompression::Zlib,
    };
    options.project = args.project.clone();
    match convert_file(&args.input, &args.output, &options) {
        Ok(s) => {
            if args.json {
                outln!(
                    "{}",
                    json!({
                        "input": args.input,
                        "input_container": s.input.container.name(),
                        "input_version": s.input.version,
                        "output": s.output,
                        "format": options.format.name(),
                        "events": s.events,
                        "lifted": s.lifted,
                        "robs": s.robs,
                        "bytes": s.bytes,
                    })
                );
            } else {
                outln!(
                    "{} ({} {}) -> {} ({}): {} events ({} lifted from eformat 3/4 to 5), {} ROBs, {} bytes",
                    args.input.display(),
                    s.input.container.name(),
                    s.input.version,
                    s.output.display(),
                    options.format.name(),
                    s.events,
                    s.lifted,
                    s.robs,
                    s.bytes
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ ConvertError::Read { .. }) => {
            eprintln!("rodeo convert: {e}");
            if let (true, ConvertError::Read { output, events, .. }) = (args.json, &e) {
                outln!(
                    "{}",
                    json!({ "error": e.to_string(), "output": output, "events": events })
                );
            }
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e).with_context(|| {
            format!(
                "cannot convert {} into {}",
                args.input.display(),
                args.output.display()
            )
        }),
    }
}
