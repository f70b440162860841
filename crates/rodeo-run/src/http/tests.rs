//! Tests of the HTTP server: parsing, routing, bounds.

use super::routes::parse_command;
use super::*;
use rodeo_control::config::RunWords;
use rodeo_control::lifecycle::Command;

#[test]
fn parses_a_request_with_a_body() {
    let raw = b"POST /api/command?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 19\r\nAuthorization: Bearer s3\r\n\r\n{\"command\":\"stop\"}XTRA";
    let r = read_request(&mut &raw[..]).unwrap();
    assert_eq!(r.method, "POST");
    assert_eq!((r.path.as_str(), r.query.as_str()), ("/api/command", "x=1"));
    assert_eq!(r.header("authorization"), Some("Bearer s3"));
    assert_eq!(r.body, b"{\"command\":\"stop\"}X");
}

#[test]
fn bad_requests_are_typed_errors() {
    let cases: [(&[u8], &str); 10] = [
        (b"GET\r\n\r\n", "BadRequestLine"),
        (b"get / HTTP/1.1\r\n\r\n", "BadRequestLine"),
        (b"GET / HTTP/1.1\r\nnocolon\r\n\r\n", "BadHeader"),
        (
            b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            "BadContentLength",
        ),
        (
            b"GET / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
            "BodyTooLarge",
        ),
        (b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", "Io"),
        // Strict: one Content-Length, digits only, no Transfer-Encoding.
        (
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
            "DuplicateHeader",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 3\r\n\r\nabc",
            "DuplicateHeader",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\nab",
            "BadContentLength",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
            "TransferEncoding",
        ),
    ];
    for (raw, kind) in cases {
        let e = read_request(&mut &raw[..]).unwrap_err();
        assert!(format!("{e:?}").starts_with(kind), "{e:?} for {raw:?}");
    }
    let huge = format!(
        "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_HEADER_BYTES)
    );
    assert!(matches!(
        read_request(&mut huge.as_bytes()),
        Err(RequestError::HeadTooLarge)
    ));
}

#[test]
fn commands_parse_from_json() {
    assert_eq!(
        parse_command(br#"{"command":"stop"}"#),
        Ok((Command::Stop, RunWords::default()))
    );
    let (c, w) =
        parse_command(br#"{"command":"start","comment":"HV scan","run_type":"physics"}"#).unwrap();
    assert_eq!(
        (c, w.comment.as_str(), w.run_type.as_str()),
        (Command::Start, "HV scan", "physics")
    );
    assert!(parse_command(br#"{"command":"stop","comment":"x"}"#).is_err());
    assert!(parse_command(br#"{"command":"start","run_type":"two words"}"#).is_err());
    assert!(parse_command(br#"{"command":"start","shifter":"a\u0007b"}"#).is_err());
    assert!(parse_command(br#"{"command":"halt"}"#)
        .unwrap_err()
        .contains("unknown command"));
    assert!(parse_command(b"stop").is_err());
    assert!(parse_command(br#"{"command":"stop","x":1}"#).is_err());
    // A JSON array is not a command, though serde would read the struct from it.
    let e = parse_command(br#"["start"]"#).unwrap_err();
    assert!(e.contains("not an object"), "{e}");
    // Nesting deeper than serde_json's limit is an error, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(parse_command(deep.as_bytes()).is_err());
}

/// `GET /api/runs` serves a page (`limit`, `before`, `next_before`), never more than
/// [`crate::rundb::RUNS_PAGE_MAX`] runs, and a bad page is a 400 that names the parameter.
#[test]
fn a_page_of_runs_is_bounded_and_a_bad_page_is_refused() {
    use crate::rundb::{RunDb, RunRecord, FILE_NAME};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let mut db = RunDb::open(&path).unwrap();
    for n in 1..=5u32 {
        db.record(&RunRecord {
            run_number: n,
            started_at_ns: Some(1),
            stopped_at_ns: Some(2),
            started_by: "test".into(),
            config_toml: String::new(),
            status: "ok".into(),
            summary: serde_json::json!({"run_number": n, "balanced": true}),
            files: Vec::new(),
        })
        .unwrap();
    }
    drop(db);
    let store = audit::Store::new(Some(path));
    let page = |query: &str| {
        let r = store.runs_response("/api/runs", query);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        (r.status, v)
    };
    let numbers = |v: &serde_json::Value| -> Vec<u64> {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_number"].as_u64().unwrap())
            .collect()
    };
    let (status, first) = page("limit=2");
    assert_eq!((status, numbers(&first)), (200, vec![5, 4]));
    assert_eq!(first["next_before"], 4);
    let (_, second) = page("limit=2&before=4");
    assert_eq!(numbers(&second), [3, 2]);
    let (_, last) = page("before=2");
    assert_eq!(numbers(&last), [1]);
    assert_eq!(
        last["next_before"],
        serde_json::Value::Null,
        "the last page"
    );
    assert_eq!(numbers(&page("").1), [5, 4, 3, 2, 1]);
    for bad in ["limit=0", "limit=1001", "limit=x", "before=-1", "offset=3"] {
        let (status, v) = page(bad);
        assert_eq!(status, 400, "{bad}");
        let key = bad.split('=').next().unwrap();
        assert!(v["error"].as_str().unwrap().contains(key), "{bad}: {v}");
    }
}

/// A request sent a byte at a time is whole at its last byte, not before (the separator and
/// the body straddle the bytes searched before), and each byte's check looks only at what
/// came since: the search is resumed, not begun again.
#[test]
fn a_request_sent_a_byte_at_a_time_is_whole_at_its_last_byte() {
    use super::request::Completion;
    let with_body: &[u8] =
        b"POST /api/command HTTP/1.1\r\nContent-Length: 18\r\n\r\n{\"command\":\"stop\"}";
    let without: &[u8] = b"GET /api/status HTTP/1.1\r\nHost: a\r\n\r\n";
    for raw in [with_body, without] {
        let mut c = Completion::default();
        let mut buf = Vec::new();
        for (i, b) in raw.iter().enumerate() {
            buf.push(*b);
            assert_eq!(c.complete(&buf), i + 1 == raw.len(), "byte {i} of {raw:?}");
        }
        assert!(read_request(&mut buf.as_slice()).is_ok());
    }
    // A head that never ends is handed on once it is too large; so is a body too large.
    let mut c = Completion::default();
    let mut buf = b"GET / HTTP/1.1\r\nX: ".to_vec();
    while !c.complete(&buf) {
        buf.extend_from_slice(&[b'a'; 1000]);
        assert!(buf.len() <= MAX_HEADER_BYTES + 1000);
    }
    let big = format!(
        "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY_BYTES + 1
    );
    assert!(Completion::default().complete(big.as_bytes()));
    // What the parser refuses (two lengths, a sign) goes to it at once, not at the deadline.
    for head in [
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
    ] {
        assert!(Completion::default().complete(head.as_bytes()), "{head:?}");
        assert!(read_request(&mut head.as_bytes()).is_err(), "{head:?}");
    }
}
