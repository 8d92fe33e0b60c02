//! Shared helpers for benches (the load generator arrives with the performance work).
