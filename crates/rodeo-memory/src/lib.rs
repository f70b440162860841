//! rodeo's memory: pre-allocated, warmed-up pools of fixed-size chunks and pages.
