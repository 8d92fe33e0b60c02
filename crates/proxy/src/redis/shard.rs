//! A Redis shard: `connections_per_shard` pipelined connections. A session
//! always uses the same connection of a shard, so its requests to that shard
//! stay in order (a pipelined `set k` then `get k` reads its own write).

use std::sync::atomic::{AtomicBool, Ordering};

use memshift_pipeline::{Pipeline, Request};

use super::connection::{ConnectionSettings, Expect, RedisCodec, RedisConnector};
use super::{BackendError, BackendRequest, Routed};
use crate::metrics::{ErrorKind, ShardMetrics};
use bytes::Bytes;

/// Requests a connection queues before new ones fail fast with `Busy`.
pub const DEFAULT_QUEUE_DEPTH: usize = 10_000;

#[derive(Debug)]
pub struct Shard {
    settings: ConnectionSettings,
    /// Label for metrics and logs: the shard's name, or its address.
    pub id: String,
    conns: Vec<Pipeline<RedisCodec>>,
    /// Set by the health monitor (PING); true until pings say otherwise.
    healthy: AtomicBool,
    metrics: ShardMetrics,
    /// Keys routed to other shards while this one was ejected (kept
    /// across reloads with the shard).
    pub diverted: super::diverted::Diverted,
    /// Near cache on: the shard's invalidation state, kept current by a
    /// listener task that ends with the shard.
    pub tracking: Option<std::sync::Arc<crate::near_cache::Tracking>>,
    /// `redis.read_from = "replica_preferred"` on a Sentinel shard: the
    /// connection that carries its replica reads.
    pub replica: Option<super::replica::Replica>,
    _listener: Option<AbortOnDrop>,
}

/// Aborts the task when dropped (the shard's invalidation listener).
#[derive(Debug)]
pub struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Shard {
    /// Start the shard's connection tasks (on the workers, `crate::workers`;
    /// the invalidation listener on the current runtime).
    pub fn start(
        id: String,
        settings: ConnectionSettings,
        connections: usize,
        queue_depth: usize,
        metrics: ShardMetrics,
        cluster: super::redirect::Hook,
    ) -> Shard {
        let conns = (0..connections.max(1))
            .map(|index| {
                // Connection `index` runs on worker `index % threads`, the
                // worker of the sessions whose lane it serves.
                let _on_worker = crate::workers::enter_for_connection(index);
                let connector = RedisConnector {
                    settings: settings.clone(),
                    metrics: metrics.clone(),
                    cluster: cluster.clone(),
                    last_target: Default::default(),
                    replica: false,
                };
                Pipeline::start(connector, settings.engine(), queue_depth)
            })
            .collect();
        let (tracking, listener) = match crate::near_cache::get() {
            Some(_) => {
                // Write-through sets only on ring shards: a cluster node
                // may redirect a SET, which this connection does not follow.
                let (tracking, writes) = match &cluster {
                    None => {
                        let (t, rx) = crate::near_cache::Tracking::with_writes();
                        (t, Some(rx))
                    }
                    Some(_) => (crate::near_cache::Tracking::default(), None),
                };
                let tracking = std::sync::Arc::new(tracking);
                // It carries every worker's write-through sets.
                let _on_worker = crate::workers::enter_next_shared();
                let task = tokio::spawn(super::tracking::listen(
                    settings.clone(),
                    tracking.clone(),
                    writes,
                    metrics.clone(),
                ));
                (Some(tracking), Some(AbortOnDrop(task)))
            }
            None => (None, None),
        };
        Shard {
            replica: None,
            tracking,
            _listener: listener,
            settings,
            id,
            conns,
            healthy: AtomicBool::new(true),
            metrics,
            diverted: super::diverted::Diverted::default(),
        }
    }

    /// Queue a request on connection `lane` (taken modulo the count). Never
    /// waits: a full queue or a stopped connection answers the request at once.
    pub fn send(&self, lane: usize, req: BackendRequest) {
        let caller = Routed {
            reply: req.reply,
            hops: 0,
            lane,
            retry: None,
        };
        self.send_routed(lane, req.cmd, false, caller);
    }

    /// Queue a read that may see a replica's (older) value: on the
    /// replica connection while it is up, else as [`Shard::send`].
    pub fn send_read(self: &std::sync::Arc<Self>, lane: usize, req: BackendRequest) {
        match &self.replica {
            Some(replica) if replica.is_up() => {
                // Once more on the primary, if the shard is still there.
                let shard = std::sync::Arc::downgrade(self);
                let cmd = req.cmd.clone();
                let retry = super::Retry::new(move |caller: Routed| match shard.upgrade() {
                    Some(shard) => shard.send_routed(caller.lane, cmd, false, caller),
                    None => caller.reply.send(Err(BackendError::Unavailable)),
                });
                replica.send(lane, req, retry);
            }
            _ => self.send(lane, req),
        }
    }

    /// Queue `bytes` (after `ASKING` when `asking`: the bytes hold both).
    pub(super) fn send_routed(&self, lane: usize, bytes: Bytes, asking: bool, caller: Routed) {
        let conn = &self.conns[lane % self.conns.len()];
        let sent = conn.send(Request {
            expect: Expect::of(&bytes, asking),
            bytes,
            caller,
        });
        // Refused (and answered already): count it.
        if let Err(err) = sent {
            self.metrics.error(match err {
                BackendError::Busy => ErrorKind::Busy,
                _ => ErrorKind::Connection,
            });
        }
    }

    /// True while at least one connection is established and the health
    /// monitor has not marked the shard down.
    pub fn is_up(&self) -> bool {
        self.is_healthy() && self.conns.iter().any(Pipeline::is_up)
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Relaxed);
    }

    pub fn settings(&self) -> &ConnectionSettings {
        &self.settings
    }

    pub fn metrics(&self) -> &ShardMetrics {
        &self.metrics
    }

    pub fn addr(&self) -> &str {
        &self.settings.addr
    }

    /// A Sentinel-managed shard's primary.
    pub fn primary(&self) -> Option<&std::sync::Arc<super::primary::Primary>> {
        self.settings.primary.as_ref()
    }

    /// Sentinel switched the shard's primary to `addr`: returns the old
    /// address if it changed. The shard's near-cache entries are dropped,
    /// and nothing fills again until its invalidation connection tracks
    /// the new primary, *before* the address is published: a write the old
    /// primary acknowledged and the failover lost does not live on here.
    /// Connections to the old address close when it is published.
    pub fn follow_primary(&self, addr: &str) -> Option<std::sync::Arc<str>> {
        let primary = self.settings.primary.as_ref()?;
        if *primary.current() == *addr {
            return None;
        }
        if let Some(tracking) = &self.tracking {
            tracking.lost();
        }
        primary.set(addr)
    }

    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }
}
