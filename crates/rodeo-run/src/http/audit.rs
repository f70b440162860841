//! The server's side of the run database: the audit trail of every request above an
//! observer's (accepted or refused), the runs and the comments on them (`GET /api/runs`,
//! `GET /api/audit`, `POST /api/runs/N/comment`), the conditions (`GET` and `POST
//! /api/conditions`). One connection, opened when first needed,
//! shared by the workers; without a database (`rodeo app --http`) the trail goes to the log
//! only.

use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::json;

use crate::rundb::conditions::{self, PostedBy};
use crate::rundb::{AuditEntry, Comment, RunDb, RunDbError};

use super::Response;

/// Audit entries `GET /api/audit` serves (the newest).
pub(super) const AUDIT_SERVED: u32 = 200;

/// Longest comment on a run, in bytes.
pub(super) const MAX_COMMENT_BYTES: usize = 4096;

/// The run database as the HTTP server uses it.
pub(super) struct Store {
    path: Option<PathBuf>,
    db: Mutex<Option<RunDb>>,
}

impl Store {
    pub(super) fn new(path: Option<PathBuf>) -> Store {
        Store {
            path,
            db: Mutex::new(None),
        }
    }

    /// The output directory (the database's), if there is a database.
    pub(super) fn output_dir(&self) -> Option<&std::path::Path> {
        self.path.as_deref().and_then(std::path::Path::parent)
    }

    /// `f` on the database (opened on first use); `None` when the server has none.
    fn with<T>(
        &self,
        f: impl FnOnce(&RunDb) -> Result<T, RunDbError>,
    ) -> Option<Result<T, RunDbError>> {
        let path = self.path.as_ref()?;
        let mut db = self.db.lock().unwrap_or_else(|p| p.into_inner());
        if db.is_none() {
            match RunDb::open(path) {
                Ok(d) => *db = Some(d),
                Err(e) => return Some(Err(e)),
            }
        }
        db.as_ref().map(f)
    }

    /// Records `e` in the audit trail and says it in the log (refusals as warnings).
    pub(super) fn record(&self, e: &AuditEntry) {
        if e.status < 400 {
            tracing::info!(
                role = %e.role, peer = %e.peer, tls = e.tls, action = %e.action,
                status = e.status, "HTTP request accepted: {}", e.result
            );
        } else {
            tracing::warn!(
                role = %e.role, peer = %e.peer, tls = e.tls, action = %e.action,
                status = e.status, "HTTP request refused: {}", e.result
            );
        }
        if let Some(Err(err)) = self.with(|db| db.audit(e)) {
            tracing::error!(
                "audit trail: cannot record {} by {}: {err}",
                e.action,
                e.peer
            );
        }
    }

    /// `GET /api/audit`: `{"audit": [...]}`, the newest [`AUDIT_SERVED`] entries first.
    pub(super) fn audit_response(&self) -> Response {
        match self.with(|db| db.audit_list(AUDIT_SERVED)) {
            None => Response::error(404, "no run database here: the audit trail is in the log"),
            Some(Ok(list)) => Response::json(200, &json!({ "audit": list })),
            Some(Err(e)) => Response::error(500, &e.to_string()),
        }
    }

    /// `GET /api/runs` and `GET /api/runs/N`.
    pub(super) fn runs_response(&self, path: &str) -> Response {
        let rest = path.trim_start_matches("/api/runs").trim_matches('/');
        if rest.is_empty() {
            return match self.with(|db| db.list()) {
                None => Response::error(404, "no run database here"),
                Some(Ok(runs)) => Response::json(200, &json!({ "runs": runs })),
                Some(Err(e)) => Response::error(500, &e.to_string()),
            };
        }
        let Ok(n) = rest.parse::<u32>() else {
            return Response::error(400, "a run number is a decimal integer: /api/runs/N");
        };
        match self.with(|db| db.get(n)) {
            None => Response::error(404, "no run database here"),
            Some(Ok(Some(run))) => Response::json(200, &run),
            Some(Ok(None)) => Response::error(404, &format!("no run {n} in the run database")),
            Some(Err(e)) => Response::error(500, &e.to_string()),
        }
    }

    /// `POST /api/runs/N/comment` with `{"text": "…"}`: a comment on a recorded run or on
    /// `current`, the run prepared or in progress.
    pub(super) fn comment(&self, n: u32, current: u32, body: &[u8], c: Comment) -> Response {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            text: String,
        }
        let text = match super::request::json_object::<Body>(body, r#"{"text": "…"}"#) {
            Ok(b) => b.text,
            Err(e) => return Response::error(400, &e),
        };
        if text.trim().is_empty() || text.len() > MAX_COMMENT_BYTES {
            return Response::error(
                400,
                &format!("a comment is 1 to {MAX_COMMENT_BYTES} bytes of text"),
            );
        }
        let comment = Comment {
            run_number: n,
            text,
            ..c
        };
        let done = self.with(|db| {
            if n != current && !db.has_run(n)? {
                return Ok(false);
            }
            db.comment(&comment).map(|()| true)
        });
        match done {
            None => Response::error(404, "no run database here"),
            Some(Ok(true)) => Response::json(200, &json!({ "commented": n })),
            Some(Ok(false)) => Response::error(
                404,
                &format!("no run {n}: comment a recorded run or the current one ({current})"),
            ),
            Some(Err(e)) => Response::error(500, &e.to_string()),
        }
    }

    /// `POST /api/conditions` with `{"key": value, ...}`: conditions of the run prepared or in
    /// progress (`by.run_number`), kept with their time.
    pub(super) fn add_conditions(&self, body: &[u8], by: &PostedBy) -> Response {
        let list = match conditions::parse(body) {
            Ok(l) => l,
            Err(e) => return Response::error(400, &e.to_string()),
        };
        match self.with(|db| db.add_conditions(by, &list)) {
            None => Response::error(
                404,
                "no run database here: conditions are kept by `rodeo serve` and `rodeo run --http`",
            ),
            Some(Ok(())) => Response::json(
                200,
                &json!({ "recorded": list.len(), "run_number": by.run_number }),
            ),
            Some(Err(e)) => Response::error(500, &e.to_string()),
        }
    }

    /// `GET /api/conditions`: the latest value of every key, with when and in which run it
    /// was posted, and the entries of run `current`.
    pub(super) fn conditions_response(&self, current: u32) -> Response {
        let got = self.with(|db| Ok((db.conditions_now()?, db.conditions_of_run(current)?)));
        match got {
            None => Response::error(404, "no run database here"),
            Some(Ok((latest, run))) => Response::json(
                200,
                &json!({ "latest": latest, "run_number": current, "run": run }),
            ),
            Some(Err(e)) => Response::error(500, &e.to_string()),
        }
    }
}
