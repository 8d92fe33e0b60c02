//! State shared by every session: the router (swapped whole on reload),
//! limits, counters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use memshift_protocol::memcache::ParseLimits;
use tokio::sync::watch;

use crate::config::{Config, ListenAddr};
use crate::metrics::Metrics;
use crate::redis::translate;
use crate::router::Router;
use crate::stats::{ServerFacts, Stats, VERSION};

/// The `[server]` settings a session reads; they change on reload.
#[derive(Debug, Clone)]
pub struct Settings {
    pub limits: ParseLimits,
    pub allow_flush_all: bool,
    pub idle_timeout: Option<Duration>,
    /// `server.drain_timeout_ms`: how long a connection drains after SIGTERM.
    pub drain_timeout: Duration,
    /// `server.drain_quiet_ms`: a draining connection with everything
    /// answered closes once its client has sent nothing this long.
    pub drain_quiet: Duration,
    pub max_pending_replies: usize,
    pub max_pending_bytes: usize,
    pub near_cache: crate::near_cache::store::Limits,
    /// RESP clients must authenticate with this password (`server.resp_password`).
    pub resp_password: Option<Arc<str>>,
    /// `server.resp_max_bulk_len`.
    pub resp_max_bulk_len: usize,
    /// `redis.pubsub_shard`, as an index into the shards (ring mode).
    pub pubsub_shard: usize,
    /// `redis.max_subscriber_connections`.
    pub max_subscriber_connections: usize,
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
            drain_timeout: Duration::from_millis(server.drain_timeout_ms),
            drain_quiet: Duration::from_millis(server.drain_quiet_ms),
            max_pending_replies: server.max_pending_replies,
            max_pending_bytes: server.max_pending_bytes,
            resp_password: server.resp_password.as_deref().map(Arc::from),
            resp_max_bulk_len: server.resp_max_bulk_len,
            pubsub_shard: config.redis.pubsub_shard.as_ref().map_or(0, |name| {
                let shards = config.redis.shards.iter().enumerate();
                shards
                    .filter(|(i, s)| s.is_named(*i, name))
                    .map(|(i, _)| i)
                    .next()
                    .unwrap_or(0)
            }),
            max_subscriber_connections: config.redis.max_subscriber_connections,
            near_cache: crate::near_cache::store::Limits {
                max_bytes: config.near_cache.max_bytes,
                max_ttl: Duration::from_millis(config.near_cache.max_ttl_ms),
                admit_reads: config.near_cache.admit_reads,
                admit_window: Duration::from_millis(config.near_cache.admit_window_ms),
                coalesce: config.near_cache.coalesce_misses,
            },
        }
    }
}

pub struct Proxy {
    /// Where each key goes: phase, Redis placement, legacy pool.
    pub router: Router,
    pub metrics: Arc<Metrics>,
    /// `[server]` settings that apply live (swapped on reload).
    pub settings: arc_swap::ArcSwap<Settings>,
    pub stats: Stats,
    pub facts: ServerFacts,
    /// Seeds each session's CAS generator (random per process).
    pub cas_seed: u64,
    pub shutdown: watch::Receiver<bool>,
    /// The one `flush_all <delay>` deadline.
    pub flush: crate::flush::FlushSchedule,
    /// `[server] sasl`: binary connections authenticate against these.
    pub sasl: Option<Arc<crate::sasl::Credentials>>,
}

impl Proxy {
    pub fn new(
        config: &Config,
        router: Router,
        cas_seed: u64,
        metrics: Arc<Metrics>,
        threads: usize,
        shutdown: watch::Receiver<bool>,
    ) -> Proxy {
        let server = &config.server;
        Proxy {
            router,
            metrics,
            settings: arc_swap::ArcSwap::from_pointee(Settings::from_config(config)),
            stats: Stats::default(),
            facts: ServerFacts {
                started: Instant::now(),
                started_unix: crate::flush::unix_now(),
                threads,
                max_connections: server.max_connections,
                version: VERSION,
                // INFO's tcp_port: 0 when the RESP side listens on a unix
                // socket only (Redis' own `port 0`).
                resp_port: [&server.resp_listen, &server.resp_tls_listen]
                    .into_iter()
                    .find_map(|a| a.as_ref().and_then(ListenAddr::tcp))
                    .map_or(0, |a| a.port()),
            },
            cas_seed,
            shutdown,
            flush: crate::flush::FlushSchedule::default(),
            sasl: None,
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
        let mut replies = self.router.redis().broadcast(buf.freeze());
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
