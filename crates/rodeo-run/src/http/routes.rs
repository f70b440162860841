//! The routing: the role each request needs, the answer it gets from a [`RunControl`], the
//! audit trail of every request above an observer's, and the isolation of each request's
//! handling (a panic is a 500 and a log line; the worker goes on). No sockets: tests call
//! [`respond`] directly.

use std::any::Any;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rodeo_control::config::RunWords;
use rodeo_control::lifecycle::{Command, TransitionError};
use rodeo_control::prometheus::MetricsWriter;
use rodeo_control::run_control::{ConfigChangeError, RunControl};
use serde_json::json;

use crate::rundb::conditions::PostedBy;
use crate::rundb::{config_hash, now_ns, AuditEntry, Comment};

use super::audit::Store;
use super::auth::{check, Credentials, Peer, Role};
use super::request::json_object;
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
    /// Requests refused 401: no token, or a wrong one.
    pub unauthorized: AtomicU64,
    /// Requests refused 403: a token of a lower role, or a token over plain HTTP from
    /// another host.
    pub forbidden: AtomicU64,
    /// Requests whose handling panicked (answered 500; the worker went on).
    pub panics: AtomicU64,
    /// Connections closed at their deadline without a complete request (answered 408).
    pub timed_out: AtomicU64,
    /// Connections closed unanswered to make room for a new one (`max_connections`).
    pub evicted: AtomicU64,
}

/// What every worker shares.
pub(super) struct Shared {
    pub(super) control: Arc<dyn RunControl>,
    pub(super) credentials: Credentials,
    pub(super) counters: Arc<HttpCounters>,
    pub(super) store: Store,
    /// The last listing of the run directory (`GET /api/files`).
    pub(super) files: super::files::FilesCache,
    /// The write timeout of an answer.
    pub(super) timeout: Duration,
}

impl Shared {
    pub(super) fn new(
        control: Arc<dyn RunControl>,
        credentials: Credentials,
        counters: Arc<HttpCounters>,
        runs_db: Option<PathBuf>,
        timeout: Duration,
    ) -> Shared {
        Shared {
            control,
            credentials,
            counters,
            store: Store::new(runs_db),
            files: super::files::FilesCache::default(),
            timeout,
        }
    }
}

/// Whether `request` from `peer` needs a role above an observer's and its token proves it
/// (the workers take these first: [`super::reader::Queues`]).
pub(super) fn proves_its_role(shared: &Shared, peer: &Peer, request: &Request) -> bool {
    let needed = needed_role(request);
    needed != Role::Observer
        && check(
            &shared.credentials,
            peer,
            request.header("authorization"),
            needed,
        )
        .is_ok()
}

/// The role `request` needs (requests that match no action need none: they get 404/405).
fn needed_role(request: &Request) -> Role {
    match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/api/command" | "/api/alarms/ack" | "/api/conditions") => Role::Operator,
        ("POST", p) if comment_run(p).is_some() => Role::Operator,
        ("PUT", "/api/config") => Role::Expert,
        _ => Role::Observer,
    }
}

/// `/api/runs/N/comment` -> N (`Some(None)`: N is not a number).
fn comment_run(path: &str) -> Option<Option<u32>> {
    let n = path.strip_prefix("/api/runs/")?.strip_suffix("/comment")?;
    Some(n.parse().ok())
}

/// Answers `request` from `peer`: the role it needs checked, its handling isolated, and, for
/// every request above an observer's, an entry in the audit trail (accepted or refused).
pub(super) fn respond(shared: &Shared, peer: &Peer, request: &Request) -> Response {
    let needed = needed_role(request);
    if needed == Role::Observer {
        return isolated(shared, request, || {
            route(shared, Role::Observer, peer, request)
        });
    }
    // Read before the token is checked (a refusal is recorded with its run too): it must not
    // wait for anything a request without a token could hold up.
    let run_number = isolated_value(|| shared.control.run_number());
    let what = format!("{} {}", request.method, request.path);
    let header = request.header("authorization");
    let (role, response) = match check(&shared.credentials, peer, header, needed) {
        Ok(role) => (
            role.as_str(),
            isolated(shared, request, || route(shared, role, peer, request)),
        ),
        Err(refusal) => {
            let r = refusal.response(&what);
            let counter = if r.status == 401 {
                &shared.counters.unauthorized
            } else {
                &shared.counters.forbidden
            };
            counter.fetch_add(1, Ordering::Relaxed);
            (refusal.role_text(), r)
        }
    };
    shared.store.record(&AuditEntry {
        at_ns: now_ns(),
        role: role.into(),
        peer: peer.addr.to_string(),
        tls: peer.tls,
        action: action(request),
        run_number,
        status: response.status,
        result: result_text(&response),
    });
    response
}

/// `f()`, or a 500 when it panics (counted and logged; the panic hook also prints it).
fn isolated(shared: &Shared, request: &Request, f: impl FnOnce() -> Response) -> Response {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => {
            shared.counters.panics.fetch_add(1, Ordering::Relaxed);
            let what = panic_message(&*panic);
            tracing::error!(
                method = %request.method, path = %request.path,
                "HTTP request handler panicked: {what}; answered 500, the worker goes on"
            );
            Response::error(
                500,
                &format!(
                    "internal error answering {} {} ({what}); logged, the service goes on",
                    request.method, request.path
                ),
            )
        }
    }
}

fn isolated_value<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// A panic's message (its `&str` or `String` payload).
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// What an audited request asked, in a few words (never the token, never a whole body).
fn action(request: &Request) -> String {
    match request.path.as_str() {
        "/api/command" => match parse_command(&request.body) {
            Ok((c, w)) if !w.is_empty() => format!(
                "command {} (type {:?}, shifter {:?}, comment {:?})",
                c.name(),
                clip(&w.run_type, 32),
                clip(&w.shifter, 32),
                clip(&w.comment, 64)
            ),
            Ok((c, _)) => format!("command {}", c.name()),
            Err(_) => "command (not a command)".into(),
        },
        "/api/alarms/ack" => {
            let name = serde_json::from_slice::<serde_json::Value>(&request.body)
                .ok()
                .and_then(|v| v["name"].as_str().map(str::to_string))
                .unwrap_or_else(|| "(not an alarm)".into());
            format!("ack {}", clip(&name, 64))
        }
        "/api/conditions" => format!("conditions ({} bytes)", request.body.len()),
        "/api/config" => format!(
            "config {} ({} bytes)",
            config_hash(&String::from_utf8_lossy(&request.body)),
            request.body.len()
        ),
        p => match comment_run(p) {
            Some(Some(n)) => format!("comment run {n}"),
            _ => format!("{} {}", request.method, clip(p, 64)),
        },
    }
}

/// The result of an answer for the audit trail: `ok` (with the state reached) or the error.
fn result_text(r: &Response) -> String {
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    if (200..300).contains(&r.status) {
        return match v["state"].as_str() {
            Some(state) => format!("ok: {state}"),
            None => "ok".into(),
        };
    }
    clip(v["error"].as_str().unwrap_or("(no message)"), 500)
}

fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The answer to `request` from a client proven to be `role`.
fn route(shared: &Shared, role: Role, peer: &Peer, request: &Request) -> Response {
    let control = &*shared.control;
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
        "/metrics" if get => metrics(control, &shared.counters),
        "/api/audit" if get => shared.store.audit_response(),
        p if get && (p == "/api/runs" || p.starts_with("/api/runs/")) => {
            shared.store.runs_response(p, &request.query)
        }
        "/api/command" if request.method == "POST" => {
            let (command, words) = match parse_command(&request.body) {
                Ok(c) => c,
                Err(e) => return Response::error(400, &e),
            };
            tracing::info!(command = command.name(), %role, %peer, "command over HTTP");
            let by = format!("{role} from {peer}");
            let outcome = if command == Command::Start {
                match control.start_with_words(&words, &by) {
                    Some(outcome) => outcome,
                    None => {
                        return Response::error(
                            405,
                            "this partition takes the run's words from its configuration \
                             ([run] comment, run_type, shifter), not at start",
                        )
                    }
                }
            } else {
                control.command_by(command, &by)
            };
            match outcome {
                Ok(state) => Response::json(200, &json!({ "state": state })),
                Err(e @ TransitionError::Illegal { .. }) => Response::json(
                    409,
                    &json!({ "error": e.to_string(), "state": control.status().state }),
                ),
                Err(e) => Response::json(
                    500,
                    &json!({ "error": e.to_string(), "application": e.who(), "state": control.status().state }),
                ),
            }
        }
        "/api/config" if request.method == "PUT" => {
            let Ok(text) = std::str::from_utf8(&request.body) else {
                return Response::error(400, "the configuration must be UTF-8 TOML");
            };
            match control.replace_config(text) {
                Ok(()) => Response::json(200, &json!({ "replaced": true })),
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
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Ack {
                name: String,
            }
            match json_object::<Ack>(&request.body, r#"{"name": "alarm"}"#) {
                Ok(a) => match control.acknowledge_alarm(&a.name) {
                    Ok(()) => Response::json(200, &json!({ "acknowledged": a.name })),
                    Err(e) => Response::error(404, &e),
                },
                Err(e) => Response::error(400, &e),
            }
        }
        "/api/files" if get => shared
            .files
            .response(shared.store.output_dir(), control.run_number()),
        "/api/conditions" if get => shared.store.conditions_response(control.run_number()),
        "/api/conditions" if request.method == "POST" => {
            let by = PostedBy {
                run_number: control.run_number(),
                at_ns: now_ns(),
                role: role.as_str().into(),
                peer: peer.addr.to_string(),
            };
            shared.store.add_conditions(&request.body, &by)
        }
        p if request.method == "POST" && comment_run(p).is_some() => {
            let Some(Some(n)) = comment_run(p) else {
                return Response::error(
                    400,
                    "a run number is a decimal integer from 0 to 4294967295: \
                     /api/runs/N/comment",
                );
            };
            let current = control.run_number();
            let by = Comment {
                run_number: n,
                at_ns: now_ns(),
                role: role.as_str().into(),
                peer: peer.addr.to_string(),
                text: String::new(),
            };
            shared.store.comment(n, current, &request.body, by)
        }
        "/" | "/index.html" | "/api/status" | "/api/config" | "/metrics" | "/api/command"
        | "/api/audit" | "/api/conditions" => {
            let mut r = Response::error(405, "method not allowed");
            let allow = match request.path.as_str() {
                "/api/command" => "POST",
                "/api/config" => "GET, PUT",
                "/api/conditions" => "GET, POST",
                _ => "GET",
            };
            r.headers.push(("Allow", allow.into()));
            r
        }
        _ => Response::error(404, "no such endpoint"),
    }
}

/// `/metrics`: the partition's families and the server's own.
fn metrics(control: &dyn RunControl, counters: &HttpCounters) -> Response {
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
        "Requests refused 401: no bearer token, or a wrong one.",
        &[(&[], c(&counters.unauthorized))],
    );
    w.counter(
        "rodeo_http_forbidden_total",
        "Requests refused 403: a token of a lower role, or a token over plain HTTP from another host.",
        &[(&[], c(&counters.forbidden))],
    );
    w.counter(
        "rodeo_http_handler_panics_total",
        "Requests whose handling panicked (answered 500, the worker went on).",
        &[(&[], c(&counters.panics))],
    );
    Response::new(200, "text/plain; version=0.0.4; charset=utf-8", w.finish())
}

/// `{"command": "stop"}` -> the command; a `start` may carry the run's words (`{"command":
/// "start", "comment": "HV scan", "run_type": "physics", "shifter": "A. Shifter"}`), checked.
pub(super) fn parse_command(body: &[u8]) -> Result<(Command, RunWords), String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        command: String,
        #[serde(default)]
        comment: String,
        #[serde(default)]
        run_type: String,
        #[serde(default)]
        shifter: String,
    }
    let b: Body = json_object(body, r#"{"command": "stop"}"#)?;
    let command = b.command.parse::<Command>().map_err(|e| e.to_string())?;
    let words = RunWords {
        comment: b.comment,
        run_type: b.run_type,
        shifter: b.shifter,
    };
    if !words.is_empty() && command != Command::Start {
        return Err(format!(
            "comment, run_type and shifter go with start, not with {}",
            command.name()
        ));
    }
    words.check()?;
    Ok((command, words))
}
