//! Tests of the run database: records, migrations, the audit trail, comments and pages.

use super::*;

fn record(n: u32, balanced: bool) -> RunRecord {
    RunRecord {
        run_number: n,
        started_at_ns: Some(1),
        stopped_at_ns: Some(2),
        started_by: "test".into(),
        config_toml: format!("[run]\nnumber = {n}\n"),
        status: if balanced { "ok" } else { "failed" }.into(),
        summary: json!({"run_number": n, "balanced": balanced, "l1_accepts": 10 * n,
                        "reason": if balanced { Value::Null } else { json!("disk full") }}),
        files: vec![FileRecord {
            path: format!("/data/run-{n}/a.data").into(),
            size_bytes: 100,
            adler32: 7,
            events: 3,
        }],
    }
}

/// A damaged database is refused with what to do, not only SQLite's words.
#[test]
fn a_file_that_is_not_a_database_is_refused_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FILE_NAME), [0x5au8; 5000]).unwrap();
    let Err(e) = RunDb::open_in(dir.path()) else {
        panic!("a file that is not a database was opened");
    };
    assert!(matches!(e, RunDbError::NotADatabase { .. }), "{e:?}");
    assert!(e.to_string().contains("move it aside"), "{e}");
}

#[test]
fn a_fresh_database_gets_the_schema_and_keeps_runs_across_opens() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut db = RunDb::open_in(dir.path()).unwrap();
        assert_eq!(db.last_run_number().unwrap(), None);
        db.record(&record(1, true)).unwrap();
        db.record(&record(2, false)).unwrap();
    }
    let db = RunDb::open_in(dir.path()).unwrap();
    assert_eq!(db.last_run_number().unwrap(), Some(2));
    let runs = db.list().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["run_number"], 2, "newest first");
    assert_eq!(runs[0]["balanced"], false);
    assert_eq!(runs[0]["reason"], "disk full");
    assert_eq!(runs[1]["l1_accepts"], 10);
    assert_eq!(runs[1]["files"][0]["events"], 3);
    let one = db.get(1).unwrap().unwrap();
    assert_eq!(one["summary"]["l1_accepts"], 10);
    assert!(db.get(3).unwrap().is_none());
    let v: i64 = db
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
}

#[test]
fn a_version_0_file_is_migrated_and_a_newer_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    // Version 0: an empty SQLite file someone made (user_version 0, no tables).
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE notes (x TEXT);")
        .unwrap();
    let mut db = RunDb::open(&path).unwrap();
    db.record(&record(5, true)).unwrap();
    drop(db);
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let e = RunDb::open(&path).unwrap_err();
    assert!(matches!(e, RunDbError::TooNew { found, .. } if found == SCHEMA_VERSION + 1));
    assert!(e.to_string().contains("newer"), "{e}");
}

#[test]
fn a_version_1_file_keeps_its_runs_and_gains_the_audit_trail_and_comments() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    {
        // A file as the previous rodeo left it: schema 1 with a run.
        let mut conn = Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        tx.execute_batch(MIGRATIONS[0]).unwrap();
        tx.pragma_update(None, "user_version", 1).unwrap();
        tx.commit().unwrap();
        conn.execute(
            "INSERT INTO runs (run_number, started_by, config_toml, config_hash, balanced,
             status, summary_json) VALUES (3, 'rodeo run (a@b)', '', '0', 1, 'ok', '{}')",
            [],
        )
        .unwrap();
    }
    let db = RunDb::open(&path).unwrap();
    let runs = db.list().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["started_by"], "rodeo run (a@b)");
    assert_eq!(runs[0]["stopped_by"], Value::Null);
    db.set_actors(3, "rodeo serve: operator from 127.0.0.1:5", Some("itself"))
        .unwrap();
    let entry = AuditEntry {
        at_ns: 7,
        role: "operator".into(),
        peer: "127.0.0.1:5".into(),
        tls: false,
        action: "command start".into(),
        run_number: Some(3),
        status: 200,
        result: "ok".into(),
    };
    db.audit(&entry).unwrap();
    db.audit(&AuditEntry {
        status: 401,
        role: "unauthenticated".into(),
        result: "no token".into(),
        ..entry
    })
    .unwrap();
    db.comment(&Comment {
        run_number: 3,
        at_ns: 9,
        role: "operator".into(),
        peer: "127.0.0.1:5".into(),
        text: "beam lost".into(),
    })
    .unwrap();
    drop(db);
    let db = RunDb::open(&path).unwrap();
    let v: i64 = db
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let one = db.get(3).unwrap().unwrap();
    assert_eq!(one["started_by"], "rodeo serve: operator from 127.0.0.1:5");
    assert_eq!(one["stopped_by"], "itself");
    assert_eq!(one["comments"][0]["text"], "beam lost");
    let audit = db.audit_list(10).unwrap();
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0]["status"], 401, "newest first");
    assert_eq!(audit[1]["action"], "command start");
    assert_eq!(db.audit_list(1).unwrap().len(), 1);
}

#[test]
fn recording_a_run_again_replaces_it_and_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = RunDb::open_in(dir.path()).unwrap();
    db.record(&record(1, false)).unwrap();
    let mut again = record(1, true);
    again.files.clear();
    db.record(&again).unwrap();
    let runs = db.list().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["balanced"], true);
    assert_eq!(runs[0]["files"].as_array().unwrap().len(), 0);
}

#[test]
fn config_hash_and_file_checksum() {
    assert_eq!(config_hash("a"), config_hash("a"));
    assert_ne!(config_hash("a"), config_hash("b"));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x");
    std::fs::write(&p, b"Wikipedia").unwrap();
    // Adler-32("Wikipedia") = 0x11E60398.
    assert_eq!(file_checksum(&p).unwrap(), (9, 0x11E6_0398));
}

/// A flood of refusals without a token (anyone can send them) is kept apart: it cannot
/// push an operator's entry out of the trail, and it is trimmed to its own limit.
#[test]
fn a_flood_of_refusals_without_a_token_keeps_the_operators_entries() {
    let dir = tempfile::tempdir().unwrap();
    let db = RunDb::open(&dir.path().join(FILE_NAME)).unwrap();
    db.conn.pragma_update(None, "synchronous", "OFF").unwrap();
    let operator = AuditEntry {
        at_ns: 1,
        role: "operator".into(),
        peer: "127.0.0.1:5".into(),
        tls: false,
        action: "command start".into(),
        run_number: Some(1),
        status: 200,
        result: "ok".into(),
    };
    db.audit(&operator).unwrap();
    let refused = AuditEntry {
        role: UNAUTHENTICATED.into(),
        status: 401,
        result: "no token".into(),
        ..operator.clone()
    };
    for _ in 0..UNAUTHENTICATED_KEEP + 3 * AUDIT_TRIM_EVERY {
        db.audit(&refused).unwrap();
    }
    let count = |class: &str| -> i64 {
        db.conn
            .query_row(
                &format!("SELECT COUNT(*) FROM audit WHERE {class}"),
                [UNAUTHENTICATED],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(count("role != ?1"), 1, "the operator's entry stays");
    let kept = count("role = ?1");
    assert!(
        (UNAUTHENTICATED_KEEP..UNAUTHENTICATED_KEEP + AUDIT_TRIM_EVERY).contains(&kept),
        "{kept}"
    );
}

/// A list of runs comes in pages (`before`, `limit`), each run with its newest comments and
/// conditions and their totals; a run takes at most [`MAX_COMMENTS_PER_RUN`] comments.
#[test]
fn runs_come_in_pages_and_a_run_takes_a_bounded_number_of_comments() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = RunDb::open(&dir.path().join(FILE_NAME)).unwrap();
    db.conn.pragma_update(None, "synchronous", "OFF").unwrap();
    for n in 1..=5 {
        db.record(&record(n, true)).unwrap();
    }
    let numbers = |runs: Vec<Value>| -> Vec<u64> {
        runs.iter()
            .map(|r| r["run_number"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        numbers(db.list_page(None, 2, PerRun::LISTED).unwrap()),
        [5, 4]
    );
    assert_eq!(
        numbers(db.list_page(Some(4), 2, PerRun::LISTED).unwrap()),
        [3, 2]
    );
    assert_eq!(
        numbers(db.list_page(Some(2), 100, PerRun::LISTED).unwrap()),
        [1]
    );
    assert_eq!(numbers(db.list().unwrap()), [5, 4, 3, 2, 1]);

    let comment = |i: u64| Comment {
        run_number: 3,
        at_ns: i,
        role: "operator".into(),
        peer: "127.0.0.1:5".into(),
        text: format!("note {i}"),
    };
    for i in 0..MAX_COMMENTS_PER_RUN {
        assert!(db.comment(&comment(i)).unwrap());
    }
    assert!(
        !db.comment(&comment(MAX_COMMENTS_PER_RUN)).unwrap(),
        "a comment past the limit was written"
    );
    let listed = &db.list_page(Some(4), 1, PerRun::LISTED).unwrap()[0];
    let texts = listed["comments"].as_array().unwrap();
    assert_eq!(texts.len(), LISTED_PER_RUN);
    assert_eq!(listed["comments_total"], MAX_COMMENTS_PER_RUN);
    assert_eq!(
        texts.last().unwrap()["text"],
        format!("note {}", MAX_COMMENTS_PER_RUN - 1),
        "the newest comment last"
    );
    let whole = db.get(3).unwrap().unwrap();
    assert_eq!(
        whole["comments"].as_array().unwrap().len() as u64,
        MAX_COMMENTS_PER_RUN
    );
    assert_eq!(whole["conditions_total"], 0);

    // A run of many files: a page names the first ten and counts them all.
    let mut many = record(6, true);
    many.files = (0..15)
        .map(|i| FileRecord {
            path: format!("/data/run-6/f{i:02}.data").into(),
            size_bytes: 1000,
            adler32: 1,
            events: 2,
        })
        .collect();
    db.record(&many).unwrap();
    let listed = &db.list_page(None, 1, PerRun::LISTED).unwrap()[0];
    assert_eq!(listed["files"].as_array().unwrap().len(), LISTED_PER_RUN);
    assert_eq!(listed["files_total"], 15);
    assert_eq!(
        db.get(6).unwrap().unwrap()["files"]
            .as_array()
            .unwrap()
            .len(),
        15
    );
    assert_eq!(db.list().unwrap()[0]["files"].as_array().unwrap().len(), 15);
}

/// A comment or note may hold line breaks and tabs, and text in any script, but no other
/// control character and no invisible formatting one (a U+202E printed the rest reversed).
#[test]
fn comments_that_would_hide_their_text_are_told_apart() {
    assert!(!super::hides_text(
        "HV scan\n\tsecteur 3 (Überprüfung), 測試"
    ));
    for bad in [
        "a\u{202E}b",
        "zero\u{200B}width",
        "bom\u{FEFF}",
        "bell\u{7}",
        "tag\u{E0041}",
    ] {
        assert!(super::hides_text(bad), "{bad:?}");
    }
}
