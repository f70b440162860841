//! Conditions: what the detector and the beam were doing during runs (high voltage,
//! temperature, beam energy), posted as key/value pairs (`POST /api/conditions`), kept with
//! their time in the run database, and dumped at each run's start and end into its sheet
//! (`summary.json`'s `conditions.begin` / `conditions.end`: the latest value of every key at
//! that moment, as MIDAS dumps its ODB and EUDAQ2 writes begin/end-of-run records).
//!
//! A condition keeps its value until the next post of its key, across runs: the temperature
//! posted during run 4 is still the temperature when run 5 starts.

use rusqlite::params;
use serde_json::{json, Map, Value};

use super::{sql_limit, RunDb, RunDbError};

/// Most keys in one post.
pub const MAX_KEYS_PER_POST: usize = 64;
/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 64;
/// Longest string value, in bytes.
pub const MAX_VALUE_BYTES: usize = 256;
/// Condition entries kept: older ones are deleted as new ones come.
pub const CONDITIONS_KEEP: i64 = 1_000_000;
/// Distinct keys kept: a post that would add more is refused
/// ([`RunDbError::TooManyConditionKeys`]), so that the latest values (`GET /api/conditions`,
/// and each run's sheet at its start and end) stay a bounded list.
pub const MAX_CONDITION_KEYS: u64 = 1_000;

/// The distinct keys of `conditions` as the CTE `keys(key)`, found by a skip-scan of the
/// `conditions_by_key` index (one seek per key; the last row is NULL), for the queries below.
macro_rules! keys_skip_scan {
    () => {
        "WITH RECURSIVE keys(key) AS (
    SELECT MIN(key) FROM conditions
    UNION ALL
    SELECT (SELECT MIN(key) FROM conditions WHERE key > keys.key) FROM keys
    WHERE keys.key IS NOT NULL)
"
    };
}

/// Each key's latest entry posted at or before `?1` (by posting time, then the later post), in
/// key order: the keys found by one index seek each (a skip-scan of `conditions_by_key`), then
/// each key's entry by one more, so the work grows with the keys (at most
/// [`MAX_CONDITION_KEYS`]), not with the entries kept (up to [`CONDITIONS_KEEP`]). A `GROUP BY
/// key` over the table read all of them: 1.8 s at a million entries, under the database's
/// lock, at every `GET /api/conditions` and every run's start and end.
const LATEST_CONDITIONS: &str = concat!(
    keys_skip_scan!(),
    "  SELECT c.key, c.value, c.at_ns, c.run_number FROM keys JOIN conditions c
    ON c.id = (SELECT id FROM conditions WHERE key = keys.key AND at_ns <= ?1
               ORDER BY at_ns DESC, id DESC LIMIT 1)
  ORDER BY c.key"
);

/// The distinct keys, counted by the same skip-scan (one index seek per key, not a read of
/// every entry).
const COUNT_CONDITION_KEYS: &str = concat!(keys_skip_scan!(), "  SELECT COUNT(key) FROM keys");

/// What is wrong with a post of conditions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConditionsError {
    /// The body is not a JSON object.
    #[error(
        "conditions are one JSON object of key: value, e.g. {{\"hv_volts\": 1500, \
         \"beam\": \"pi+ 120 GeV\"}} ({0})"
    )]
    NotAnObject(String),
    /// An empty object.
    #[error("no conditions in the post: give at least one key")]
    Empty,
    /// Too many keys.
    #[error("{0} conditions in one post: at most {MAX_KEYS_PER_POST}")]
    TooMany(usize),
    /// A key that is not a short word.
    #[error(
        "condition key {0:?}: 1 to {MAX_KEY_BYTES} bytes of letters, digits, `_`, `.` and `-`"
    )]
    BadKey(String),
    /// A value that is not a number, a short string or a boolean.
    #[error(
        "condition {0}: a number, true/false, or a string of at most {MAX_VALUE_BYTES} bytes \
         without control or invisible formatting characters"
    )]
    BadValue(String),
}

/// One condition: a key and its value (a number, a string or a boolean).
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The key (`hv_volts`, `temperature_c`, `beam.energy_gev`).
    pub key: String,
    /// The value.
    pub value: Value,
}

/// Who posted conditions, when, for which run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedBy {
    /// The run prepared or in progress.
    pub run_number: u32,
    /// When, nanoseconds since the Unix epoch.
    pub at_ns: u64,
    /// The role.
    pub role: String,
    /// From where.
    pub peer: String,
}

/// The conditions of a post's body (`{"hv_volts": 1500, "beam": "pi+ 120 GeV"}`), checked.
pub fn parse(body: &[u8]) -> Result<Vec<Condition>, ConditionsError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| ConditionsError::NotAnObject(e.to_string()))?;
    let Value::Object(map) = v else {
        return Err(ConditionsError::NotAnObject("not an object".into()));
    };
    if map.is_empty() {
        return Err(ConditionsError::Empty);
    }
    if map.len() > MAX_KEYS_PER_POST {
        return Err(ConditionsError::TooMany(map.len()));
    }
    map.into_iter()
        .map(|(key, value)| {
            let key_ok = !key.is_empty()
                && key.len() <= MAX_KEY_BYTES
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
            if !key_ok {
                return Err(ConditionsError::BadKey(key.chars().take(80).collect()));
            }
            let value_ok = match &value {
                Value::Number(n) => n.as_f64().is_some_and(f64::is_finite),
                Value::Bool(_) => true,
                Value::String(s) => {
                    s.len() <= MAX_VALUE_BYTES && !s.chars().any(rodeo_control::config::hides_text)
                }
                _ => false,
            };
            if !value_ok {
                return Err(ConditionsError::BadValue(key));
            }
            Ok(Condition { key, value })
        })
        .collect()
}

impl RunDb {
    /// Records `conditions` as posted by `by` (one transaction; the oldest entries beyond
    /// [`CONDITIONS_KEEP`] go).
    pub fn add_conditions(
        &self,
        by: &PostedBy,
        conditions: &[Condition],
    ) -> Result<(), RunDbError> {
        let tx = self.conn.unchecked_transaction().map_err(self.err())?;
        let mut new = 0u64;
        for c in conditions {
            let known: bool = tx
                .query_row(
                    "SELECT EXISTS(SELECT 1 FROM conditions WHERE key = ?1)",
                    [&c.key],
                    |r| r.get(0),
                )
                .map_err(self.err())?;
            new += u64::from(!known);
        }
        if new > 0 {
            let known: i64 = tx
                .query_row(COUNT_CONDITION_KEYS, [], |r| r.get(0))
                .map_err(self.err())?;
            let known = known.max(0) as u64;
            if known + new > MAX_CONDITION_KEYS {
                return Err(RunDbError::TooManyConditionKeys { known, new });
            }
        }
        for c in conditions {
            tx.execute(
                "INSERT INTO conditions (run_number, at_ns, key, value, role, peer)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    by.run_number,
                    by.at_ns as i64,
                    c.key,
                    c.value.to_string(),
                    by.role,
                    by.peer
                ],
            )
            .map_err(self.err())?;
        }
        let id = tx.last_insert_rowid();
        tx.execute(
            "DELETE FROM conditions WHERE id <= ?1",
            [id - CONDITIONS_KEEP],
        )
        .map_err(self.err())?;
        tx.commit().map_err(self.err())
    }

    /// The latest value of every key posted at or before `at_ns` (`u64::MAX`: now), as
    /// `{key: value}`.
    pub fn conditions_as_of(&self, at_ns: u64) -> Result<Map<String, Value>, RunDbError> {
        Ok(self
            .latest_conditions(at_ns)?
            .into_iter()
            .map(|(k, v)| (k, v["value"].clone()))
            .collect())
    }

    /// The latest value of every key now, each as `{value, at_ns, run_number}` (`GET
    /// /api/conditions`).
    pub fn conditions_now(&self) -> Result<Map<String, Value>, RunDbError> {
        self.latest_conditions(u64::MAX)
    }

    fn latest_conditions(&self, at_ns: u64) -> Result<Map<String, Value>, RunDbError> {
        let mut stmt = self.conn.prepare(LATEST_CONDITIONS).map_err(self.err())?;
        let limit = i64::try_from(at_ns).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map([limit], |r| {
                let value: String = r.get(1)?;
                Ok((
                    r.get::<_, String>(0)?,
                    json!({
                        "value": stored_value(value),
                        "at_ns": r.get::<_, i64>(2)?,
                        "run_number": r.get::<_, u32>(3)?,
                    }),
                ))
            })
            .map_err(self.err())?;
        rows.collect::<Result<Map<_, _>, _>>().map_err(self.err())
    }

    /// The newest `limit` conditions posted during run `n`, oldest first.
    pub fn conditions_of_run(&self, n: u32, limit: usize) -> Result<Vec<Value>, RunDbError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT at_ns, key, value, role, peer FROM (SELECT id, at_ns, key, value, role,
                 peer FROM conditions WHERE run_number = ?1 ORDER BY id DESC LIMIT ?2)
                 ORDER BY id",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![n, sql_limit(limit)], |r| {
                let value: String = r.get(2)?;
                Ok(json!({
                    "at_ns": r.get::<_, i64>(0)?,
                    "key": r.get::<_, String>(1)?,
                    "value": stored_value(value),
                    "role": r.get::<_, String>(3)?,
                    "peer": r.get::<_, String>(4)?,
                }))
            })
            .map_err(self.err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.err())
    }
}

/// A value as stored (JSON text) back into JSON; a text that does not parse (written by hand
/// into the database) is kept as a string.
fn stored_value(text: String) -> Value {
    serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(run_number: u32, at_ns: u64) -> PostedBy {
        PostedBy {
            run_number,
            at_ns,
            role: "operator".into(),
            peer: "127.0.0.1:5".into(),
        }
    }

    #[test]
    fn a_post_is_an_object_of_short_keys_and_scalar_values() {
        let c = parse(br#"{"hv_volts": 1500, "beam": "pi+ 120 GeV", "magnet.on": true}"#).unwrap();
        assert_eq!(c.len(), 3);
        assert!(matches!(
            parse(b"[1, 2]"),
            Err(ConditionsError::NotAnObject(_))
        ));
        assert!(matches!(
            parse(b"{\"hv\": "),
            Err(ConditionsError::NotAnObject(_))
        ));
        assert_eq!(parse(b"{}"), Err(ConditionsError::Empty));
        assert!(matches!(
            parse(br#"{"bad key": 1}"#),
            Err(ConditionsError::BadKey(_))
        ));
        assert!(matches!(
            parse(br#"{"hv": {"a": 1}}"#),
            Err(ConditionsError::BadValue(_))
        ));
        assert!(matches!(
            parse(br#"{"hv": null}"#),
            Err(ConditionsError::BadValue(_))
        ));
        let long = format!(r#"{{"note": "{}"}}"#, "x".repeat(MAX_VALUE_BYTES + 1));
        assert!(matches!(
            parse(long.as_bytes()),
            Err(ConditionsError::BadValue(_))
        ));
        let many: Map<String, Value> = (0..=MAX_KEYS_PER_POST)
            .map(|i| (format!("k{i}"), json!(i)))
            .collect();
        assert_eq!(
            parse(Value::Object(many).to_string().as_bytes()),
            Err(ConditionsError::TooMany(MAX_KEYS_PER_POST + 1))
        );
    }

    #[test]
    fn the_latest_value_of_each_key_as_of_a_moment_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let db = RunDb::open_in(dir.path()).unwrap();
        db.add_conditions(&by(4, 100), &parse(br#"{"hv": 1500, "t": 21.5}"#).unwrap())
            .unwrap();
        db.add_conditions(&by(4, 200), &parse(br#"{"hv": 1550}"#).unwrap())
            .unwrap();
        db.add_conditions(&by(5, 300), &parse(br#"{"t": 22.0}"#).unwrap())
            .unwrap();
        let at = |t| Value::Object(db.conditions_as_of(t).unwrap());
        assert_eq!(at(50), json!({}));
        assert_eq!(at(150), json!({"hv": 1500, "t": 21.5}));
        assert_eq!(at(250), json!({"hv": 1550, "t": 21.5}));
        assert_eq!(at(u64::MAX), json!({"hv": 1550, "t": 22.0}));
        let now = db.conditions_now().unwrap();
        assert_eq!(now["t"]["run_number"], 5);
        assert_eq!(now["hv"]["at_ns"], 200);
        let run4 = db.conditions_of_run(4, usize::MAX).unwrap();
        assert_eq!(run4.len(), 3);
        assert_eq!(run4[2]["key"], "hv");
        assert_eq!(run4[2]["value"], 1550);
        assert_eq!(run4[0]["role"], "operator");
    }

    /// The latest entry of each key by posting time (the later post on a tie), as a brute
    /// force over every post finds it, at many moments; and the query seeks the index, never
    /// reads the whole table (its plan has no scan of `conditions`).
    #[test]
    fn the_latest_values_are_found_by_seeks_not_a_scan() {
        let dir = tempfile::tempdir().unwrap();
        let db = RunDb::open_in(dir.path()).unwrap();
        let mut posts: Vec<(u64, String, i64)> = Vec::new();
        for i in 0..200u64 {
            // Five keys, times that repeat (two posts at one moment) and interleave.
            let (key, at) = (format!("k{}", i % 5), 10 * (i / 2));
            let value = i as i64;
            let body = format!(r#"{{"{key}": {value}}}"#);
            db.add_conditions(&by(1, at), &parse(body.as_bytes()).unwrap())
                .unwrap();
            posts.push((at, key, value));
        }
        for at in [0u64, 5, 10, 15, 333, 990, 995, 2000] {
            let mut want = Map::new();
            for (t, key, value) in &posts {
                if *t <= at {
                    want.insert(key.clone(), json!(value)); // later posts overwrite
                }
            }
            assert_eq!(db.conditions_as_of(at).unwrap(), want, "at {at}");
        }
        let plan: Vec<String> = db
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {LATEST_CONDITIONS}"))
            .unwrap()
            .query_map([0i64], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().all(|step| !step.starts_with("SCAN conditions")),
            "{plan:?}"
        );
    }

    #[test]
    fn keys_beyond_the_limit_are_refused_and_a_run_serves_its_newest_entries() {
        let dir = tempfile::tempdir().unwrap();
        let db = RunDb::open_in(dir.path()).unwrap();
        let keys: Vec<Condition> = (0..MAX_CONDITION_KEYS)
            .map(|i| Condition {
                key: format!("k{i}"),
                value: json!(i),
            })
            .collect();
        db.add_conditions(&by(1, 10), &keys).unwrap();
        let more = parse(br#"{"k5": 1, "fresh": 2, "other": 3}"#).unwrap();
        match db.add_conditions(&by(1, 20), &more) {
            Err(RunDbError::TooManyConditionKeys { known, new }) => {
                assert_eq!((known, new), (MAX_CONDITION_KEYS, 2));
            }
            other => panic!("a post past the key limit was taken: {other:?}"),
        }
        // Nothing of the refused post was written; a known key still takes a new value.
        assert_eq!(
            db.conditions_now().unwrap().len() as u64,
            MAX_CONDITION_KEYS
        );
        db.add_conditions(&by(1, 30), &parse(br#"{"k5": 55}"#).unwrap())
            .unwrap();
        assert_eq!(db.conditions_now().unwrap()["k5"]["value"], 55);
        let newest = db.conditions_of_run(1, 2).unwrap();
        assert_eq!(newest.len(), 2);
        assert_eq!(newest[0]["key"], format!("k{}", MAX_CONDITION_KEYS - 1));
        assert_eq!(newest[1]["value"], 55);
    }
}
