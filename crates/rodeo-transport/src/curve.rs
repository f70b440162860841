//! ZeroMQ CURVE on tcp: a partition's applications authenticate each other, strangers are
//! refused, counted and logged.
//!
//! # Keys
//!
//! A partition has two CURVE key pairs ([`PartitionKeys`]), made by whoever starts it (the
//! controller, or the process of an embedded partition) and handed to its applications with
//! their configuration: the **server** pair, which every tcp server socket of the partition
//! uses, and the **client** pair, which every tcp client socket uses. Only a peer that holds the
//! client secret key (proved in the CURVE handshake) and knows the server public key gets in.
//!
//! # What a transport with keys does
//!
//! [`crate::socket::Transport::with_curve`] makes every `tcp://` socket of that transport a
//! CURVE socket (binds: server with the server pair; connects: client with the client pair and
//! the server public key). `inproc://`, `ipc://` and `shm://` endpoints stay as they are: they
//! never leave the host. One thread per transport ([`Guard`]) answers ZeroMQ's authentication
//! requests (ZAP, RFC 27) on `inproc://zeromq.zap.01`: a CURVE client is accepted only with the
//! partition's client public key. The same thread reads the event monitor of every tcp server
//! socket: each handshake that failed (a plain ZeroMQ peer, a wrong server key, a client key
//! that is not the partition's, garbage) is counted ([`refused_count`], exported as
//! `rodeo_transport_auth_refused_total`) and the first one from each peer address is logged.
//! A refused peer's messages never reach the application: ZeroMQ drops the connection before
//! any message is delivered.
//!
//! CURVE also encrypts what it carries (Curve25519, XSalsa20-Poly1305); see
//! docs/security.md, "Security notes", for what is and is not covered.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::frame::TransportError;
use crate::stream::TlsKeys;

/// Refused handshakes in this process, over every transport with keys.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// The ZAP domain of rodeo's CURVE servers.
pub(crate) const ZAP_DOMAIN: &str = "rodeo";

/// The endpoint libzmq asks for authentication (RFC 27).
const ZAP_ENDPOINT: &str = "inproc://zeromq.zap.01";

/// At most this many peer addresses are remembered for "first refusal" logging; past it new
/// addresses are counted but no longer logged one by one.
const LOGGED_PEERS_MAX: usize = 1024;

/// Accepted tcp connections whose peer address is remembered (per monitored socket).
const OPEN_CONNECTIONS_MAX: usize = 4096;

/// How often the guard thread looks at its stop flag.
const POLL_MS: i64 = 100;

/// Handshakes refused by this process's CURVE servers so far (plain peers, wrong keys,
/// unknown client keys, garbage), and its `stream://` connections TLS refused (a peer of
/// another partition, not TLS, a record that did not decrypt): `rodeo_transport_auth_refused_total`.
pub fn refused_count() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Counts one connection refused by the stream transport's TLS in [`refused_count`].
pub(crate) fn count_tls_refused() {
    REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// True when this build's libzmq has CURVE (it is built with libsodium:
/// third_party/zmq-sys/README.md).
pub fn available() -> bool {
    zmq::has("curve") == Some(true)
}

/// Why a key line could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The line does not start with the format's tag.
    #[error("CURVE key line: expected \"rodeo-curve-1\" and four keys, got {0} words")]
    Format(usize),
    /// A key is not 40 characters of Z85 (32 bytes).
    #[error("CURVE key line: the {0} is not a 40-character Z85 key")]
    Key(&'static str),
    /// A secret key does not belong to its public key.
    #[error("CURVE key line: the {0} secret key does not match its public key")]
    Mismatch(&'static str),
    /// The line's TLS part (after the CURVE keys) is wrong.
    #[error("key line: {0}")]
    Tls(#[from] crate::stream::tls::TlsKeyError),
}

/// The tag a key line starts with (the format's version).
pub const KEY_LINE_TAG: &str = "rodeo-curve-1";

// libzmq's (zmq.h, 4.2.1 and later); zmq-sys 0.12 does not declare it.
unsafe extern "C" {
    /// Writes the Z85 public key (40 characters and a NUL) of a Z85 secret key.
    fn zmq_curve_public(
        z85_public_key: *mut libc::c_char,
        z85_secret_key: *const libc::c_char,
    ) -> libc::c_int;
}

/// A CURVE key pair (32-byte keys).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPair {
    /// The public key.
    pub public: [u8; 32],
    /// The secret key.
    pub secret: [u8; 32],
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &z85(&self.public))
            .field("secret", &"(hidden)")
            .finish()
    }
}

impl KeyPair {
    /// A new random key pair (libsodium's generator).
    pub fn generate() -> Result<KeyPair, TransportError> {
        let k = zmq::CurveKeyPair::new().map_err(|source| TransportError::Setup {
            op: "make a CURVE key pair",
            source,
        })?;
        Ok(KeyPair {
            public: k.public_key,
            secret: k.secret_key,
        })
    }

    /// The public key that belongs to `secret`.
    fn public_of(secret: &[u8; 32]) -> Option<[u8; 32]> {
        let secret_z85 = zmq::z85_encode(secret).ok()?;
        let c_secret = std::ffi::CString::new(secret_z85).ok()?;
        let mut out = [0u8; 41];
        // SAFETY: `out` has room for the 40 characters and the NUL zmq_curve_public writes;
        // `c_secret` is a NUL-terminated 40-character Z85 string, which it reads.
        let rc = unsafe { zmq_curve_public(out.as_mut_ptr().cast(), c_secret.as_ptr().cast()) };
        if rc != 0 {
            return None;
        }
        let text = std::str::from_utf8(&out[..40]).ok()?;
        decode_key(text)
    }
}

/// The keys of one partition (module docs): what its applications get with their
/// configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct PartitionKeys {
    /// Every tcp server socket's pair.
    pub server: KeyPair,
    /// Every tcp client socket's pair; the only client key the servers accept.
    pub client: KeyPair,
    /// The partition's TLS keys, for its `stream://` connections when they are encrypted
    /// ([`crate::stream::tls`]); `None`: stream connections go plain.
    pub tls: Option<TlsKeys>,
}

impl std::fmt::Debug for PartitionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionKeys")
            .field("server", &self.server)
            .field("client", &self.client)
            .field("tls", &self.tls)
            .finish()
    }
}

fn z85(key: &[u8; 32]) -> String {
    // 32 bytes is a multiple of 4: encoding cannot fail.
    zmq::z85_encode(key).unwrap_or_default()
}

/// The Z85 alphabet (ZeroMQ RFC 32).
const Z85_ALPHABET: &[u8] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

fn decode_key(text: &str) -> Option<[u8; 32]> {
    if text.len() != 40 || !text.bytes().all(|b| Z85_ALPHABET.contains(&b)) {
        return None;
    }
    let bytes = zmq::z85_decode(text).ok()?;
    bytes.try_into().ok()
}

impl PartitionKeys {
    /// New random CURVE keys for a partition (no TLS keys: [`PartitionKeys::with_tls`]).
    pub fn generate() -> Result<PartitionKeys, TransportError> {
        Ok(PartitionKeys {
            server: KeyPair::generate()?,
            client: KeyPair::generate()?,
            tls: None,
        })
    }

    /// These keys and new TLS keys for the partition's `stream://` connections (its own CA).
    pub fn with_tls(self) -> Result<PartitionKeys, TransportError> {
        Ok(PartitionKeys {
            tls: Some(TlsKeys::generate()?),
            ..self
        })
    }

    /// The keys as one line of text (no newline): the tag, then the server public and secret
    /// and the client public and secret keys in Z85, then the TLS keys' words if there are
    /// ([`TlsKeys::to_words`]). Secret: hand it over a private channel (a child's stdin),
    /// never on a command line.
    pub fn to_line(&self) -> String {
        let mut line = format!(
            "{KEY_LINE_TAG} {} {} {} {}",
            z85(&self.server.public),
            z85(&self.server.secret),
            z85(&self.client.public),
            z85(&self.client.secret)
        );
        if let Some(t) = &self.tls {
            line.push(' ');
            line.push_str(&t.to_words());
        }
        line
    }

    /// Reads [`PartitionKeys::to_line`]'s format (surrounding white space ignored); every key
    /// is checked, and each secret key against its public key.
    pub fn from_line(line: &str) -> Result<PartitionKeys, KeyError> {
        let words: Vec<&str> = line.split_whitespace().collect();
        if !matches!(words.len(), 5 | 9) || words[0] != KEY_LINE_TAG {
            return Err(KeyError::Format(words.len()));
        }
        let tls = match words.get(5..) {
            Some(w) if !w.is_empty() => Some(TlsKeys::from_words(w)?),
            _ => None,
        };
        let names = [
            "server public key",
            "server secret key",
            "client public key",
            "client secret key",
        ];
        let mut keys = [[0u8; 32]; 4];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = decode_key(words[i + 1]).ok_or(KeyError::Key(names[i]))?;
        }
        let pair = |public: [u8; 32], secret: [u8; 32], who| {
            if KeyPair::public_of(&secret) != Some(public) {
                return Err(KeyError::Mismatch(who));
            }
            Ok(KeyPair { public, secret })
        };
        Ok(PartitionKeys {
            server: pair(keys[0], keys[1], "server")?,
            client: pair(keys[2], keys[3], "client")?,
            tls,
        })
    }
}

/// A monitored server socket's event stream, read by the guard thread.
struct Monitor {
    /// The PAIR socket connected to the server socket's monitor endpoint.
    pair: zmq::Socket,
    /// The server's endpoint (for the log).
    endpoint: String,
    /// Accepted connections: descriptor -> peer address (when it could be read).
    open: HashMap<i32, String>,
    /// A handshake failed: its reason, until the connection's DISCONNECTED names the peer.
    failed: Option<&'static str>,
}

/// The authentication thread of one transport with keys (module docs): answers ZAP requests
/// and reads the server sockets' monitors. It stops when the last transport clone and socket
/// holding it are dropped.
pub(crate) struct Guard {
    ctx: zmq::Context,
    keys: PartitionKeys,
    stop: Arc<AtomicBool>,
    add: Mutex<Sender<Monitor>>,
    next_monitor: AtomicU64,
    /// Refused handshakes of this transport's servers (also in [`REFUSED`]).
    refused: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").finish()
    }
}

impl Guard {
    /// Binds the ZAP endpoint in `ctx` and starts the thread.
    pub(crate) fn start(ctx: &zmq::Context, keys: PartitionKeys) -> Result<Guard, TransportError> {
        if !available() {
            return Err(TransportError::Setup {
                op: "enable CURVE (this build's libzmq has no CURVE: see \
                     third_party/zmq-sys/README.md; or set [transport] curve = false)",
                source: zmq::Error::ENOTSUP,
            });
        }
        let setup = |op| move |source| TransportError::Setup { op, source };
        let zap = ctx
            .socket(zmq::REP)
            .map_err(setup("create the ZAP socket"))?;
        zap.set_linger(0)
            .map_err(setup("set linger on the ZAP socket"))?;
        zap.set_rcvhwm(1000)
            .map_err(setup("set the ZAP socket's high-water mark"))?;
        zap.bind(ZAP_ENDPOINT)
            .map_err(|source| TransportError::Bind {
                endpoint: ZAP_ENDPOINT.into(),
                source,
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let client_public = keys.client.public;
        let st = Arc::clone(&stop);
        let refused = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&refused);
        let thread = std::thread::Builder::new()
            .name("curve-guard".into())
            .spawn(move || guard_loop(zap, rx, client_public, &st, &count))
            .map_err(|e| TransportError::Setup {
                op: "start the CURVE guard thread",
                source: zmq::Error::from_raw(e.raw_os_error().unwrap_or(12)),
            })?;
        Ok(Guard {
            ctx: ctx.clone(),
            keys,
            stop,
            add: Mutex::new(tx),
            next_monitor: AtomicU64::new(0),
            refused,
            thread: Some(thread),
        })
    }

    /// The partition's keys.
    pub(crate) fn keys(&self) -> &PartitionKeys {
        &self.keys
    }

    /// Refused handshakes of this transport's servers so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Makes `socket` (about to bind `endpoint`) report its handshakes to this guard.
    pub(crate) fn watch(&self, socket: &zmq::Socket, endpoint: &str) -> Result<(), TransportError> {
        let n = self.next_monitor.fetch_add(1, Ordering::Relaxed);
        let name = format!("inproc://rodeo-curve-monitor-{n}");
        let events = zmq_sys::ZMQ_EVENT_ACCEPTED
            | zmq_sys::ZMQ_EVENT_DISCONNECTED
            | zmq_sys::ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
            | zmq_sys::ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq_sys::ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
        let setup = |op| move |source| TransportError::Setup { op, source };
        socket
            .monitor(&name, events as i32)
            .map_err(setup("monitor a CURVE server socket"))?;
        // Connected here, before any event can be emitted, then handed to the thread.
        let pair = self
            .ctx
            .socket(zmq::PAIR)
            .map_err(setup("create a monitor socket"))?;
        pair.set_linger(0)
            .map_err(setup("set linger on a monitor socket"))?;
        pair.connect(&name)
            .map_err(setup("connect a monitor socket"))?;
        let m = Monitor {
            pair,
            endpoint: endpoint.to_string(),
            open: HashMap::new(),
            failed: None,
        };
        self.add
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(m)
            .map_err(|_| TransportError::Setup {
                op: "hand a monitor to the CURVE guard thread (it has stopped)",
                source: zmq::Error::ETERM,
            })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the guard thread remembers for logging, and its count.
struct Log {
    peers: HashSet<String>,
    saturated: bool,
    refused: Arc<AtomicU64>,
}

impl Log {
    /// Logs the first refusal of `peer` (bounded, module docs).
    fn refused(&mut self, peer: &str, endpoint: &str, reason: &str) {
        if self.peers.contains(peer) {
            return;
        }
        if self.peers.len() >= LOGGED_PEERS_MAX {
            if !self.saturated {
                self.saturated = true;
                tracing::warn!(
                    "CURVE: {LOGGED_PEERS_MAX} peers refused; further peers are counted \
                     (rodeo_transport_auth_refused_total) but not logged"
                );
            }
            return;
        }
        self.peers.insert(peer.to_string());
        tracing::warn!(
            peer,
            endpoint,
            reason,
            "CURVE: refused a tcp peer (first refusal from this address; later ones are only \
             counted in rodeo_transport_auth_refused_total)"
        );
    }
}

fn guard_loop(
    zap: zmq::Socket,
    add: Receiver<Monitor>,
    client_public: [u8; 32],
    stop: &AtomicBool,
    refused: &Arc<AtomicU64>,
) {
    let mut monitors: Vec<Monitor> = Vec::new();
    let mut log = Log {
        peers: HashSet::new(),
        saturated: false,
        refused: Arc::clone(refused),
    };
    while !stop.load(Ordering::Acquire) {
        while let Ok(m) = add.try_recv() {
            monitors.push(m);
        }
        let ready: Vec<bool> = {
            let mut items = Vec::with_capacity(monitors.len() + 1);
            items.push(zap.as_poll_item(zmq::POLLIN));
            items.extend(monitors.iter().map(|m| m.pair.as_poll_item(zmq::POLLIN)));
            if zmq::poll(&mut items, POLL_MS).is_err() {
                // Interrupted or the context is terminating: look at the stop flag again.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            items.iter().map(|i| i.is_readable()).collect()
        };
        if ready[0] {
            answer_zap(&zap, &client_public, &mut log);
        }
        let mut stopped = Vec::new();
        for (i, m) in monitors.iter_mut().enumerate() {
            if ready[i + 1] && !read_events(m, &mut log) {
                stopped.push(i);
            }
        }
        for i in stopped.into_iter().rev() {
            monitors.swap_remove(i);
        }
    }
}

/// Answers one ZAP request: CURVE with the partition's client key in rodeo's domain: 200;
/// NULL (a plain socket of this context: ipc, which stays on the host): 200; anything else:
/// 400 (counted and logged through the server's monitor).
fn answer_zap(zap: &zmq::Socket, client_public: &[u8; 32], log: &mut Log) {
    let Ok(frames) = zap.recv_multipart(zmq::DONTWAIT) else {
        return;
    };
    // version, request id, domain, address, identity, mechanism, credentials...
    let get = |i: usize| frames.get(i).map(Vec::as_slice).unwrap_or_default();
    let (version, request_id, domain, address, mechanism) =
        (get(0), get(1), get(2), get(3), get(5));
    let (code, text): (&[u8], &[u8]) = if version != b"1.0" {
        (b"400", b"unsupported ZAP version")
    } else if mechanism == b"NULL"
        || (mechanism == b"CURVE"
            && domain == ZAP_DOMAIN.as_bytes()
            && frames.len() == 7
            && get(6) == client_public)
    {
        (b"200", b"OK")
    } else {
        let peer = String::from_utf8_lossy(address).into_owned();
        let why = format!(
            "{} credentials not the partition's",
            String::from_utf8_lossy(mechanism)
        );
        log.refused(&peer, &String::from_utf8_lossy(domain), &why);
        (b"400", b"not a member of this partition")
    };
    let reply: [&[u8]; 6] = [b"1.0", request_id, code, text, b"", b""];
    // A REP socket must answer before its next receive; a failed send (the asker went away)
    // resets nothing we rely on.
    let _ = zap.send_multipart(reply, zmq::DONTWAIT);
}

/// Reads a monitor's queued events; false when its socket has closed (monitor stopped).
fn read_events(m: &mut Monitor, log: &mut Log) -> bool {
    loop {
        let frames = match m.pair.recv_multipart(zmq::DONTWAIT) {
            Ok(f) => f,
            Err(zmq::Error::EAGAIN) => return true,
            Err(_) => return false,
        };
        let Some((event, value)) = frames.first().and_then(|f| parse_event(f)) else {
            continue;
        };
        match event {
            zmq_sys::ZMQ_EVENT_MONITOR_STOPPED => return false,
            zmq_sys::ZMQ_EVENT_ACCEPTED => {
                let fd = value as i32;
                if m.open.len() < OPEN_CONNECTIONS_MAX || m.open.contains_key(&fd) {
                    m.open
                        .insert(fd, peer_address(fd).unwrap_or_else(|| "?".into()));
                }
            }
            zmq_sys::ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
            | zmq_sys::ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq_sys::ZMQ_EVENT_HANDSHAKE_FAILED_AUTH => {
                REFUSED.fetch_add(1, Ordering::Relaxed);
                log.refused.fetch_add(1, Ordering::Relaxed);
                m.failed = Some(reason(event, value));
            }
            zmq_sys::ZMQ_EVENT_DISCONNECTED => {
                let peer = m.open.remove(&(value as i32));
                if let Some(why) = m.failed.take() {
                    // The failing engine reports its disconnection right after the failure.
                    let peer = peer.unwrap_or_else(|| "?".into());
                    let key = if peer == "?" {
                        format!("{}: {why}", m.endpoint)
                    } else {
                        peer.clone()
                    };
                    if !log.peers.contains(&key) {
                        log.refused(&key, &m.endpoint, why);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A monitor event's first frame: the event (u16) and its value (u32), native byte order.
fn parse_event(frame: &[u8]) -> Option<(u32, u32)> {
    if frame.len() != 6 {
        return None;
    }
    let event = u16::from_ne_bytes([frame[0], frame[1]]);
    let value = u32::from_ne_bytes([frame[2], frame[3], frame[4], frame[5]]);
    Some((u32::from(event), value))
}

fn reason(event: u32, value: u32) -> &'static str {
    match (event, value) {
        (zmq_sys::ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, _) => {
            "client key is not the partition's (refused by the authenticator)"
        }
        (_, zmq_sys::ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) => {
            "no CURVE (a plain ZeroMQ peer without the partition's keys)"
        }
        (_, zmq_sys::ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) => {
            "CURVE handshake did not decrypt (wrong server key)"
        }
        (zmq_sys::ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, _) => {
            "ZeroMQ protocol error in the handshake"
        }
        _ => "handshake failed (connection closed or not ZeroMQ)",
    }
}

/// The peer address of an accepted tcp connection, `IP:PORT`.
fn peer_address(fd: i32) -> Option<String> {
    let mut storage = std::mem::MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage` is a writable sockaddr_storage and `len` its size, as getpeername
    // requires; a descriptor that is closed or not a socket only makes it fail (EBADF,
    // ENOTSOCK), which is checked.
    let rc = unsafe { libc::getpeername(fd, storage.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return None;
    }
    // SAFETY: zero-initialised above and filled by getpeername: every bit pattern is a valid
    // sockaddr_storage.
    let storage = unsafe { storage.assume_init() };
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: ss_family is AF_INET, so the storage holds a sockaddr_in, which it is
            // large and aligned enough for.
            let a = unsafe {
                &*(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(format!("{ip}:{}", u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: ss_family is AF_INET6, so the storage holds a sockaddr_in6, which it is
            // large and aligned enough for.
            let a = unsafe {
                &*(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(format!("[{ip}]:{}", u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_build_has_curve() {
        assert!(available(), "libzmq was built without CURVE (libsodium)");
    }

    #[test]
    fn key_line_round_trips_and_bad_lines_are_typed_errors() {
        let k = PartitionKeys::generate().unwrap();
        let line = k.to_line();
        assert!(line.starts_with(KEY_LINE_TAG), "{line}");
        assert_eq!(PartitionKeys::from_line(&format!("  {line}\n")).unwrap(), k);
        assert!(!format!("{k:?}").contains(&z85(&k.client.secret)));
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(PartitionKeys::from_line(""), Err(KeyError::Format(0)));
        assert_eq!(
            PartitionKeys::from_line(&words[..4].join(" ")),
            Err(KeyError::Format(4))
        );
        let mut w = words.clone();
        w[0] = "rodeo-curve-0";
        assert_eq!(
            PartitionKeys::from_line(&w.join(" ")),
            Err(KeyError::Format(5))
        );
        let mut w = words.clone();
        w[3] = "short";
        assert_eq!(
            PartitionKeys::from_line(&w.join(" ")),
            Err(KeyError::Key("client public key"))
        );
        let mut w = words.clone();
        w[2] = "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}";
        assert_eq!(
            PartitionKeys::from_line(&w.join(" ")),
            Err(KeyError::Key("server secret key"))
        );
        // The client's secret in the server's place: it does not match the server public key.
        let mut w = words.clone();
        w[2] = words[4];
        assert_eq!(
            PartitionKeys::from_line(&w.join(" ")),
            Err(KeyError::Mismatch("server"))
        );
    }

    #[test]
    fn peer_address_reads_a_tcp_peer_and_fails_on_other_descriptors() {
        use std::os::fd::AsRawFd as _;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, from) = l.accept().unwrap();
        assert_eq!(peer_address(s.as_raw_fd()), Some(from.to_string()));
        assert_eq!(
            peer_address(c.as_raw_fd()),
            Some(l.local_addr().unwrap().to_string())
        );
        // A listening socket has no peer; a file is not a socket; -1 is no descriptor.
        assert_eq!(peer_address(l.as_raw_fd()), None);
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert_eq!(peer_address(f.as_raw_fd()), None);
        assert_eq!(peer_address(-1), None);
    }

    #[test]
    fn monitor_events_parse_and_short_frames_are_refused() {
        let mut f = (zmq_sys::ZMQ_EVENT_ACCEPTED as u16).to_ne_bytes().to_vec();
        f.extend_from_slice(&7u32.to_ne_bytes());
        assert_eq!(parse_event(&f), Some((zmq_sys::ZMQ_EVENT_ACCEPTED, 7)));
        assert_eq!(parse_event(&f[..5]), None);
        assert_eq!(parse_event(&[]), None);
    }
}
