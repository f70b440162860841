//! A partition over three hosts: three Linux network namespaces on this machine joined by a
//! bridge (10.200.0.1-3, the controller on 10.200.0.254), a real sshd in each with a host key
//! and an authorized key made here, and `rodeo run --processes` starting the applications
//! over ssh, twice: the data over the stream transport (`kind = "stream"`), then all of it
//! over ZeroMQ tcp (the fallback). Everything is torn down by a guard, also when the test fails.
//!
//! Needs root, `ip`, `sshd`, `ssh` and `ssh-keygen` (Debian: iproute2, openssh-server,
//! openssh-client; .ci/run installs them). Without them it is skipped with the reason printed,
//! unless the CI environment variable is set, where it fails instead.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rodeo_testkit::{rodeo, rodeo_bin};
use serde_json::Value;

const SSHD: &str = "/usr/sbin/sshd";

fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Why this test cannot run here, if it cannot.
fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces need it)".into());
    }
    for t in ["ip", "ssh", "ssh-keygen"] {
        if tool(t).is_none() {
            return Some(format!("{t} not found"));
        }
    }
    if !Path::new(SSHD).is_file() {
        return Some(format!("{SSHD} not found (Debian package openssh-server)"));
    }
    None
}

/// Runs a command that must succeed.
fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a command whose failure does not matter (cleanup).
fn sh_quiet(args: &[&str]) {
    let _ = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The namespaces, the bridge and the sshd processes; removed on drop, whatever happened.
struct Hosts {
    namespaces: Vec<String>,
    bridge: String,
    sshd: Vec<Child>,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.sshd {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.namespaces {
            // Anything still running in the namespace (an application that did not leave).
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    // SAFETY: kill(2) with a pid listed in our own namespace, valid signal.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
            sh_quiet(&["ip", "netns", "del", ns]);
        }
        sh_quiet(&["ip", "link", "del", &self.bridge]);
    }
}

/// Waits (bounded) until a TCP connection to `addr` succeeds.
fn wait_listening(addr: &str) -> bool {
    let a: std::net::SocketAddr = addr.parse().unwrap();
    rodeo_testkit::holds_within(Duration::from_secs(15), || {
        std::net::TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok()
    })
}

fn setup(dir: &Path, tag: &str) -> Hosts {
    let mut hosts = Hosts {
        namespaces: Vec::new(),
        bridge: format!("rb{tag}"),
        sshd: Vec::new(),
    };
    let br = hosts.bridge.clone();
    sh(&["ip", "link", "add", &br, "type", "bridge"]);
    sh(&["ip", "addr", "add", "10.200.0.254/24", "dev", &br]);
    sh(&["ip", "link", "set", &br, "up"]);
    // Keys: one host key for the three sshd, one client key authorized for root.
    let host_key = dir.join("host_key");
    let client_key = dir.join("client_key");
    for k in [&host_key, &client_key] {
        sh(&[
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-f",
            k.to_str().unwrap(),
        ]);
    }
    let authorized = dir.join("authorized_keys");
    std::fs::copy(dir.join("client_key.pub"), &authorized).unwrap();
    std::fs::create_dir_all("/run/sshd").unwrap();
    for i in 1..=3 {
        let ns = format!("rodeo-{tag}-{i}");
        sh(&["ip", "netns", "add", &ns]);
        hosts.namespaces.push(ns.clone());
        let (outer, inner) = (format!("rv{tag}{i}"), format!("rp{tag}{i}"));
        sh(&[
            "ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ]);
        sh(&["ip", "link", "set", &inner, "netns", &ns]);
        sh(&["ip", "link", "set", &outer, "master", &br]);
        sh(&["ip", "link", "set", &outer, "up"]);
        let addr = format!("10.200.0.{i}");
        let in_ns = |args: &[&str]| {
            let mut v = vec!["ip", "netns", "exec", &ns];
            v.extend_from_slice(args);
            sh(&v);
        };
        in_ns(&["ip", "link", "set", "lo", "up"]);
        in_ns(&["ip", "addr", "add", &format!("{addr}/24"), "dev", &inner]);
        in_ns(&["ip", "link", "set", &inner, "up"]);
        let cfg = dir.join(format!("sshd_config_{i}"));
        std::fs::write(
            &cfg,
            format!(
                "ListenAddress {addr}\nPort 22\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PidFile none\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 LogLevel ERROR\n",
                host_key.display(),
                authorized.display()
            ),
        )
        .unwrap();
        // sshd's own log (it complains about the readiness probes below) goes to a file.
        let log = std::fs::File::create(dir.join(format!("sshd_{i}.log"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, SSHD, "-D", "-e", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        hosts.sshd.push(child);
        assert!(
            wait_listening(&format!("{addr}:22")),
            "sshd in {ns} does not listen on {addr}:22"
        );
    }
    hosts
}

/// One run of the three-host partition with `transport` (the `[transport]` lines besides the
/// base port) on ports from `base_port`; asserts it balanced.
fn run_over_three_hosts(dir: &Path, name: &str, transport: &str, base_port: u16) {
    let out_dir = dir.join(format!("out-{name}"));
    let client_key = dir.join("client_key");
    let rodeo = rodeo_bin!();
    let cfg = dir.join(format!("three-hosts-{name}.toml"));
    std::fs::write(
        &cfg,
        format!(
            r#"[l1]
rate_hz = 3000.0
[dcm]
nodes = 2
slots = 16
[transport]
{transport}
base_port = {base_port}
[control]
address = "10.200.0.254"
heartbeat_ms = 200
dead_after_ms = 3000
spawn_timeout_ms = 20000
ssh = ["ssh", "-i", "{key}", "-l", "root", "-o", "BatchMode=yes",
       "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
       "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]
remote_rodeo = "{rodeo}"
[hosts]
"logger-1" = "10.200.0.1"
"ros-1" = "10.200.0.1"
"supervisor" = "10.200.0.2"
"dcm-1" = "10.200.0.2"
"dcm-2" = "10.200.0.3"
"#,
            key = client_key.display(),
        ),
    )
    .unwrap();
    let child = rodeo!()
        .args([
            "run",
            "--processes",
            "--events",
            "6000",
            "--json",
            // Three hosts on two cores may hold the L1 behind its schedule (checked below).
            "--accept-degraded",
            "--config",
        ])
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .stdin(Stdio::null())
        .spawn();
    let out = child.wait_with_deadline(Duration::from_secs(120));
    let status = out.status;
    let stdout = &out.stdout;
    let stderr = &out.stderr;
    assert!(status.success(), "{name}: {stderr}\n{stdout}");
    let v: Value = serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{name}: {e}: {stdout}"));
    assert_eq!(v["balanced"], true, "{name}: {v}");
    for p in v["problems"].as_array().unwrap() {
        assert_eq!(p["kind"], "l1_missed", "{name}: {v}");
    }
    assert_eq!(v["l1_accepts"], 6000, "{name}: {v}");
    let written = v["events_written"].as_u64().unwrap();
    assert!(written > 0);
    assert_eq!(
        written,
        v["accepted"].as_u64().unwrap() + v["forced_accepts"].as_u64().unwrap()
    );
    assert_eq!(v["events_verified"].as_u64().unwrap(), written);
    assert_eq!(v["readout_nodes"][0]["cleared"], 6000, "{name}: {v}");
}

#[test]
fn a_partition_over_three_hosts_in_network_namespaces_balances() {
    if let Some(why) = missing() {
        if std::env::var_os("CI").is_some() {
            panic!("the three-host test cannot run on CI: {why}");
        }
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("{}", std::process::id() % 100_000);
    let _hosts = setup(dir.path(), &tag);
    // The data over the stream transport with TLS (its default: the partition's own CA, keys
    // handed over ssh's stdin with the CURVE keys; run control over ZeroMQ tcp with CURVE),
    // then all of it over ZeroMQ tcp with CURVE: the fallback. The plain stream (a trusted
    // network) runs in recovery.rs.
    run_over_three_hosts(dir.path(), "stream", "kind = \"stream\"", 47600);
    run_over_three_hosts(dir.path(), "tcp", "kind = \"tcp\"", 47650);
}
