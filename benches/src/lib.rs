//! Shared code for the benches: the `memshift-load` load generator (`load`)
//! and real server processes for the end-to-end bench (`harness`).

pub mod epoll;
pub mod floor;
pub mod harness;
pub mod load;
