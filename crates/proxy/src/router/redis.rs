//! Redis placement: which shard serves a key, and the shards' connections.
//! Swapped whole on reload; a session holds the old generation until its
//! requests are sent, so requests already routed finish on their old shard.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use memshift_protocol::resp::Frame;
use memshift_ring::{Ring, RingConfig, ShardSpec};
use tokio::sync::mpsc;

use crate::config::{Config, ReadFrom, RedisMode, ShardDownPolicy};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::read_errors::ReadErrors;
use crate::redis::cluster::Cluster;
use crate::redis::connection::ConnectionSettings;
use crate::redis::dedicated::DedicatedLimit;
use crate::redis::primary::Primary;
use crate::redis::replica::Replica;
use crate::redis::sentinel;
use crate::redis::shard::{AbortOnDrop, Shard};
use crate::redis::{BackendError, BackendReply, BackendRequest, Reply, ReplyTo};
use crate::router::Access;

/// How keys map to shards.
#[derive(Debug)]
pub enum Placement {
    /// Standalone shards on the xxh3 vnode ring, with ejection.
    Ring(RingPlacement),
    /// One Redis Cluster: its hash slots (redirects followed underneath).
    Cluster(Arc<Cluster>),
}

impl Placement {
    #[inline]
    fn locate(&self, key: &[u8], access: Access, shards: &[Arc<Shard>]) -> usize {
        match self {
            Placement::Ring(ring) => ring.locate(key, access, shards),
            Placement::Cluster(cluster) => cluster.locate(key),
        }
    }

    /// The shard that owns `key` when every shard is up.
    fn owner(&self, key: &[u8]) -> usize {
        match self {
            Placement::Ring(ring) => ring.ring.locate(key),
            Placement::Cluster(cluster) => cluster.locate(key),
        }
    }

    fn ejects(&self) -> bool {
        match self {
            Placement::Ring(ring) => ring.policy == ShardDownPolicy::Eject,
            Placement::Cluster(_) => false,
        }
    }

    fn health_changed(&self, shards: &[Arc<Shard>]) {
        match self {
            Placement::Ring(ring) => ring.health_changed(shards),
            // The cluster fails over itself; its map follows on refresh.
            Placement::Cluster(_) => {}
        }
    }
}

/// The shard index of a write that may go nowhere now (its ejected owner
/// is rejoining, `eject`): no shard has it, so `send` fails it as
/// unavailable without sending it anywhere.
pub const REFUSED: usize = usize::MAX;

/// Every configured shard on one ring; under the eject policy, a second
/// ring without the shards marked down.
#[derive(Debug)]
pub struct RingPlacement {
    ring: Ring,
    policy: ShardDownPolicy,
    /// Under the eject policy: the ring without the shards marked down.
    active: ArcSwap<ActiveRing>,
    ring_shards: Vec<ShardSpec>,
    ring_config: RingConfig,
}

/// A ring over a subset of the shards, and where its slots point.
#[derive(Debug)]
struct ActiveRing {
    /// None when every shard is down.
    ring: Option<Ring>,
    to_shard: Vec<usize>,
}

impl RingPlacement {
    fn new(config: &Config) -> Result<RingPlacement, ProxyError> {
        let ring = Ring::new(&config.ring_shards(), config.ring_config())?;
        Ok(RingPlacement {
            active: ArcSwap::from_pointee(ActiveRing {
                ring: Some(ring.clone()),
                to_shard: (0..config.redis.shards.len()).collect(),
            }),
            ring,
            policy: config.redis.on_shard_down,
            ring_shards: config.ring_shards(),
            ring_config: config.ring_config(),
        })
    }

    /// Under the eject policy, a write routed away from its ejected owner
    /// is remembered, to be cleaned before the owner rejoins; while the
    /// owner is rejoining it is refused instead ([`REFUSED`]; `eject`).
    #[inline]
    fn locate(&self, key: &[u8], access: Access, shards: &[Arc<Shard>]) -> usize {
        match self.policy {
            ShardDownPolicy::Fail => self.ring.locate(key),
            ShardDownPolicy::Eject => {
                let active = self.active.load();
                match &active.ring {
                    Some(ring) => {
                        let shard = active.to_shard[ring.locate(key)];
                        if access == Access::Write && active.to_shard.len() < shards.len() {
                            let owner = self.ring.locate(key);
                            if owner != shard {
                                if let Some(owner) = shards.get(owner) {
                                    if !owner.diverted.record(key) {
                                        return REFUSED;
                                    }
                                }
                            }
                        }
                        shard
                    }
                    // Nothing is up: the owner's connection fails it fast.
                    None => self.ring.locate(key),
                }
            }
        }
    }

    /// Under the eject policy, rebuild the ring from the healthy shards.
    fn health_changed(&self, shards: &[Arc<Shard>]) {
        if self.policy != ShardDownPolicy::Eject {
            return;
        }
        let to_shard: Vec<usize> = (0..shards.len())
            .filter(|&i| shards[i].is_healthy())
            .collect();
        let specs: Vec<ShardSpec> = to_shard
            .iter()
            .map(|&i| self.ring_shards[i].clone())
            .collect();
        let ring = Ring::new(&specs, self.ring_config).ok();
        tracing::warn!(
            serving = to_shard.len(),
            configured = shards.len(),
            "eject policy: ring rebuilt from the healthy shards"
        );
        self.active.store(Arc::new(ActiveRing { ring, to_shard }));
    }
}

/// The Redis side of one generation: the placement and the shard behind
/// each of its indexes.
#[derive(Debug)]
pub struct RedisBackends {
    placement: Placement,
    pub shards: Vec<Arc<Shard>>,
    /// Per-request deadline (`redis.timeout_ms`).
    pub request_timeout: Duration,
    /// `redis.read_errors_as_misses` and its per-shard tallies.
    pub read_errors: ReadErrors,
    /// Sentinel-managed shards: the task following their primaries, for
    /// as long as this generation lives.
    _sentinel: Option<AbortOnDrop>,
    /// RESP sessions' held connections (`redis.max_dedicated_connections`);
    /// kept across reloads while the bound is unchanged.
    pub dedicated: Arc<DedicatedLimit>,
}

impl RedisBackends {
    /// Build the placement and start every shard's connections; shards
    /// whose address and connection settings are unchanged keep their live
    /// connections from `previous`.
    pub fn start(
        config: &Config,
        previous: Option<&RedisBackends>,
        metrics: &Metrics,
    ) -> Result<RedisBackends, ProxyError> {
        let redis = &config.redis;
        let dedicated = previous
            .map(|p| p.dedicated.clone())
            .filter(|d| d.max == redis.max_dedicated_connections)
            .unwrap_or_else(|| {
                let (in_use, refused) = metrics.dedicated_handles();
                Arc::new(DedicatedLimit::new(
                    redis.max_dedicated_connections,
                    in_use,
                    refused,
                ))
            });
        if redis.mode == RedisMode::Cluster {
            let cluster = Cluster::start(config, metrics).map_err(ProxyError::Other)?;
            return Ok(RedisBackends {
                read_errors: ReadErrors::new(redis.read_errors_as_misses, &cluster.shards, metrics),
                shards: cluster.shards.clone(),
                placement: Placement::Cluster(cluster),
                request_timeout: Duration::from_millis(redis.timeout_ms),
                _sentinel: None,
                dedicated,
            });
        }
        let placement = Placement::Ring(RingPlacement::new(config)?);
        let redis_tls = crate::tls::RedisTls::from_config(redis)?;
        let sentinel_settings = ConnectionSettings {
            addr: String::new(),
            username: redis.sentinel_username.clone(),
            password: redis.sentinel_password.clone(),
            timeout: Duration::from_millis(redis.timeout_ms),
            connect_timeout: Duration::from_millis(redis.connect_timeout_ms),
            tls: redis_tls.as_ref().map(|t| t.for_shard("")),
            primary: None,
        };
        let shards: Vec<Arc<Shard>> = redis
            .shards
            .iter()
            .map(|s| {
                let settings = ConnectionSettings {
                    addr: s.addr.clone(),
                    username: redis.username.clone(),
                    password: redis.password.clone(),
                    timeout: Duration::from_millis(redis.timeout_ms),
                    connect_timeout: Duration::from_millis(redis.connect_timeout_ms),
                    tls: redis_tls.as_ref().map(|t| t.for_shard(&s.addr)),
                    // Its address comes from the sentinels, below (unless
                    // the shard is kept, with its own).
                    primary: s.master.as_deref().map(|m| Arc::new(Primary::new(m, ""))),
                };
                let replica_reads =
                    redis.read_from == ReadFrom::ReplicaPreferred && settings.primary.is_some();
                let reusable = previous.and_then(|p| {
                    p.shards.iter().find(|old| {
                        old.id == s.id()
                            && *old.settings() == settings
                            && old.replica.is_some() == replica_reads
                            && old.connection_count() == redis.connections_per_shard.max(1)
                    })
                });
                if let Some(old) = reusable {
                    return Ok(old.clone());
                }
                if let Some(primary) = &settings.primary {
                    let addr =
                        sentinel::discover(primary.master(), &redis.sentinels, &sentinel_settings)
                            .map_err(ProxyError::Other)?;
                    primary.set(&addr);
                }
                let replica = replica_reads.then(|| {
                    Replica::start(
                        s.id(),
                        &settings,
                        redis.max_inflight_per_connection,
                        metrics.shard(
                            memshift_shadow::Backend::Redis,
                            &format!("{}/replica", s.id()),
                        ),
                        metrics.replica_reads(s.id()),
                    )
                });
                let mut shard = Shard::start(
                    s.id().to_string(),
                    settings,
                    redis.connections_per_shard,
                    redis.max_inflight_per_connection,
                    metrics.shard(memshift_shadow::Backend::Redis, s.id()),
                    None,
                );
                shard.replica = replica;
                Ok(Arc::new(shard))
            })
            .collect::<Result<_, ProxyError>>()?;
        let followed: Vec<sentinel::Followed> = shards
            .iter()
            .filter(|s| s.primary().is_some())
            .map(|s| sentinel::Followed {
                shard: s.clone(),
                metrics: metrics.primary(&s.id),
            })
            .collect();
        let watcher = (!followed.is_empty())
            .then(|| sentinel::spawn(redis.sentinels.clone(), sentinel_settings, followed));
        let backends = RedisBackends {
            read_errors: ReadErrors::new(redis.read_errors_as_misses, &shards, metrics),
            placement,
            shards,
            request_timeout: Duration::from_millis(redis.timeout_ms),
            _sentinel: watcher,
            dedicated,
        };
        // Shards kept from the previous generation may be down right now:
        // under the eject policy they stay out of the ring.
        if backends.shards.iter().any(|s| !s.is_healthy()) {
            backends.health_changed();
        }
        Ok(backends)
    }

    /// The shard that serves a request that may change `key` now.
    #[inline]
    pub fn locate(&self, key: &[u8]) -> usize {
        self.placement.locate(key, Access::Write, &self.shards)
    }

    /// The shard that serves a request of this `access` to `key` now.
    #[inline]
    pub fn locate_for(&self, key: &[u8], access: Access) -> usize {
        self.placement.locate(key, access, &self.shards)
    }

    /// The shard that serves a read of `key` now.
    #[inline]
    pub fn locate_read(&self, key: &[u8]) -> usize {
        self.placement.locate(key, Access::Read, &self.shards)
    }

    /// The shard that owns `key` when every shard is up.
    pub fn owner(&self, key: &[u8]) -> usize {
        self.placement.owner(key)
    }

    /// Whether down shards leave the placement (`on_shard_down = "eject"`).
    pub fn ejects(&self) -> bool {
        self.placement.ejects()
    }

    /// Put `cmd` on `shard`'s connection `lane`; its reply goes to `reply`.
    #[inline]
    pub fn send(&self, shard: usize, lane: usize, cmd: Bytes, reply: ReplyTo) {
        // A cluster's node table grows with the cluster (nodes added or
        // promoted after start); `shards` holds the nodes known at start.
        if let Placement::Cluster(cluster) = &self.placement {
            return cluster.send(shard, lane, BackendRequest { cmd, reply });
        }
        match self.shards.get(shard) {
            Some(s) => s.send(lane, BackendRequest { cmd, reply }),
            None => reply.send(Err(BackendError::Unavailable)),
        }
    }

    /// The shard (cluster node) behind index `shard`, for a connection of
    /// a session's own (`redis::dedicated`).
    pub fn shard_at(&self, shard: usize) -> Option<Arc<Shard>> {
        match &self.placement {
            Placement::Cluster(cluster) => cluster.node_at(shard),
            Placement::Ring(_) => self.shards.get(shard).cloned(),
        }
    }

    /// `send` of a read that may see a replica's value (plain reads only:
    /// nothing that returns a CAS or changes the item); the replica
    /// connection exists only under `redis.read_from = "replica_preferred"`.
    #[inline]
    pub fn send_read(&self, shard: usize, lane: usize, cmd: Bytes, reply: ReplyTo) {
        match self.shards.get(shard) {
            Some(s) if s.replica.is_some() => s.send_read(lane, BackendRequest { cmd, reply }),
            _ => self.send(shard, lane, cmd, reply),
        }
    }

    /// Send `cmd` to `shard` outside any session (on its first connection)
    /// and return its reply. The command is queued before this returns, so
    /// callers that need an order get it even if they await later.
    pub fn call(
        &self,
        shard: usize,
        cmd: Bytes,
    ) -> impl std::future::Future<Output = Result<Frame, BackendError>> + Send + 'static {
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.send(
            shard,
            0,
            cmd,
            ReplyTo {
                tx: tx.into(),
                seq: 0,
                part: 0,
            },
        );
        async move {
            match rx.recv().await.map(|r| r.result) {
                Some(Ok(Reply::Redis(frame))) => Ok(frame),
                Some(Ok(Reply::Memcached(_))) | None => Err(BackendError::ConnectionLost),
                Some(Err(e)) => Err(e),
            }
        }
    }

    /// `call` on the shard that serves `key`.
    pub fn call_for_key(
        &self,
        key: &[u8],
        cmd: Bytes,
    ) -> impl std::future::Future<Output = Result<Frame, BackendError>> + Send + 'static {
        self.call(self.locate(key), cmd)
    }

    /// Send `cmd` to every shard; shard i's reply comes with `part` i.
    pub fn broadcast(&self, cmd: Bytes) -> mpsc::UnboundedReceiver<BackendReply> {
        let (tx, rx) = mpsc::unbounded_channel();
        for i in 0..self.shards.len() {
            let reply = ReplyTo {
                tx: tx.clone().into(),
                seq: 0,
                part: i as u32,
            };
            self.send(i, 0, cmd.clone(), reply);
        }
        rx
    }

    /// The shards a `flush_all` empties: every master of a cluster, else
    /// every shard.
    pub fn flush_targets(&self) -> Vec<usize> {
        match &self.placement {
            Placement::Cluster(cluster) => cluster.masters(),
            Placement::Ring(_) => (0..self.shards.len()).collect(),
        }
    }

    /// Cluster mode: the hash slot of `key` (a cluster refuses multi-key
    /// commands across slots); `None` on the ring.
    #[inline]
    pub fn cluster_slot(&self, key: &[u8]) -> Option<u16> {
        match &self.placement {
            Placement::Cluster(_) => Some(memshift_ring::key_slot(key)),
            Placement::Ring(_) => None,
        }
    }

    /// The health monitor changed a shard's state: the placement follows.
    pub fn health_changed(&self) {
        self.placement.health_changed(&self.shards);
    }
}
