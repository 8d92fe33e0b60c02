//! Test harness for memshift's integration tests: real `redis-server`,
//! `memcached` and `memshift` processes on free loopback ports, a blocking
//! memcached text-protocol client and a minimal RESP client. No mocks.
//!
//! Every process is owned by a guard whose `Drop` kills it and reaps it, so a
//! panicking test leaves nothing behind; on Linux the children also get
//! `PR_SET_PDEATHSIG` so they die with the test binary if it is killed.

pub mod client;
pub mod env;
pub mod go;
pub mod migration_support;
pub mod ops_support;
pub mod process;
pub mod python;
pub mod redis_cluster;
pub mod redis_cluster_tls;
pub mod resp;
pub mod resp_proxy;
pub mod sentinel;
pub mod socket;
pub mod tls;
pub mod verify;

pub use client::{escape, McClient, Unit};
pub use env::{
    free_port, in_ci, memshift_bin, require_tools, target_dir, tool_available, workspace_root,
};
pub use process::{
    memshift_config, run_with_timeout, Cluster, ClusterOptions, CommandOutput, Memcached, Memshift,
    RedisServer,
};
pub use python::{
    binary_memcached_python, pymemcache_python, redis_py_python, PYMEMCACHE,
    PYTHON_BINARY_MEMCACHED, REDIS_PY,
};
pub use resp::{RedisClient, Resp};
pub use resp_proxy::{on_both, send_and_read, send_and_read_reply, RespCluster};
pub use socket::Socket;
pub use verify::{VerifyConfig, VerifyLoad, VerifyReport};
