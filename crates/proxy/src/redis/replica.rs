//! `redis.read_from = "replica_preferred"`: a Sentinel shard's replica
//! connection, which carries only reads.
//!
//! * One pipelined connection per shard, to one healthy replica that
//!   Sentinel lists (`SENTINEL REPLICAS`, asked with every periodic re-ask
//!   in `super::sentinel`; [`choose`] keeps the current one while it stays
//!   healthy). A new choice closes the connection to the old one, as a
//!   primary switch does (the address is a [`Primary`] of its own).
//! * No `ROLE` check: whatever the address answers, only reads go there.
//! * A read goes to the replica while its connection is up, else to the
//!   primary; a read the replica fails (connection lost, timeout, error
//!   reply such as `-LOADING`) is sent once more to the primary: reads
//!   change nothing, so sending one twice is safe.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use memshift_pipeline::{Pipeline, Request};
use memshift_protocol::resp::Frame;
use metrics::Counter;

use super::connection::{ConnectionSettings, RedisCodec, RedisConnector};
use super::primary::Primary;
use super::shard::Shard;
use super::{BackendError, BackendRequest, Routed};
use crate::metrics::ShardMetrics;

/// A shard's replica connection and where it goes.
#[derive(Debug)]
pub struct Replica {
    addr: Arc<Primary>,
    conn: Pipeline<RedisCodec>,
    /// `memshift_replica_reads_total{shard}`.
    reads: Counter,
}

/// Where a read the replica failed goes once more: the shard's primary.
#[derive(Debug)]
pub struct Retry {
    shard: Weak<Shard>,
    cmd: Bytes,
}

impl Retry {
    /// Send the read again on the primary, on the caller's lane.
    pub(super) fn send(self, caller: Routed) {
        match self.shard.upgrade() {
            Some(shard) => shard.send_routed(caller.lane, self.cmd, false, caller),
            None => caller.reply.send(Err(BackendError::Unavailable)),
        }
    }
}

impl Replica {
    /// Start the connection task of shard `master`'s replica (no address
    /// yet: connects fail, and reads use the primary, until Sentinel names
    /// a healthy replica).
    pub fn start(
        master: &str,
        template: &ConnectionSettings,
        queue_depth: usize,
        metrics: ShardMetrics,
        reads: Counter,
    ) -> Replica {
        let addr = Arc::new(Primary::new(&format!("{master}/replica"), ""));
        let settings = ConnectionSettings {
            primary: Some(addr.clone()),
            ..template.clone()
        };
        let engine = settings.engine();
        let connector = RedisConnector {
            settings,
            metrics,
            cluster: None,
            last_target: Default::default(),
            replica: true,
        };
        Replica {
            addr,
            conn: Pipeline::start(connector, engine, queue_depth),
            reads,
        }
    }

    /// The replica reads go to now ("" while none is healthy).
    pub fn current(&self) -> Arc<str> {
        self.addr.current()
    }

    /// Sentinel's replicas of the shard: keep the current one if it is
    /// still healthy, else take the first healthy one (or none).
    pub fn follow(&self, healthy: &[String]) -> Option<Arc<str>> {
        self.addr.set(&choose(&self.current(), healthy))
    }

    /// Queue a read on the replica if its connection is up; `Err` gives
    /// the request back (send it to the primary).
    pub(super) fn send(
        &self,
        shard: Weak<Shard>,
        lane: usize,
        req: BackendRequest,
    ) -> Result<(), BackendRequest> {
        if !self.conn.is_up() {
            return Err(req);
        }
        self.reads.increment(1);
        let caller = Routed {
            reply: req.reply,
            hops: 0,
            lane,
            retry: Some(Box::new(Retry {
                shard,
                cmd: req.cmd.clone(),
            })),
        };
        // Refused (queue full, stopped): the codec's `fail` retries it.
        let _ = self.conn.send(Request {
            bytes: req.cmd,
            expect: false,
            caller,
        });
        Ok(())
    }
}

/// The replica to read from: `current` while it is in `healthy`, else the
/// first healthy one, else none ("").
fn choose(current: &str, healthy: &[String]) -> String {
    if !current.is_empty() && healthy.iter().any(|h| h == current) {
        return current.to_string();
    }
    healthy.first().cloned().unwrap_or_default()
}

/// `SENTINEL REPLICAS`' reply (one flat field/value array per replica):
/// the `host:port` of each one whose `flags` say neither down nor
/// disconnected.
pub fn healthy_replicas(frame: &Frame) -> Vec<String> {
    let Frame::Array(replicas) = frame else {
        return Vec::new();
    };
    replicas
        .iter()
        .filter_map(|r| {
            let Frame::Array(items) = r else {
                return None;
            };
            let field = |name: &[u8]| {
                items.chunks(2).find_map(|kv| match kv {
                    [Frame::Bulk(k), Frame::Bulk(v)] if &k[..] == name => Some(v.clone()),
                    _ => None,
                })
            };
            let flags = field(b"flags")?;
            let down = flags
                .split(|&b| b == b',')
                .any(|f| matches!(f, b"s_down" | b"o_down" | b"disconnected"));
            if down {
                return None;
            }
            super::sentinel::join_addr(&field(b"ip")?, &field(b"port")?).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_replicas_skip_down_ones_and_the_choice_sticks() {
        let bulk = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
        let replica = |port: &str, flags: &str| {
            Frame::Array(vec![
                bulk("ip"),
                bulk("127.0.0.1"),
                bulk("port"),
                bulk(port),
                bulk("flags"),
                bulk(flags),
            ])
        };
        let reply = Frame::Array(vec![
            replica("1", "slave,s_down"),
            replica("2", "slave"),
            replica("3", "slave,disconnected"),
            replica("4", "slave"),
        ]);
        let healthy = healthy_replicas(&reply);
        assert_eq!(healthy, ["127.0.0.1:2", "127.0.0.1:4"]);
        assert_eq!(choose("127.0.0.1:4", &healthy), "127.0.0.1:4");
        assert_eq!(choose("127.0.0.1:1", &healthy), "127.0.0.1:2");
        assert_eq!(choose("127.0.0.1:2", &[]), "");
        assert!(healthy_replicas(&Frame::Null).is_empty());
    }
}
