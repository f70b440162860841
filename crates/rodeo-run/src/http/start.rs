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
    for (role, t) in [("operator", &token), ("expert", &expert_token)] {
        if let Some(w) = t.as_deref().and_then(|t| weak_token(role, t)) {
            eprintln!("rodeo: warning: {w}");
        }
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

/// Tokens shorter than this are said to be guessable when the server starts: failed tokens
/// are not rate-limited beyond the connection bounds (docs/security.md), so a 1-byte token
/// falls in at most 256 requests.
const MIN_TOKEN_BYTES: usize = 16;

/// The warning for `role`'s token `token` when it is shorter than [`MIN_TOKEN_BYTES`]; the
/// token itself is never printed.
fn weak_token(role: &str, token: &str) -> Option<String> {
    (token.len() < MIN_TOKEN_BYTES).then(|| {
        format!(
            "the {role}'s token is {} byte(s): anyone who reaches the HTTP port can guess it \
             (failed tokens are not rate-limited); give {MIN_TOKEN_BYTES} or more random \
             characters (e.g. `openssl rand -hex 16`)",
            token.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short token is said, by role and length, never by value; a long one is not.
    #[test]
    fn a_short_token_is_said_to_be_guessable() {
        let w = weak_token("operator", "t").unwrap();
        assert!(w.contains("operator's token is 1 byte(s)"), "{w}");
        assert!(!w.contains("\"t\"") && !w.contains(" t "), "{w}");
        assert!(weak_token("expert", &"x".repeat(15)).is_some());
        assert!(weak_token("expert", &"x".repeat(16)).is_none());
    }
}
