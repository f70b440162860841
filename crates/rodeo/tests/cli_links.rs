//! `rodeo gen link` and `rodeo cards` end to end: a corrupted link file replayed by the
//! file-player channel shows every injected error kind; a FELIX stream sent over UDP to a
//! network input channel arrives whole.

use std::net::UdpSocket;
use std::process::{Command, Stdio};

use serde_json::Value;

fn rodeo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rodeo"))
}

fn json_of(out: std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn corrupted_link_file_replays_with_every_error_counted() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slink.rlnk");
    let gen = json_of(
        rodeo()
            .args(["gen", "link", "--mode", "slink", "--framing", "--crc"])
            .args([
                "--units",
                "5000",
                "--corrupt",
                "0.1",
                "--data-words",
                "8..200",
            ])
            .arg("--output")
            .arg(&file)
            .arg("--json")
            .output()
            .unwrap(),
    );
    let injected = &gen["injected"];
    let cards = json_of(
        rodeo()
            .args([
                "cards",
                "--no-defaults",
                "--seconds",
                "1",
                "--json",
                "--play",
            ])
            .arg(&file)
            .output()
            .unwrap(),
    );
    let ch = &cards["cards"][0]["channels"][0];
    assert_eq!(ch["units"], gen["units_written"], "{ch}");
    let errors = &ch["errors"];
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    for (kind, counter) in [
        ("missing_begin", "missing_begin"),
        ("missing_end", "missing_end"),
        ("bad_marker", "bad_markers"),
        ("size_mismatch", "format_errors"),
        ("short", "short_fragments"),
        ("crc_error", "crc_errors"),
        ("duplicate", "duplicates"),
        ("lost", "l1id_sequence_errors"),
        ("garbage", "garbage_spans"),
    ] {
        assert!(n(&injected[kind]) > 0, "{kind} never injected: {gen}");
        assert!(
            n(&errors[counter]) >= n(&injected[kind]),
            "{counter} = {} < injected {kind} = {}",
            errors[counter],
            injected[kind]
        );
    }
    assert!(n(&ch["good"]) > 4000, "{ch}");
}

#[test]
fn felix_blocks_over_udp_reach_a_network_channel() {
    // A free port: bind to port 0, note it, release it for the channel.
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("udp://127.0.0.1:{port}");
    let mut cards = rodeo()
        .args(["cards", "--no-defaults", "--seconds", "4", "--json"])
        .args(["--listen", &address, "--listen-mode", "felix"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Send once the input is bound (the line comes before the cards' --seconds run; the
    // process ends by itself, so the read is bounded).
    let mut err = std::io::BufReader::new(cards.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("card(s) running") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(n > 0, "rodeo cards ended before its inputs ran");
    }
    let gen = json_of(
        rodeo()
            .args(["gen", "link", "--mode", "felix", "--units", "2000"])
            .args(["--rate", "5000", "--send", &address, "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(gen["units_written"], 2000);
    let out = json_of(cards.wait_with_output().unwrap());
    let ch = &out["cards"][0]["channels"][0];
    assert_eq!(ch["units"], 2000, "{ch}");
    assert_eq!(ch["bad"], 0, "{ch}");
    assert_eq!(ch["errors"].as_object().map(|m| m.len()), Some(0), "{ch}");
}
