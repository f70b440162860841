//! The routing: which answer a request gets from a [`RunControl`], the bearer-token check and
//! the run database's pages; no sockets (tests call [`handle`] directly).

use std::sync::atomic::{AtomicU64, Ordering};

use rodeo_control::lifecycle::{Command, TransitionError};
use rodeo_control::prometheus::MetricsWriter;
use rodeo_control::run_control::{ConfigChangeError, RunControl};

use super::{Request, Response, INDEX_HTML};

/// The server's own counters (in `/metrics` as `rodeo_http_*`).
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Requests answered, by class: 2xx, 4xx, 5xx.
    pub ok: AtomicU64,
    /// Answers 4xx.
    pub client_errors: AtomicU64,
    /// Answers 5xx (503 when the queue was full included).
    pub server_errors: AtomicU64,
    /// Commands refused for a missing or wrong token.
    pub unauthorized: AtomicU64,
    /// Connections closed at their deadline without a complete request (answered 408).
    pub timed_out: AtomicU64,
    /// Connections closed unanswered to make room for a new one (`max_connections`).
    pub evicted: AtomicU64,
}

/// Answers `request` against `control` (the routing, without sockets: tests call it directly).
pub fn handle(
    control: &dyn RunControl,
    token: Option<&str>,
    counters: &HttpCounters,
    request: &Request,
) -> Response {
    let get = request.method == "GET";
    match request.path.as_str() {
        "/" | "/index.html" if get => Response::new(200, "text/html; charset=utf-8", INDEX_HTML),
        "/api/status" if get => match serde_json::to_value(control.status()) {
            Ok(v) => Response::json(200, &v),
            Err(e) => Response::error(500, &e.to_string()),
        },
        "/api/config" if get => Response::new(
            200,
            "application/toml; charset=utf-8",
            control.config_toml(),
        ),
        "/metrics" if get => {
            let mut w = MetricsWriter::new();
            control.write_metrics(&mut w);
            let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
            w.counter(
                "rodeo_http_responses_total",
                "HTTP answers of this server, by class.",
                &[
                    (&[("class", "2xx")], c(&counters.ok)),
                    (&[("class", "4xx")], c(&counters.client_errors)),
                    (&[("class", "5xx")], c(&counters.server_errors)),
                ],
            );
            w.counter(
                "rodeo_http_unauthorized_total",
                "Commands refused for a missing or wrong bearer token.",
                &[(&[], c(&counters.unauthorized))],
            );
            Response::new(200, "text/plain; version=0.0.4; charset=utf-8", w.finish())
        }
        "/api/command" if request.method == "POST" => {
            if !authorized(token, request.header("authorization")) {
                counters.unauthorized.fetch_add(1, Ordering::Relaxed);
                let mut r = Response::error(
                    401,
                    "commands need the header Authorization: Bearer <token> (RODEO_TOKEN)",
                );
                r.headers
                    .push(("WWW-Authenticate", "Bearer realm=\"rodeo\"".into()));
                return r;
            }
            let command = match parse_command(&request.body) {
                Ok(c) => c,
                Err(e) => return Response::error(400, &e),
            };
            tracing::info!(command = command.name(), "command over HTTP");
            match control.command(command) {
                Ok(state) => Response::json(200, &serde_json::json!({ "state": state })),
                Err(e @ TransitionError::Illegal { .. }) => Response::json(
                    409,
                    &serde_json::json!({ "error": e.to_string(), "state": control.status().state }),
                ),
                Err(e) => Response::json(
                    500,
                    &serde_json::json!({ "error": e.to_string(), "application": e.who(), "state": control.status().state }),
                ),
            }
        }
        "/api/config" if request.method == "PUT" => {
            if let Some(r) = refuse_unauthorized(token, counters, request) {
                return r;
            }
            let Ok(text) = std::str::from_utf8(&request.body) else {
                return Response::error(400, "the configuration must be UTF-8 TOML");
            };
            match control.replace_config(text) {
                Ok(()) => Response::json(200, &serde_json::json!({ "replaced": true })),
                Err(e) => {
                    let status = match e {
                        ConfigChangeError::NotSupported => 405,
                        ConfigChangeError::Invalid(_) => 400,
                        ConfigChangeError::Busy(_) => 409,
                        ConfigChangeError::Failed(_) => 500,
                    };
                    Response::error(status, &e.to_string())
                }
            }
        }
        "/api/history" | "/api/alarms" | "/api/histograms" | "/api/log" if get => {
            match control.view(request.path.trim_start_matches("/api/")) {
                Some(v) => Response::json(200, &v),
                None => Response::error(
                    404,
                    "this partition keeps no such view (`rodeo serve` does)",
                ),
            }
        }
        "/api/alarms/ack" if request.method == "POST" => {
            if let Some(r) = refuse_unauthorized(token, counters, request) {
                return r;
            }
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Ack {
                name: String,
            }
            match serde_json::from_slice::<Ack>(&request.body) {
                Ok(a) => match control.acknowledge_alarm(&a.name) {
                    Ok(()) => Response::json(200, &serde_json::json!({ "acknowledged": a.name })),
                    Err(e) => Response::error(404, &e),
                },
                Err(e) => Response::error(400, &format!("expected {{\"name\": \"alarm\"}}: {e}")),
            }
        }
        "/" | "/index.html" | "/api/status" | "/api/config" | "/metrics" | "/api/command" => {
            let mut r = Response::error(405, "method not allowed");
            let allow = match request.path.as_str() {
                "/api/command" => "POST",
                "/api/config" => "GET, PUT",
                _ => "GET",
            };
            r.headers.push(("Allow", allow.into()));
            r
        }
        _ => Response::error(404, "no such endpoint"),
    }
}

/// The 401 answer for a request without the right token (`None`: authorized).
pub(super) fn refuse_unauthorized(
    token: Option<&str>,
    counters: &HttpCounters,
    request: &Request,
) -> Option<Response> {
    if authorized(token, request.header("authorization")) {
        return None;
    }
    counters.unauthorized.fetch_add(1, Ordering::Relaxed);
    let mut r = Response::error(
        401,
        "this request needs the header Authorization: Bearer <token> (RODEO_TOKEN)",
    );
    r.headers
        .push(("WWW-Authenticate", "Bearer realm=\"rodeo\"".into()));
    Some(r)
}

/// `{"command": "stop"}` -> the command.
pub(super) fn parse_command(body: &[u8]) -> Result<Command, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        command: String,
    }
    let b: Body = serde_json::from_slice(body)
        .map_err(|e| format!("expected a JSON body {{\"command\": \"stop\"}}: {e}"))?;
    b.command.parse::<Command>().map_err(|e| e.to_string())
}

/// Whether the `Authorization` header carries `token` (compared in constant time).
pub(super) fn authorized(token: Option<&str>, header: Option<&str>) -> bool {
    let (Some(token), Some(header)) = (token, header) else {
        return false;
    };
    let Some(given) = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
    else {
        return false;
    };
    let (a, b) = (token.as_bytes(), given.trim().as_bytes());
    if a.is_empty() || a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `GET /api/runs` and `GET /api/runs/N` from the run database.
pub(super) fn runs_response(db: Option<&std::path::Path>, path: &str) -> Response {
    let Some(db) = db.filter(|p| p.exists()) else {
        return Response::error(404, "no run database here");
    };
    let db = match crate::rundb::RunDb::open(db) {
        Ok(d) => d,
        Err(e) => return Response::error(500, &e.to_string()),
    };
    let rest = path.trim_start_matches("/api/runs").trim_matches('/');
    if rest.is_empty() {
        return match db.list() {
            Ok(runs) => Response::json(200, &serde_json::json!({ "runs": runs })),
            Err(e) => Response::error(500, &e.to_string()),
        };
    }
    let Ok(n) = rest.parse::<u32>() else {
        return Response::error(400, "a run number is a decimal integer: /api/runs/N");
    };
    match db.get(n) {
        Ok(Some(run)) => Response::json(200, &run),
        Ok(None) => Response::error(404, &format!("no run {n} in the run database")),
        Err(e) => Response::error(500, &e.to_string()),
    }
}
