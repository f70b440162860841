//! Starting the HTTP API of a run, a service or an application from its `[control]` section.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use rodeo_control::config::ControlSection;
use rodeo_control::run_control::RunControl;

use super::{HttpConfig, HttpServer};

/// Serves the HTTP API of `control` on `section.http` (nothing when it is empty), with the
/// section's token and `runs_db` for `GET /api/runs`. Says on stderr where it listens, and
/// that commands are refused when there is no token.
pub fn serve_section(
    section: &ControlSection,
    control: Arc<dyn RunControl>,
    runs_db: Option<PathBuf>,
) -> anyhow::Result<Option<HttpServer>> {
    if section.http.is_empty() {
        return Ok(None);
    }
    let token = section.effective_token();
    if token.is_none() {
        eprintln!("rodeo: note: no RODEO_TOKEN or control.token: HTTP commands are refused");
    }
    let server = HttpServer::start(
        &section.http,
        control,
        HttpConfig {
            token,
            runs_db,
            ..HttpConfig::default()
        },
    )
    .with_context(|| format!("cannot serve HTTP on {}", section.http))?;
    eprintln!("rodeo: HTTP API on http://{}/", server.local_addr());
    Ok(Some(server))
}
