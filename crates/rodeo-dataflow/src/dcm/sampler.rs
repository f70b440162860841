//! Event sampling for monitoring: a DCM publishes a sample of the full events it ships to its
//! loggers on a ZeroMQ PUB socket, connected to the partition's monitoring forwarder (see
//! `docs/run-control.md`, "Monitoring protocol").
//!
//! # Message
//!
//! Two frames: a JSON header `{"dcm":"dcm-1","seq":N,"run":R,"global_id":G,"bytes":B}` and the
//! full-event fragment's bytes exactly as the files hold them (little-endian words, starting
//! with 0xAA1234AA, `4 * size word == B`). `seq` counts this DCM's samples from 0: a subscriber
//! that sees a gap in one DCM's `seq` missed (was dropped) that many samples.
//!
//! # Never slowing the run
//!
//! The PUB socket has a small send high-water mark and every send is non-blocking: when the
//! queue to the forwarder is full the sample is dropped (counted in `sample_dropped`); PUB
//! itself never waits. With no subscriber at all, ZeroMQ filters the message out before it is
//! queued. Sampling is chosen before any copy is made: an event not sampled costs one
//! floating-point addition; a DCM without `[monitoring]` has no sampler at all.

use std::sync::atomic::Ordering;
use std::time::Instant;

use rodeo_format::checksum::words_as_bytes;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{Frame, Socket, SocketKind, Transport};

use super::counters::DcmCounters;
use crate::error::DataflowError;

/// What and where a DCM samples (the partition's `[monitoring]`).
#[derive(Debug, Clone, PartialEq)]
pub struct SampleConfig {
    /// The forwarder's input endpoint the PUB socket connects to.
    pub endpoint: String,
    /// Fraction of shipped events sampled (0 to 1).
    pub fraction: f64,
    /// Most samples per second from this DCM (0: no limit).
    pub max_rate_hz: f64,
    /// Send high-water mark of the PUB socket (samples queued before they are dropped).
    pub queue: u32,
}

/// A DCM's sampler: choice, rate limit and the PUB socket.
pub(super) struct Sampler {
    socket: Socket,
    fraction: f64,
    /// Accumulated fraction: a sample is taken each time it reaches 1 (exactly `fraction` of
    /// the events, evenly spread, no random numbers).
    credit: f64,
    max_rate_hz: f64,
    /// Token bucket of the rate limit (at most one second's worth).
    tokens: f64,
    refilled: Instant,
    seq: u64,
    name: String,
    run: u32,
    bytes: Vec<u8>,
    header: String,
}

impl Sampler {
    /// A PUB socket connected to `config.endpoint` (ZeroMQ connects in the background: a
    /// forwarder that is not there yet is not an error).
    pub(super) fn connect(
        config: &SampleConfig,
        transport: &Transport,
        name: &str,
        run: u32,
    ) -> Result<Sampler, DataflowError> {
        let terr = |what: &str| {
            let (app, what) = (name.to_string(), what.to_string());
            move |source| DataflowError::Transport { app, what, source }
        };
        let ep = Endpoint::parse(&config.endpoint).map_err(|source| DataflowError::Endpoint {
            app: name.to_string(),
            source,
        })?;
        let socket = transport
            .socket(SocketKind::Pub)
            .map_err(terr("create monitoring socket"))?;
        socket
            .set_high_water_marks(config.queue.max(1))
            .map_err(terr("set monitoring high-water mark"))?;
        socket
            .connect(&ep)
            .map_err(terr(&format!("connect monitoring {}", config.endpoint)))?;
        Ok(Sampler {
            socket,
            fraction: config.fraction.clamp(0.0, 1.0),
            credit: 0.0,
            max_rate_hz: config.max_rate_hz.max(0.0),
            tokens: config.max_rate_hz.max(1.0),
            refilled: Instant::now(),
            seq: 0,
            name: name.to_string(),
            run,
            bytes: Vec::new(),
            header: String::new(),
        })
    }

    /// Whether the next shipped event is to be sampled (advances the fraction and the rate
    /// limit); if so, [`Sampler::publish`] it.
    pub(super) fn choose(&mut self) -> bool {
        self.credit += self.fraction;
        if self.credit < 1.0 {
            return false;
        }
        self.credit -= 1.0;
        if self.max_rate_hz > 0.0 {
            let now = Instant::now();
            let dt = now.duration_since(self.refilled).as_secs_f64();
            self.refilled = now;
            self.tokens = (self.tokens + dt * self.max_rate_hz).min(self.max_rate_hz.max(1.0));
            if self.tokens < 1.0 {
                return false;
            }
            self.tokens -= 1.0;
        }
        true
    }

    /// Publishes one chosen event, given as its pieces in order (the words of the full event
    /// fragment back to back). Never blocks: a full queue drops the sample (counted).
    pub(super) fn publish<'a>(
        &mut self,
        pieces: impl IntoIterator<Item = &'a [u32]>,
        global_id: u64,
        counters: &DcmCounters,
    ) {
        self.bytes.clear();
        for p in pieces {
            self.bytes.extend_from_slice(words_as_bytes(p));
        }
        self.header.clear();
        use std::fmt::Write as _;
        let _ = write!(
            self.header,
            "{{\"dcm\":\"{}\",\"seq\":{},\"run\":{},\"global_id\":{},\"bytes\":{}}}",
            self.name,
            self.seq,
            self.run,
            global_id,
            self.bytes.len()
        );
        self.seq += 1;
        let frames = [
            Frame::Copy(self.header.as_bytes()),
            Frame::Copy(&self.bytes),
        ];
        match self.socket.try_send(frames) {
            Ok(()) => counters.sampled.fetch_add(1, Ordering::Relaxed),
            Err(_) => counters.sample_dropped.fetch_add(1, Ordering::Relaxed),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(fraction: f64, max_rate_hz: f64) -> Sampler {
        let t = Transport::new(1).expect("transport");
        let c = SampleConfig {
            endpoint: "inproc://sampler-test".into(),
            fraction,
            max_rate_hz,
            queue: 4,
        };
        Sampler::connect(&c, &t, "dcm-1", 7).expect("sampler")
    }

    #[test]
    fn the_fraction_is_exact_and_evenly_spread() {
        let mut s = sampler(0.25, 0.0);
        let chosen: Vec<bool> = (0..8).map(|_| s.choose()).collect();
        assert_eq!(
            chosen,
            [false, false, false, true, false, false, false, true]
        );
        let mut all = sampler(1.0, 0.0);
        assert!((0..100).all(|_| all.choose()));
        let mut none = sampler(0.0, 0.0);
        assert!((0..100).all(|_| !none.choose()));
    }

    #[test]
    fn the_rate_limit_bounds_a_burst() {
        // Every event chosen by fraction, at most 5 per second: a burst of 1000 events within
        // a few milliseconds gets the bucket's 5 (plus what refills meanwhile, well under 5).
        let mut s = sampler(1.0, 5.0);
        let n = (0..1000).filter(|_| s.choose()).count();
        assert!((5..10).contains(&n), "{n} samples");
    }
}
