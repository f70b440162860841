//! Checks of the addresses a partition binds, without binding them where they are in use: two
//! of the partition's own on one port, and hosts that are not this host's. `config check`
//! passed a `[monitoring] endpoint` on the partition's own data port, an `l1.external_listen`
//! or `control.http` on it, a `transport.host` or `control.address` of another machine
//! (`8.8.8.8`, `example.invalid`), and an ipc endpoint in a directory that does not exist: each
//! run then failed at its first bind, blaming "another process". (`config check --bind` also
//! binds every address, which fails while a run holds them.)

use std::path::Path;

use super::error::{bad, ConfigError};
use super::PartitionConfig;
use crate::partition::Layout;

/// One address the partition binds on this host.
struct Bind {
    /// The field that sets it (or the application, for the transport's endpoints).
    field: String,
    /// `tcp`, `udp` or `ipc`.
    scheme: &'static str,
    /// Host (tcp, udp) or path (ipc).
    host: String,
    /// Port (0: any, never a collision).
    port: u16,
    /// Bound by ZeroMQ, which takes an IP address, `*` or an interface name, no host name.
    zmq: bool,
}

impl PartitionConfig {
    /// Checks the addresses this partition binds on this host (module docs): no two of its own
    /// on one port, every host an address of this host (it binds there, on a port the system
    /// picks), every ipc endpoint's directory there. Applications placed on other hosts
    /// (`[hosts]`) are not checked here.
    pub fn check_binds_here(&self) -> Result<(), ConfigError> {
        let binds = self.binds_here();
        for (i, b) in binds.iter().enumerate() {
            if b.port == 0 {
                continue;
            }
            let wild = |h: &str| h == "*" || h == "0.0.0.0";
            let same = binds[..i].iter().find(|a| {
                a.scheme == b.scheme
                    && a.port == b.port
                    && (a.host == b.host || wild(&a.host) || wild(&b.host))
            });
            if let Some(a) = same {
                return Err(bad(
                    field_of(&b.field),
                    format!("{}://{}:{} ({})", b.scheme, b.host, b.port, b.field),
                    format!(
                        "a port the partition does not bind already: {} binds {}://{}:{} (the run \
                         would fail at its bind)",
                        a.field, a.scheme, a.host, a.port
                    ),
                ));
            }
        }
        let mut tried: Vec<&str> = Vec::new();
        for b in &binds {
            if tried.contains(&b.host.as_str()) {
                continue;
            }
            tried.push(&b.host);
            let value = || format!("{:?} ({})", b.host, b.field);
            if b.scheme == "ipc" {
                // The endpoint as written: the path alone read as a file name.
                let value = || format!("\"ipc://{}\" ({})", b.host, b.field);
                let dir = Path::new(&b.host)
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty());
                if dir.is_some_and(|d| !d.is_dir()) {
                    return Err(bad(
                        field_of(&b.field),
                        value(),
                        "an ipc path in a directory that exists (ZeroMQ makes the socket file, \
                         not its directory)",
                    ));
                }
                // ZeroMQ unlinks the path before it binds: a file there would be deleted (a
                // QA pass lost one to `[monitoring] endpoint`). A socket may be there: a
                // service's own, live while it prepares its next run, or one an ended run
                // left; one another process listens on is refused at the bind
                // (`rodeo_transport::socket::check_ipc_bind`).
                use std::os::unix::fs::FileTypeExt as _;
                let other =
                    std::fs::symlink_metadata(&b.host).is_ok_and(|m| !m.file_type().is_socket());
                if other {
                    return Err(bad(
                        field_of(&b.field),
                        value(),
                        "an ipc path holding nothing or a socket: something that is not a \
                         socket is there, and binding would replace it",
                    ));
                }
                continue;
            }
            // The transport's own endpoints are named by their host field.
            let field = match field_of(&b.field) {
                "transport.base_port" => "transport.host",
                f => f,
            };
            if b.zmq && !zmq_bindable(&b.host) {
                return Err(bad(
                    field,
                    value(),
                    "an IP address of this host or \"*\" (ZeroMQ binds no host name: \
                     \"127.0.0.1\" for \"localhost\")",
                ));
            }
            // Bound on a port the system picks: released at once.
            let at = if b.host.contains(':') {
                format!("tcp://[{}]:0", b.host)
            } else {
                format!("tcp://{}:0", b.host)
            };
            let bound = crate::binds::bind_os(&at).map(drop);
            if let Err(why) = bound {
                return Err(bad(
                    field,
                    value(),
                    format!("a name or address of this host ({why})"),
                ));
            }
        }
        Ok(())
    }

    /// The addresses bound on this host (module docs), with the field that sets each: the
    /// partition's binds ([`crate::binds::partition_binds`]) placed here, but the transport's
    /// ipc endpoints (in the run's own runtime directory, made at its start), and the
    /// controller's `control.address`.
    fn binds_here(&self) -> Vec<Bind> {
        let layout = Layout::new(self);
        let mut out: Vec<Bind> = crate::binds::partition_binds(self, &layout)
            .into_iter()
            .filter(|b| b.host.is_none() && (!b.endpoint || b.address.starts_with("tcp://")))
            .filter_map(|b| {
                let field = if b.endpoint {
                    format!("{}'s endpoint (transport.base_port)", b.what)
                } else {
                    b.what
                };
                parse(field, &b.address, b.zmq)
            })
            .collect();
        let controller = format!("tcp://{}:0", self.control.address);
        out.extend(parse("control.address".into(), &controller, true));
        out
    }
}

/// The configuration field named by a [`Bind`]'s description.
fn field_of(what: &str) -> &'static str {
    const FIELDS: [&str; 6] = [
        "ros.listen",
        "l1.external_listen",
        "control.http",
        "control.address",
        "monitoring.endpoint",
        "monitoring.input",
    ];
    FIELDS
        .into_iter()
        .find(|f| what.starts_with(f))
        .unwrap_or("transport.base_port")
}

/// `tcp://HOST:PORT`, `udp://HOST:PORT` or `ipc://PATH` as a [`Bind`]; anything else (inproc,
/// a value `validate` refuses) is none.
fn parse(field: String, address: &str, zmq: bool) -> Option<Bind> {
    let (scheme, rest) = address.split_once("://")?;
    let scheme = match scheme {
        "tcp" => "tcp",
        "udp" => "udp",
        "ipc" => {
            return Some(Bind {
                field,
                scheme: "ipc",
                host: rest.to_string(),
                port: 0,
                zmq,
            })
        }
        _ => return None,
    };
    let (host, port) = rest.rsplit_once(':')?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Some(Bind {
        field,
        scheme,
        host,
        port: port.parse().ok()?,
        zmq,
    })
}

/// Whether `host` is one ZeroMQ binds and the partition's peers connect to: `*` or an IP
/// address (ZeroMQ reads any other word as an interface name to bind, which nobody can
/// connect to).
fn zmq_bindable(host: &str) -> bool {
    host == "*" || host.parse::<std::net::IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<(), String> {
        PartitionConfig::from_toml(text, "b.toml")
            .map_err(|e| e.to_string())?
            .check_binds_here()
            .map_err(|e| e.to_string())
    }

    /// The partition's own addresses on one port are refused naming both; hosts of other
    /// machines and ipc endpoints in missing directories are refused by field.
    #[test]
    fn the_partitions_own_binds_do_not_collide_and_are_on_this_host() {
        let tcp = "[transport]\nkind = \"tcp\"\n";
        let e = check(&format!(
            "{tcp}[monitoring]\nendpoint = \"tcp://127.0.0.1:47001\"\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("monitoring.endpoint") && e.contains("ros-1"),
            "{e}"
        );
        let e = check(&format!(
            "{tcp}[l1]\nmode = \"external\"\nexternal_listen = \"tcp://127.0.0.1:47000\"\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("l1.external_listen") && e.contains("logger-1"),
            "{e}"
        );
        let e = check(&format!("{tcp}[control]\nhttp = \"127.0.0.1:47002\"\n")).unwrap_err();
        assert!(e.contains("control.http"), "{e}");
        // The forwarder's input is the endpoint's port + 1.
        let e = check("[monitoring]\nendpoint = \"tcp://127.0.0.1:47100\"\ninput = \"tcp://127.0.0.1:47100\"\n");
        assert!(e.is_err());
        let e = check(&format!("{tcp}host = \"8.8.8.8\"\n")).unwrap_err();
        assert!(
            e.contains("transport.host") && e.contains("this host"),
            "{e}"
        );
        // ZeroMQ binds no host name (the run failed: "No such device").
        let e = check(&format!("{tcp}host = \"localhost\"\n")).unwrap_err();
        assert!(
            e.contains("transport.host") && e.contains("no host name"),
            "{e}"
        );
        let e = check("[control]\naddress = \"example.invalid\"\n").unwrap_err();
        assert!(e.contains("control.address"), "{e}");
        let e = check("[monitoring]\nendpoint = \"ipc:///nonexistent/dir/sock\"\n").unwrap_err();
        assert!(
            e.contains("monitoring.endpoint") && e.contains("directory"),
            "{e}"
        );
        // The default, tcp on its own ports, and a wildcard HTTP address on a free port pass.
        check("").unwrap();
        check(tcp).unwrap();
        check(&format!("{tcp}[control]\nhttp = \"0.0.0.0:0\"\n")).unwrap();
    }

    /// An ipc path holding a file is refused by field (ZeroMQ would delete it, a QA pass
    /// found); a socket (a service's own while it prepares its next run, one an ended run
    /// left) and nothing at all pass: one a process listens on is refused at the bind.
    #[test]
    fn an_ipc_path_holding_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name).display().to_string();
        let config = |path: &str| format!("[monitoring]\nendpoint = \"ipc://{path}\"\n");
        std::fs::write(at("precious.txt"), "data").unwrap();
        let e = check(&config(&at("precious.txt"))).unwrap_err();
        assert!(
            e.contains("monitoring.endpoint") && e.contains("not a socket"),
            "{e}"
        );
        // Named as written, the scheme with it.
        assert!(e.contains(&format!("ipc://{}", at("precious.txt"))), "{e}");
        assert!(std::path::Path::new(&at("precious.txt")).exists());
        // The forwarder's input is the endpoint's path + ".in".
        std::fs::write(at("mon.sock.in"), "data").unwrap();
        let e = check(&config(&at("mon.sock"))).unwrap_err();
        assert!(e.contains("monitoring.input"), "{e}");
        let live = std::os::unix::net::UnixListener::bind(at("live.sock")).unwrap();
        check(&config(&at("live.sock"))).unwrap();
        drop(live);
        check(&config(&at("live.sock"))).unwrap();
        check(&config(&at("new.sock"))).unwrap();
    }
}
