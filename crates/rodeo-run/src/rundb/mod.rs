//! The run database: one SQLite file per output directory (`<output>/runs.sqlite`) that
//! remembers every run: its number, when it started and stopped, who started it, the
//! configuration it ran with (text and hash), its balance sheet and the files it wrote (size
//! and Adler-32 of each).
//!
//! # Schema (version 4, `PRAGMA user_version = 4`)
//!
//! ```text
//! runs(run_number INTEGER PRIMARY KEY, started_at_ns, stopped_at_ns, started_by, config_toml,
//!      config_hash, l1_accepts, accepted, rejected, forced_accepts, partial_events,
//!      events_written, bytes_written, balanced, reason, status, summary_json, stopped_by,
//!      comment, run_type, shifter)
//! files(run_number, path, size_bytes, adler32, events, PRIMARY KEY (run_number, path))
//! audit(id INTEGER PRIMARY KEY, at_ns, role, peer, tls, action, run_number, status, result)
//! comments(id INTEGER PRIMARY KEY, run_number, at_ns, role, peer, text)
//! conditions(id INTEGER PRIMARY KEY, run_number, at_ns, key, value, role, peer)
//! ```
//!
//! `status` is `ok`, `failed` (the run ended with an error or an unbalanced sheet) or
//! `crashed` (found at the next start without a record: the process died; its files found
//! and verified then). `summary_json` is the balance sheet exactly as `rodeo run --json`
//! printed it. `started_by` / `stopped_by` say who started and stopped a run (for a served
//! run the role and peer address of the HTTP request). `audit` is the HTTP API's trail: every
//! command, acknowledgement, comment and configuration change, accepted or refused (the last
//! [`AUDIT_KEEP`] by a token's role kept, and apart from them the last
//! [`UNAUTHENTICATED_KEEP`] refusals of requests without a valid token, so that a flood of
//! those cannot push the operators' entries out; index `audit_by_role`); `comments` the
//! operators' notes on runs; `comment`, `run_type` and
//! `shifter` the run's words given at its start (`[run]`); `conditions` the detector's and the
//! beam's conditions posted during runs (`POST /api/conditions`: high voltage, temperature,
//! beam energy), each value as JSON text with its time ([`conditions`]).
//!
//! # Versions and migrations
//!
//! [`RunDb::open`] brings an older file up to [`SCHEMA_VERSION`] step by step in one
//! transaction (`MIGRATIONS[v]` takes version `v` to `v + 1`), and refuses a file written by a
//! newer rodeo (its version above ours) instead of guessing.
//!
//! Why SQLite (rusqlite, bundled): one file beside the data, transactions, readable by any
//! tool (`sqlite3 runs.sqlite`), no server to run; `bundled` builds the library from source so
//! a fresh machine needs nothing installed.

pub mod conditions;

use std::path::{Path, PathBuf};

use rodeo_control::config::PartitionConfig;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Value};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 4;

/// Entries of the audit trail by a token's role kept: older ones are deleted as new ones come.
pub const AUDIT_KEEP: i64 = 100_000;

/// Refusals of requests without a valid token kept in the audit trail, apart from the entries
/// of [`AUDIT_KEEP`]: a flood of them (anyone can send one) neither grows the database without
/// end nor pushes the operators' entries out.
pub const UNAUTHENTICATED_KEEP: i64 = 10_000;

/// The audit trail's role of a request without a valid token.
pub const UNAUTHENTICATED: &str = "unauthenticated";

/// The audit trail is trimmed to its limits once per this many entries (each trim walks the
/// kept entries of one class by index).
const AUDIT_TRIM_EVERY: i64 = 64;

/// Comments kept on one run: a further one is refused ([`RunDb::comment`] says so), so that a
/// token holder cannot grow one run's record (served whole at `GET /api/runs/N`) without end.
pub const MAX_COMMENTS_PER_RUN: u64 = 1_000;

/// Files, comments and conditions of each run in a page of `GET /api/runs`: the first files
/// by name, the newest comments and conditions (oldest first); `files_total`,
/// `comments_total` and `conditions_total` count them all.
pub const LISTED_PER_RUN: usize = 10;

/// Conditions of one run served at `GET /api/runs/N` and `GET /api/conditions`: the newest,
/// oldest first (a run may have up to [`conditions::CONDITIONS_KEEP`] of them).
pub const SERVED_CONDITIONS: usize = 1_000;

/// Files of one run served at `GET /api/runs/N`, the first by name (a day's run at 1 GB/s
/// in 1 GiB files has ~80,000; `files_total` counts them all).
pub const SERVED_FILES: usize = 10_000;

/// Runs in one page of `GET /api/runs` when the request names no `limit`.
pub const RUNS_PAGE: usize = 100;

/// The largest page of `GET /api/runs` (`?limit=N`).
pub const RUNS_PAGE_MAX: usize = 1_000;

/// How much of each run's lists (files, comments, conditions) an answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerRun {
    /// Files, the first by name.
    pub files: usize,
    /// Comments, the newest.
    pub comments: usize,
    /// Conditions, the newest.
    pub conditions: usize,
}

impl PerRun {
    /// A page of `GET /api/runs`: [`LISTED_PER_RUN`] of each.
    pub const LISTED: PerRun = PerRun {
        files: LISTED_PER_RUN,
        comments: LISTED_PER_RUN,
        conditions: LISTED_PER_RUN,
    };
    /// `GET /api/runs/N`: [`SERVED_FILES`], every comment, [`SERVED_CONDITIONS`].
    pub const SERVED: PerRun = PerRun {
        files: SERVED_FILES,
        comments: MAX_COMMENTS_PER_RUN as usize,
        conditions: SERVED_CONDITIONS,
    };
    /// Everything (`rodeo runs --json`, which reads the file itself).
    pub const ALL: PerRun = PerRun {
        files: usize::MAX,
        comments: usize::MAX,
        conditions: usize::MAX,
    };
}

/// The database file's name in an output directory.
pub const FILE_NAME: &str = "runs.sqlite";

/// `MIGRATIONS[v]` takes a database from version `v` to `v + 1`.
const MIGRATIONS: [&str; 4] = [
    // 0 -> 1: the first schema.
    "CREATE TABLE runs (
        run_number INTEGER PRIMARY KEY,
        started_at_ns INTEGER,
        stopped_at_ns INTEGER,
        started_by TEXT NOT NULL,
        config_toml TEXT NOT NULL,
        config_hash TEXT NOT NULL,
        l1_accepts INTEGER NOT NULL DEFAULT 0,
        accepted INTEGER NOT NULL DEFAULT 0,
        rejected INTEGER NOT NULL DEFAULT 0,
        forced_accepts INTEGER NOT NULL DEFAULT 0,
        partial_events INTEGER NOT NULL DEFAULT 0,
        events_written INTEGER NOT NULL DEFAULT 0,
        bytes_written INTEGER NOT NULL DEFAULT 0,
        balanced INTEGER NOT NULL,
        reason TEXT,
        status TEXT NOT NULL,
        summary_json TEXT NOT NULL
    );
    CREATE TABLE files (
        run_number INTEGER NOT NULL REFERENCES runs(run_number),
        path TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        adler32 INTEGER NOT NULL,
        events INTEGER NOT NULL,
        PRIMARY KEY (run_number, path)
    );",
    // 1 -> 2: who stopped a run, the HTTP API's audit trail, comments on runs (issue 38).
    "ALTER TABLE runs ADD COLUMN stopped_by TEXT;
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ns INTEGER NOT NULL,
        role TEXT NOT NULL,
        peer TEXT NOT NULL,
        tls INTEGER NOT NULL,
        action TEXT NOT NULL,
        run_number INTEGER,
        status INTEGER NOT NULL,
        result TEXT NOT NULL
    );
    CREATE TABLE comments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_number INTEGER NOT NULL,
        at_ns INTEGER NOT NULL,
        role TEXT NOT NULL,
        peer TEXT NOT NULL,
        text TEXT NOT NULL
    );
    CREATE INDEX comments_by_run ON comments (run_number);",
    // 2 -> 3: the run's words and the conditions (issue 39).
    "ALTER TABLE runs ADD COLUMN comment TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN run_type TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN shifter TEXT NOT NULL DEFAULT '';
    CREATE TABLE conditions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_number INTEGER NOT NULL,
        at_ns INTEGER NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        role TEXT NOT NULL,
        peer TEXT NOT NULL
    );
    CREATE INDEX conditions_by_key ON conditions (key, at_ns);
    CREATE INDEX conditions_by_run ON conditions (run_number);",
    // 3 -> 4: the audit trail kept per class (requests without a token apart).
    "CREATE INDEX audit_by_role ON audit (role, id);",
];

/// What can go wrong with the run database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunDbError {
    /// SQLite refused (open, query, write).
    #[error("run database {path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The file is not an SQLite database (damaged, or another file under the name).
    #[error(
        "run database {path} is not an SQLite database (damaged, or another file with its \
         name): move it aside; the next start makes a new one and records each run directory \
         again from the summary.json it kept"
    )]
    NotADatabase {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The file was written by a newer rodeo.
    #[error(
        "run database {path} has schema version {found}, newer than this rodeo's {SCHEMA_VERSION}: \
         use a newer rodeo, or another output directory"
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Its version.
        found: i64,
    },
    /// A post of conditions would make more distinct keys than the database keeps.
    #[error(
        "{known} condition keys are known and this post adds {new}: at most \
         {max}; post values of known keys (`GET /api/conditions` lists them)",
        max = conditions::MAX_CONDITION_KEYS
    )]
    TooManyConditionKeys {
        /// Distinct keys in the database.
        known: u64,
        /// New keys in the post.
        new: u64,
    },
}

/// One file of a run, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    /// Its path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Adler-32 of the whole file (for a file its logger cross-checked: the sum its bytes must
    /// have, taken as they were written; `rodeo_run::output::file_records`).
    pub adler32: u32,
    /// Events in it: its end record's count for a file its logger cross-checked, else the good
    /// events read back (`rodeo verify`'s count).
    pub events: u64,
}

/// What [`RunDb::record`] stores about one run.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The run number.
    pub run_number: u32,
    /// Start, nanoseconds since the Unix epoch (None: unknown, e.g. a crashed run).
    pub started_at_ns: Option<u64>,
    /// Stop, nanoseconds since the Unix epoch.
    pub stopped_at_ns: Option<u64>,
    /// Who or what started it (`rodeo run`, `http`, `user@host`...).
    pub started_by: String,
    /// The configuration it ran with (TOML).
    pub config_toml: String,
    /// `ok`, `failed` or `crashed`.
    pub status: String,
    /// The balance sheet as `rodeo run --json` prints it.
    pub summary: Value,
    /// Its files.
    pub files: Vec<FileRecord>,
}

/// One entry of the audit trail: who tried what, from where, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// When, nanoseconds since the Unix epoch.
    pub at_ns: u64,
    /// `observer`, `operator`, `expert`, or `unauthenticated` (no token, or a wrong one).
    pub role: String,
    /// The peer's address (`10.0.0.2:51234`).
    pub peer: String,
    /// Over HTTPS.
    pub tls: bool,
    /// What was asked: `command start`, `ack l1-rate-low`, `config 3f2a…`, `comment run 4`.
    pub action: String,
    /// The run it concerned (the run prepared or in progress then).
    pub run_number: Option<u32>,
    /// The HTTP status answered.
    pub status: u16,
    /// `ok`, or why it was refused or failed.
    pub result: String,
}

/// One comment on a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// The run.
    pub run_number: u32,
    /// When, nanoseconds since the Unix epoch.
    pub at_ns: u64,
    /// Who wrote it: the role.
    pub role: String,
    /// From where.
    pub peer: String,
    /// The text.
    pub text: String,
}

/// An open run database.
#[derive(Debug)]
pub struct RunDb {
    conn: Connection,
    path: PathBuf,
}

impl RunDb {
    /// Opens (creating if need be) `<dir>/runs.sqlite`, migrating it to [`SCHEMA_VERSION`].
    pub fn open_in(dir: &Path) -> Result<RunDb, RunDbError> {
        RunDb::open(&dir.join(FILE_NAME))
    }

    /// Opens (creating if need be) the database at `path`, migrating it to
    /// [`SCHEMA_VERSION`].
    pub fn open(path: &Path) -> Result<RunDb, RunDbError> {
        let err = |source: rusqlite::Error| {
            let path = path.to_path_buf();
            if source.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) {
                RunDbError::NotADatabase { path, source }
            } else {
                RunDbError::Sqlite { path, source }
            }
        };
        let mut conn = Connection::open(path).map_err(err)?;
        // Several processes (a service and `rodeo runs`) may open it: wait for a lock.
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(err)?;
        if version > SCHEMA_VERSION {
            return Err(RunDbError::TooNew {
                path: path.to_path_buf(),
                found: version,
            });
        }
        if version < SCHEMA_VERSION {
            let tx = conn.transaction().map_err(err)?;
            for step in &MIGRATIONS[version.max(0) as usize..] {
                tx.execute_batch(step).map_err(err)?;
            }
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(err)?;
            tx.commit().map_err(err)?;
        }
        Ok(RunDb {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> RunDbError + '_ {
        move |source| RunDbError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The largest run number recorded.
    pub fn last_run_number(&self) -> Result<Option<u32>, RunDbError> {
        self.conn
            .query_row("SELECT MAX(run_number) FROM runs", [], |r| {
                r.get::<_, Option<u32>>(0)
            })
            .map_err(self.err())
    }

    /// Whether run `n` is recorded.
    pub fn has_run(&self, n: u32) -> Result<bool, RunDbError> {
        self.conn
            .query_row("SELECT 1 FROM runs WHERE run_number = ?1", [n], |_| Ok(()))
            .optional()
            .map(|o| o.is_some())
            .map_err(self.err())
    }

    /// Records one run (replacing an earlier record of the same number) with its files, in one
    /// transaction.
    pub fn record(&mut self, r: &RunRecord) -> Result<(), RunDbError> {
        let path = self.path.clone();
        let err = |source| RunDbError::Sqlite {
            path: path.clone(),
            source,
        };
        let s = &r.summary;
        let n = |k: &str| s[k].as_u64().unwrap_or(0) as i64;
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute("DELETE FROM files WHERE run_number = ?1", [r.run_number])
            .map_err(err)?;
        tx.execute(
            "INSERT OR REPLACE INTO runs (run_number, started_at_ns, stopped_at_ns, started_by,
                config_toml, config_hash, l1_accepts, accepted, rejected, forced_accepts,
                partial_events, events_written, bytes_written, balanced, reason, status,
                summary_json, comment, run_type, shifter)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                ?18, ?19, ?20)",
            params![
                r.run_number,
                r.started_at_ns.map(|v| v as i64),
                r.stopped_at_ns.map(|v| v as i64),
                r.started_by,
                r.config_toml,
                config_hash(&r.config_toml),
                n("l1_accepts"),
                n("accepted"),
                n("rejected"),
                n("forced_accepts"),
                n("partial_events"),
                n("events_written"),
                n("bytes_written"),
                s["balanced"].as_bool().unwrap_or(false),
                s["reason"].as_str(),
                r.status,
                s.to_string(),
                s["comment"].as_str().unwrap_or(""),
                s["run_type"].as_str().unwrap_or(""),
                s["shifter"].as_str().unwrap_or(""),
            ],
        )
        .map_err(err)?;
        for f in &r.files {
            tx.execute(
                "INSERT OR REPLACE INTO files (run_number, path, size_bytes, adler32, events)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    r.run_number,
                    f.path.to_string_lossy(),
                    f.size_bytes as i64,
                    f.adler32,
                    f.events as i64
                ],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Sets who started and who stopped run `n` (a service knows it only once the run's
    /// record is written).
    pub fn set_actors(
        &self,
        n: u32,
        started_by: &str,
        stopped_by: Option<&str>,
    ) -> Result<(), RunDbError> {
        self.conn
            .execute(
                "UPDATE runs SET started_by = ?2, stopped_by = ?3 WHERE run_number = ?1",
                params![n, started_by, stopped_by],
            )
            .map(|_| ())
            .map_err(self.err())
    }

    /// Appends `e` to the audit trail (the oldest entries beyond [`AUDIT_KEEP`], or beyond
    /// [`UNAUTHENTICATED_KEEP`] for requests without a valid token, go).
    pub fn audit(&self, e: &AuditEntry) -> Result<(), RunDbError> {
        self.conn
            .execute(
                "INSERT INTO audit (at_ns, role, peer, tls, action, run_number, status, result)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    e.at_ns as i64,
                    e.role,
                    e.peer,
                    e.tls,
                    e.action,
                    e.run_number,
                    e.status,
                    e.result
                ],
            )
            .map_err(self.err())?;
        let id = self.conn.last_insert_rowid();
        if id % AUDIT_TRIM_EVERY != 0 {
            return Ok(());
        }
        // Each class keeps its newest entries: the oldest beyond the limit go.
        for (class, keep) in [
            ("role = ?1", UNAUTHENTICATED_KEEP),
            ("role != ?1", AUDIT_KEEP),
        ] {
            self.conn
                .execute(
                    &format!(
                        "DELETE FROM audit WHERE {class} AND id <= (SELECT id FROM audit \
                         WHERE {class} ORDER BY id DESC LIMIT 1 OFFSET ?2)"
                    ),
                    params![UNAUTHENTICATED, keep],
                )
                .map_err(self.err())?;
        }
        Ok(())
    }

    /// The last `limit` audit entries, newest first, as JSON objects (`GET /api/audit`).
    pub fn audit_list(&self, limit: u32) -> Result<Vec<Value>, RunDbError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, at_ns, role, peer, tls, action, run_number, status, result
                 FROM audit ORDER BY id DESC LIMIT ?1",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([limit], |r| {
                Ok(json!({
                    "id": r.get::<_, i64>(0)?,
                    "at_ns": r.get::<_, i64>(1)?,
                    "role": r.get::<_, String>(2)?,
                    "peer": r.get::<_, String>(3)?,
                    "tls": r.get::<_, bool>(4)?,
                    "action": r.get::<_, String>(5)?,
                    "run_number": r.get::<_, Option<u32>>(6)?,
                    "status": r.get::<_, u16>(7)?,
                    "result": r.get::<_, String>(8)?,
                }))
            })
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }

    /// Adds a comment to run `c.run_number`; `false` (nothing written) when the run has
    /// [`MAX_COMMENTS_PER_RUN`] already.
    pub fn comment(&self, c: &Comment) -> Result<bool, RunDbError> {
        if self.count_of("comments", c.run_number)? >= MAX_COMMENTS_PER_RUN {
            return Ok(false);
        }
        self.conn
            .execute(
                "INSERT INTO comments (run_number, at_ns, role, peer, text)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![c.run_number, c.at_ns as i64, c.role, c.peer, c.text],
            )
            .map(|_| true)
            .map_err(self.err())
    }

    /// Rows of `table` (`files`, `comments` or `conditions`, each indexed by run) of run `n`.
    fn count_of(&self, table: &str, n: u32) -> Result<u64, RunDbError> {
        self.conn
            .query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE run_number = ?1"),
                [n],
                |r| r.get::<_, i64>(0),
            )
            .map(|c| c.max(0) as u64)
            .map_err(self.err())
    }

    /// The newest `limit` comments on run `n`, oldest first.
    fn comments_json(&self, n: u32, limit: usize) -> Result<Vec<Value>, RunDbError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT at_ns, role, peer, text FROM (SELECT id, at_ns, role, peer, text
                 FROM comments WHERE run_number = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![n, sql_limit(limit)], |r| {
                Ok(json!({
                    "at_ns": r.get::<_, i64>(0)?,
                    "role": r.get::<_, String>(1)?,
                    "peer": r.get::<_, String>(2)?,
                    "text": r.get::<_, String>(3)?,
                }))
            })
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }

    /// Every run, newest first, as JSON objects (the form of `rodeo runs --json`), each with
    /// all its files, comments and conditions.
    pub fn list(&self) -> Result<Vec<Value>, RunDbError> {
        self.list_page(None, usize::MAX, PerRun::ALL)
    }

    /// At most `limit` runs numbered below `before` (all: `None`), newest first, as JSON
    /// objects (the form of `GET /api/runs`), each with `per` of its files, comments and
    /// conditions and their totals (`files_total`, `comments_total`,
    /// `conditions_total`).
    pub fn list_page(
        &self,
        before: Option<u32>,
        limit: usize,
        per: PerRun,
    ) -> Result<Vec<Value>, RunDbError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "{SELECT_RUN} WHERE run_number < ?1 ORDER BY run_number DESC LIMIT ?2"
            ))
            .map_err(self.err())?;
        let below = before.map_or(i64::MAX, i64::from);
        let rows = stmt
            .query_map(params![below, sql_limit(limit)], run_json)
            .map_err(self.err())?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(self.err())?);
        }
        for r in &mut out {
            let n = r["run_number"].as_u64().unwrap_or(0) as u32;
            self.add_lists(r, n, per)?;
        }
        Ok(out)
    }

    /// `per` of run `n`'s files, comments and conditions into `run`, with their totals.
    fn add_lists(&self, run: &mut Value, n: u32, per: PerRun) -> Result<(), RunDbError> {
        run["files"] = Value::Array(self.files_json(n, per.files)?);
        // A count from the key's index alone (the bytes are the run's `bytes_written`).
        run["files_total"] = self.count_of("files", n)?.into();
        run["comments"] = Value::Array(self.comments_json(n, per.comments)?);
        run["comments_total"] = self.count_of("comments", n)?.into();
        run["conditions"] = Value::Array(self.conditions_of_run(n, per.conditions)?);
        run["conditions_total"] = self.count_of("conditions", n)?.into();
        Ok(())
    }

    /// One run with its full balance sheet, configuration and [`PerRun::SERVED`] of its
    /// files, comments (every one: at most [`MAX_COMMENTS_PER_RUN`]) and conditions, or None.
    pub fn get(&self, n: u32) -> Result<Option<Value>, RunDbError> {
        let run = self
            .conn
            .query_row(
                &format!("{SELECT_RUN} WHERE run_number = ?1"),
                [n],
                run_json,
            )
            .optional()
            .map_err(self.err())?;
        let Some(mut run) = run else {
            return Ok(None);
        };
        let (summary, config): (String, String) = self
            .conn
            .query_row(
                "SELECT summary_json, config_toml FROM runs WHERE run_number = ?1",
                [n],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(self.err())?;
        run["summary"] = serde_json::from_str(&summary).unwrap_or(Value::Null);
        // Hidden again as served: a record made before tokens were hidden on the way in.
        run["config_toml"] = Value::String(PartitionConfig::hide_tokens(&config));
        self.add_lists(&mut run, n, PerRun::SERVED)?;
        Ok(Some(run))
    }

    /// The first `limit` files of run `n` by name.
    fn files_json(&self, n: u32, limit: usize) -> Result<Vec<Value>, RunDbError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT path, size_bytes, adler32, events FROM files WHERE run_number = ?1
                 ORDER BY path LIMIT ?2",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![n, sql_limit(limit)], |r| {
                Ok(json!({
                    "path": r.get::<_, String>(0)?,
                    "size_bytes": r.get::<_, i64>(1)?,
                    "adler32": r.get::<_, u32>(2)?,
                    "events": r.get::<_, i64>(3)?,
                }))
            })
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }
}

/// `limit` as SQLite's LIMIT (`usize::MAX`: no limit, -1).
pub(super) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(-1)
}

const SELECT_RUN: &str = "SELECT run_number, started_at_ns, stopped_at_ns, started_by, config_hash,
    l1_accepts, accepted, rejected, forced_accepts, partial_events, events_written,
    bytes_written, balanced, reason, status, stopped_by, comment, run_type, shifter FROM runs";

fn run_json(r: &rusqlite::Row<'_>) -> rusqlite::Result<Value> {
    Ok(json!({
        "run_number": r.get::<_, u32>(0)?,
        "started_at_ns": r.get::<_, Option<i64>>(1)?,
        "stopped_at_ns": r.get::<_, Option<i64>>(2)?,
        "started_by": r.get::<_, String>(3)?,
        "config_hash": r.get::<_, String>(4)?,
        "l1_accepts": r.get::<_, i64>(5)?,
        "accepted": r.get::<_, i64>(6)?,
        "rejected": r.get::<_, i64>(7)?,
        "forced_accepts": r.get::<_, i64>(8)?,
        "partial_events": r.get::<_, i64>(9)?,
        "events_written": r.get::<_, i64>(10)?,
        "bytes_written": r.get::<_, i64>(11)?,
        "balanced": r.get::<_, bool>(12)?,
        "reason": r.get::<_, Option<String>>(13)?,
        "status": r.get::<_, String>(14)?,
        "stopped_by": r.get::<_, Option<String>>(15)?,
        "comment": r.get::<_, String>(16)?,
        "run_type": r.get::<_, String>(17)?,
        "shifter": r.get::<_, String>(18)?,
    }))
}

/// The configuration's hash: FNV-1a 64 of its text, as 16 hex digits (a fingerprint to tell
/// runs of the same configuration, not a security measure).
pub fn config_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Size and Adler-32 of a whole file, read in 1 MiB steps.
pub fn file_checksum(path: &Path) -> std::io::Result<(u64, u32)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut size, mut adler) = (0u64, rodeo_format::checksum::ADLER32_INIT);
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok((size, adler));
        }
        adler = rodeo_format::checksum::adler32(adler, &buf[..n]);
        size += n as u64;
    }
}

/// Nanoseconds since the Unix epoch now.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whether a comment or note would not show as itself in `rodeo runs` or on the page: a
/// control character other than a line break or a tab, or an invisible formatting one
/// ([`rodeo_control::config::hides_text`]: a U+202E stored as given printed the rest
/// reversed, a QA pass).
pub fn hides_text(text: &str) -> bool {
    text.chars()
        .any(|c| c != '\n' && c != '\t' && rodeo_control::config::hides_text(c))
}

#[cfg(test)]
mod tests;
