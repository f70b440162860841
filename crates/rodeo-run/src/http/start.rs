//! Starting the HTTP API of a run, a service or an application from its `[control]` section.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use rodeo_control::config::ControlSection;
use rodeo_control::run_control::RunControl;

use super::{tls, HttpConfig, HttpServer};

/// The certificate chain and private key (PEM files) of an HTTPS server (`--tls-cert FILE
/// --tls-key FILE`).
#[derive(Debug, Clone)]
pub struct HttpsFiles {
    /// The certificate chain, the server's first.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// Serves the HTTP API of `control` on `section.http` (nothing when it is empty), with the
/// section's tokens (the environment's first), `runs_db` for `GET /api/runs` and the audit
/// trail, and HTTPS when `https` is given. Says on stderr where it listens, and what is
/// refused for want of a token or of TLS.
pub fn serve_section(
    section: &ControlSection,
    control: Arc<dyn RunControl>,
    runs_db: Option<PathBuf>,
    https: Option<&HttpsFiles>,
) -> anyhow::Result<Option<HttpServer>> {
    if section.http.is_empty() {
        return Ok(None);
    }
    let token = section.effective_token();
    let expert_token = section.effective_expert_token();
    if token.is_some() && token == expert_token {
        anyhow::bail!(
            "the operator's and the expert's tokens are the same (RODEO_TOKEN / control.token \
             and RODEO_EXPERT_TOKEN / control.expert_token): give the expert a token of its own"
        );
    }
    if token.is_none() && expert_token.is_none() {
        eprintln!("rodeo: note: no RODEO_TOKEN or control.token: HTTP commands are refused");
    }
    let tls = match https {
        Some(f) => Some(
            tls::server_config(&f.cert, &f.key)
                .context("cannot serve HTTPS (--tls-cert, --tls-key)")?,
        ),
        None => None,
    };
    let plain = tls.is_none();
    let server = HttpServer::start(
        &section.http,
        control,
        HttpConfig {
            token,
            expert_token,
            tls,
            runs_db,
            ..HttpConfig::default()
        },
    )
    .with_context(|| format!("cannot serve HTTP on {}", section.http))?;
    let addr = server.local_addr();
    let scheme = if plain { "http" } else { "https" };
    eprintln!("rodeo: HTTP API on {scheme}://{addr}/");
    if plain && !addr.ip().is_loopback() {
        eprintln!(
            "rodeo: note: plain HTTP: tokens are taken from this host only (loopback); serve \
             HTTPS (--tls-cert FILE --tls-key FILE) to take commands from other hosts"
        );
    }
    Ok(Some(server))
}
