//! memshift's integration tests: one binary, one module per area, real
//! processes only (redis-server, memcached, memshift, memccapable, python).
//!
//! Tests that need memshift use the binary built by
//! `cargo build -p memshift-proxy` (override with `MEMSHIFT_BIN`).

mod auth;
mod binary_clients;
mod binary_sasl;
mod cas_concurrency;
mod cli;
mod cluster;
mod cluster_copy;
mod cluster_ops;
mod cluster_redirect_order;
mod cluster_reload;
mod cluster_tls;
mod deploy;
mod differential;
mod memccapable;
mod meta_capable;
mod meta_stampede;
mod migration;
mod near_cache;
mod near_cache_coalesce;
mod near_cache_write_through;
mod near_cache_zipf;
mod observability;
mod ops;
mod oversize_refusal;
mod pipelining;
mod plan;
mod pymemcache;
mod resp;
mod sentinel;
mod sentinel_replica;
mod shard_down;
mod shard_down_misses;
mod tls;
mod unix;
mod workers;
