//! `[control]`: run control and observability (HTTP API, token, logs, traces) and how the
//! controller runs applications as processes (heartbeats, timeouts, restarts, ssh).

use serde::{Deserialize, Serialize};

use super::address::bare_host_ok;
use super::error::Checks;
use super::l1::MAX_TIMEOUT_MS;

/// Shortest `control.spawn_timeout_ms` and `control.command_timeout_ms`: a second.
pub(super) const MIN_PROCESS_TIMEOUT_MS: u64 = 1000;
/// The shortest heartbeat period accepted.
const MIN_HEARTBEAT_MS: u64 = 50;
/// The shortest silence accepted as a death.
const MIN_DEAD_AFTER_MS: u64 = 1000;

/// `[control]`: run control and observability (HTTP API, logs, traces) and how the
/// controller runs applications as processes.
#[derive(Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ControlSection {
    /// HTTP listen address ("": none).
    pub http: String,
    /// The operator's bearer token: run commands, alarm acknowledgements, run comments ("":
    /// only `RODEO_TOKEN`).
    pub token: String,
    /// The expert's bearer token: also `PUT /api/config` ("": only `RODEO_EXPERT_TOKEN`).
    pub expert_token: String,
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
            expert_token: String::new(),
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

    /// The expert token: `RODEO_EXPERT_TOKEN` if set and not empty, else the configuration's
    /// (`None`: nobody may change the configuration over HTTP).
    pub fn effective_expert_token(&self) -> Option<String> {
        std::env::var("RODEO_EXPERT_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| (!self.expert_token.is_empty()).then(|| self.expert_token.clone()))
    }
}

/// Like the derived one, with the tokens hidden: a section printed in a log shows no secret.
impl std::fmt::Debug for ControlSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hide = |t: &str| {
            if t.is_empty() {
                ""
            } else {
                super::HIDDEN_TOKEN
            }
        };
        f.debug_struct("ControlSection")
            .field("http", &self.http)
            .field("token", &hide(&self.token))
            .field("expert_token", &hide(&self.expert_token))
            .field("log", &self.log)
            .field("trace_every", &self.trace_every)
            .field("address", &self.address)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("dead_after_ms", &self.dead_after_ms)
            .field("spawn_timeout_ms", &self.spawn_timeout_ms)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("restart", &self.restart)
            .field("max_restarts_per_run", &self.max_restarts_per_run)
            .field("restart_backoff_ms", &self.restart_backoff_ms)
            .field("ssh", &self.ssh)
            .field("remote_rodeo", &self.remote_rodeo)
            .finish()
    }
}

impl ControlSection {
    /// Checks this section's own values, each error naming its field (checks across sections
    /// are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, c: &mut Checks) {
        if !self.http.is_empty() && self.http.parse::<std::net::SocketAddr>().is_err() {
            c.bad(
                "control.http",
                format!("{:?}", self.http),
                "an address with a port, e.g. \"127.0.0.1:8080\" (port 0..=65535, 0: any free \
                 port; \"\": off)",
            );
        }
        if let Err(why) = check_log_filter(&self.log) {
            c.bad("control.log", format!("{:?}", self.log), why);
        }
        if self.trace_every == 0 {
            c.bad("control.trace_every", 0, ">= 1");
        }
        for (field, token) in [
            ("control.token", &self.token),
            ("control.expert_token", &self.expert_token),
        ] {
            if token
                .chars()
                .any(|ch| ch.is_whitespace() || ch.is_control())
            {
                c.bad(
                    field,
                    super::HIDDEN_TOKEN,
                    "no spaces or control characters",
                );
            }
        }
        if !self.token.is_empty() && self.token == self.expert_token {
            c.bad(
                "control.expert_token",
                super::HIDDEN_TOKEN,
                "a token other than control.token (the expert's role is more than the operator's)",
            );
        }
        if !bare_host_ok(&self.address) {
            c.bad(
                "control.address",
                format!("{:?}", self.address),
                "an address of this host (without scheme or port: the port is chosen by the \
                 system)",
            );
        }
        // A heartbeat goes through a socket and two threads that share their cores with the
        // run: beside a busy core, 10 ms heartbeats declared 20 ms of silence a death in 7 runs
        // of 10 (a scheduler slice is a few ms); 50 / 1000 ran every time.
        if !(MIN_HEARTBEAT_MS..=60_000).contains(&self.heartbeat_ms) {
            c.bad(
                "control.heartbeat_ms",
                self.heartbeat_ms,
                "50..=60000 (a heartbeat waits for a thread on a busy core)",
            );
        }
        // Four heartbeats that were themselves refused are not measured against (said once).
        let floor = MIN_DEAD_AFTER_MS.max(self.heartbeat_ms.saturating_mul(4));
        if (self.dead_after_ms < floor
            && !(c.has("control.heartbeat_ms") && self.dead_after_ms >= MIN_DEAD_AFTER_MS))
            || self.dead_after_ms > MAX_TIMEOUT_MS
        {
            c.bad(
                "control.dead_after_ms",
                self.dead_after_ms,
                ">= 1000 and >= four times control.heartbeat_ms (one late heartbeat is not a \
                 death), at most 86400000 (a day)",
            );
        }
        // An application process needs time to start and say hello, and a command (configure
        // warms the memory up) time to be answered: below a second a `--processes` run failed
        // at once ("no hello within 1 ms of being started"); 1000 ms ran, beside a busy core
        // too.
        for (field, ms) in [
            ("control.spawn_timeout_ms", self.spawn_timeout_ms),
            ("control.command_timeout_ms", self.command_timeout_ms),
        ] {
            if !(MIN_PROCESS_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&ms) {
                c.bad(
                    field,
                    ms,
                    ">= 1000 milliseconds (a process's start and a command's answer take \
                     hundreds), at most 86400000 (a day)",
                );
            }
        }
        if self.max_restarts_per_run > 1000 {
            c.bad(
                "control.max_restarts_per_run",
                self.max_restarts_per_run,
                "0..=1000",
            );
        }
        if self.restart_backoff_ms > 600_000 {
            c.bad(
                "control.restart_backoff_ms",
                self.restart_backoff_ms,
                "0..=600000 milliseconds",
            );
        }
        if self.ssh.is_empty() || self.ssh[0].is_empty() {
            c.bad(
                "control.ssh",
                format!("{:?}", self.ssh),
                "the ssh command, then its options",
            );
        }
        if self.remote_rodeo.is_empty() {
            c.bad("control.remote_rodeo", "\"\"", "a path or command name");
        }
    }
}

/// The level names a log directive may end in (as `tracing`'s filter reads them, any case).
const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Checks `control.log` as the run will read it (`tracing-subscriber`'s filter syntax: the run
/// refused `rodeo_ros=dbug` after `config check` had let it through), and refuses a bare word
/// that is neither a level nor one of rodeo's targets: the filter reads it as a target name at
/// every level, so `wran` turned every warning off without a word. Another crate's target is
/// written with its level (`zmq=debug`).
fn check_log_filter(log: &str) -> Result<(), String> {
    if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(log) {
        return Err(format!(
            "a log filter: {e} (directives separated by commas, each a level or \
             target=level, e.g. \"warn,rodeo_ros=debug\")"
        ));
    }
    for directive in log.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[']);
        let level = LOG_LEVELS.iter().any(|l| directive.eq_ignore_ascii_case(l))
            || matches!(directive, "0" | "1" | "2" | "3" | "4" | "5");
        if bare && !level && !directive.starts_with("rodeo") {
            return Err(format!(
                "a log filter whose bare words are levels ({}) or rodeo's targets \
                 (rodeo_ros, ...); {directive:?} is neither (another crate's target is written \
                 with its level, e.g. \"{directive}=debug\")",
                LOG_LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::PartitionConfig;

    /// `config check` refuses a log filter the run would refuse, and a typo the filter would
    /// take as a target (turning warnings off); levels, targets with levels and rodeo's bare
    /// targets pass.
    #[test]
    fn a_log_filter_is_checked_as_the_run_reads_it() {
        let check = |log: &str| {
            PartitionConfig::from_toml(&format!("[control]\nlog = {log:?}\n"), "l.toml")
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        for bad in [
            "warn,rodeo_ros=dbug",
            "wran",
            "info,bogus",
            "rodeo_ros=[",
            "zmq",
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.contains("control.log"), "{bad}: {e}");
        }
        assert!(check("wran").unwrap_err().contains("\"wran\" is neither"));
        for good in [
            "",
            "warn",
            "INFO",
            "warn,rodeo_ros=debug",
            "rodeo_ros",
            "zmq=trace,3",
        ] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
    }

    /// Heartbeats a busy core delays are not deaths: 10 / 20 ms passed the check and failed runs
    /// beside a CPU hog; the floors are 50 ms and 1000 ms (and four heartbeats).
    #[test]
    fn heartbeats_and_deaths_have_floors_a_busy_core_keeps() {
        let refused = |text: &str| {
            PartitionConfig::from_toml(text, "h.toml")
                .unwrap_err()
                .to_string()
        };
        let e = refused("[control]\nheartbeat_ms = 10\ndead_after_ms = 20\n");
        assert!(
            e.contains("control.heartbeat_ms") && e.contains("control.dead_after_ms"),
            "{e}"
        );
        let e = refused("[control]\nheartbeat_ms = 500\ndead_after_ms = 1500\n");
        assert!(e.contains("four times"), "{e}");
        let ok = "[control]\nheartbeat_ms = 50\ndead_after_ms = 1000\n";
        let c = PartitionConfig::from_toml(ok, "h.toml").unwrap();
        assert_eq!(
            (c.control.heartbeat_ms, c.control.dead_after_ms),
            (50, 1000)
        );
    }
}
