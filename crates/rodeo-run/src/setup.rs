//! The configuration a run starts from: the file (or the built-in default) and what the
//! command line overrides.

use std::path::Path;

use rodeo_control::config::PartitionConfig;

/// Loads the configuration file `path` (None: the built-in default partition).
pub fn load_config(path: Option<&Path>) -> anyhow::Result<PartitionConfig> {
    Ok(match path {
        Some(p) => {
            let text = rodeo_control::config::read_config_file(p)?;
            PartitionConfig::from_toml(&text, &p.display().to_string())?
        }
        None => PartitionConfig::default(),
    })
}

/// What a command line may override in a configuration (None: keep the file's).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// Stop after this many L1 accepts (the run then has no time limit).
    pub events: Option<u64>,
    /// Stop after this many seconds (the run then has no event limit).
    pub seconds: Option<f64>,
    /// The output directory.
    pub output: Option<String>,
    /// The L1 rate in Hz.
    pub rate_hz: Option<f64>,
    /// The HTTP address.
    pub http: Option<String>,
    /// Trace one event in this many.
    pub trace_every: Option<u64>,
    /// Re-read every file after the run.
    pub verify_after: bool,
}

impl Overrides {
    /// Applies the overrides to `config`.
    pub fn apply(&self, config: &mut PartitionConfig) {
        if let Some(n) = self.events {
            config.run.events = n;
            config.run.seconds = 0.0;
        }
        if let Some(s) = self.seconds {
            config.run.seconds = s;
            config.run.events = 0;
        }
        if let Some(o) = &self.output {
            config.run.output = o.clone();
        }
        if let Some(r) = self.rate_hz {
            config.l1.rate_hz = r;
        }
        if let Some(h) = &self.http {
            config.control.http = h.clone();
        }
        if let Some(n) = self.trace_every {
            config.control.trace_every = n;
        }
        if self.verify_after {
            config.logger.verify_after = true;
        }
    }
}
