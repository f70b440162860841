//! `rodeo config check --bind`: every address a partition would bind on this host, tried
//! ([`try_binds`]): the layout's endpoints (one per logger, readout node and the supervisor's),
//! the network input's `ros.listen` addresses, the external trigger's `l1.external_listen`, the
//! HTTP API's `control.http` and the monitoring forwarder's endpoint and input. All are held at
//! once, as a run holds them, and released when the answer is made. Applications placed on
//! other hosts (`[hosts]`) are not tried; neither are inproc endpoints, nor ipc paths whose
//! run directory does not exist yet.

use std::net::{TcpListener, ToSocketAddrs, UdpSocket};

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};

use crate::config::{L1Mode, PartitionConfig, RosInput, TransportKind};
use crate::partition::Layout;

/// What became of one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    /// It bound (and was released).
    Binds,
    /// It cannot be bound here: why.
    Fails(String),
    /// Not tried: why.
    NotTried(String),
}

/// One address tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindTry {
    /// Who binds it: an application (`logger-1`) or a field (`ros.listen[3]`).
    pub what: String,
    /// The address.
    pub address: String,
    /// What became of it.
    pub outcome: BindOutcome,
}

impl std::fmt::Display for BindTry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.outcome {
            BindOutcome::Binds => write!(f, "{}: {}: binds", self.what, self.address),
            BindOutcome::Fails(why) => write!(f, "{}: {}: FAILS: {why}", self.what, self.address),
            BindOutcome::NotTried(why) => write!(f, "{}: {}: {why}", self.what, self.address),
        }
    }
}

/// Something bound (a socket, a listener), held until every address was tried.
type Held = Box<dyn std::any::Any>;

/// One address a partition binds ([`partition_binds`]).
pub(crate) struct PartitionBind {
    /// Who binds it: an application (`logger-1`) or a field (`ros.listen[3] (ros-1)`).
    pub(crate) what: String,
    /// The address as bound (`control.http` as `tcp://HOST:PORT`).
    pub(crate) address: String,
    /// The address as the configuration writes it.
    pub(crate) written: String,
    /// Bound by ZeroMQ (else by the operating system's sockets).
    pub(crate) zmq: bool,
    /// One of the layout's endpoints (the transport's).
    pub(crate) endpoint: bool,
    /// The host `[hosts]` places it on, when another.
    pub(crate) host: Option<String>,
}

/// Every address `config` binds, in the order: endpoints, `ros.listen`,
/// `l1.external_listen`, `control.http`, `[monitoring]` (what [`try_binds`] tries and
/// `PartitionConfig::check_binds_here` checks).
pub(crate) fn partition_binds(config: &PartitionConfig, layout: &Layout) -> Vec<PartitionBind> {
    let bind =
        |what: String, address: String, zmq, endpoint, host: Option<&String>| PartitionBind {
            what,
            written: address.clone(),
            address,
            zmq,
            endpoint,
            host: host.cloned(),
        };
    let mut out = Vec::new();
    for (name, ep) in layout.endpoints() {
        let host = config.hosts.get(&name);
        out.push(bind(name, ep, true, true, host));
    }
    let ros = &config.ros;
    if ros.input == RosInput::Network {
        for (i, a) in ros.listen.iter().enumerate() {
            let node = format!("ros-{}", i / ros.channels.max(1) + 1);
            let what = format!("ros.listen[{i}] ({node})");
            out.push(bind(what, a.clone(), false, false, config.hosts.get(&node)));
        }
    }
    if config.l1.mode == L1Mode::External {
        let a = config.l1.external_listen.clone();
        let host = config.hosts.get("supervisor");
        out.push(bind("l1.external_listen".into(), a, false, false, host));
    }
    if !config.control.http.is_empty() {
        let a = format!("tcp://{}", config.control.http);
        let mut b = bind("control.http".into(), a, false, false, None);
        b.written = config.control.http.clone();
        out.push(b);
    }
    let m = &config.monitoring;
    if m.enabled() {
        out.push(bind(
            "monitoring.endpoint".into(),
            m.endpoint.clone(),
            true,
            false,
            None,
        ));
        out.push(bind(
            "monitoring.input".into(),
            m.input_bind(),
            true,
            false,
            None,
        ));
    }
    out
}

/// Tries every address of `config` this host would bind (module docs), all held at once,
/// then released; one entry per address, in the order of [`partition_binds`].
pub fn try_binds(config: &PartitionConfig) -> Vec<BindTry> {
    let mut held: Vec<Held> = Vec::new();
    let transport = Transport::new(1).ok();
    let layout = Layout::new(config);
    let mut out = Vec::new();
    for b in partition_binds(config, &layout) {
        let not_tried = if let Some(host) = &b.host {
            Some(format!("on host {host}, not tried here"))
        } else if b.endpoint {
            match config.transport.kind {
                TransportKind::Inproc => Some("in process, nothing to bind".into()),
                TransportKind::Ipc if !layout.output.is_dir() => Some(format!(
                    "not tried, {} does not exist yet (the run creates it)",
                    layout.output.display()
                )),
                _ => None,
            }
        } else {
            None
        };
        let bound = match (not_tried, b.zmq) {
            (Some(why), _) => Err(BindOutcome::NotTried(why)),
            (None, true) => match &transport {
                None => Err(BindOutcome::Fails("no ZeroMQ context".into())),
                Some(t) => bind_zmq(t, &b.address)
                    .map(|s| Box::new(s) as Held)
                    .map_err(BindOutcome::Fails),
            },
            (None, false) => bind_os(&b.address).map_err(BindOutcome::Fails),
        };
        let outcome = match bound {
            Ok(h) => {
                held.push(h);
                BindOutcome::Binds
            }
            Err(o) => o,
        };
        out.push(BindTry {
            what: b.what,
            address: b.written,
            outcome,
        });
    }
    drop(held);
    out
}

fn bind_zmq(t: &Transport, address: &str) -> Result<rodeo_transport::socket::Socket, String> {
    let socket = t.socket(SocketKind::Router).map_err(|e| e.to_string())?;
    let ep = Endpoint::parse(address).map_err(|e| e.to_string())?;
    socket.bind(&ep).map_err(|e| e.to_string())?;
    Ok(socket)
}

/// Binds `tcp://HOST:PORT` or `udp://HOST:PORT` with the operating system's sockets (what the
/// network input, the external trigger and the HTTP server use); `*` is every address.
pub(crate) fn bind_os(address: &str) -> Result<Box<dyn std::any::Any>, String> {
    let Some((scheme @ ("tcp" | "udp"), rest)) = address.split_once("://") else {
        return Err("not tcp://HOST:PORT or udp://HOST:PORT".into());
    };
    let rest = rest.replacen('*', "0.0.0.0", 1);
    let a = rest
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| "no address".to_string())?;
    if scheme == "tcp" {
        TcpListener::bind(a).map(|l| Box::new(l) as Held)
    } else {
        UdpSocket::bind(a).map(|u| Box::new(u) as Held)
    }
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_port_fails_and_every_free_address_binds() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let free_udp = udp.local_addr().unwrap().port();
        drop(udp);
        let mut c = PartitionConfig::default();
        c.ros.channels = 2;
        c.ros.input = RosInput::Network;
        c.ros.listen = vec![
            format!("tcp://127.0.0.1:{port}"),
            format!("udp://127.0.0.1:{free_udp}"),
        ];
        c.control.http = "127.0.0.1:0".into();
        let tries = try_binds(&c);
        let lines: Vec<String> = tries.iter().map(ToString::to_string).collect();
        assert!(
            lines.contains(&"logger-1: inproc://logger-1: in process, nothing to bind".into()),
            "{lines:#?}"
        );
        assert!(
            lines[3].starts_with(&format!(
                "ros.listen[0] (ros-1): tcp://127.0.0.1:{port}: FAILS"
            )),
            "{lines:#?}"
        );
        assert_eq!(
            lines[4],
            format!("ros.listen[1] (ros-1): udp://127.0.0.1:{free_udp}: binds")
        );
        assert_eq!(lines[5], "control.http: 127.0.0.1:0: binds");
        // Released: the udp port binds again.
        UdpSocket::bind(("127.0.0.1", free_udp)).unwrap();
        drop(held);
    }
}
