//! The beats of an application while a control command runs: [`while_beating`] runs the
//! command while a thread of its own says `busy` to the controller every heartbeat period and
//! takes what the controller sends meanwhile (an `abandon_drain` for the supervisor's drain).
//! So a long command is never silence, and a process frozen during one is dead after
//! `control.dead_after_ms` (docs/run-control.md, "Heartbeats and dead applications").

use std::time::{Duration, Instant};

use rodeo_transport::socket::{Frame, Received};

use crate::channel::{self, ToApp, ToController};

/// Runs `work` (command `seq`) while a thread of its own tells the controller every
/// `heartbeat` that the application lives ([`ToController::Busy`]): a command may take long (a
/// stop's drain, a configure's memory warm-up), and the controller judges silences during
/// commands too, so a frozen process is found dead within `dead_after` at any time. The same
/// thread takes what the controller sends meanwhile: [`ToApp::AbandonDrain`] calls
/// `abandoner` (the supervisor's drain gives up: a logger died during the stop); pings are
/// read and dropped (the command's end counts as the controller heard); anything else (a
/// command the controller sent after this one's timeout) is kept and returned, for the
/// caller to take in order. The socket is the beating thread's until `work` returns.
pub(crate) fn while_beating<T>(
    sock: &mut rodeo_transport::socket::Socket,
    heartbeat: Duration,
    seq: u64,
    abandoner: Option<crate::application::Abandoner>,
    work: impl FnOnce() -> T,
) -> (T, Vec<Vec<u8>>) {
    let busy = channel::encode(&ToController::Busy { seq });
    // How often the socket is looked at: a message waits this long at most.
    let look = heartbeat.min(Duration::from_millis(20));
    std::thread::scope(|s| {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let beating = std::thread::Builder::new()
            .name("rodeo-beat".into())
            .spawn_scoped(s, move || {
                let mut msg = Received::default();
                let mut held = Vec::new();
                let mut next_beat = Instant::now() + heartbeat;
                // Ends when `stop` is dropped: the work returned (or unwound).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(look)
                {
                    while let Ok(true) = sock.try_recv(&mut msg) {
                        match channel::decode::<ToApp>(&msg.bytes) {
                            Ok(ToApp::AbandonDrain) => {
                                if let Some(a) = &abandoner {
                                    a();
                                }
                            }
                            Ok(ToApp::Ping { .. }) => {}
                            _ => held.push(std::mem::take(&mut msg.bytes)),
                        }
                    }
                    if Instant::now() >= next_beat {
                        // Never waits: a beat the controller cannot take is replaced by the
                        // next.
                        let _ = sock.try_send([Frame::Copy(&busy)]);
                        next_beat += heartbeat;
                    }
                }
                held
            });
        if beating.is_err() {
            // No thread to spare: the command runs without beats (a long one may then be
            // taken for a death, as before they existed).
            tracing::warn!("no thread for the beats during command {seq}");
        }
        let out = work();
        drop(stop);
        let held = match beating {
            Ok(b) => b.join().unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        (out, held)
    })
}

#[cfg(test)]
mod tests {
    use rodeo_transport::endpoint::Endpoint;
    use rodeo_transport::socket::{SocketKind, Transport};

    use super::*;

    /// While a command runs the controller hears `Busy` every heartbeat period, an
    /// `abandon_drain` it sends meanwhile reaches the abandoner, another command is kept for
    /// the caller, and the command's result comes back as it was.
    #[test]
    fn a_long_command_is_heard_beating() {
        let t = Transport::new(1).unwrap();
        let mut router = t.socket(SocketKind::Router).unwrap();
        let at = router
            .bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
            .unwrap();
        let mut dealer = t.socket(SocketKind::Dealer).unwrap();
        dealer.set_identity(b"app").unwrap();
        dealer.connect(&Endpoint::parse(&at).unwrap()).unwrap();
        let abandoned = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&abandoned);
        let abandoner: crate::application::Abandoner =
            std::sync::Arc::new(move || flag.store(true, std::sync::atomic::Ordering::Release));
        let (mut msg, mut beats) = (Received::default(), 0);
        let command = channel::encode(&ToApp::Command {
            seq: 8,
            command: crate::lifecycle::Command::Disconnect,
            config: None,
            expect_cleared: None,
            abandon_drain: false,
            rejoin_at: None,
        });
        let out = std::thread::scope(|s| {
            let work = s.spawn(|| {
                while_beating(
                    &mut dealer,
                    Duration::from_millis(50),
                    7,
                    Some(abandoner),
                    || {
                        // The work ends once the abandon came (or after 5 s, failing below).
                        let t0 = Instant::now();
                        while !abandoned.load(std::sync::atomic::Ordering::Acquire)
                            && t0.elapsed() < Duration::from_secs(5)
                        {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        42
                    },
                )
            });
            // The first beat tells the router the application's name: then the abandon.
            assert!(router.recv(&mut msg, 5000).unwrap(), "no beat");
            beats += 1;
            // A command sent meanwhile (after a timeout) is kept for the caller; a ping is not.
            let ping = channel::encode(&ToApp::Ping {
                dead_after_ms: 1000,
            });
            router.send_to(b"app", [Frame::Copy(&ping)]).unwrap();
            router.send_to(b"app", [Frame::Copy(&command)]).unwrap();
            let abandon = channel::encode(&ToApp::AbandonDrain);
            router.send_to(b"app", [Frame::Copy(&abandon)]).unwrap();
            work.join().unwrap()
        });
        assert_eq!(out.0, 42);
        assert_eq!(out.1, [command], "the command kept, the ping not");
        assert!(abandoned.load(std::sync::atomic::Ordering::Acquire));
        while router.recv(&mut msg, 200).unwrap() {
            match channel::decode::<ToController>(&msg.bytes) {
                Ok(ToController::Busy { seq: 7 }) => beats += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!((1..=110).contains(&beats), "{beats} beats");
    }
}
