//! libzmq as rodeo builds it (third_party/zmq-sys, "The second change"): the mailbox signaler of
//! each socket and of the context's own threads is an eventfd, not a Unix socket pair. One test
//! in its own process, so that no other test opens or closes descriptors while it counts them.

#![cfg(target_os = "linux")]

/// How many of this process's open descriptors point at something whose name contains `what`.
fn open_fds(what: &str) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("reading /proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains(what))
        .count()
}

/// A context with one inproc socket opens eventfds (the socket's mailbox, the reaper's and the
/// I/O thread's) and no socket at all; with socket-pair signalers it would open two sockets per
/// mailbox and no eventfd.
#[test]
fn a_zeromq_mailbox_is_an_eventfd_not_a_socket_pair() {
    let (eventfds, sockets) = (open_fds("[eventfd]"), open_fds("socket:["));
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::PAIR).expect("a PAIR socket");
    socket
        .bind("inproc://rodeo-signaler-test")
        .expect("binding an inproc endpoint");
    let new_eventfds = open_fds("[eventfd]") - eventfds;
    let new_sockets = open_fds("socket:[").saturating_sub(sockets);
    assert!(
        new_eventfds >= 2,
        "{new_eventfds} eventfds opened: libzmq was built without ZMQ_HAVE_EVENTFD"
    );
    assert_eq!(
        new_sockets, 0,
        "an inproc socket's signalers opened sockets"
    );
    drop(socket);
    drop(ctx);
}
