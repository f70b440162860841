//! The control plane is not a root shell (issue 38), against real `rodeo serve` processes:
//! the operator's token cannot change the configuration, the expert's cannot change what
//! starts processes or names places outside the output directory (and nothing runs), 100
//! hostile configurations are all refused while the status answers and SIGTERM still ends the
//! service cleanly, HTTPS with a CA made at test time and `rodeo ctl --ca`, the audit trail,
//! who started and stopped each run. The network-namespace test (a plain-HTTP token from
//! another host) needs root and `ip`: without them it is skipped with the reason printed,
//! unless CI is set, where it fails instead.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use rodeo_testkit::cli::{Output, Running};
use rodeo_testkit::http::request as http;
use rodeo_testkit::{rodeo, wait_until};
use serde_json::Value;

const OP: &str = "op-7d2f";
const EX: &str = "ex-91ab";

/// A `rodeo serve` (stopped by its guard when the test ends, however it ends).
struct Serve {
    child: Running,
    addr: SocketAddr,
}

impl Serve {
    fn start(out: &Path, config: &Path, extra: &[&str]) -> Serve {
        let child = rodeo!()
            .args(["serve", "--config"])
            .arg(config)
            .arg("--output")
            .arg(out)
            .args(["--http", "127.0.0.1:0"])
            .args(extra)
            .env("RODEO_TOKEN", OP)
            .env("RODEO_EXPERT_TOKEN", EX)
            .env("RODEO_LOG", "warn")
            .echo_stderr()
            .spawn();
        let addr = child.http_address(Duration::from_secs(60));
        Serve { child, addr }
    }

    fn command(&self, c: &str) -> (u16, String) {
        http(
            self.addr,
            "POST",
            "/api/command",
            Some(OP),
            &format!("{{\"command\":\"{c}\"}}"),
        )
    }

    fn json(&self, path: &str) -> Value {
        let (code, body) = http(self.addr, "GET", path, None, "");
        assert_eq!(code, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// SIGTERM; the exit status within 60 s.
    fn terminate(mut self) -> std::process::ExitStatus {
        self.child.signal(libc::SIGTERM);
        self.child.status_with_deadline(Duration::from_secs(60))
    }
}

fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let p = dir.join("p.toml");
    std::fs::write(&p, text).unwrap();
    p
}

const BASE: &str =
    "[run]\nevents = 0\nseconds = 3600.0\n[l1]\nrate_hz = 2000.0\n[dcm]\nslots = 16\n";

fn rodeo(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = rodeo!();
    cmd.args(args).deadline(Duration::from_secs(120));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
}

#[test]
fn only_the_expert_changes_the_configuration_and_never_what_starts_processes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = write_config(dir.path(), BASE);
    let s = Serve::start(&out, &cfg, &[]);
    let put = |token: &str, body: &str| http(s.addr, "PUT", "/api/config", Some(token), body);

    // The operator's token: 403 naming the role; the expert's: 200 for a valid change.
    let newer = BASE.replace("rate_hz = 2000.0", "rate_hz = 2500.0");
    let (code, body) = put(OP, &newer);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("expert role"), "{body}");
    let (code, body) = put(EX, &newer);
    assert_eq!(code, 200, "{body}");

    // The attack: a shell as the ssh command, a host to use it on, tcp.
    let pwned = dir.path().join("PWNED");
    let attack = format!(
        "{BASE}[transport]\nkind = \"tcp\"\n[control]\nssh = [\"/bin/sh\", \"-c\", \"id > {}; exit 3\", \"sh\"]\n[hosts]\n\"dcm-1\" = \"127.0.0.1\"\n",
        pwned.display()
    );
    let (code, body) = put(EX, &attack);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("`control.ssh`"), "{body}");
    // Each of the others, alone: 400 naming it.
    let elsewhere = format!("{}/../../elsewhere", out.display());
    for (body_text, field) in [
        (
            format!("{BASE}[control]\nremote_rodeo = \"/tmp/evil-rodeo\"\n"),
            "control.remote_rodeo",
        ),
        (
            format!("{BASE}[transport]\nkind = \"tcp\"\n[hosts]\n\"dcm-1\" = \"127.0.0.1\"\n"),
            "hosts",
        ),
        (
            BASE.replace("[run]\n", "[run]\noutput = \"/tmp/rodeo-elsewhere\"\n"),
            "run.output",
        ),
        (
            format!("{BASE}[logger]\ndirectories = [{elsewhere:?}]\n"),
            "logger.directories",
        ),
    ] {
        let (code, body) = put(EX, &body_text);
        assert_eq!(code, 400, "{field}: {body}");
        assert!(body.contains(&format!("`{field}`")), "{field}: {body}");
    }
    assert!(!Path::new("/tmp/rodeo-elsewhere").exists());
    assert!(!dir.path().join("elsewhere").exists());

    // The served run's configuration snapshot is the owner's only (it may hold the tokens).
    let snapshot = out.join("run-00000001/partition.toml");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&snapshot).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "{}: {mode:o}", snapshot.display());

    // A run: nothing of the refused configuration runs.
    let (code, body) = s.command("start");
    assert_eq!(code, 200, "{body}");
    wait_until("events flowing", Duration::from_secs(60), || {
        s.json("/api/status")["l1_accepts"].as_u64().unwrap_or(0) > 100
    });
    let (code, body) = s.command("stop");
    assert_eq!(code, 200, "{body}");
    assert!(!pwned.exists(), "the command ran");
    let (_, served) = http(s.addr, "GET", "/api/config", None, "");
    assert!(served.contains("rate_hz = 2500.0"), "{served}");
    assert!(!served.contains(OP) && !served.contains(EX), "{served}");

    // A comment on the run, from another shell.
    let url = format!("http://{}", s.addr);
    let c = rodeo(
        &["ctl", "comment", "1", "beam", "lost", "--url", &url],
        &[("RODEO_TOKEN", OP)],
    );
    c.assert_success();
    // `rodeo ctl config put` with the operator's token only: refused; with the expert's: done.
    std::fs::write(dir.path().join("new.toml"), &newer).unwrap();
    let file = dir.path().join("new.toml");
    let args = [
        "ctl",
        "config",
        "put",
        file.to_str().unwrap(),
        "--url",
        &url,
    ];
    let refused = rodeo(&args, &[("RODEO_TOKEN", OP)]);
    refused.assert_failure();
    assert!(refused.stdout.contains("expert role"), "{}", refused.stdout);
    rodeo(&args, &[("RODEO_TOKEN", OP), ("RODEO_EXPERT_TOKEN", EX)]).assert_success();

    // The audit trail: refused and accepted, with role, peer and result.
    let audit = s.json("/api/audit")["audit"].as_array().unwrap().clone();
    let has = |role: &str, action: &str, status: u64| {
        audit.iter().any(|e| {
            e["role"] == role
                && e["action"].as_str().unwrap().starts_with(action)
                && e["status"] == status
                && e["peer"].as_str().unwrap().starts_with("127.0.0.1:")
        })
    };
    assert!(has("operator", "config", 403), "{audit:?}");
    assert!(has("expert", "config", 200), "{audit:?}");
    assert!(has("expert", "config", 400), "{audit:?}");
    assert!(has("operator", "command start", 200), "{audit:?}");
    assert!(has("operator", "command stop", 200), "{audit:?}");
    assert!(has("operator", "comment run 1", 200), "{audit:?}");
    let ssh = audit
        .iter()
        .find(|e| e["result"].as_str().unwrap().contains("control.ssh"))
        .expect("the refused ssh change is in the trail");
    assert_eq!(ssh["run_number"], 1);

    let status = s.terminate();
    assert!(status.success(), "{status}");
    assert!(!pwned.exists());
    // Who started and stopped the run, in the database and in `rodeo runs`.
    let listed = rodeo(&["runs", "--output", out.to_str().unwrap(), "--json"], &[]);
    let runs: Value = serde_json::from_str(&listed.stdout).unwrap();
    let run = &runs["runs"][0];
    assert_eq!(run["run_number"], 1, "{runs}");
    for who in ["started_by", "stopped_by"] {
        let v = run[who].as_str().unwrap();
        assert!(v.contains("operator from 127.0.0.1:"), "{who}: {v}");
    }
    let table = rodeo(&["runs", "--output", out.to_str().unwrap()], &[]);
    assert!(
        table.stdout.contains("operator from 127.0.0.1:"),
        "{}",
        table.stdout
    );
}

/// Hostile `PUT /api/config` bodies: non-finite and huge numbers, wrong types, huge strings,
/// deep nesting, not TOML, not UTF-8, and fields HTTP may not change.
fn hostile_bodies() -> Vec<Vec<u8>> {
    let deep = format!(
        "[run]\nnumber = {}1{}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let mut v: Vec<Vec<u8>> = [
        "[dcm]\nprocessing_us = 1e300\n".to_string(),
        "[dcm]\nprocessing_us = 1.7976931348623157e308\n".into(),
        "[dcm]\nprocessing_us = nan\n".into(),
        "[dcm]\nprocessing_us = inf\n".into(),
        "[dcm]\naccept_fraction = nan\n".into(),
        "[run]\nseconds = -inf\n".into(),
        "[l1]\nrate_hz = inf\n".into(),
        "[l1]\nrate_hz = -1e300\n".into(),
        "[[alarms]]\nname = \"a\"\nmetric = \"l1_rate_hz\"\nbelow = 1.0\nfor_seconds = 1e300\n"
            .into(),
        "[dcm]\nslots = 99999999999999999999999999\n".into(),
        "[dcm]\nslots = 9223372036854775807\n".into(),
        "[ros]\nnodes = -3\n".into(),
        "[transport]\nmax_message_bytes = 9223372036854775807\n".into(),
        "[supervisor]\nclear_group = 18446744073709551615\n".into(),
        "[dcm]\nslots = \"many\"\n".into(),
        "[supervisor]\nevent_timeout_ms = 1e300\n".into(),
        "[logger]\nstreams = 7\n".into(),
        "[l1]\nrate_hz = [1, 2, 3]\n".into(),
        format!("[logger]\nstreams = [\"{}\"]\n", "A".repeat(60_000)),
        format!("[alarms]\nname = \"{}\"\n", "x".repeat(60_000)),
        format!("[{}]\nx = 1\n", "s".repeat(60_000)),
        deep,
        format!("{}x = 1\n", "[a]\n".repeat(5000)),
        "{\"run\": {\"seconds\": 1}}".into(),
        "[hosts]\n\"dcm-1\" = \"127.0.0.1\"\n".into(),
        "[control]\nssh = [\"/bin/sh\", \"-c\", \"true\"]\n".into(),
        "[monitoring]\nendpoint = \"ipc:///etc/rodeo\"\n".into(),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect();
    v.push(vec![0xff, 0xfe, b'[', 0x80]);
    v
}

#[test]
fn a_hundred_hostile_configurations_are_refused_while_the_status_answers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = write_config(dir.path(), BASE);
    let s = Serve::start(&out, &cfg, &[]);
    let bodies = hostile_bodies();
    for i in 0..100 {
        let body = &bodies[i % bodies.len()];
        let (code, answer) = put_raw(s.addr, body);
        assert!(
            (400..500).contains(&code),
            "PUT #{i} ({:?}…) got {code}: {answer}",
            String::from_utf8_lossy(&body[..body.len().min(60)])
        );
        let (code, _) = http(s.addr, "GET", "/api/status", None, "");
        assert_eq!(code, 200, "status after PUT #{i}");
    }
    // Still a working service: its configuration changes, a run starts and stops.
    let (code, body) = http(s.addr, "PUT", "/api/config", Some(EX), BASE);
    assert_eq!(code, 200, "{body}");
    let st = s.json("/api/status");
    assert_eq!(st["state"], "CONNECTED", "{st}");
    assert_eq!(s.command("start").0, 200);
    wait_until("events flowing", Duration::from_secs(60), || {
        s.json("/api/status")["l1_accepts"].as_u64().unwrap_or(0) > 100
    });
    let metrics = http(s.addr, "GET", "/metrics", None, "").1;
    assert!(
        metrics.contains("rodeo_http_handler_panics_total 0"),
        "handlers isolated, none panicked: {metrics}"
    );
    // SIGTERM during the run: down in order, exit 0 (not a panic's 101).
    let status = s.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
    let runs: Value = serde_json::from_str(
        &rodeo(&["runs", "--output", out.to_str().unwrap(), "--json"], &[]).stdout,
    )
    .unwrap();
    assert_eq!(runs["runs"][0]["status"], "ok", "{runs}");
}

/// `PUT /api/config` with raw bytes and the expert's token.
fn put_raw(addr: SocketAddr, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!(
        "PUT /api/config HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {EX}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (
        code,
        out.split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string(),
    )
}

#[test]
fn serve_answers_https_and_ctl_verifies_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = write_config(dir.path(), BASE);
    let pki = rodeo_testkit::tls::make_pki(dir.path(), &["127.0.0.1"]);
    let s = Serve::start(
        &out,
        &cfg,
        &[
            "--tls-cert",
            pki.cert.to_str().unwrap(),
            "--tls-key",
            pki.key.to_str().unwrap(),
        ],
    );
    let url = format!("https://{}", s.addr);
    let ca = pki.ca.to_str().unwrap();
    let ctl = |args: &[&str]| {
        let mut all = vec!["ctl"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--url", &url]);
        rodeo(&all, &[("RODEO_TOKEN", OP)])
    };
    let st = ctl(&["status", "--ca", ca, "--json"]);
    st.assert_success();
    let v: Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(v["state"], "CONNECTED");
    // Without the CA: the certificate is not trusted, nothing is sent.
    let untrusted = ctl(&["start"]);
    untrusted.assert_failure();
    assert!(
        untrusted.stderr.to_lowercase().contains("certificate"),
        "{}",
        untrusted.stderr
    );
    // Plain HTTP to the HTTPS port gets no HTTP answer.
    let plain = rodeo(
        &["ctl", "status", "--url", &format!("http://{}", s.addr)],
        &[],
    );
    plain.assert_failure();
    for c in ["start", "stop"] {
        ctl(&[c, "--ca", ca]).assert_success();
    }
    let audit = rodeo(&["ctl", "audit", "--url", &url, "--ca", ca], &[]);
    let audit: Value = serde_json::from_str(&audit.stdout).unwrap();
    assert_eq!(audit["audit"][0]["tls"], true, "{audit}");
    assert_eq!(audit["audit"][0]["action"], "command stop", "{audit}");
    ctl(&["shutdown", "--ca", ca]).assert_success();
    let mut s = s;
    let exit = s.child.status_with_deadline(Duration::from_secs(60));
    assert!(exit.success(), "{exit}");
}

/// Two network namespaces joined by a veth pair: a "server host" at 10.238.0.1 and a "client
/// host" at 10.238.0.2, removed (with the pair) when dropped.
struct TwoHosts {
    server: String,
    client: String,
}

impl TwoHosts {
    /// `None` (with the reason) when this machine cannot make them: not root, no `ip`.
    fn make() -> Result<TwoHosts, String> {
        // SAFETY: geteuid(2) only reads the process's credentials.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        let id = std::process::id() % 100_000;
        let hosts = TwoHosts {
            server: format!("rodeo-s{id}"),
            client: format!("rodeo-c{id}"),
        };
        let (vs, vc) = (format!("r38s{id}"), format!("r38c{id}"));
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &hosts.server],
            vec!["netns", "add", &hosts.client],
            vec![
                "link",
                "add",
                &vs,
                "netns",
                &hosts.server,
                "type",
                "veth",
                "peer",
                "name",
                &vc,
                "netns",
                &hosts.client,
            ],
            vec![
                "-n",
                &hosts.server,
                "addr",
                "add",
                "10.238.0.1/30",
                "dev",
                &vs,
            ],
            vec![
                "-n",
                &hosts.client,
                "addr",
                "add",
                "10.238.0.2/30",
                "dev",
                &vc,
            ],
            vec!["-n", &hosts.server, "link", "set", &vs, "up"],
            vec!["-n", &hosts.client, "link", "set", &vc, "up"],
            vec!["-n", &hosts.server, "link", "set", "lo", "up"],
        ];
        for step in steps {
            let o = rodeo_testkit::cli::Rodeo::new("ip")
                .args(&step)
                .deadline(Duration::from_secs(30))
                .output();
            if !o.status.success() {
                return Err(format!("ip {}: {}", step.join(" "), o.stderr.trim()));
            }
        }
        Ok(hosts)
    }

    /// `rodeo ARGS` on the host `ns` (a command to finish or spawn).
    fn rodeo(ns: &str, args: &[&str]) -> rodeo_testkit::cli::Rodeo {
        let mut cmd = rodeo_testkit::cli::Rodeo::new("ip");
        cmd.args(["netns", "exec", ns, rodeo_testkit::rodeo_bin!()])
            .args(args);
        cmd
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in [&self.server, &self.client] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

/// Issue 38, point 3: over plain HTTP a token is taken from loopback peers only. A client on
/// another host (another network namespace, a real veth link) reads the status, but its
/// operator token is refused (403, "use TLS") and nothing starts; the refusal is in the audit
/// trail with the client's address. Needs root and `ip`: skipped otherwise, unless CI is set.
#[test]
fn a_token_over_plain_http_from_another_host_is_refused() {
    let hosts = match TwoHosts::make() {
        Ok(h) => h,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("skipped: cannot make two network namespaces here: {why}");
            return;
        }
        Err(why) => panic!("CI is set and the network-namespace test cannot run: {why}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = write_config(dir.path(), BASE);
    let server = TwoHosts::rodeo(
        &hosts.server,
        &[
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--http",
            "10.238.0.1:0",
        ],
    )
    .env("RODEO_TOKEN", OP)
    .env("RODEO_EXPERT_TOKEN", EX)
    .env("RODEO_LOG", "warn")
    .echo_stderr()
    .spawn();
    let addr = server.http_address(Duration::from_secs(60));
    assert!(
        server
            .stderr_so_far()
            .contains("tokens are taken from this host only"),
        "{}",
        server.stderr_so_far()
    );
    let url = format!("http://{addr}");
    let from_client = |args: &[&str]| {
        let mut all = vec!["ctl"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--url", &url]);
        TwoHosts::rodeo(&hosts.client, &all)
            .env("RODEO_TOKEN", OP)
            .env("RODEO_EXPERT_TOKEN", EX)
            .deadline(Duration::from_secs(60))
            .output()
    };
    // An observer from the other host: served.
    let st = from_client(&["status", "--json"]);
    st.assert_success();
    let v: Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(v["state"], "CONNECTED", "{v}");
    // The operator's and the expert's tokens from there, over plain HTTP: refused, told why.
    let start = from_client(&["start"]);
    start.assert_failure();
    assert!(start.stderr.contains("HTTP 403"), "{}", start.text());
    assert!(
        start.stdout.contains("use TLS") && start.stdout.contains("--tls-cert"),
        "{}",
        start.stdout
    );
    let put = from_client(&["config", "put", cfg.to_str().unwrap()]);
    put.assert_failure();
    assert!(put.stdout.contains("use TLS"), "{}", put.stdout);
    // Nothing started; the refusals are in the trail with the client's address.
    let st: Value = serde_json::from_str(&from_client(&["status", "--json"]).stdout).unwrap();
    assert_eq!(st["state"], "CONNECTED", "{st}");
    let audit: Value = serde_json::from_str(&from_client(&["audit"]).stdout).unwrap();
    let refused: Vec<&Value> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["status"] == 403)
        .collect();
    assert_eq!(refused.len(), 2, "{audit}");
    for e in refused {
        assert!(
            e["peer"].as_str().unwrap().starts_with("10.238.0.2:"),
            "{e}"
        );
        assert_eq!(e["tls"], false, "{e}");
    }
    let mut server = server;
    server.signal(libc::SIGTERM);
    let exit = server.status_with_deadline(Duration::from_secs(60));
    assert!(exit.success(), "{exit}");
}
