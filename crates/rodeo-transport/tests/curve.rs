//! CURVE on tcp (issue 20, point 7): a server with the partition's keys lets in only clients
//! with the partition's keys; a plain ZeroMQ client, a client with another partition's keys
//! and a client with the server's key but its own client key get nothing through, and each
//! refusal is counted (`rodeo_transport::curve::refused_count`). Real sockets on 127.0.0.1,
//! one test function (the count is per process), every wait with a deadline.

use std::time::Duration;

use rodeo_testkit::{holds_within, wait_for, wait_until};
use rodeo_transport::curve::{refused_count, PartitionKeys};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{Frame, Received, Socket, SocketKind, Transport};

const LIMIT: Duration = Duration::from_secs(20);

/// Receives everything the server has queued within `ms`, returning the payloads.
fn drain(server: &mut Socket, ms: i64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut msg = Received::default();
    while server.recv(&mut msg, ms).unwrap() {
        out.push(msg.bytes.clone());
    }
    out
}

/// A raw ZeroMQ DEALER (not rodeo's transport) that sends `payload` to `endpoint` as soon as
/// it can; `curve` sets its CURVE options (server key, its own key pair).
fn raw_dealer(
    ctx: &zmq::Context,
    endpoint: &str,
    curve: Option<(&[u8; 32], &zmq::CurveKeyPair)>,
    payload: &[u8],
) -> zmq::Socket {
    let s = ctx.socket(zmq::DEALER).unwrap();
    s.set_linger(0).unwrap();
    if let Some((server_public, pair)) = curve {
        s.set_curve_serverkey(server_public).unwrap();
        s.set_curve_publickey(&pair.public_key).unwrap();
        s.set_curve_secretkey(&pair.secret_key).unwrap();
    }
    s.connect(endpoint).unwrap();
    // Queued until a connection completes its handshake: which never happens when refused.
    s.send(payload, zmq::DONTWAIT).unwrap();
    s
}

#[test]
fn only_clients_with_the_partitions_keys_get_through_and_refusals_are_counted() {
    assert!(rodeo_transport::curve::available(), "no CURVE in libzmq");
    let keys = PartitionKeys::generate().unwrap();
    let server_t = Transport::with_curve(1, keys.clone()).unwrap();
    let mut server = server_t.socket(SocketKind::Router).unwrap();
    let bound = server
        .bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
        .unwrap();
    let ep = Endpoint::parse(&bound).unwrap();

    // 1. A plain ZeroMQ peer (no keys).
    let strangers = zmq::Context::new();
    let base = server_t.auth_refused();
    let plain = raw_dealer(&strangers, &bound, None, b"from a plain peer");
    wait_until("the plain peer's refusal to be counted", LIMIT, || {
        server_t.auth_refused() > base
    });
    drop(plain);

    // 2. A rodeo transport with another partition's keys (wrong server key).
    let other = Transport::with_curve(1, PartitionKeys::generate().unwrap()).unwrap();
    let mut wrong = other.socket(SocketKind::Dealer).unwrap();
    wrong.connect(&ep).unwrap();
    let _ = wrong.try_send([Frame::Copy(b"from another partition")]);
    let base = server_t.auth_refused();
    wait_until("the other partition's refusal to be counted", LIMIT, || {
        server_t.auth_refused() > base
    });
    drop(wrong);

    // 3. The right server key but a client key pair of its own: the authenticator refuses it.
    let own = zmq::CurveKeyPair::new().unwrap();
    let base = server_t.auth_refused();
    let forger = raw_dealer(
        &strangers,
        &bound,
        Some((&keys.server.public, &own)),
        b"from a client key that is not the partition's",
    );
    wait_until(
        "the unknown client key's refusal to be counted",
        LIMIT,
        || server_t.auth_refused() > base,
    );
    drop(forger);

    assert!(
        refused_count() >= server_t.auth_refused(),
        "the process's count includes every transport's"
    );

    // 4. A member of the partition (its own transport, as another process would have): its
    // message arrives, the reply comes back, and it is the only message the server saw.
    let member_t = Transport::with_curve(1, keys.clone()).unwrap();
    let mut member = member_t.socket(SocketKind::Dealer).unwrap();
    member.set_identity(b"member").unwrap();
    member.connect(&ep).unwrap();
    member.set_send_timeout(5000).unwrap();
    member.send([Frame::Copy(b"from a member")]).unwrap();
    let mut msg = Received::default();
    wait_until("the member's message", LIMIT, || {
        server.recv(&mut msg, 100).unwrap()
    });
    assert_eq!(
        msg.bytes, b"from a member",
        "a stranger's message got through"
    );
    assert_eq!(msg.peer, b"member");
    server
        .send_to(b"member", [Frame::Copy(b"welcome")])
        .unwrap();
    let reply = wait_for("the reply to the member", LIMIT, || {
        let mut r = Received::default();
        member.recv(&mut r, 100).unwrap().then_some(r.bytes)
    });
    assert_eq!(reply, b"welcome");
    // The strangers are gone; whatever they queued never arrives.
    let late = drain(&mut server, 300);
    assert!(late.is_empty(), "strangers' messages arrived: {late:?}");
}

#[test]
fn strangers_at_once_get_nothing_through_while_a_member_is_served() {
    use std::io::Write as _;
    let keys = PartitionKeys::generate().unwrap();
    let t = Transport::with_curve(1, keys.clone()).unwrap();
    let mut server = t.socket(SocketKind::Router).unwrap();
    let bound = server
        .bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
        .unwrap();
    // Three plain ZeroMQ peers (each a connection of its own) and a peer that writes
    // something that is not ZeroMQ at all.
    let strangers = zmq::Context::new();
    let plain: Vec<zmq::Socket> = (0..3)
        .map(|i| raw_dealer(&strangers, &bound, None, format!("stranger {i}").as_bytes()))
        .collect();
    let port = bound.rsplit(':').next().unwrap();
    let mut garbage = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    let _ = garbage.write_all(b"GET / HTTP/1.0\r\n\r\n");
    wait_until("the three plain peers' refusals", LIMIT, || {
        t.auth_refused() >= 3
    });
    let member_t = Transport::with_curve(1, keys).unwrap();
    let mut member = member_t.socket(SocketKind::Dealer).unwrap();
    member.connect(&Endpoint::parse(&bound).unwrap()).unwrap();
    member.set_send_timeout(5000).unwrap();
    for i in 0..10u8 {
        member.send([Frame::Copy(&[i])]).unwrap();
    }
    let mut got = Vec::new();
    wait_until("the member's 10 messages", LIMIT, || {
        got.extend(drain(&mut server, 50));
        got.len() >= 10
    });
    assert_eq!(got, (0..10u8).map(|i| vec![i]).collect::<Vec<_>>());
    assert!(
        !holds_within(Duration::from_millis(200), || {
            !drain(&mut server, 20).is_empty()
        }),
        "a stranger got a message through"
    );
    drop(plain);
}

#[test]
fn non_tcp_endpoints_of_a_curve_transport_stay_plain() {
    let keys = PartitionKeys::generate().unwrap();
    let t = Transport::with_curve(1, keys).unwrap();
    let dir = std::env::temp_dir().join(format!("rodeo-curve-ipc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for url in [
        format!("inproc://curve-plain-{}", std::process::id()),
        format!("ipc://{}/s", dir.display()),
    ] {
        let ep = Endpoint::parse(&url).unwrap();
        let mut server = t.socket(SocketKind::Router).unwrap();
        server.bind(&ep).unwrap();
        // A client of another context without keys: the endpoint is not CURVE.
        let other = Transport::new(1).unwrap();
        let mut client = if url.starts_with("inproc") {
            t.socket(SocketKind::Dealer).unwrap()
        } else {
            other.socket(SocketKind::Dealer).unwrap()
        };
        client.connect(&ep).unwrap();
        client.set_send_timeout(5000).unwrap();
        client.send([Frame::Copy(b"local")]).unwrap();
        let mut msg = Received::default();
        wait_until(&format!("a message over {url}"), LIMIT, || {
            server.recv(&mut msg, 100).unwrap()
        });
        assert_eq!(msg.bytes, b"local");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dropping_a_curve_transport_ends_its_authenticator() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let t = Transport::with_curve(1, PartitionKeys::generate().unwrap()).unwrap();
        let s = t.socket(SocketKind::Router).unwrap();
        s.bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
            .unwrap();
        drop(s);
        drop(t);
        tx.send(()).unwrap();
    });
    rx.recv_timeout(LIMIT)
        .expect("dropping the transport did not end (authenticator thread or context hung)");
}

#[test]
fn without_curve_the_same_stranger_gets_through() {
    // The control experiment: what the tests above refuse is what a plain tcp server takes.
    let t = Transport::new(1).unwrap();
    let mut server = t.socket(SocketKind::Router).unwrap();
    let bound = server
        .bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
        .unwrap();
    let strangers = zmq::Context::new();
    let _plain = raw_dealer(&strangers, &bound, None, b"from a plain peer");
    let mut msg = Received::default();
    wait_until("the plain peer's message on a plain server", LIMIT, || {
        server.recv(&mut msg, 100).unwrap()
    });
    assert_eq!(msg.bytes, b"from a plain peer");
    assert_eq!(t.auth_refused(), 0);
}
