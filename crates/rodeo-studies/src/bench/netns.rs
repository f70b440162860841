//! `rodeo bench transport --hosts`: a second "host" for the consumer, a Linux network
//! namespace joined to this one by a veth pair (MTU 1500, as two hosts on a LAN), so that the
//! bytes cross a network device and its TCP stack instead of loopback. Made with `ip`
//! (iproute2, needs root) and removed when dropped, also when the bench fails.

use std::process::{Command, Stdio};

use anyhow::Context as _;

/// The consumer's namespace and the two ends' addresses.
#[derive(Debug)]
pub(super) struct PeerHost {
    /// The namespace's name (`rodeo-bt-PID`).
    pub(super) ns: String,
    /// This side's interface (removed with the namespace's end).
    link: String,
    /// The consumer's address (the namespace's end of the veth).
    pub(super) peer_addr: String,
}

/// Runs `ip` with `args`; an error names the command and what it printed.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            "bench transport --hosts: cannot run `ip` (install iproute2; it needs root)"
        })?;
    anyhow::ensure!(
        out.status.success(),
        "bench transport --hosts: `ip {}` failed: {} (network namespaces need root)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

impl PeerHost {
    /// Makes the namespace and the veth pair: this side 10.201.N.1/24, the namespace's side
    /// 10.201.N.2/24 (N from the process id, so that two benches do not meet).
    pub(super) fn create() -> anyhow::Result<PeerHost> {
        let pid = std::process::id();
        let ns = format!("rodeo-bt-{pid}");
        let link = format!("rbt{}a", pid % 10_000_000);
        let inner = format!("rbt{}b", pid % 10_000_000);
        let net = pid % 250 + 1;
        let host = PeerHost {
            ns: ns.clone(),
            link: link.clone(),
            peer_addr: format!("10.201.{net}.2"),
        };
        ip(&["netns", "add", &ns])?;
        // From here the namespace exists: `host`'s drop removes it whatever fails next.
        ip(&["link", "add", &link, "type", "veth", "peer", "name", &inner])?;
        ip(&["link", "set", &inner, "netns", &ns])?;
        ip(&["addr", "add", &format!("10.201.{net}.1/24"), "dev", &link])?;
        ip(&["link", "set", &link, "up"])?;
        let local = format!("10.201.{net}.2/24");
        for args in [
            vec!["addr", "add", local.as_str(), "dev", inner.as_str()],
            vec!["link", "set", inner.as_str(), "up"],
            vec!["link", "set", "lo", "up"],
        ] {
            let mut all = vec!["netns", "exec", ns.as_str(), "ip"];
            all.extend(args);
            ip(&all)?;
        }
        Ok(host)
    }

    /// The command that runs `program` inside the namespace.
    pub(super) fn command(&self, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(program);
        c
    }
}

impl Drop for PeerHost {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the veth, and with it this one.
        let _ = ip(&["netns", "del", &self.ns]);
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
