//! Redis Cluster mode: the node table and slot → master map, their refresh
//! (periodic, on `-MOVED`, and when a node's connection fails), and
//! redirects: a request a node answers with `-MOVED`/`-ASK`/`-TRYAGAIN`/
//! `-CLUSTERDOWN` is re-sent from the connection that got that answer, so
//! the session only ever sees the final reply (or a failure, rendered as
//! memcached's `SERVER_ERROR`).
//!
//! The node table follows the cluster with no reload: a refresh connects to
//! nodes it has not seen (masters added, replicas at new addresses) and
//! retires the nodes the cluster no longer lists. A multi-key `MGET` the
//! cluster refuses with `-TRYAGAIN` (its slot is migrating and its keys are
//! split between the two nodes, or missing) is answered by one `GET` per
//! key instead, each following its own `-ASK`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::{encode_command, Frame};
use memshift_ring::{key_slot, SLOT_COUNT};
use tokio::sync::{mpsc, Notify};

use super::connection::ConnectionSettings;
pub use super::redirect::Redirect;
use super::redirect::RedirectHook;
use super::route_pin;
use super::shard::Shard;
use super::topology::{self, Topology};
use super::{BackendError, BackendRequest, Reply, ReplyTo, Routed};
use crate::config::Config;
use crate::metrics::{Metrics, ShardRegistry};
use crate::tls::RedisTls;

/// Redirects and retries one request may take before it fails (retries
/// stop earlier, when their waits would pass `redis.timeout_ms`).
const MAX_HOPS: u8 = 16;
/// First wait before retrying a `TRYAGAIN`/`CLUSTERDOWN`; doubles each time
/// up to `RETRY_MAX`.
const RETRY_BASE: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_millis(100);
/// Refreshes asked for by redirects come at most this often.
const REFRESH_GAP: Duration = Duration::from_millis(50);
/// `ASKING` as sent before a request redirected by `-ASK`.
pub(super) const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";
/// A slot no known master serves.
const UNOWNED: u16 = u16::MAX;

/// One cluster: the nodes it has had and which of them serves each slot.
#[derive(Debug)]
pub struct Cluster {
    /// The nodes known at start: the generation's `shards` (indexes 0..n
    /// of the live node table too).
    pub shards: Vec<Arc<Shard>>,
    map: ArcSwap<SlotMap>,
    /// The maps before `map`, newest last (at most `route_pin::KEPT_MAPS`),
    /// for sessions pinned to one (`route_pin`). Read only while a pinned
    /// session routes after a change.
    kept: Mutex<VecDeque<Arc<SlotMap>>>,
    refresh: Arc<Notify>,
    /// `redis.timeout_ms`: retries of `TRYAGAIN`/`CLUSTERDOWN` fit in it.
    timeout: Duration,
    nodes: NodeStarter,
    me: Weak<Cluster>,
}

/// The live node table and slot owners, swapped whole by the refresh task
/// (its only writer), so an index and the owners always agree.
#[derive(Debug)]
struct SlotMap {
    /// Append-only: an index located earlier names the same node for the
    /// cluster's lifetime; `None` once that node left the cluster.
    nodes: Vec<Option<Arc<Shard>>>,
    /// `owner[slot]`: index into `nodes`, or `UNOWNED`.
    owner: Box<[u16]>,
    /// Changes with `owner` (`route_pin`).
    epoch: u64,
}

impl SlotMap {
    fn owner_of(&self, key: &[u8]) -> usize {
        match self.owner.get(usize::from(key_slot(key))) {
            Some(&o) if o != UNOWNED => usize::from(o),
            _ => usize::MAX,
        }
    }
}

/// What starting a node's connections needs, kept for nodes found later.
struct NodeStarter {
    /// Every node's settings but `addr` and `tls`.
    settings: ConnectionSettings,
    /// `redis.tls*`, made per node (the name its certificate must carry).
    tls: Option<RedisTls>,
    connections: usize,
    queue_depth: usize,
    metrics: ShardRegistry,
}

impl std::fmt::Debug for NodeStarter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeStarter")
            .field("settings", &self.settings)
            .field("tls", &self.tls.is_some())
            .field("connections", &self.connections)
            .finish_non_exhaustive()
    }
}

impl NodeStarter {
    fn settings(&self, addr: &str) -> ConnectionSettings {
        ConnectionSettings {
            addr: addr.to_string(),
            tls: self.tls.as_ref().map(|t| t.for_shard(addr)),
            ..self.settings.clone()
        }
    }

    fn start(&self, addr: &str, cluster: &Weak<Cluster>) -> Arc<Shard> {
        let settings = self.settings(addr);
        Arc::new(Shard::start(
            addr.to_string(),
            settings,
            self.connections,
            self.queue_depth,
            self.metrics.shard(memshift_shadow::Backend::Redis, addr),
            Some(cluster.clone() as Weak<dyn RedirectHook>),
        ))
    }
}

impl Cluster {
    /// Read the topology from the seeds (blocking, bounded by the connect
    /// timeout), connect to every node, and start the refresh task.
    pub fn start(config: &Config, metrics: &Metrics) -> Result<Arc<Cluster>, String> {
        let redis = &config.redis;
        let seed = redis
            .cluster_nodes
            .first()
            .map(String::as_str)
            .unwrap_or("");
        let starter = NodeStarter {
            settings: ConnectionSettings {
                addr: seed.to_string(),
                username: redis.username.clone(),
                password: redis.password.clone(),
                timeout: Duration::from_millis(redis.timeout_ms),
                connect_timeout: Duration::from_millis(redis.connect_timeout_ms),
                tls: None,
                primary: None,
            },
            tls: crate::tls::RedisTls::from_config(redis).map_err(|e| e.to_string())?,
            connections: redis.connections_per_shard,
            queue_depth: redis.max_inflight_per_connection,
            metrics: metrics.shard_registry(),
        };
        let topo = topology::discover(&redis.cluster_nodes, &starter.settings(seed))?;
        tracing::info!(
            nodes = topo.nodes.len(),
            ranges = topo.ranges.len(),
            "redis cluster topology read"
        );
        let cluster = Arc::new_cyclic(|weak: &Weak<Cluster>| {
            let shards: Vec<Arc<Shard>> = topo
                .nodes
                .iter()
                .map(|addr| starter.start(addr, weak))
                .collect();
            let nodes: Vec<Option<Arc<Shard>>> = shards.iter().cloned().map(Some).collect();
            let owner = slot_owners(&topo, &nodes);
            Cluster {
                shards,
                map: ArcSwap::from_pointee(SlotMap {
                    nodes,
                    owner,
                    epoch: route_pin::next_epoch(),
                }),
                kept: Mutex::new(VecDeque::new()),
                refresh: Arc::new(Notify::new()),
                timeout: Duration::from_millis(redis.timeout_ms),
                nodes: starter,
                me: weak.clone(),
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
    ///
    /// By the map this thread's session is pinned to, while it is kept
    /// (`route_pin`); the epoch used is recorded for the session.
    #[inline]
    pub fn locate(&self, key: &[u8]) -> usize {
        let map = self.map.load();
        let pin = route_pin::pinned();
        if pin == 0 || pin == map.epoch {
            route_pin::routed_by(map.epoch, false);
            return map.owner_of(key);
        }
        // A newer map exists: the session drains before its next request.
        match self.kept_map(pin) {
            Some(old) => {
                route_pin::routed_by(pin, true);
                old.owner_of(key)
            }
            // Not kept (or another cluster's): the current map.
            None => {
                route_pin::routed_by(map.epoch, true);
                map.owner_of(key)
            }
        }
    }

    /// A kept map by its epoch.
    fn kept_map(&self, epoch: u64) -> Option<Arc<SlotMap>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter().rev().find(|m| m.epoch == epoch).cloned()
    }

    /// Queue a request on node `node` (an index `locate` gave).
    #[inline]
    pub fn send(&self, node: usize, lane: usize, req: BackendRequest) {
        match self.map.load().nodes.get(node) {
            Some(Some(shard)) => shard.send(lane, req),
            _ => req.reply.send(Err(BackendError::Unavailable)),
        }
    }

    /// Node `node` (an index `locate` gave), if it is still in the cluster.
    pub fn node_at(&self, node: usize) -> Option<Arc<Shard>> {
        self.map.load().nodes.get(node).cloned().flatten()
    }

    /// The nodes serving at least one slot (for `flush_all`).
    pub fn masters(&self) -> Vec<usize> {
        let map = self.map.load();
        let mut serving = vec![false; map.nodes.len()];
        for &o in map.owner.iter() {
            if let Some(s) = serving.get_mut(usize::from(o)) {
                *s = true;
            }
        }
        (0..serving.len()).filter(|&i| serving[i]).collect()
    }

    /// A connection to a cluster node was lost or refused: the node may
    /// have failed over, so read the map again soon.
    pub fn node_down(&self) {
        self.refresh.notify_one();
    }

    fn node(&self, addr: &str) -> Option<Arc<Shard>> {
        self.map
            .load()
            .nodes
            .iter()
            .flatten()
            .find(|s| s.addr() == addr)
            .cloned()
    }

    fn node_for(&self, key: &[u8]) -> Option<Arc<Shard>> {
        let map = self.map.load();
        let owner = *map.owner.get(usize::from(key_slot(key)))?;
        map.nodes.get(usize::from(owner))?.clone()
    }

    /// Re-send a request a node answered with a cluster redirect or error.
    pub fn forward(&self, redirect: Redirect, caller: Routed, bytes: Bytes, from: &str) {
        if caller.hops >= MAX_HOPS {
            tracing::warn!(node = %from, ?redirect, "redis cluster: too many redirects");
            return caller.reply.send(Err(BackendError::Unavailable));
        }
        let hops = caller.hops + 1;
        let caller = Routed { hops, ..caller };
        // A request redirected by `-ASK` before carries its `ASKING`.
        let bytes = if bytes.starts_with(ASKING) {
            bytes.slice(ASKING.len()..)
        } else {
            bytes
        };
        let lane = caller.lane;
        match redirect {
            Redirect::Moved { slot, addr } => {
                self.refresh.notify_one();
                match self.node(&addr) {
                    Some(node) => node.send_routed(lane, bytes, false, caller),
                    // A node the map does not have yet (added, promoted at
                    // a new address): the refresh connects to it; re-send
                    // once it is known, within the timeout.
                    None => {
                        tracing::debug!(slot, node = %addr, "redis cluster: MOVED to a node not in the map yet");
                        self.later(hops, Redirect::Moved { slot, addr }, caller, bytes, from);
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
                None => {
                    self.refresh.notify_one();
                    self.later(hops, Redirect::Ask { addr }, caller, bytes, from);
                }
            },
            Redirect::Retry => {
                // A multi-key MGET refused while its slot migrates (some of
                // its keys moved already, or none exist on the importing
                // node) keeps being refused until the slot has moved: read
                // the keys one by one instead, each following its own ASK.
                if let Some(keys) = mget_keys(&bytes) {
                    return self.get_each(keys, caller, lane);
                }
                self.refresh.notify_one();
                self.later(hops, Redirect::Retry, caller, bytes, from);
            }
        }
    }

    /// After a short backoff, re-send the request: to `from` on `Retry`,
    /// else by `redirect` again. Fails it once the waits would pass the
    /// timeout.
    fn later(&self, hops: u8, redirect: Redirect, caller: Routed, bytes: Bytes, from: &str) {
        let wait = retry_wait(hops);
        if retry_waited(hops) > self.timeout {
            return caller.reply.send(Err(BackendError::Unavailable));
        }
        let (cluster, from) = (self.me.clone(), from.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(cluster) = cluster.upgrade() else {
                return caller.reply.send(Err(BackendError::Unavailable));
            };
            match redirect {
                Redirect::Retry => match cluster.node(&from) {
                    Some(node) => node.send_routed(caller.lane, bytes, false, caller),
                    None => caller.reply.send(Err(BackendError::Unavailable)),
                },
                // Another hop: `forward` counts it and re-checks the map.
                redirect => {
                    cluster.forward(redirect, caller, bytes, &from);
                }
            }
        });
    }

    /// Answer an `MGET` by one `GET` per key (each routed and redirected on
    /// its own), assembled into the `MGET` reply.
    fn get_each(&self, keys: Vec<Bytes>, caller: Routed, lane: usize) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let count = keys.len();
        for (i, key) in keys.iter().enumerate() {
            let mut cmd = BytesMut::with_capacity(key.len() + 24);
            encode_command(&mut cmd, &[b"GET", key]);
            let one = Routed {
                reply: ReplyTo {
                    tx: tx.clone().into(),
                    seq: caller.reply.seq,
                    part: i as u32,
                },
                hops: caller.hops,
                lane,
                retry: None,
            };
            match self.node_for(key) {
                Some(node) => node.send_routed(lane, cmd.freeze(), false, one),
                None => one.reply.send(Err(BackendError::Unavailable)),
            }
        }
        drop(tx);
        // Each GET is answered by its connection (reply, timeout, failure);
        // the bound is a backstop.
        let bound = self.timeout * 4;
        tokio::spawn(async move {
            let collect = async {
                let mut values = vec![Frame::Null; count];
                for _ in 0..count {
                    let Some(reply) = rx.recv().await else {
                        return Err(BackendError::ConnectionLost);
                    };
                    let value = match reply.result? {
                        Reply::Redis(f @ (Frame::Bulk(_) | Frame::Null)) => f,
                        // An error (or anything else): the whole MGET's.
                        Reply::Redis(other) => return Ok(other),
                        Reply::Memcached(_) => return Err(BackendError::ConnectionLost),
                    };
                    if let Some(v) = values.get_mut(reply.part as usize) {
                        *v = value;
                    }
                }
                Ok(Frame::Array(values))
            };
            let result = tokio::time::timeout(bound, collect)
                .await
                .unwrap_or(Err(BackendError::Timeout));
            caller.reply.send(result);
        });
    }
}

/// Waits before retries: 10, 20, 40, 80, then 100 ms each.
fn retry_wait(hops: u8) -> Duration {
    (RETRY_BASE * (1u32 << hops.saturating_sub(1).min(4))).min(RETRY_MAX)
}

/// The most `hops` retries can have waited in all.
fn retry_waited(hops: u8) -> Duration {
    (1..=hops).map(retry_wait).sum()
}

/// The keys of an encoded `MGET` (as the translation writes it), or `None`
/// for any other command.
fn mget_keys(cmd: &[u8]) -> Option<Vec<Bytes>> {
    let mut parser = memshift_protocol::resp::ReplyParser::new();
    let mut buf = BytesMut::from(cmd);
    let Ok(Some(Frame::Array(args))) = parser.parse(&mut buf) else {
        return None;
    };
    let mut args = args.into_iter();
    match args.next() {
        Some(Frame::Bulk(name)) if name.eq_ignore_ascii_case(b"MGET") => {}
        _ => return None,
    }
    args.map(|a| match a {
        Frame::Bulk(key) => Some(key),
        _ => None,
    })
    .collect::<Option<Vec<Bytes>>>()
    .filter(|keys| !keys.is_empty())
}

/// The slot table of `topo` over `nodes` (matched by address).
fn slot_owners(topo: &Topology, nodes: &[Option<Arc<Shard>>]) -> Box<[u16]> {
    let mut owner = vec![UNOWNED; usize::from(SLOT_COUNT)].into_boxed_slice();
    for (first, last, addr) in &topo.ranges {
        let Some(i) = nodes
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.addr() == addr))
        else {
            tracing::warn!(node = %addr, "redis cluster: a master not in the node table serves slots {first}-{last}");
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

impl Cluster {
    /// Take a freshly read topology: connect to nodes not seen before,
    /// retire the nodes it no longer lists, and point the slots at their
    /// masters. Only the refresh task calls this.
    fn apply(&self, topo: &Topology) {
        let old = self.map.load_full();
        let mut nodes = old.nodes.clone();
        for addr in &topo.nodes {
            if !nodes.iter().flatten().any(|s| s.addr() == addr) {
                tracing::info!(node = %addr, "redis cluster: new node, connecting");
                nodes.push(Some(self.nodes.start(addr, &self.me)));
            }
        }
        for entry in nodes.iter_mut() {
            if let Some(s) = entry {
                if !topo.nodes.iter().any(|a| a == s.addr()) {
                    tracing::info!(node = %s.addr(), "redis cluster: node left the cluster, retired");
                    *entry = None;
                }
            }
        }
        let owner = slot_owners(topo, &nodes);
        let epoch = if owner == old.owner {
            old.epoch
        } else {
            // Kept before the new map is visible: a session pinned to the
            // old one finds it from the moment it can tell the maps apart.
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.push_back(old);
            while kept.len() > route_pin::KEPT_MAPS {
                kept.pop_front();
            }
            route_pin::next_epoch()
        };
        self.map.store(Arc::new(SlotMap {
            nodes,
            owner,
            epoch,
        }));
    }
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
                Some(topo) => c.apply(&topo),
                None => tracing::warn!("redis cluster: no node gave the slot map"),
            }
            drop(c);
            tokio::time::sleep(REFRESH_GAP).await;
        }
    });
}

/// `CLUSTER SHARDS` (else `CLUSTER SLOTS`) from the first node that
/// answers, nodes known longest first (a node just added may not know
/// every other node yet).
async fn read_topology(c: &Cluster) -> Option<Topology> {
    let nodes: Vec<Arc<Shard>> = c.map.load().nodes.iter().flatten().cloned().collect();
    for node in &nodes {
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
        tx: tx.into(),
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

impl RedirectHook for Cluster {
    fn forward(&self, redirect: Redirect, caller: Routed, bytes: Bytes, from: &str) {
        Cluster::forward(self, redirect, caller, bytes, from);
    }

    fn node_down(&self) {
        Cluster::node_down(self);
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

    #[test]
    fn mget_keys_only_of_an_mget() {
        let mut buf = BytesMut::new();
        encode_command(&mut buf, &[b"MGET", b"a", b"{t}b"]);
        assert_eq!(
            mget_keys(&buf),
            Some(vec![Bytes::from_static(b"a"), Bytes::from_static(b"{t}b")])
        );
        let mut buf = BytesMut::new();
        encode_command(&mut buf, &[b"GET", b"a"]);
        assert_eq!(mget_keys(&buf), None);
        assert_eq!(mget_keys(b"*1\r\n$4\r\nMGET\r\n"), None);
        assert_eq!(mget_keys(b"*2\r\n$4\r\nMGET\r\n$9\r\nshort"), None);
        assert_eq!(mget_keys(b"garbage"), None);
    }

    #[test]
    fn retries_fit_the_timeout() {
        assert_eq!(retry_wait(1), Duration::from_millis(10));
        assert_eq!(retry_wait(4), Duration::from_millis(80));
        assert_eq!(retry_wait(9), RETRY_MAX);
        // With a 1 s timeout, retries stop well before the hop limit.
        let last = (1..=MAX_HOPS)
            .take_while(|&h| retry_waited(h) <= Duration::from_secs(1))
            .last();
        assert_eq!(last, Some(12));
    }
}
