//! An `ipc://` bind never destroys what is at its path nor takes a live socket over: ZeroMQ
//! unlinks the path first, and `rodeo ros --listen ipc://FILE` replaced a regular file with
//! its socket, a second node on a live node's path took its clients.

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};

#[test]
fn an_ipc_bind_refuses_a_file_and_a_live_socket_and_takes_a_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let t = Transport::new(1).unwrap();
    // A regular file: refused, left as it was.
    let file = dir.path().join("precious");
    std::fs::write(&file, "precious").unwrap();
    let ep = Endpoint::parse(&format!("ipc://{}", file.display())).unwrap();
    let e = t.socket(SocketKind::Router).unwrap().bind(&ep).unwrap_err();
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    // A live socket: the second bind is refused.
    let path = dir.path().join("node.ipc");
    let ep = Endpoint::parse(&format!("ipc://{}", path.display())).unwrap();
    let first = t.socket(SocketKind::Router).unwrap();
    first.bind(&ep).unwrap();
    let e = t.socket(SocketKind::Router).unwrap().bind(&ep).unwrap_err();
    assert!(e.to_string().contains("a process listens"), "{e}");
    // Its process gone (the socket closed, the path left behind): bound again. ZeroMQ closes
    // the listener on its I/O thread, a moment after the drop.
    drop(first);
    rodeo_testkit::wait_until(
        "the first socket closed",
        std::time::Duration::from_secs(5),
        || std::os::unix::net::UnixStream::connect(&path).is_err(),
    );
    if !path.exists() {
        // ZeroMQ removed it on close: leave one as a killed process would.
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(l);
    }
    t.socket(SocketKind::Router).unwrap().bind(&ep).unwrap();
}
