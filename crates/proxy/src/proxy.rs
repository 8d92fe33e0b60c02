//! State shared by every session: the shards and ring (swapped whole on
//! reload), limits, counters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::BytesMut;
use memshift_protocol::memcache::ParseLimits;
use memshift_ring::{Ring, RingConfig, ShardSpec};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, ShardDownPolicy};
use crate::error::ProxyError;
use crate::metrics::{Backend, Metrics};
use crate::migration::Migration;
use crate::redis::connection::ConnectionSettings;
use crate::redis::shard::Shard;
use crate::redis::{translate, BackendError, BackendReply, BackendRequest, Reply, ReplyTo};
use crate::stats::{ServerFacts, Stats, VERSION};
use bytes::Bytes;
use memshift_protocol::resp::Frame;

/// Where keys go: the ring and the shard behind each of its slots. Swapped
/// whole on reload; a session holds the old one until its requests are
/// routed, so requests already routed finish on their old shard.
#[derive(Debug)]
pub struct Backends {
    /// Every configured shard.
    pub ring: Ring,
    pub shards: Vec<Arc<Shard>>,
    /// Per-request deadline (`redis.timeout_ms`).
    pub request_timeout: Duration,
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

impl Backends {
    /// Build the ring and start every shard's connections.
    pub fn start(config: &Config, metrics: &Metrics) -> Result<Backends, ProxyError> {
        Backends::start_reusing(config, None, metrics)
    }

    /// Like `start`, but shards whose address and connection settings are
    /// unchanged keep their live connections from `previous`.
    pub fn start_reusing(
        config: &Config,
        previous: Option<&Backends>,
        metrics: &Metrics,
    ) -> Result<Backends, ProxyError> {
        let ring = Ring::new(&config.ring_shards(), config.ring_config())?;
        let redis = &config.redis;
        let redis_tls = crate::tls::RedisTls::from_config(redis)?;
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
                };
                let reusable = previous.and_then(|p| {
                    p.shards.iter().find(|old| {
                        old.id == s.id()
                            && *old.settings() == settings
                            && old.connection_count() == redis.connections_per_shard.max(1)
                    })
                });
                match reusable {
                    Some(old) => old.clone(),
                    None => Arc::new(Shard::start(
                        s.id().to_string(),
                        settings,
                        redis.connections_per_shard,
                        redis.max_inflight_per_connection,
                        metrics.shard(Backend::Redis, s.id()),
                    )),
                }
            })
            .collect();
        let backends = Backends {
            active: ArcSwap::from_pointee(ActiveRing {
                ring: Some(ring.clone()),
                to_shard: (0..shards.len()).collect(),
            }),
            ring,
            shards,
            request_timeout: Duration::from_millis(redis.timeout_ms),
            policy: redis.on_shard_down,
            ring_shards: config.ring_shards(),
            ring_config: config.ring_config(),
        };
        // Shards kept from the previous generation may be down right now:
        // under the eject policy they stay out of the ring.
        if backends.shards.iter().any(|s| !s.is_healthy()) {
            backends.health_changed();
        }
        Ok(backends)
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
        let reply = ReplyTo {
            tx,
            seq: 0,
            part: 0,
        };
        match self.shards.get(shard) {
            Some(s) => s.send(0, BackendRequest { cmd, reply }),
            None => reply.send(Err(BackendError::Unavailable)),
        }
        async move {
            match rx.recv().await.map(|r| r.result) {
                Some(Ok(Reply::Redis(frame))) => Ok(frame),
                Some(Ok(Reply::Memcached(_))) | None => Err(BackendError::ConnectionLost),
                Some(Err(e)) => Err(e),
            }
        }
    }

    /// Send `cmd` to every shard; shard i's reply comes with `part` i.
    pub fn broadcast(&self, cmd: Bytes) -> mpsc::UnboundedReceiver<BackendReply> {
        let (tx, rx) = mpsc::unbounded_channel();
        for (i, shard) in self.shards.iter().enumerate() {
            let reply = ReplyTo {
                tx: tx.clone(),
                seq: 0,
                part: i as u32,
            };
            shard.send(
                0,
                BackendRequest {
                    cmd: cmd.clone(),
                    reply,
                },
            );
        }
        rx
    }

    /// The shard that serves a request that may change `key` now. Under
    /// the eject policy, a key routed away from its ejected owner is
    /// remembered, so that it is cleaned before the owner rejoins (see
    /// `eject`).
    #[inline]
    pub fn locate(&self, key: &[u8]) -> usize {
        self.locate_as(key, true)
    }

    /// The shard that serves a read of `key` now (nothing to remember).
    #[inline]
    pub fn locate_read(&self, key: &[u8]) -> usize {
        self.locate_as(key, false)
    }

    #[inline]
    fn locate_as(&self, key: &[u8], write: bool) -> usize {
        match self.policy {
            ShardDownPolicy::Fail => self.ring.locate(key),
            ShardDownPolicy::Eject => {
                let active = self.active.load();
                match &active.ring {
                    Some(ring) => {
                        let shard = active.to_shard[ring.locate(key)];
                        if write && active.to_shard.len() < self.shards.len() {
                            let owner = self.ring.locate(key);
                            if owner != shard {
                                self.shards[owner].diverted.record(key);
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

    pub fn ejects(&self) -> bool {
        self.policy == ShardDownPolicy::Eject
    }

    /// The health monitor changed a shard's state: under the eject policy,
    /// rebuild the ring from the healthy shards.
    pub fn health_changed(&self) {
        if self.policy != ShardDownPolicy::Eject {
            return;
        }
        let to_shard: Vec<usize> = (0..self.shards.len())
            .filter(|&i| self.shards[i].is_healthy())
            .collect();
        let specs: Vec<ShardSpec> = to_shard
            .iter()
            .map(|&i| self.ring_shards[i].clone())
            .collect();
        let ring = Ring::new(&specs, self.ring_config).ok();
        tracing::warn!(
            serving = to_shard.len(),
            configured = self.shards.len(),
            "eject policy: ring rebuilt from the healthy shards"
        );
        self.active.store(Arc::new(ActiveRing { ring, to_shard }));
    }
}

/// The `[server]` settings a session reads; they change on reload.
#[derive(Debug, Clone)]
pub struct Settings {
    pub limits: ParseLimits,
    pub allow_flush_all: bool,
    pub idle_timeout: Option<Duration>,
    pub max_pending_replies: usize,
}

impl Settings {
    pub fn from_config(config: &Config) -> Settings {
        let server = &config.server;
        Settings {
            limits: ParseLimits {
                max_item_size: server.max_item_size,
                max_line_len: server.max_line_length,
            },
            allow_flush_all: server.allow_flush_all,
            idle_timeout: (server.idle_timeout_ms > 0)
                .then(|| Duration::from_millis(server.idle_timeout_ms)),
            max_pending_replies: server.max_pending_replies,
        }
    }
}

pub struct Proxy {
    /// Shared with the Redis shadow sink, which writes where the ring says.
    pub backends: Arc<ArcSwap<Backends>>,
    pub migration: ArcSwap<Migration>,
    pub metrics: Arc<Metrics>,
    /// `[server]` settings that apply live (swapped on reload).
    pub settings: ArcSwap<Settings>,
    pub stats: Stats,
    pub facts: ServerFacts,
    /// Seeds each session's CAS generator (random per process).
    pub cas_seed: u64,
    pub shutdown: watch::Receiver<bool>,
    /// The one `flush_all <delay>` deadline.
    pub flush: crate::flush::FlushSchedule,
}

impl Proxy {
    pub fn new(
        config: &Config,
        backends: Arc<ArcSwap<Backends>>,
        migration: Migration,
        cas_seed: u64,
        metrics: Arc<Metrics>,
        threads: usize,
        shutdown: watch::Receiver<bool>,
    ) -> Proxy {
        let server = &config.server;
        Proxy {
            backends,
            migration: ArcSwap::from_pointee(migration),
            metrics,
            settings: ArcSwap::from_pointee(Settings::from_config(config)),
            stats: Stats::default(),
            facts: ServerFacts {
                started: Instant::now(),
                started_unix: crate::flush::unix_now(),
                threads,
                max_connections: server.max_connections,
                version: VERSION,
            },
            cas_seed,
            shutdown,
            flush: crate::flush::FlushSchedule::default(),
        }
    }

    /// Apply `flush_all <delay>` deadlines as they come (for the life of
    /// the process).
    pub fn start_flush_schedule(self: &Arc<Self>) {
        let proxy = self.clone();
        tokio::spawn(async move {
            let flusher = proxy.clone();
            proxy
                .flush
                .run(move || flusher.clone().flush_all_detached())
                .await
        });
    }

    /// A `flush_all <delay>` deadline has come: FLUSHDB on every shard,
    /// outside any session.
    pub async fn flush_all_detached(self: Arc<Self>) {
        let mut buf = BytesMut::new();
        translate::flush(&mut buf);
        let mut replies = self.backends.load().broadcast(buf.freeze());
        while let Some(reply) = replies.recv().await {
            if let Err(e) = reply.result {
                tracing::warn!(shard = reply.part, error = ?e, "delayed flush_all failed on a shard");
            }
        }
    }
}

pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}
