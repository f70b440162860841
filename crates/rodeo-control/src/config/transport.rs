//! `[transport]`: the endpoints' kind, ZeroMQ's settings, message limits and CURVE.

use serde::{Deserialize, Serialize};

use super::address::bare_host_ok;
use super::error::Checks;

/// Transport kinds.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// In one process.
    Inproc,
    /// Unix-domain sockets between processes on one host.
    Ipc,
    /// TCP.
    Tcp,
    /// Shared memory (iceoryx2) between processes on one host: the default of `--processes`
    /// when every application runs on this host.
    Shm,
    /// rodeo's own framing over kernel TCP for the data paths (`stream://HOST:PORT`: fragments
    /// to DCMs, events to loggers, assignments and decisions), ZeroMQ tcp for run control.
    /// TLS 1.3 with the partition's own CA on every connection; plain with
    /// `trusted_network = true`.
    Stream,
}

/// `[transport]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// Endpoint kind.
    pub kind: TransportKind,
    /// ZeroMQ I/O threads.
    pub io_threads: u32,
    /// First tcp port.
    pub base_port: u16,
    /// Host of tcp endpoints.
    pub host: String,
    /// ZeroMQ high-water mark of the supervisor's, DCMs' and loggers' sockets, in messages.
    pub high_water_mark: u32,
    /// Largest incoming message of every data socket, in bytes; 0: derived per socket
    /// ([`PartitionConfig::message_limits`](super::PartitionConfig::message_limits)).
    pub max_message_bytes: u64,
    /// CURVE on every tcp socket of the partition; unset: on when `kind` is tcp
    /// ([`TransportConfig::curve_enabled`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curve: Option<bool>,
    /// The network between the partition's hosts is private to it: the data plane may go
    /// without authentication or encryption (`kind = "stream"` then goes plain instead of TLS).
    /// Off by default.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub trusted_network: bool,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            kind: TransportKind::Inproc,
            io_threads: 1,
            base_port: 47000,
            host: "127.0.0.1".into(),
            high_water_mark: rodeo_dataflow::DEFAULT_HIGH_WATER_MARK,
            max_message_bytes: 0,
            curve: None,
            trusted_network: false,
        }
    }
}

impl TransportConfig {
    /// Whether the partition's ZeroMQ tcp sockets (data plane with `kind = "tcp"`, and the
    /// control channel) authenticate with CURVE: `curve` if given, else true for
    /// `kind = "tcp"` and `"stream"` (whose run control goes over ZeroMQ tcp).
    pub fn curve_enabled(&self) -> bool {
        self.curve.unwrap_or(matches!(
            self.kind,
            TransportKind::Tcp | TransportKind::Stream
        ))
    }

    /// Whether the partition's `stream://` connections are TLS: `kind = "stream"` without
    /// `trusted_network` (its keys travel with the CURVE keys, so CURVE is on too).
    pub fn stream_tls(&self) -> bool {
        self.kind == TransportKind::Stream && !self.trusted_network
    }

    /// New keys for a partition of this section: CURVE keys when [`Self::curve_enabled`],
    /// with TLS keys (the partition's own CA) when [`Self::stream_tls`]; `None` without CURVE.
    pub fn partition_keys(
        &self,
    ) -> Result<Option<rodeo_transport::curve::PartitionKeys>, rodeo_transport::frame::TransportError>
    {
        if !self.curve_enabled() {
            return Ok(None);
        }
        let keys = rodeo_transport::curve::PartitionKeys::generate()?;
        Ok(Some(if self.stream_tls() {
            keys.with_tls()?
        } else {
            keys
        }))
    }

    /// Whether the data plane's endpoints are tcp ports (`kind = "tcp"` or `"stream"`).
    pub fn uses_ports(&self) -> bool {
        matches!(self.kind, TransportKind::Tcp | TransportKind::Stream)
    }

    /// Checks this section's own values, each error naming its field (checks across sections
    /// are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, c: &mut Checks) {
        if self.curve_enabled() && !rodeo_transport::curve::available() {
            c.bad(
                "transport.curve",
                format!(
                    "true{}",
                    if self.curve.is_none() {
                        " (the default with kind = \"tcp\")"
                    } else {
                        ""
                    }
                ),
                "false: this build's libzmq has no CURVE (build it with libsodium: \
                 third_party/zmq-sys/README.md)",
            );
        }
        if self.stream_tls() && !self.curve_enabled() {
            c.bad(
                "transport.curve",
                "false",
                "true (or unset): kind = \"stream\" encrypts its connections with TLS, whose \
                 keys are handed to the applications with the CURVE keys; or set \
                 transport.trusted_network = true for a plain stream on a network private to \
                 the partition (docs/transport.md)",
            );
        }
        if self.io_threads == 0 || self.io_threads > 16 {
            c.bad("transport.io_threads", self.io_threads, "1..=16");
        }
        if !bare_host_ok(&self.host) {
            c.bad(
                "transport.host",
                format!("{:?}", self.host),
                "a host name or IPv4 address of tcp endpoints, without scheme or port (IPv6 is not supported)",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::PartitionConfig;

    fn refused(text: &str) -> String {
        PartitionConfig::from_toml(text, "t.toml")
            .unwrap_err()
            .to_string()
    }

    /// The supervisor's queue to a DCM holds an assignment for each of the DCM's slots: a
    /// smaller high-water mark is refused by name (it ran, with every dropped assignment
    /// waiting for the event timeout), one as large as the slots passes; over ipc and tcp
    /// twice the slots.
    #[test]
    fn a_high_water_mark_below_the_dcm_slots_is_refused() {
        let e = refused("[transport]\nkind = \"ipc\"\nhigh_water_mark = 300\n");
        assert!(
            e.contains("high_water_mark") && e.contains("at least 512 (twice"),
            "{e}"
        );
        let e = refused("[transport]\nhigh_water_mark = 255\n");
        assert!(
            e.contains("transport.high_water_mark") && e.contains("at least 256"),
            "{e}"
        );
        let ok = PartitionConfig::from_toml(
            "[transport]\nhigh_water_mark = 64\n[dcm]\nslots = 64\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!((ok.transport.high_water_mark, ok.dcm.slots), (64, 64));
    }

    /// A readout node's queue of replies to a DCM holds what the DCM may have in flight to it,
    /// twice over ipc and tcp (a mark of 64 built 59 events partial over tcp); within a
    /// process (inproc, shm) the mark is not bounded so.
    #[test]
    fn a_readout_node_mark_below_the_requests_in_flight_is_refused_over_ipc_and_tcp() {
        for kind in ["ipc", "tcp"] {
            let e = refused(&format!(
                "[transport]\nkind = \"{kind}\"\n[ros]\nhigh_water_mark = 127\n"
            ));
            assert!(
                e.contains("ros.high_water_mark") && e.contains("at least 128"),
                "{kind}: {e}"
            );
            let text = format!("[transport]\nkind = \"{kind}\"\n[ros]\nhigh_water_mark = 128\n");
            assert!(
                PartitionConfig::from_toml(&text, "t.toml").is_ok(),
                "{kind}"
            );
        }
        assert!(PartitionConfig::from_toml("[ros]\nhigh_water_mark = 1\n", "t.toml").is_ok());
    }
}
