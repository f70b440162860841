//! The helper on plain system commands (`sh`, `sleep`): capture, deadlines, the guard.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use super::{Rodeo, GRACE};

/// The message of the panic `f` ends in.
fn panic_message(f: impl FnOnce()) -> String {
    let e = catch_unwind(AssertUnwindSafe(f)).expect_err("a panic");
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Whether a process `pid` exists (a zombie counts).
fn exists(pid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn sh(script: &str) -> Rodeo {
    let mut r = Rodeo::new("sh");
    r.args(["-c", script]);
    r
}

#[test]
fn output_captures_status_stdout_and_stderr() {
    let out = sh("echo out; echo err >&2; exit 3").output();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
    assert_eq!(out.text(), "out\nerr\n");
    assert_eq!(out.command, "sh -c \"echo out; echo err >&2; exit 3\"");
    assert!(!out.stopped_at_deadline);
    out.assert_failure();
    sh("true").output().assert_success();
}

#[test]
fn env_current_dir_and_stdin_reach_the_process() {
    let dir = std::env::temp_dir();
    let out = sh("echo \"$A|$(pwd)\"; cat")
        .env("A", "set")
        .current_dir(&dir)
        .output();
    let pwd = dir.canonicalize().unwrap();
    assert_eq!(
        out.stdout,
        format!("set|{}\n", pwd.display()),
        "stdin is empty"
    );
    let out = sh("echo \"[$HOME]\"").env_remove("HOME").output();
    assert_eq!(out.stdout, "[]\n");
    let file = std::fs::File::open("/proc/self/cmdline").unwrap();
    let out = sh("wc -c").stdin(file).output();
    assert_ne!(out.stdout.trim(), "0");
}

#[test]
fn a_failed_assertion_names_the_command_and_shows_both_streams() {
    let msg = panic_message(|| {
        sh("echo said; echo complained >&2; exit 1")
            .output()
            .assert_success();
    });
    assert!(msg.contains("`sh -c"), "{msg}");
    assert!(
        msg.contains("failed") && msg.contains("exit status: 1"),
        "{msg}"
    );
    assert!(msg.contains("said") && msg.contains("complained"), "{msg}");
}

#[test]
fn much_output_on_both_streams_does_not_block_the_child() {
    let out =
        sh("head -c 3000000 /dev/zero | tr '\\0' x; head -c 2000000 /dev/zero | tr '\\0' y >&2")
            .deadline(Duration::from_secs(60))
            .output();
    out.assert_success();
    assert_eq!(out.stdout.len(), 3_000_000);
    assert_eq!(out.stderr.len(), 2_000_000);
}

#[test]
fn the_deadline_stops_a_process_and_shows_what_it_printed() {
    let t0 = Instant::now();
    let msg = panic_message(|| {
        sh("echo started; exec sleep 30")
            .deadline(Duration::from_millis(300))
            .output();
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(msg.contains("did not finish within 300ms"), "{msg}");
    assert!(
        msg.contains("`sh -c \"echo started; exec sleep 30\"`"),
        "{msg}"
    );
    assert!(msg.contains("started"), "what it printed so far: {msg}");
}

#[test]
fn a_process_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let r = sh("trap '' TERM; echo ready; exec sleep 30").spawn();
    r.wait_for_stdout("ready", Duration::from_secs(10), |t| {
        t.contains("ready").then_some(())
    });
    let t0 = Instant::now();
    let out = r.wait_or_stop(Duration::from_millis(100));
    let took = t0.elapsed();
    assert!(out.stopped_at_deadline);
    assert!(
        took >= GRACE && took < GRACE + Duration::from_secs(5),
        "{took:?}"
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    assert_eq!(out.stdout, "ready\n");
}

#[test]
fn dropping_the_guard_stops_and_reaps_the_process() {
    let r = Rodeo::new("sleep").arg("30").spawn();
    let pid = r.id();
    assert!(exists(pid));
    let t0 = Instant::now();
    drop(r);
    assert!(t0.elapsed() < GRACE, "SIGTERM ends sleep");
    assert!(
        !exists(pid),
        "process {pid} left after the guard was dropped"
    );
}

#[test]
fn lines_are_read_while_the_process_runs_and_a_signal_ends_it() {
    let mut r = sh("echo 'listening on tcp://x:1'; exec sleep 30").spawn();
    let ep = r.wait_for_stdout("the endpoint", Duration::from_secs(10), |t| {
        t.lines()
            .find_map(|l| l.strip_prefix("listening on "))
            .map(String::from)
    });
    assert_eq!(ep, "tcp://x:1");
    assert_eq!(r.try_wait().unwrap(), None);
    r.signal(libc::SIGTERM);
    let status = r.status_with_deadline(Duration::from_secs(10));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    let msg = panic_message(|| r.signal(libc::SIGTERM));
    assert!(msg.contains("already ended"), "{msg}");
}

#[test]
fn an_incomplete_line_is_not_given_until_it_ends() {
    // Port 4 for 300 ms, until the line is complete: only 4567 may be read.
    let r = sh(
        "printf 'rodeo: HTTP API on http://127.0.0.1:4' >&2; sleep 0.3; \
                echo '567/' >&2; echo out; exec sleep 30",
    )
    .echo_stderr()
    .spawn();
    let addr = r.http_address(Duration::from_secs(10));
    assert_eq!(addr.to_string(), "127.0.0.1:4567");
    assert_eq!(
        r.stderr_so_far(),
        "rodeo: HTTP API on http://127.0.0.1:4567/\n"
    );
    r.wait_for_stdout("out", Duration::from_secs(10), |t| {
        (t == "out\n").then_some(())
    });
    assert_eq!(r.stdout_so_far(), "out\n");
}

#[test]
fn waiting_for_a_line_fails_at_once_when_the_stream_ends() {
    let r = sh("echo nothing").spawn();
    let t0 = Instant::now();
    let msg = panic_message(|| {
        r.wait_for_stdout("a line never printed", Duration::from_secs(30), |t| {
            t.contains("never").then_some(())
        })
    });
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(
        msg.contains("closed its stdout before a line never printed"),
        "{msg}"
    );
    assert!(msg.contains("nothing"), "{msg}");
    let r = Rodeo::new("sleep").arg("30").spawn();
    let msg = panic_message(|| {
        r.wait_for_stderr("a log line", Duration::from_millis(100), |_| None::<()>)
    });
    assert!(
        msg.contains("timed out after 100ms waiting for a log line"),
        "{msg}"
    );
}

#[test]
fn streams_held_open_by_a_grandchild_fail_the_wait_instead_of_hanging_it() {
    let r = sh("sleep 2 & echo parent done").spawn();
    let msg = panic_message(|| {
        r.wait_with_deadline(Duration::from_millis(500));
    });
    assert!(msg.contains("stayed open"), "{msg}");
    assert!(msg.contains("parent done"), "{msg}");
    let r = sh("sleep 2 & echo parent done").spawn();
    let out = r.wait_or_stop(Duration::from_millis(500));
    assert!(out.status.success() && !out.stopped_at_deadline);
    assert_eq!(out.stdout, "parent done\n");
}

#[test]
fn a_program_that_does_not_exist_is_named() {
    let msg = panic_message(|| {
        Rodeo::new("/no/such/program").arg("x").output();
    });
    assert!(msg.contains("cannot start `program x`"), "{msg}");
}
