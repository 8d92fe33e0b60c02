//! Redis Cluster mode: the slot → master map over the nodes known at start,
//! its refresh (periodic, and on `-MOVED`), and redirects: a request a node
//! answers with `-MOVED`/`-ASK`/`-TRYAGAIN`/`-CLUSTERDOWN` is re-sent from
//! the connection that got that answer, so the session only ever sees the
//! final reply (or a failure, rendered as memcached's `SERVER_ERROR`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::{encode_command, Frame};
use memshift_ring::{key_slot, SLOT_COUNT};
use tokio::sync::{mpsc, Notify};

use super::connection::ConnectionSettings;
use super::shard::Shard;
use super::topology::{self, Topology};
use super::{BackendError, Reply, ReplyTo, Routed};
use crate::config::Config;
use crate::metrics::Metrics;

/// Redirects one request may follow before it fails.
const MAX_HOPS: u8 = 5;
/// First wait before retrying a `TRYAGAIN`/`CLUSTERDOWN`; doubles each time.
const RETRY_BASE: Duration = Duration::from_millis(10);
/// Refreshes asked for by redirects come at most this often.
const REFRESH_GAP: Duration = Duration::from_millis(50);
/// `ASKING` as sent before a request redirected by `-ASK`.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";
/// A slot no known master serves.
const UNOWNED: u16 = u16::MAX;

/// What a cluster error reply asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// The slot lives on `addr` now: refresh the map, re-send there.
    Moved { slot: u16, addr: String },
    /// The slot is migrating to `addr`: `ASKING` + the request there, once.
    Ask { addr: String },
    /// A multi-key request during a migration, or the cluster is down:
    /// retry shortly.
    Retry,
}

impl Redirect {
    /// Recognise `MOVED 3999 127.0.0.1:6381`, `ASK 3999 …`, `TRYAGAIN …`,
    /// `CLUSTERDOWN …`.
    pub fn parse(e: &[u8]) -> Option<Redirect> {
        if e.starts_with(b"TRYAGAIN") || e.starts_with(b"CLUSTERDOWN") {
            return Some(Redirect::Retry);
        }
        let text = std::str::from_utf8(e).ok()?;
        let mut words = text.split(' ');
        let kind = words.next()?;
        let slot: u16 = words.next()?.parse().ok()?;
        let addr = words.next()?.to_string();
        match kind {
            "MOVED" => Some(Redirect::Moved { slot, addr }),
            "ASK" => Some(Redirect::Ask { addr }),
            _ => None,
        }
    }
}

/// One cluster: its nodes (indexes are the generation's shard indexes) and
/// which of them serves each slot.
#[derive(Debug)]
pub struct Cluster {
    pub shards: Vec<Arc<Shard>>,
    /// `owner[slot]`: index into `shards`, or `UNOWNED`.
    owner: ArcSwap<Box<[u16]>>,
    refresh: Arc<Notify>,
    /// `redis.timeout_ms`: retries of `TRYAGAIN`/`CLUSTERDOWN` fit in it.
    timeout: Duration,
}

impl Cluster {
    /// Read the topology from the seeds (blocking, bounded by the connect
    /// timeout), connect to every node, and start the refresh task.
    pub fn start(config: &Config, metrics: &Metrics) -> Result<Arc<Cluster>, String> {
        let redis = &config.redis;
        let tls = crate::tls::RedisTls::from_config(redis).map_err(|e| e.to_string())?;
        let settings = |addr: &str| ConnectionSettings {
            addr: addr.to_string(),
            username: redis.username.clone(),
            password: redis.password.clone(),
            timeout: Duration::from_millis(redis.timeout_ms),
            connect_timeout: Duration::from_millis(redis.connect_timeout_ms),
            tls: tls.as_ref().map(|t| t.for_shard(addr)),
        };
        let seed = redis
            .cluster_nodes
            .first()
            .map(String::as_str)
            .unwrap_or("");
        let topo = topology::discover(&redis.cluster_nodes, &settings(seed))?;
        tracing::info!(
            nodes = topo.nodes.len(),
            ranges = topo.ranges.len(),
            "redis cluster topology read"
        );
        let cluster = Arc::new_cyclic(|weak: &Weak<Cluster>| {
            let shards: Vec<Arc<Shard>> = topo
                .nodes
                .iter()
                .map(|addr| {
                    Arc::new(Shard::start(
                        addr.clone(),
                        settings(addr),
                        redis.connections_per_shard,
                        redis.max_inflight_per_connection,
                        metrics.shard(memshift_shadow::Backend::Redis, addr),
                        Some(weak.clone()),
                    ))
                })
                .collect();
            let owner = slot_owners(&topo, &shards);
            Cluster {
                shards,
                owner: ArcSwap::from_pointee(owner),
                refresh: Arc::new(Notify::new()),
                timeout: Duration::from_millis(redis.timeout_ms),
            }
        });
        spawn_refresh(
            Arc::downgrade(&cluster),
            cluster.refresh.clone(),
            Duration::from_millis(redis.cluster_refresh_ms),
        );
        Ok(cluster)
    }

    /// The node serving `key`'s slot (out of range when none does: the
    /// request then fails as unavailable).
    #[inline]
    pub fn locate(&self, key: &[u8]) -> usize {
        let owner = self.owner.load();
        match owner.get(usize::from(key_slot(key))) {
            Some(&o) if o != UNOWNED => usize::from(o),
            _ => usize::MAX,
        }
    }

    /// The nodes serving at least one slot (for `flush_all`).
    pub fn masters(&self) -> Vec<usize> {
        let mut serving = vec![false; self.shards.len()];
        for &o in self.owner.load().iter() {
            if let Some(s) = serving.get_mut(usize::from(o)) {
                *s = true;
            }
        }
        (0..serving.len()).filter(|&i| serving[i]).collect()
    }

    fn node(&self, addr: &str) -> Option<&Arc<Shard>> {
        self.shards.iter().find(|s| s.addr() == addr)
    }

    /// Re-send a request a node answered with a cluster redirect or error.
    pub fn forward(&self, redirect: Redirect, caller: Routed, bytes: Bytes, from: &str) {
        if caller.hops >= MAX_HOPS {
            tracing::warn!(node = %from, ?redirect, "redis cluster: too many redirects");
            return caller.reply.send(Err(BackendError::Unavailable));
        }
        let hops = caller.hops + 1;
        let caller = Routed {
            reply: caller.reply,
            hops,
        };
        // A request redirected by `-ASK` before carries its `ASKING`.
        let bytes = if bytes.starts_with(ASKING) {
            bytes.slice(ASKING.len()..)
        } else {
            bytes
        };
        let lane = caller.reply.seq as usize;
        match redirect {
            Redirect::Moved { slot, addr } => {
                self.refresh.notify_one();
                match self.node(&addr) {
                    Some(node) => node.send_routed(lane, bytes, false, caller),
                    None => {
                        tracing::warn!(slot, node = %addr, "redis cluster: MOVED to a node unknown since start (reload to use it)");
                        caller.reply.send(Err(BackendError::Unavailable));
                    }
                }
            }
            Redirect::Ask { addr } => match self.node(&addr) {
                Some(node) => {
                    let mut out = BytesMut::with_capacity(ASKING.len() + bytes.len());
                    out.extend_from_slice(ASKING);
                    out.extend_from_slice(&bytes);
                    node.send_routed(lane, out.freeze(), true, caller);
                }
                None => caller.reply.send(Err(BackendError::Unavailable)),
            },
            Redirect::Retry => {
                self.refresh.notify_one();
                // Waits 10, 20, 40… ms: stop before their sum passes the timeout.
                let wait = RETRY_BASE * (1u32 << (hops - 1));
                let waited = RETRY_BASE * ((1u32 << hops) - 1);
                let node = match self.node(from) {
                    Some(node) if waited <= self.timeout => node.clone(),
                    _ => return caller.reply.send(Err(BackendError::Unavailable)),
                };
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    node.send_routed(lane, bytes, false, caller);
                });
            }
        }
    }
}

/// The slot table of `topo` over `shards` (matched by address).
fn slot_owners(topo: &Topology, shards: &[Arc<Shard>]) -> Box<[u16]> {
    let mut owner = vec![UNOWNED; usize::from(SLOT_COUNT)].into_boxed_slice();
    for (first, last, addr) in &topo.ranges {
        let Some(i) = shards.iter().position(|s| s.addr() == addr) else {
            tracing::warn!(node = %addr, "redis cluster: a master unknown since start serves slots {first}-{last} (reload to use it)");
            continue;
        };
        for slot in *first..=*last {
            if let Some(o) = owner.get_mut(usize::from(slot)) {
                *o = i as u16;
            }
        }
    }
    owner
}

/// Re-read the slot map every `every`, and soon after a redirect asks.
fn spawn_refresh(cluster: Weak<Cluster>, asked: Arc<Notify>, every: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = asked.notified() => {}
            }
            // The generation is gone (reload, shutdown): stop.
            let Some(c) = cluster.upgrade() else { return };
            match read_topology(&c).await {
                Some(topo) => c.owner.store(Arc::new(slot_owners(&topo, &c.shards))),
                None => tracing::warn!("redis cluster: no node gave the slot map"),
            }
            drop(c);
            tokio::time::sleep(REFRESH_GAP).await;
        }
    });
}

/// `CLUSTER SHARDS` (else `CLUSTER SLOTS`) from the first node that answers.
async fn read_topology(c: &Cluster) -> Option<Topology> {
    for node in &c.shards {
        // Over TLS, `CLUSTER SLOTS` only (see `topology::discover`).
        let tls = node.settings().tls.is_some();
        if let Some(t) = ask_unless(tls, node, &[b"CLUSTER", b"SHARDS"])
            .await
            .as_ref()
            .and_then(Topology::from_shards)
        {
            return Some(t);
        }
        if let Some(t) = ask(node, &[b"CLUSTER", b"SLOTS"])
            .await
            .as_ref()
            .and_then(Topology::from_slots)
        {
            return Some(t);
        }
    }
    None
}

async fn ask_unless(skip: bool, node: &Shard, cmd: &[&[u8]]) -> Option<Frame> {
    if skip {
        return None;
    }
    ask(node, cmd).await
}

async fn ask(node: &Shard, cmd: &[&[u8]]) -> Option<Frame> {
    let mut buf = BytesMut::new();
    encode_command(&mut buf, cmd);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let reply = ReplyTo {
        tx,
        seq: 0,
        part: 0,
    };
    node.send(
        0,
        super::BackendRequest {
            cmd: buf.freeze(),
            reply,
        },
    );
    match rx.recv().await?.result {
        Ok(Reply::Redis(frame)) => Some(frame),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_parse() {
        assert_eq!(
            Redirect::parse(b"MOVED 3999 127.0.0.1:6381"),
            Some(Redirect::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381".into()
            })
        );
        assert_eq!(
            Redirect::parse(b"ASK 3999 127.0.0.1:6381"),
            Some(Redirect::Ask {
                addr: "127.0.0.1:6381".into()
            })
        );
        assert_eq!(
            Redirect::parse(b"TRYAGAIN Multiple keys request during rehashing of slot"),
            Some(Redirect::Retry)
        );
        assert_eq!(
            Redirect::parse(b"CLUSTERDOWN The cluster is down"),
            Some(Redirect::Retry)
        );
        assert_eq!(Redirect::parse(b"ERR unknown command"), None);
        assert_eq!(Redirect::parse(b"MOVED x 1:2"), None);
    }
}
