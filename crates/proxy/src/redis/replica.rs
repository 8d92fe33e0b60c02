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

use std::sync::Arc;

use memshift_pipeline::{Pipeline, Request};
use metrics::Counter;

use super::connection::{ConnectionSettings, Expect, RedisCodec, RedisConnector};
use super::primary::Primary;
use super::{BackendRequest, Retry, Routed};
use crate::metrics::ShardMetrics;

/// A shard's replica connection and where it goes.
#[derive(Debug)]
pub struct Replica {
    addr: Arc<Primary>,
    conn: Pipeline<RedisCodec>,
    /// `memshift_replica_reads_total{shard}`.
    reads: Counter,
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
        // Every worker's replica reads of the shard: on a worker, in turn.
        let _on_worker = crate::workers::enter_next_shared();
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

    /// True while reads can go to the replica (its connection is up).
    pub fn is_up(&self) -> bool {
        self.conn.is_up()
    }

    /// Queue a read on the replica; a failure of it goes to `retry`.
    pub(super) fn send(&self, lane: usize, req: BackendRequest, retry: Retry) {
        self.reads.increment(1);
        let caller = Routed {
            reply: req.reply,
            hops: 0,
            lane,
            retry: Some(retry),
        };
        // Refused (queue full, stopped): the codec's `fail` retries it.
        let _ = self.conn.send(Request {
            expect: Expect::of(&req.cmd, false),
            bytes: req.cmd,
            caller,
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chosen_replica_sticks_while_healthy() {
        let healthy = ["127.0.0.1:2".to_string(), "127.0.0.1:4".to_string()];
        assert_eq!(choose("127.0.0.1:4", &healthy), "127.0.0.1:4");
        assert_eq!(choose("127.0.0.1:1", &healthy), "127.0.0.1:2");
        assert_eq!(choose("127.0.0.1:2", &[]), "");
    }
}
