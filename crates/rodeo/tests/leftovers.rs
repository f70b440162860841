//! Nothing left behind (issue 37, point 5): runs (shared memory with restarts, aborted by a
//! second interrupt with a logger frozen, its controller killed after a logger's death; ipc
//! with its controller killed), a service (`rodeo serve --processes` over shared memory and ipc: a
//! partition prepared, run, stopped, the next one prepared, shut down) and benches (`rodeo
//! bench transport` over ZeroMQ ipc and iceoryx2) leave nothing new in /dev/shm, in iceoryx2's
//! directories, nor in the temporary directory.
//!
//! The rodeo processes get a temporary directory of their own (`TMPDIR`): what they would leave
//! in /tmp (runtime directories, bench sockets) is then theirs alone and must be gone at the
//! end, whatever other processes of the machine do in /tmp meanwhile. iceoryx2 keeps its fixed
//! places (/dev/shm, /tmp/iceoryx2), compared before and after.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rodeo_testkit::cli::Running;
use rodeo_testkit::process::{apps_of, find_app};
use rodeo_testkit::{files_under, holds_within, rodeo, shm_entries, wait_for, wait_until};
use serde_json::Value;

/// What the processes' own temporary directory holds (names).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A small paced partition in `kind` (restarts quick).
fn config(dir: &Path, kind: &str) -> PathBuf {
    let cfg = dir.join(format!("{kind}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[transport]\nkind = \"{kind}\"\n[l1]\nrate_hz = 3000.0\n\
             [ros]\nnodes = 1\nchannels = 4\nfragment_words = 100\n\
             [dcm]\nnodes = 2\nslots = 32\naccept_fraction = 0.3\n\
             [control]\nrestart_backoff_ms = 200\ndead_after_ms = 1500\n"
        ),
    )
    .unwrap();
    cfg
}

fn data_written(out: &Path) -> bool {
    files_under(out).iter().any(|p| {
        p.to_string_lossy().contains(".data")
            && std::fs::metadata(p).is_ok_and(|m| m.len() > 64 * 1024)
    })
}

/// `rodeo run --processes --json ARGS --config CONFIG --output OUT` with `tmp` as its
/// temporary directory, waited for (bounded) until it has written events.
fn start_writing(config: &Path, out: &Path, tmp: &str, args: &[&str]) -> Running {
    let mut run = rodeo!();
    run.args(["run", "--processes", "--json"])
        .args(args)
        .arg("--config")
        .arg(config)
        .arg("--output")
        .arg(out)
        .env("TMPDIR", tmp);
    let run = run.spawn();
    wait_until(
        &format!("events written in {}", out.display()),
        Duration::from_secs(60),
        || data_written(out),
    );
    run
}

fn kill(name: &str, marker: &str) {
    let pid = wait_for(name, Duration::from_secs(30), || find_app(name, marker));
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// Waits (bounded) until nothing in shared memory is new against `before`, before any later
/// process could clean it up.
fn nothing_new_in_shared_memory(before: &std::collections::BTreeSet<String>, what: &str) {
    let mut new = Vec::new();
    let clean = holds_within(Duration::from_secs(10), || {
        new = shm_entries().difference(before).cloned().collect();
        new.is_empty()
    });
    assert!(clean, "{what}: left behind {new:?}");
}

#[test]
fn runs_a_service_and_benches_leave_nothing_behind() {
    let shm_before = shm_entries();
    let work = tempfile::tempdir().unwrap();
    let tmp = work.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let tmp_env = tmp.to_str().unwrap().to_string();
    let (shm, ipc) = (config(work.path(), "shm"), config(work.path(), "ipc"));

    // 1. Shared memory: a readout node and a logger killed with -9 and restarted.
    let out = work.path().join("shm");
    let run = start_writing(
        &shm,
        &out,
        &tmp_env,
        &["--accept-degraded", "--seconds", "8"],
    );
    let marker = out.to_str().unwrap();
    kill("ros-1", marker);
    kill("logger-1", marker);
    let o = run.wait_with_deadline(Duration::from_secs(90));
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}\n{}", o.stderr);
    assert_eq!(v["restarts"], 2, "{v}\n{}", o.stderr);

    // 1b. Shared memory, the run aborted (a second interrupt) while a logger is frozen: the
    // kernel hangs the orphaned, stopped logger up (SIGHUP, SIGCONT), which walks itself
    // down; it died of the hang-up, its node left in /dev/shm.
    let out = work.path().join("shm-abort");
    let mut run = start_writing(&shm, &out, &tmp_env, &["--seconds", "60"]);
    let marker = out.to_str().unwrap().to_string();
    let logger = wait_for("logger-1", Duration::from_secs(30), || {
        find_app("logger-1", &marker)
    });
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(logger, libc::SIGSTOP) }, 0);
    run.signal(libc::SIGINT);
    std::thread::sleep(Duration::from_millis(700));
    run.signal(libc::SIGINT);
    let status = run.status_with_deadline(Duration::from_secs(10));
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(
        holds_within(Duration::from_secs(15), || apps_of(&marker).is_empty()),
        "the applications left after the abort"
    );
    nothing_new_in_shared_memory(&shm_before, "the abort with a logger frozen");

    // 1c. Shared memory, a logger killed, then its controller killed before the restart: the
    // applications that walk themselves down remove the dead logger's node.
    let out = work.path().join("shm-killed");
    let slow = work.path().join("slow.toml");
    std::fs::write(
        &slow,
        std::fs::read_to_string(&shm)
            .unwrap()
            .replace("restart_backoff_ms = 200", "restart_backoff_ms = 30000"),
    )
    .unwrap();
    let mut run = start_writing(&slow, &out, &tmp_env, &["--seconds", "60"]);
    let marker = out.to_str().unwrap().to_string();
    kill("logger-1", &marker);
    run.wait_for_stderr("the restart scheduled", Duration::from_secs(30), |t| {
        t.contains("logger-1 will be restarted").then_some(())
    });
    run.signal(libc::SIGKILL);
    let _ = run.status_with_deadline(Duration::from_secs(10));
    assert!(
        holds_within(Duration::from_secs(15), || apps_of(&marker).is_empty()),
        "the applications left after their controller's death"
    );
    nothing_new_in_shared_memory(&shm_before, "a logger killed, then its controller");

    // 2. ipc: the controller killed with -9: its applications walk themselves down, and the
    // last of them to close its endpoints removes the run's runtime directory ...
    let out = work.path().join("ipc-killed");
    let mut run = start_writing(&ipc, &out, &tmp_env, &["--seconds", "60"]);
    run.signal(libc::SIGKILL);
    let _ = run.status_with_deadline(Duration::from_secs(10));
    let marker = out.to_str().unwrap().to_string();
    assert!(
        holds_within(Duration::from_secs(10), || apps_of(&marker).is_empty()),
        "the applications left after their controller's death"
    );
    assert!(
        holds_within(Duration::from_secs(5), || entries(&tmp).is_empty()),
        "the dead run's runtime directory stayed: {:?}",
        entries(&tmp)
    );
    // ... and one that even they could not remove (every process of its run killed; made here:
    // a socket file nobody listens on) the next controller removes as stale once it is old
    // enough (made old here rather than waited for).
    let stale = tmp.join("rodeo-00000000000000ee");
    std::fs::create_dir(&stale).unwrap();
    drop(std::os::unix::net::UnixListener::bind(stale.join("ros-1.sock")).unwrap());
    let old = SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let mut run = rodeo!();
    run.args([
        "run",
        "--processes",
        "--json",
        "--accept-degraded",
        "--events",
        "3000",
        "--config",
    ])
    .arg(&ipc)
    .arg("--output")
    .arg(work.path().join("ipc-next"))
    .env("TMPDIR", &tmp_env);
    let o = run.output();
    o.assert_success();
    assert!(
        o.stderr
            .contains("removed 1 runtime directory of runs whose processes are gone"),
        "{}",
        o.stderr
    );
    assert!(!stale.exists());

    // 3. A service, over shared memory (the default) and ipc (whose endpoints live in the
    // partition's runtime directory): the partition of run 1 prepared, run, stopped; run 2
    // prepared; shut down.
    for kind in ["shm", "ipc"] {
        let out = work.path().join(format!("serve-{kind}"));
        let mut serve = rodeo!();
        serve
            .args(["serve", "--processes", "--http", "127.0.0.1:0", "--config"])
            .arg(config(work.path(), kind))
            .arg("--output")
            .arg(&out)
            .env("RODEO_TOKEN", "tok")
            .env("TMPDIR", &tmp_env);
        let mut serve = serve.spawn();
        let addr = serve.http_address(Duration::from_secs(60));
        let command = |c: &str| {
            rodeo_testkit::http::request(
                addr,
                "POST",
                "/api/command",
                Some("tok"),
                &format!("{{\"command\":\"{c}\"}}"),
            )
            .0
        };
        assert_eq!(command("start"), 200, "{kind}");
        wait_until("events written (serve)", Duration::from_secs(60), || {
            data_written(&out)
        });
        assert_eq!(command("stop"), 200, "{kind}");
        assert_eq!(command("shutdown"), 200, "{kind}");
        let status = serve.status_with_deadline(Duration::from_secs(60));
        assert!(status.success(), "{kind}: {status}");
    }

    // 4. Benches over ZeroMQ ipc, rodeo's shm sockets and iceoryx2 alone.
    for transport in ["zmq_ipc", "iceoryx2", "iceoryx2_raw", "stream_tcp"] {
        rodeo!()
            .args(["bench", "transport", "--transport", transport])
            .args(["--bytes", "64", "--seconds", "0.1"])
            .env("TMPDIR", &tmp_env)
            .output()
            .assert_success();
    }

    // Nothing new anywhere (bounded: the last processes' exits and clean-ups finish first).
    let mut new = Vec::new();
    let clean = holds_within(Duration::from_secs(15), || {
        new = shm_entries().difference(&shm_before).cloned().collect();
        new.is_empty() && entries(&tmp).is_empty()
    });
    assert!(
        clean,
        "left behind: shared memory {new:?}, temporary directory {:?}",
        entries(&tmp)
    );
}
