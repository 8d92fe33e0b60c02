//! `[redis]` and `[ring]`: the shards and how keys are placed on them.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// Standalone shards on the ring, or one Redis Cluster.
    pub mode: RedisMode,
    pub shards: Vec<ShardConfig>,
    /// `mode = "cluster"`: seed nodes the topology is discovered from.
    pub cluster_nodes: Vec<String>,
    /// `mode = "cluster"`: how often the slot map is re-read.
    pub cluster_refresh_ms: u64,
    /// Pipelined connections per shard; 0 in the file (the default) is
    /// resolved at load ([`RedisConfig::auto_connections_per_shard`]).
    pub connections_per_shard: usize,
    /// Per-request timeout.
    pub timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub on_shard_down: ShardDownPolicy,
    /// Consecutive failures before a shard counts as down.
    pub eject_after_failures: u32,
    pub health_check_interval_ms: u64,
    pub max_inflight_per_connection: usize,
    pub username: Option<String>,
    pub password: Option<String>,
    pub tls: bool,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Name checked against the shards' certificates (default: the host of each addr).
    pub tls_server_name: Option<String>,
    /// RESP pub/sub on the ring: the shard that carries the channel space
    /// (a shard's name or address, or its index in `shards`; default the
    /// first). Not used with `mode = "cluster"`.
    pub pubsub_shard: Option<String>,
    /// RESP pub/sub: subscriber connections open at once (one per
    /// subscribed client and node); a SUBSCRIBE beyond is refused.
    pub max_subscriber_connections: usize,
}

impl RedisConfig {
    /// `connections_per_shard` when the file leaves it at 0: one with a
    /// single worker thread (its connections would all be written by that
    /// one thread, and each extra one wakes the shard's redis-server
    /// separately: measured 1.2x the closed-loop throughput and a lower
    /// p50 with one, BENCHMARKS.md "Issue 14"), two otherwise (so workers
    /// do not all queue on one connection task per shard).
    pub fn auto_connections_per_shard(worker_threads: usize) -> usize {
        if worker_threads <= 1 {
            1
        } else {
            2
        }
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            mode: RedisMode::Standalone,
            shards: Vec::new(),
            cluster_nodes: Vec::new(),
            cluster_refresh_ms: 5000,
            connections_per_shard: 0,
            timeout_ms: 500,
            connect_timeout_ms: 1000,
            on_shard_down: ShardDownPolicy::Fail,
            eject_after_failures: 3,
            health_check_interval_ms: 1000,
            max_inflight_per_connection: 10_000,
            username: None,
            password: None,
            tls: false,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_server_name: None,
            pubsub_shard: None,
            max_subscriber_connections: 1024,
        }
    }
}

// Hand-written so the password never reaches a log line through `{:?}`.
impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("mode", &self.mode)
            .field("shards", &self.shards)
            .field("cluster_nodes", &self.cluster_nodes)
            .field("cluster_refresh_ms", &self.cluster_refresh_ms)
            .field("connections_per_shard", &self.connections_per_shard)
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("on_shard_down", &self.on_shard_down)
            .field("eject_after_failures", &self.eject_after_failures)
            .field("health_check_interval_ms", &self.health_check_interval_ms)
            .field(
                "max_inflight_per_connection",
                &self.max_inflight_per_connection,
            )
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_server_name", &self.tls_server_name)
            .field("pubsub_shard", &self.pubsub_shard)
            .field(
                "max_subscriber_connections",
                &self.max_subscriber_connections,
            )
            .finish()
    }
}

/// Where items live: standalone shards or a Redis Cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    /// `redis.shards` on memshift's own xxh3 ring.
    #[default]
    Standalone,
    /// One Redis Cluster, found from `redis.cluster_nodes`: its hash slots
    /// place the keys.
    Cluster,
}

impl RedisMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RedisMode::Standalone => "standalone",
            RedisMode::Cluster => "cluster",
        }
    }
}

/// What happens to a shard's keys while it does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardDownPolicy {
    /// Its keys get a fast `SERVER_ERROR`.
    #[default]
    Fail,
    /// It leaves the ring until it answers again.
    Eject,
}

impl ShardDownPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ShardDownPolicy::Fail => "fail",
            ShardDownPolicy::Eject => "eject",
        }
    }
}

/// One Redis shard: `"host:port"` or `{ addr = "host:port", weight = 2, name = "r1" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    pub addr: String,
    pub weight: u32,
    pub name: Option<String>,
}

impl ShardConfig {
    /// Whether `pubsub_shard` names this shard (`index`: its place in
    /// `shards`).
    pub fn is_named(&self, index: usize, name: &str) -> bool {
        name == self.id() || name == self.addr || name.parse() == Ok(index)
    }

    /// Identity on the ring: the name when set, else the address. Naming
    /// shards lets an address change without moving keys.
    pub fn id(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.addr)
    }
}

impl<'de> Deserialize<'de> for ShardConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            addr: String,
            #[serde(default = "default_weight")]
            weight: u32,
            #[serde(default)]
            name: Option<String>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ShardConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a "host:port" string or a table { addr = "host:port", weight = 1, name = "..." }"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ShardConfig, E> {
                Ok(ShardConfig {
                    addr: v.to_owned(),
                    weight: default_weight(),
                    name: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ShardConfig, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ShardConfig {
                    addr: t.addr,
                    weight: t.weight,
                    name: t.name,
                })
            }
        }
        d.deserialize_any(V)
    }
}

pub(super) fn default_weight() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RingSection {
    /// Virtual nodes per unit of shard weight.
    pub vnodes: u32,
    /// xxh3 seed; every proxy of a fleet must use the same.
    pub seed: u64,
    /// Two characters, e.g. "{}": hash only the part of the key between them.
    pub hash_tag: Option<String>,
}

impl Default for RingSection {
    fn default() -> Self {
        RingSection {
            vnodes: 160,
            seed: 0,
            hash_tag: None,
        }
    }
}
