//! The server's side of the run database: the audit trail of every request above an
//! observer's (accepted or refused), the runs and the comments on them (`GET /api/runs`,
//! `GET /api/audit`, `POST /api/runs/N/comment`), the conditions (`GET` and `POST
//! /api/conditions`). One connection, opened when first needed,
//! shared by the workers; without a database (`rodeo app --http`) the trail goes to the log
//! only.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::rundb::conditions::{self, PostedBy};
use crate::rundb::{
    AuditEntry, Comment, PerRun, RunDb, RunDbError, MAX_COMMENTS_PER_RUN, RUNS_PAGE, RUNS_PAGE_MAX,
    SERVED_CONDITIONS, UNAUTHENTICATED,
};

use super::Response;

/// Audit entries `GET /api/audit` serves (the newest).
pub(super) const AUDIT_SERVED: u32 = 200;

/// Longest comment on a run, in bytes.
pub(super) const MAX_COMMENT_BYTES: usize = 4096;

/// Refusals without a valid token recorded one by one (in the trail and the log) per second;
/// beyond, they are counted and recorded as one entry once the second is over (the metrics
/// count every one): anyone can send them, and each entry is a synced write under the
/// database's lock, which the operators' requests wait for.
pub(super) const UNAUTHENTICATED_PER_SECOND: u64 = 20;

/// The audit trail's action of the entry that sums refusals not recorded one by one.
const SUMMED_REFUSALS: &str = "refusals without a valid token";

/// The count of refusals without a token in the current second (see
/// [`UNAUTHENTICATED_PER_SECOND`]).
struct RefusalGate {
    since: Instant,
    recorded: u64,
    /// Refusals beyond the limit, not yet recorded, and the last one of them.
    unrecorded: u64,
    last: Option<AuditEntry>,
}

impl RefusalGate {
    /// A gate whose first second begins at `now`.
    fn new(now: Instant) -> RefusalGate {
        RefusalGate {
            since: now,
            recorded: 0,
            unrecorded: 0,
            last: None,
        }
    }

    /// Whether a refusal without a token is recorded one by one, and the entry summing the
    /// refusals of a second that is over (to record first).
    fn admit(&mut self, refusal: Option<&AuditEntry>, now: Instant) -> (bool, Option<AuditEntry>) {
        let mut summary = None;
        if now.duration_since(self.since) >= Duration::from_secs(1) {
            summary = self.summary();
            self.since = now;
            self.recorded = 0;
        }
        let Some(e) = refusal else {
            return (false, summary);
        };
        if self.recorded < UNAUTHENTICATED_PER_SECOND {
            self.recorded += 1;
            return (true, summary);
        }
        self.unrecorded += 1;
        self.last = Some(e.clone());
        (false, summary)
    }

    /// The entry summing the refusals not recorded one by one (all in one second), if any.
    fn summary(&mut self) -> Option<AuditEntry> {
        let last = self.last.take()?;
        let n = std::mem::take(&mut self.unrecorded);
        Some(AuditEntry {
            action: SUMMED_REFUSALS.into(),
            result: format!(
                "{n} more requests without a valid token refused within one second (more than \
                 {UNAUTHENTICATED_PER_SECOND} a second), not recorded one by one; the last from \
                 {}: {}; rodeo_http_responses_total counts each",
                last.peer, last.action
            ),
            ..last
        })
    }
}

/// The run database as the HTTP server uses it.
pub(super) struct Store {
    path: Option<PathBuf>,
    db: Mutex<Option<RunDb>>,
    refusals: Mutex<RefusalGate>,
}

impl Store {
    pub(super) fn new(path: Option<PathBuf>) -> Store {
        Store {
            path,
            db: Mutex::new(None),
            refusals: Mutex::new(RefusalGate::new(Instant::now())),
        }
    }

    /// The output directory (the database's), if there is a database.
    pub(super) fn output_dir(&self) -> Option<&std::path::Path> {
        self.path.as_deref().and_then(std::path::Path::parent)
    }

    /// The summary of refusals not yet recorded (see [`UNAUTHENTICATED_PER_SECOND`]), written
    /// now if its second is over, or at once when `now_anyway` (the server stops).
    fn flush_refusals(&self, now_anyway: bool) {
        let summary = {
            let mut gate = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
            if now_anyway {
                gate.summary()
            } else {
                gate.admit(None, Instant::now()).1
            }
        };
        if let Some(s) = summary {
            self.write(&s);
        }
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

    /// Records `e` in the audit trail and says it in the log (refusals as warnings); refusals
    /// without a valid token beyond [`UNAUTHENTICATED_PER_SECOND`] are summed into one entry.
    pub(super) fn record(&self, e: &AuditEntry) {
        let unauthenticated = e.role == UNAUTHENTICATED;
        let (one_by_one, summary) = self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(unauthenticated.then_some(e), Instant::now());
        if let Some(s) = summary {
            self.write(&s);
        }
        if one_by_one || !unauthenticated {
            self.write(e);
        }
    }

    /// `e` in the log and the audit trail.
    fn write(&self, e: &AuditEntry) {
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
        // A second of refusals that is over is recorded before the trail is read.
        self.flush_refusals(false);
        match self.with(|db| db.audit_list(AUDIT_SERVED)) {
            None => Response::error(404, "no run database here: the audit trail is in the log"),
            Some(Ok(list)) => Response::json(200, &json!({ "audit": list })),
            Some(Err(e)) => Response::error(500, &e.to_string()),
        }
    }

    /// `GET /api/runs[?limit=N&before=R]` (a page of runs, newest first) and
    /// `GET /api/runs/N`.
    pub(super) fn runs_response(&self, path: &str, query: &str) -> Response {
        let rest = path.trim_start_matches("/api/runs").trim_matches('/');
        if rest.is_empty() {
            let (before, limit) = match runs_page(query) {
                Ok(p) => p,
                Err(e) => return Response::error(400, &e),
            };
            // One run more than the page tells whether there is a next page.
            return match self.with(|db| db.list_page(before, limit + 1, PerRun::LISTED)) {
                None => Response::error(404, "no run database here"),
                Some(Ok(mut runs)) => {
                    let more = runs.len() > limit;
                    runs.truncate(limit);
                    let next = runs
                        .last()
                        .filter(|_| more)
                        .map(|r| r["run_number"].clone());
                    Response::json(200, &json!({ "runs": runs, "next_before": next }))
                }
                Some(Err(e)) => Response::error(500, &e.to_string()),
            };
        }
        let Ok(n) = rest.parse::<u32>() else {
            return Response::error(
                400,
                "a run number is a decimal integer from 0 to 4294967295: /api/runs/N",
            );
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
        if text.trim().is_empty()
            || text.len() > MAX_COMMENT_BYTES
            || crate::rundb::hides_text(&text)
        {
            return Response::error(
                400,
                &format!(
                    "a comment is 1 to {MAX_COMMENT_BYTES} bytes of text, lines without \
                     control or invisible formatting characters"
                ),
            );
        }
        let comment = Comment {
            run_number: n,
            text,
            ..c
        };
        let done = self.with(|db| {
            if n != current && !db.has_run(n)? {
                return Ok(None);
            }
            db.comment(&comment).map(Some)
        });
        match done {
            None => Response::error(404, "no run database here"),
            Some(Ok(Some(true))) => Response::json(200, &json!({ "commented": n })),
            Some(Ok(Some(false))) => Response::error(
                409,
                &format!(
                    "run {n} has {MAX_COMMENTS_PER_RUN} comments, the most a run keeps: \
                     say it in the log book"
                ),
            ),
            Some(Ok(None)) => Response::error(
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
            Some(Err(e @ RunDbError::TooManyConditionKeys { .. })) => {
                Response::error(409, &e.to_string())
            }
            Some(Err(e)) => Response::error(500, &e.to_string()),
        }
    }

    /// `GET /api/conditions`: the latest value of every key, with when and in which run it
    /// was posted, and the entries of run `current`.
    pub(super) fn conditions_response(&self, current: u32) -> Response {
        let got = self.with(|db| {
            Ok((
                db.conditions_now()?,
                db.conditions_of_run(current, SERVED_CONDITIONS)?,
            ))
        });
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

/// The refusals not yet recorded are recorded as the server stops.
impl Drop for Store {
    fn drop(&mut self) {
        self.flush_refusals(true);
    }
}

/// `limit=N&before=R` of `GET /api/runs` as (before, limit): `limit` 1 to [`RUNS_PAGE_MAX`]
/// ([`RUNS_PAGE`] when not given); `before` a run number (all runs when not given).
fn runs_page(query: &str) -> Result<(Option<u32>, usize), String> {
    let mut before = None;
    let mut limit = RUNS_PAGE;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|l| (1..=RUNS_PAGE_MAX).contains(l))
                    .ok_or_else(|| {
                        format!("limit={value}: a number of runs, 1 to {RUNS_PAGE_MAX}")
                    })?;
            }
            "before" => {
                before = Some(value.parse::<u32>().map_err(|_| {
                    format!("before={value}: a run number (the page's runs are below it)")
                })?);
            }
            _ => {
                return Err(format!(
                    "unknown parameter {key:?}: /api/runs takes limit=N and before=RUN"
                ))
            }
        }
    }
    Ok((before, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(peer: &str) -> AuditEntry {
        AuditEntry {
            at_ns: 1,
            role: UNAUTHENTICATED.into(),
            peer: peer.into(),
            tls: false,
            action: "command stop".into(),
            run_number: Some(3),
            status: 401,
            result: "no token".into(),
        }
    }

    /// Past the limit in one second, refusals without a token are counted, and summed into
    /// one entry when a later second begins.
    #[test]
    fn refusals_past_the_limit_are_summed_into_one_entry() {
        let t0 = Instant::now();
        let mut gate = RefusalGate::new(t0);
        let e = refusal("10.0.0.9:4000");
        let admitted = (0..UNAUTHENTICATED_PER_SECOND + 30)
            .filter(|_| gate.admit(Some(&e), t0).0)
            .count() as u64;
        assert_eq!(admitted, UNAUTHENTICATED_PER_SECOND);
        assert_eq!(gate.unrecorded, 30);
        // Nothing is summed within the second; the next second's first refusal brings it.
        assert!(gate
            .admit(None, t0 + Duration::from_millis(900))
            .1
            .is_none());
        let (one_by_one, summary) = gate.admit(Some(&e), t0 + Duration::from_millis(1500));
        assert!(one_by_one, "a new second records again");
        let summary = summary.expect("the refusals past the limit are summed");
        assert_eq!(summary.role, UNAUTHENTICATED);
        assert!(
            summary.result.starts_with("30 more requests"),
            "{}",
            summary.result
        );
        assert!(
            summary.result.contains("10.0.0.9:4000"),
            "{}",
            summary.result
        );
        assert_eq!(gate.unrecorded, 0);
    }

    /// A flood of refusals writes at most a second's worth of entries (each a synced write
    /// under the database's lock), and an operator's entry is always written.
    #[test]
    fn a_flood_of_refusals_writes_a_bounded_number_of_entries() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(Some(dir.path().join(crate::rundb::FILE_NAME)));
        for i in 0..500 {
            store.record(&refusal(&format!("10.0.0.9:{i}")));
        }
        store.record(&AuditEntry {
            role: "operator".into(),
            status: 200,
            result: "ok".into(),
            ..refusal("127.0.0.1:5")
        });
        let trail = store.with(|db| db.audit_list(1_000)).unwrap().unwrap();
        let refused = trail
            .iter()
            .filter(|e| e["role"] == UNAUTHENTICATED)
            .count() as u64;
        assert!(
            refused <= 3 * UNAUTHENTICATED_PER_SECOND + 2,
            "{refused} refusals written one by one"
        );
        assert_eq!(trail[0]["role"], "operator", "the operator's entry, newest");
        // As the server stops, the rest is summed: every refusal is in the trail, one by one
        // or in a count.
        drop(store);
        let db = RunDb::open(&dir.path().join(crate::rundb::FILE_NAME)).unwrap();
        let trail = db.audit_list(1_000).unwrap();
        let mut accounted = 0;
        for e in trail.iter().filter(|e| e["role"] == UNAUTHENTICATED) {
            accounted += if e["action"] == SUMMED_REFUSALS {
                let text = e["result"].as_str().unwrap();
                text.split(' ').next().unwrap().parse::<u64>().unwrap()
            } else {
                1
            };
        }
        assert_eq!(accounted, 500);
    }
}
