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
    assert_eq!(r.path, "/api/command");
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
