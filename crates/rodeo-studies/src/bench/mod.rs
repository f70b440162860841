//! The benches: measurements from the papers, reproduced on this machine in one run. Every
//! comparison a bench reports (a ratio to memcpy, to plain ZeroMQ, to malloc) is measured in the
//! same run, so that it stays meaningful on a noisy machine.

pub mod dma;
pub mod logger;
mod netns;
pub mod pool;
pub mod probe;
pub mod queue;
pub mod ros;
pub mod swrod;
pub mod timing;
pub mod transport;
mod transport_raw;
mod transport_stream;
