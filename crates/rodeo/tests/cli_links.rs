//! `rodeo gen link` and `rodeo cards` end to end: a corrupted link file replayed by the
//! file-player channel shows every injected error kind; a FELIX stream sent over UDP to a
//! network input channel arrives whole.

use std::net::UdpSocket;
use std::time::Duration;

use rodeo_testkit::cli::Output;
use rodeo_testkit::rodeo;
use serde_json::Value;

fn json_of(out: Output) -> Value {
    assert!(out.status.success(), "stderr: {}", out.stderr);
    serde_json::from_str(&out.stdout).expect("one JSON object")
}

#[test]
fn corrupted_link_file_replays_with_every_error_counted() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slink.rlnk");
    let gen = json_of(
        rodeo!()
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
            .output(),
    );
    let injected = &gen["injected"];
    let cards = json_of(
        rodeo!()
            .args([
                "cards",
                "--no-defaults",
                "--seconds",
                "1",
                "--json",
                "--play",
            ])
            .arg(&file)
            .output(),
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
    let cards = rodeo!()
        .args(["cards", "--no-defaults", "--seconds", "4", "--json"])
        .args(["--listen", &address, "--listen-mode", "felix"])
        .spawn();
    // Send once the input is bound (the line comes before the cards' --seconds run; the
    // wait fails if rodeo cards ends before its inputs ran).
    cards.wait_for_stderr("the inputs running", Duration::from_secs(60), |err| {
        err.contains("card(s) running").then_some(())
    });
    let gen = json_of(
        rodeo!()
            .args(["gen", "link", "--mode", "felix", "--units", "2000"])
            .args(["--rate", "5000", "--send", &address, "--json"])
            .output(),
    );
    assert_eq!(gen["units_written"], 2000);
    let out = json_of(cards.wait_with_deadline(Duration::from_secs(60)));
    let ch = &out["cards"][0]["channels"][0];
    assert_eq!(ch["units"], 2000, "{ch}");
    assert_eq!(ch["bad"], 0, "{ch}");
    assert_eq!(ch["errors"].as_object().map(|m| m.len()), Some(0), "{ch}");
}
