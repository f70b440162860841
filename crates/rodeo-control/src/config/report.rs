//! Everything `rodeo config check` says of a configuration, at once ([`CheckReport`]): the
//! errors of the file (types in words, every value), the checks on this host (the output
//! directories and their free space, the memory and threads the partition takes), and the
//! warnings. A run's start makes the same checks ([`PartitionConfig::check_here`]).

use super::error::{Checks, ConfigError};
use super::estimate::Machine;
use super::PartitionConfig;

/// What the checks of a configuration found.
#[derive(Debug)]
pub struct CheckReport {
    /// The configuration, when it parsed (it may still have errors).
    pub config: Option<PartitionConfig>,
    /// Every error (`None`: accepted).
    pub error: Option<ConfigError>,
    /// Warnings: accepted, but worth knowing (threads beyond the cores, most of the memory).
    pub warnings: Vec<String>,
}

impl CheckReport {
    /// Whether the configuration is accepted.
    pub fn accepted(&self) -> bool {
        self.error.is_none()
    }

    /// Every error, one per entry, as text.
    pub fn error_lines(&self) -> Vec<String> {
        self.error.as_ref().map_or_else(Vec::new, |e| {
            e.errors().iter().map(ToString::to_string).collect()
        })
    }
}

impl PartitionConfig {
    /// Checks `text` (named `source_name`) as `rodeo config check` does, on `machine`: parse
    /// (every field of the wrong type, in words), [`PartitionConfig::validate`] (every value),
    /// and [`PartitionConfig::check_here_on`] (output directories, memory, threads), every
    /// error at once. Unless `served` (a served partition's runs may last until `stop`), also
    /// [`PartitionConfig::check_ends_by_itself`].
    pub fn check_text(
        text: &str,
        source_name: &str,
        machine: &Machine,
        served: bool,
    ) -> CheckReport {
        let config = match super::parse::parse(text, source_name) {
            Ok(c) => c,
            Err(e) => {
                return CheckReport {
                    config: None,
                    error: Some(e),
                    warnings: Vec::new(),
                }
            }
        };
        let mut c = Checks::new();
        if !served {
            c.check(config.check_ends_by_itself());
        }
        let valid = config.validate();
        let was_valid = valid.is_ok();
        c.check(valid);
        c.check(config.check_output());
        c.check(config.check_directories());
        c.check(config.check_input_files());
        let mut warnings = Vec::new();
        if was_valid {
            c.check(config.check_binds_here());
            c.check(config.check_free_space());
            match config.check_resources_on(machine) {
                Ok(w) => warnings = w,
                Err(e) => c.push(e),
            }
            warnings.extend(config.unused_settings());
        }
        CheckReport {
            config: Some(config),
            error: c.finish().err(),
            warnings,
        }
    }

    /// The checks on this host of a configuration that passed
    /// [`PartitionConfig::validate`]: see [`PartitionConfig::check_here_on`].
    pub fn check_here(&self) -> Result<Vec<String>, ConfigError> {
        self.check_here_on(&Machine::this_host())
    }

    /// The checks on `machine` (this host) of a valid configuration: the output directory
    /// and the loggers' directories can take files and have room above the loggers' margin
    /// ([`PartitionConfig::check_free_space`]), and the memory and threads the partition
    /// takes ([`PartitionConfig::check_resources_on`]); every error at once, or the warnings.
    pub fn check_here_on(&self, machine: &Machine) -> Result<Vec<String>, ConfigError> {
        let mut c = Checks::new();
        c.check(self.check_output());
        c.check(self.check_directories());
        c.check(self.check_input_files());
        c.check(self.check_binds_here());
        c.check(self.check_free_space());
        let warnings = match self.check_resources_on(machine) {
            Ok(w) => w,
            Err(e) => {
                c.push(e);
                Vec::new()
            }
        };
        c.finish().map(|()| warnings)
    }
}
