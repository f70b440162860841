//! `[control]`: run control and observability (HTTP API, token, logs, traces) and how the
//! controller runs applications as processes (heartbeats, timeouts, restarts, ssh).

use serde::{Deserialize, Serialize};

use super::error::{bad, ConfigError};

/// `[control]`: run control and observability (HTTP API, logs, traces) and how the
/// controller runs applications as processes.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ControlSection {
    /// HTTP listen address ("": none).
    pub http: String,
    /// Bearer token for commands ("": only `RODEO_TOKEN`).
    pub token: String,
    /// Per-module log levels (tracing filter syntax).
    pub log: String,
    /// Trace sampling: one event in this many.
    pub trace_every: u64,
    /// The address the controller listens on (tcp, system-chosen port).
    pub address: String,
    /// Heartbeat period of every application.
    pub heartbeat_ms: u64,
    /// An application silent this long is dead.
    pub dead_after_ms: u64,
    /// How long a spawned application may take to say hello.
    pub spawn_timeout_ms: u64,
    /// How long one command may take in one application.
    pub command_timeout_ms: u64,
    /// Process mode: restart a readout node or logger that dies during a run.
    pub restart: bool,
    /// Restarts per run at most (then a death fails the partition).
    pub max_restarts_per_run: u32,
    /// Wait this long after a death before the restart (and between failed attempts).
    pub restart_backoff_ms: u64,
    /// The ssh command and its options (the host follows them).
    pub ssh: Vec<String>,
    /// The rodeo executable on the other hosts.
    pub remote_rodeo: String,
}

impl Default for ControlSection {
    fn default() -> Self {
        ControlSection {
            http: String::new(),
            token: String::new(),
            log: "warn".into(),
            trace_every: 100,
            address: "127.0.0.1".into(),
            heartbeat_ms: 250,
            dead_after_ms: 3000,
            spawn_timeout_ms: 20_000,
            command_timeout_ms: 60_000,
            restart: true,
            max_restarts_per_run: 3,
            restart_backoff_ms: 500,
            ssh: vec!["ssh".into(), "-o".into(), "BatchMode=yes".into()],
            remote_rodeo: "rodeo".into(),
        }
    }
}

impl ControlSection {
    /// The command token: `RODEO_TOKEN` if set and not empty, else the configuration's (`None`:
    /// no token, commands are refused).
    pub fn effective_token(&self) -> Option<String> {
        std::env::var("RODEO_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| (!self.token.is_empty()).then(|| self.token.clone()))
    }
}

impl ControlSection {
    /// Checks this section's own values; the error names the first bad field (checks across
    /// sections are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.http.is_empty() && self.http.parse::<std::net::SocketAddr>().is_err() {
            return Err(bad(
                "control.http",
                format!("{:?}", self.http),
                "an address with a port, e.g. \"127.0.0.1:8080\" (\"\": off)",
            ));
        }
        if self.trace_every == 0 {
            return Err(bad("control.trace_every", 0, ">= 1"));
        }
        if self
            .token
            .chars()
            .any(|ch| ch.is_whitespace() || ch.is_control())
        {
            return Err(bad(
                "control.token",
                "(hidden)",
                "no spaces or control characters",
            ));
        }
        if self.address.is_empty() || self.address.contains(char::is_whitespace) {
            return Err(bad(
                "control.address",
                format!("{:?}", self.address),
                "an address of this host",
            ));
        }
        if self.heartbeat_ms < 10 || self.heartbeat_ms > 60_000 {
            return Err(bad("control.heartbeat_ms", self.heartbeat_ms, "10..=60000"));
        }
        if self.dead_after_ms < 2 * self.heartbeat_ms {
            return Err(bad(
                "control.dead_after_ms",
                self.dead_after_ms,
                ">= twice control.heartbeat_ms",
            ));
        }
        if self.spawn_timeout_ms == 0 {
            return Err(bad("control.spawn_timeout_ms", 0, "> 0 milliseconds"));
        }
        if self.command_timeout_ms == 0 {
            return Err(bad("control.command_timeout_ms", 0, "> 0 milliseconds"));
        }
        if self.max_restarts_per_run > 1000 {
            return Err(bad(
                "control.max_restarts_per_run",
                self.max_restarts_per_run,
                "0..=1000",
            ));
        }
        if self.restart_backoff_ms > 600_000 {
            return Err(bad(
                "control.restart_backoff_ms",
                self.restart_backoff_ms,
                "0..=600000 milliseconds",
            ));
        }
        if self.ssh.is_empty() || self.ssh[0].is_empty() {
            return Err(bad(
                "control.ssh",
                format!("{:?}", self.ssh),
                "the ssh command, then its options",
            ));
        }
        if self.remote_rodeo.is_empty() {
            return Err(bad(
                "control.remote_rodeo",
                "\"\"",
                "a path or command name",
            ));
        }
        Ok(())
    }
}
