//! A Redis shard: `connections_per_shard` pipelined connections. A session
//! always uses the same connection of a shard, so its requests to that shard
//! stay in order (a pipelined `set k` then `get k` reads its own write).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::connection::{self, ConnectionSettings};
use super::{BackendError, BackendRequest};
use crate::metrics::{ErrorKind, ShardMetrics};

/// Requests a connection queues before new ones fail fast with `Busy`.
pub const DEFAULT_QUEUE_DEPTH: usize = 10_000;

#[derive(Debug)]
pub struct Shard {
    settings: ConnectionSettings,
    /// Label for metrics and logs: the shard's name, or its address.
    pub id: String,
    conns: Vec<mpsc::Sender<BackendRequest>>,
    up: Vec<Arc<AtomicBool>>,
    /// Set by the health monitor (PING); true until pings say otherwise.
    healthy: AtomicBool,
    metrics: ShardMetrics,
    /// Keys routed to other shards while this one was ejected (kept
    /// across reloads with the shard).
    pub diverted: crate::eject::Diverted,
}

impl Shard {
    /// Start the shard's connection tasks (on the current runtime).
    pub fn start(
        id: String,
        settings: ConnectionSettings,
        connections: usize,
        queue_depth: usize,
        metrics: ShardMetrics,
    ) -> Shard {
        let mut conns = Vec::with_capacity(connections);
        let mut up = Vec::with_capacity(connections);
        for _ in 0..connections.max(1) {
            let (tx, rx) = mpsc::channel(queue_depth.max(1));
            let flag = Arc::new(AtomicBool::new(false));
            tokio::spawn(connection::run(
                settings.clone(),
                rx,
                flag.clone(),
                metrics.clone(),
            ));
            conns.push(tx);
            up.push(flag);
        }
        Shard {
            settings,
            id,
            conns,
            up,
            healthy: AtomicBool::new(true),
            metrics,
            diverted: crate::eject::Diverted::default(),
        }
    }

    /// Queue a request on connection `lane` (taken modulo the count). Never
    /// waits: a full queue or a stopped connection answers the request at once.
    pub fn send(&self, lane: usize, req: BackendRequest) {
        let conn = &self.conns[lane % self.conns.len()];
        if let Err(e) = conn.try_send(req) {
            let (req, err) = match e {
                mpsc::error::TrySendError::Full(r) => (r, BackendError::Busy),
                mpsc::error::TrySendError::Closed(r) => (r, BackendError::Unavailable),
            };
            self.metrics.error(match err {
                BackendError::Busy => ErrorKind::Busy,
                _ => ErrorKind::Connection,
            });
            req.reply.send(Err(err));
        }
    }

    /// True while at least one connection is established and the health
    /// monitor has not marked the shard down.
    pub fn is_up(&self) -> bool {
        self.is_healthy() && self.up.iter().any(|u| u.load(Ordering::Relaxed))
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

    pub fn addr(&self) -> &str {
        &self.settings.addr
    }

    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }
}
