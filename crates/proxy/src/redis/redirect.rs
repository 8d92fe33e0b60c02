//! What a shard connection does with a Redis Cluster's redirects, without
//! knowing the cluster: the codec parses the error reply and hands the
//! request to a [`RedirectHook`] (the cluster implements it), so
//! `connection` sits below `cluster` in the module graph.

use bytes::Bytes;

use super::Routed;

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

/// Where a cluster node's connection sends what is the cluster's business.
pub trait RedirectHook: Send + Sync + std::fmt::Debug + 'static {
    /// Re-send (or fail) a request the node at `from` answered with `redirect`.
    fn forward(&self, redirect: Redirect, caller: Routed, bytes: Bytes, from: &str);

    /// A node's connection was lost or refused: it may have failed over.
    fn node_down(&self);
}

/// A shard connection's hook: `None` on the ring (no redirects).
pub type Hook = Option<std::sync::Weak<dyn RedirectHook>>;
