//! Shard health: a PING through each shard's own connection on an interval.
//!
//! `eject_after_failures` consecutive failed pings mark a shard down; one
//! success marks it up again. Under `on_shard_down = "eject"` the routing
//! ring is rebuilt without the down shards (their keys move to the others,
//! like twemproxy's auto_eject_hosts); under `"fail"` routing never changes
//! and a down shard's keys get a fast `SERVER_ERROR` from its connection.

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::BytesMut;
use memshift_protocol::resp::{encode_command, Frame};

use crate::redis::Reply;
use crate::router::{eject, RedisBackends};

/// Runs until the Redis generation it watches is replaced and dropped.
pub async fn monitor(backends: Weak<RedisBackends>, interval: Duration, eject_after: u32) {
    let eject_after = eject_after.max(1);
    let mut failures: Vec<u32> = Vec::new();
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(backends) = backends.upgrade() else {
            return;
        };
        failures.resize(backends.shards.len(), 0);
        let results = ping_all(&backends).await;
        let mut changed = false;
        for (i, &ok) in results.iter().enumerate() {
            let shard = &backends.shards[i];
            if ok {
                failures[i] = 0;
                if !shard.is_healthy() {
                    // Under eject: first remove what would read stale.
                    if backends.ejects() {
                        match eject::prepare_rejoin(&backends, i, &results).await {
                            Ok(c) => tracing::info!(
                                shard = %shard.id,
                                deleted_keys = c.keys,
                                flushed = c.flushed,
                                scanned_copies = c.scanned_copies,
                                "keys diverted while ejected removed before the rejoin"
                            ),
                            Err(e) => {
                                tracing::warn!(shard = %shard.id, error = ?e, "ejected shard stays out: cleaning its diverted keys failed");
                                continue;
                            }
                        }
                    }
                    tracing::info!(shard = %shard.id, "redis shard healthy again");
                    shard.set_healthy(true);
                    changed = true;
                }
            } else {
                failures[i] = failures[i].saturating_add(1);
                if failures[i] >= eject_after && shard.is_healthy() {
                    if backends.ejects() {
                        if let Err(e) = eject::prepare_ejection(&backends, i, &results).await {
                            tracing::warn!(shard = %shard.id, error = ?e, "down shard stays in the ring (its keys fail): deleting the fallbacks' copies of its keys failed; retried at the next check");
                            continue;
                        }
                    }
                    tracing::warn!(shard = %shard.id, failures = failures[i], "redis shard marked down");
                    shard.set_healthy(false);
                    changed = true;
                }
            }
        }
        if changed {
            backends.health_changed();
        }
    }
}

/// PING every shard at once; true where PONG came back in time.
async fn ping_all(backends: &Arc<RedisBackends>) -> Vec<bool> {
    let mut buf = BytesMut::with_capacity(14);
    encode_command(&mut buf, &[b"PING"]);
    let mut replies = backends.broadcast(buf.freeze());
    let mut ok = vec![false; backends.shards.len()];
    let collect = async {
        while let Some(reply) = replies.recv().await {
            if let (Some(slot), Ok(Reply::Redis(Frame::Simple(s)))) =
                (ok.get_mut(reply.part as usize), &reply.result)
            {
                *slot = &s[..] == b"PONG";
            }
        }
    };
    let _ = tokio::time::timeout(backends.request_timeout, collect).await;
    ok
}
