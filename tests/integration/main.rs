//! memshift's integration tests: one binary, one module per area, real
//! processes only (redis-server, memcached, memshift, memccapable, python).
//!
//! Tests that need memshift use the binary built by
//! `cargo build -p memshift-proxy` (override with `MEMSHIFT_BIN`).

mod auth;
mod cas_concurrency;
mod cluster;
mod deploy;
mod differential;
mod memccapable;
mod meta_capable;
mod meta_stampede;
mod migration;
mod near_cache;
mod observability;
mod ops;
mod oversize_refusal;
mod pipelining;
mod pymemcache;
mod resp;
mod shard_down;
mod tls;
