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
    /// A memcached read (get, gets, gat, gats, mg, binary get) of a key whose
    /// shard failed is answered as a miss instead of `SERVER_ERROR`.
    pub read_errors_as_misses: bool,
    /// Consecutive failures before a shard counts as down.
    pub eject_after_failures: u32,
    pub health_check_interval_ms: u64,
    pub max_inflight_per_connection: usize,
    /// RESP: connections held by one session (WATCH … EXEC, a transaction,
    /// a blocking call) at most, across the proxy.
    pub max_dedicated_connections: usize,
    pub username: Option<String>,
    pub password: Option<String>,
    pub tls: bool,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Name checked against the shards' certificates (default: the host of each addr).
    pub tls_server_name: Option<String>,
    /// Sentinel-managed shards (`shards = [{ master = "s1" }, …]`): the
    /// sentinels asked for each master's current primary, in order.
    pub sentinels: Vec<String>,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
    /// RESP pub/sub on the ring: the shard that carries the channel space
    /// (a shard's name or address, or its index in `shards`; default the
    /// first). Not used with `mode = "cluster"`.
    pub pubsub_shard: Option<String>,
    /// RESP pub/sub: subscriber connections open at once (one per
    /// subscribed client and node); a SUBSCRIBE beyond is refused.
    pub max_subscriber_connections: usize,
    /// Where reads that may be stale go (Sentinel shards only).
    pub read_from: ReadFrom,
}

impl RedisConfig {
    /// `connections_per_shard` when the file leaves it at 0: one per
    /// worker thread (at most 64), so that every worker's sessions have a
    /// connection of their own on their own thread (`crate::workers`). One
    /// with a single worker: each extra connection wakes the shard's
    /// redis-server separately (measured 1.2x the closed-loop throughput
    /// and a lower p50 with one, BENCHMARKS.md "Issue 14").
    pub fn auto_connections_per_shard(worker_threads: usize) -> usize {
        worker_threads.clamp(1, 64)
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
            read_errors_as_misses: true,
            eject_after_failures: 3,
            health_check_interval_ms: 1000,
            max_inflight_per_connection: 10_000,
            max_dedicated_connections: 256,
            username: None,
            password: None,
            tls: false,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_server_name: None,
            sentinels: Vec::new(),
            sentinel_username: None,
            sentinel_password: None,
            pubsub_shard: None,
            max_subscriber_connections: 1024,
            read_from: ReadFrom::Primary,
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
            .field("read_errors_as_misses", &self.read_errors_as_misses)
            .field("eject_after_failures", &self.eject_after_failures)
            .field("health_check_interval_ms", &self.health_check_interval_ms)
            .field(
                "max_inflight_per_connection",
                &self.max_inflight_per_connection,
            )
            .field("max_dedicated_connections", &self.max_dedicated_connections)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_server_name", &self.tls_server_name)
            .field("sentinels", &self.sentinels)
            .field("sentinel_username", &self.sentinel_username)
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .field("pubsub_shard", &self.pubsub_shard)
            .field(
                "max_subscriber_connections",
                &self.max_subscriber_connections,
            )
            .field("read_from", &self.read_from)
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

/// Where plain reads go (`redis.read_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadFrom {
    /// Every request reads the shard's primary.
    #[default]
    Primary,
    /// Reads that no later request can depend on (plain get, RESP read
    /// commands) go to a healthy replica of a Sentinel shard, falling back
    /// to the primary.
    ReplicaPreferred,
}

impl ReadFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadFrom::Primary => "primary",
            ReadFrom::ReplicaPreferred => "replica_preferred",
        }
    }
}

/// One Redis shard: `"host:port"`, `{ addr = "host:port", weight = 2, name = "r1" }`,
/// or a Sentinel master `{ master = "s1", weight = 2 }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    /// Empty for a Sentinel master (its address is asked from the sentinels).
    pub addr: String,
    pub weight: u32,
    pub name: Option<String>,
    /// The Sentinel master name (`redis.sentinels` finds its primary).
    pub master: Option<String>,
}

impl ShardConfig {
    /// Whether `pubsub_shard` names this shard (`index`: its place in
    /// `shards`).
    pub fn is_named(&self, index: usize, name: &str) -> bool {
        name == self.id() || name == self.addr || name.parse() == Ok(index)
    }

    /// Identity on the ring: the Sentinel master name, else the name when
    /// set, else the address. Naming shards lets an address change (a
    /// failover, a move) without moving keys.
    pub fn id(&self) -> &str {
        self.master
            .as_deref()
            .or(self.name.as_deref())
            .unwrap_or(&self.addr)
    }
}

impl<'de> Deserialize<'de> for ShardConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            #[serde(default)]
            addr: Option<String>,
            #[serde(default)]
            master: Option<String>,
            #[serde(default = "default_weight")]
            weight: u32,
            #[serde(default)]
            name: Option<String>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ShardConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a "host:port" string, a table { addr = "host:port", weight = 1, name = "..." }, or a Sentinel master { master = "name", weight = 1 }"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ShardConfig, E> {
                Ok(ShardConfig {
                    addr: v.to_owned(),
                    weight: default_weight(),
                    name: None,
                    master: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ShardConfig, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                sentinel_master_table(t.addr, t.master, t.weight, t.name)
            }
        }
        d.deserialize_any(V)
    }
}

/// A shard table names either an address or a Sentinel master (whose name
/// is its ring identity, so `name` does not go with it).
fn sentinel_master_table<E: de::Error>(
    addr: Option<String>,
    master: Option<String>,
    weight: u32,
    name: Option<String>,
) -> Result<ShardConfig, E> {
    match (addr, master) {
        (Some(addr), None) => Ok(ShardConfig {
            addr,
            weight,
            name,
            master: None,
        }),
        (None, Some(_)) if name.is_some() => Err(E::custom(
            "a Sentinel shard's master name is its name on the ring; remove `name`",
        )),
        (None, Some(master)) => Ok(ShardConfig {
            addr: String::new(),
            weight,
            name: None,
            master: Some(master),
        }),
        (Some(_), Some(_)) => Err(E::custom(
            "set either `addr` (a standalone shard) or `master` (a Sentinel master), not both",
        )),
        (None, None) => Err(E::missing_field("addr")),
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
