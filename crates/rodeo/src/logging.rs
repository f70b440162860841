//! Structured logs (`tracing`) to stderr, with per-module levels.
//!
//! The filter is `RODEO_LOG` when set (tracing's syntax: `warn,rodeo_control=info`), else
//! `warn` until a command has read its configuration, which may then set `control.log`
//! ([`apply_config`]); the environment variable always wins.
//!
//! Colours only on a terminal, and never when `NO_COLOR` is set (no-color.org): a log
//! redirected to a file holds no escape codes.

use std::sync::OnceLock;

use anyhow::Context as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

static HANDLE: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Log events at WARN or ERROR so far (what the live status line shows).
static WARNINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Warnings and errors logged so far.
pub(crate) fn warnings() -> u64 {
    WARNINGS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts the WARN and ERROR events that pass the filter.
struct CountWarnings;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountWarnings {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() <= tracing::Level::WARN {
            WARNINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Keeps every event that passes the filter as a line for `GET /api/log` (the page's recent
/// log lines): `HH:MM:SS LEVEL target: message key=value…` (UTC).
struct RecentLines;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RecentLines {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                use std::fmt::Write as _;
                if f.name() == "message" {
                    let _ = write!(self.0, " {v:?}");
                } else {
                    let _ = write!(self.0, " {}={v:?}", f.name());
                }
            }
            fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
                use std::fmt::Write as _;
                if f.name() == "message" {
                    let _ = write!(self.0, " {v}");
                } else {
                    let _ = write!(self.0, " {}={v}", f.name());
                }
            }
        }
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let m = event.metadata();
        let mut f = Fields(format!(
            "{:02}:{:02}:{:02} {} {}:",
            secs / 3600 % 24,
            secs / 60 % 60,
            secs % 60,
            m.level(),
            m.target()
        ));
        event.record(&mut f);
        rodeo_run::observe::push_log_line(f.0);
    }
}

/// Installs the subscriber (once, at the start of `main`).
pub(crate) fn init() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = EnvFilter::try_from_env("RODEO_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colours_wanted());
    if tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(CountWarnings)
        .with(RecentLines)
        .try_init()
        .is_ok()
    {
        let _ = HANDLE.set(handle);
    }
}

/// Whether log lines may carry colour codes: stderr is a terminal and `NO_COLOR` is unset or
/// empty.
fn colours_wanted() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Applies the configuration's `control.log` filter, unless `RODEO_LOG` is set.
pub(crate) fn apply_config(directives: &str) -> anyhow::Result<()> {
    if std::env::var_os("RODEO_LOG").is_some() || directives.trim().is_empty() {
        return Ok(());
    }
    let filter = EnvFilter::try_new(directives)
        .with_context(|| format!("configuration field `control.log` = {directives:?}"))?;
    if let Some(h) = HANDLE.get() {
        h.reload(filter).context("cannot change the log filter")?;
    }
    Ok(())
}
