//! `rodeo config`: the partition configuration: print the default, check a file.

use std::path::PathBuf;
use std::process::ExitCode;

use rodeo_control::config::DEFAULT_TOML;

/// Arguments of `rodeo config`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Print the built-in default partition as commented TOML (a starting point for a file).
    Default,
    /// Check a configuration file: unknown fields and bad values are named, with what is
    /// allowed.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Default => {
            print!("{DEFAULT_TOML}");
            Ok(ExitCode::SUCCESS)
        }
        What::Check { file } => {
            super::run::load_config(Some(&file))?;
            println!("{}: OK", file.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
