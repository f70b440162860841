//! The configuration of a tester instance ([`TesterConfig`]): the request mix, the bounds on
//! requests in flight and rate, the instance's share of the L1IDs, and the run's limits.

use std::time::Duration;

/// Configuration of a tester instance.
#[derive(Debug, Clone)]
pub struct TesterConfig {
    /// The node's ROB ids.
    pub robs: Vec<u32>,
    /// Probability of an L2 request per event.
    pub l2_fraction: f64,
    /// ROBs per L2 request.
    pub roi_size: usize,
    /// Probability of an EB request per event.
    pub eb_fraction: f64,
    /// L1IDs per Clear message.
    pub clear_group: usize,
    /// Requests in flight at most.
    pub max_outstanding: usize,
    /// Events per second at most (`None`: as fast as the node answers).
    pub max_rate: Option<f64>,
    /// Number of tester instances sharing the node.
    pub instances: u32,
    /// This instance, `0..instances`.
    pub instance: u32,
    /// Stop after this many events of this instance.
    pub events: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The L1ID wrap value of the node's inputs.
    pub l1id_wrap: u32,
    /// PRNG seed (mixed with the instance).
    pub seed: u64,
    /// Re-asks for PENDING fragments.
    pub retries: u32,
    /// The wait before a re-ask (protocol rule 3: "after a short delay").
    pub retry_delay: Duration,
    /// How long to wait for replies in flight at the end.
    pub drain_timeout: Duration,
    /// A partial clear group is sent after this long without a clear (protocol rule 5).
    pub clear_flush: Duration,
}

impl Default for TesterConfig {
    fn default() -> TesterConfig {
        TesterConfig {
            robs: Vec::new(),
            l2_fraction: 0.7,
            roi_size: 4,
            eb_fraction: 0.2,
            clear_group: 100,
            max_outstanding: 256,
            max_rate: None,
            instances: 1,
            instance: 0,
            events: None,
            duration: Some(Duration::from_secs(5)),
            l1id_wrap: 1 << 24,
            seed: 1,
            retries: 3,
            retry_delay: Duration::from_millis(1),
            drain_timeout: Duration::from_secs(5),
            clear_flush: Duration::from_millis(20),
        }
    }
}
