//! A client's pipelined requests stay in order across cluster redirects:
//! with `connections_per_shard = 4`, a request a node redirects goes to
//! its new node on the session's own connection (lane), as the requests
//! sent there directly do. Picking the connection by request number
//! instead spread one client's `set` and the `get` after it over different
//! connections, and the node could run the `get` first.
//!
//! The slot is left mid-migration (`MIGRATING` / `IMPORTING`): every
//! request is redirected with `-ASK`, which does not change memshift's slot
//! map, so no request of the pipeline goes to the new node directly.

use std::time::Duration;

use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::{require_tools, McClient, Unit};

const TOOLS: &[&str] = &["redis-server", "redis-cli"];
/// Keys of one slot (one hash tag), each set then read `ROUNDS` times in
/// one pipelined write.
const KEYS: usize = 50;
const ROUNDS: usize = 8;
/// Pipelined writes, each of `KEYS * ROUNDS` set/get pairs.
const PIPELINES: usize = 6;
/// Slot moves in the `-MOVED` test (each: one pipelined write).
const MOVES: usize = 20;

#[test]
fn cluster_redirects_keep_a_clients_pipelined_order() {
    if !require_tools("cluster_redirects_keep_a_clients_pipelined_order", TOOLS) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    // No periodic refresh within the test (nothing would change anyway).
    let (memshift, _) = nodes.memshift_with(
        "",
        "timeout_ms = 5000\ncluster_refresh_ms = 600000\nconnections_per_shard = 4\n",
    );
    let slot = nodes.keyslot("{ord}");
    let slot_arg = slot.to_string();
    let from = nodes.master_of(slot);
    let to = nodes
        .masters()
        .into_iter()
        .find(|&i| i != from)
        .expect("another master");
    let (from_id, to_id) = (nodes.node_id(from), nodes.node_id(to));
    let setslot = |node: usize, state: &[u8], id: &[u8]| {
        nodes.cmd(
            node,
            &[b"CLUSTER", b"SETSLOT", slot_arg.as_bytes(), state, id],
        );
    };
    setslot(to, b"IMPORTING", &from_id);
    setslot(from, b"MIGRATING", &to_id);
    let mut c = memshift.client();
    c.set_read_timeout(Duration::from_secs(30))
        .expect("timeout");
    let mut reordered = Vec::new();
    for m in 0..PIPELINES {
        c.send(&pipeline(m)).expect("send the pipeline");
        check_pipeline(&mut c, m, &mut reordered);
    }
    // The keys went where the redirects said: the importing node.
    let count = |node: usize| {
        let cmd: [&[u8]; 3] = [b"CLUSTER", b"COUNTKEYSINSLOT", slot_arg.as_bytes()];
        nodes.cmd(node, &cmd).as_int()
    };
    assert_eq!(count(to), Some(KEYS as i64), "keys on the importing node");
    assert_eq!(count(from), Some(0), "keys on the migrating node");
    assert!(
        reordered.is_empty(),
        "{} gets did not see the set pipelined just before them; first: {:?}",
        reordered.len(),
        &reordered[..reordered.len().min(10)]
    );
}

/// A client's pipelined order across `-MOVED`: the slot moves (its keys
/// first) to another master behind memshift's back, then one pipelined
/// write of set/get pairs. The first replies redirect and make memshift
/// re-read the slot map while the rest of the pipeline is being
/// dispatched: requests routed by the new map go to the new node directly
/// and must not get there before the earlier ones still being redirected.
///
/// Known gap (docs/cluster.md): this fails in about one run of five
/// (`{ord}k19: want 0-0, got (miss)`: the `set` routed by the old map, the
/// `get` 10 µs later by the new one, sent directly). A session barrier on a
/// map-change counter (dispatch nothing new while requests routed before
/// the change wait) did not close it: the map swap and the routing run on
/// different threads, so the counter and the map a request was routed by
/// can disagree. Closing it needs the map a session's waiting requests
/// were routed by pinned for its next ones (they go to the old node and
/// follow the same `-MOVED`, in order) until they are answered.
#[test]
#[ignore = "known ordering gap across a slot-map refresh: docs/cluster.md"]
fn cluster_moved_mid_pipeline_keeps_a_clients_order() {
    if !require_tools("cluster_moved_mid_pipeline_keeps_a_clients_order", TOOLS) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    // No periodic refresh within the test: only a -MOVED re-reads the map.
    let (memshift, _) = nodes.memshift_with(
        "",
        "timeout_ms = 5000\ncluster_refresh_ms = 600000\nconnections_per_shard = 4\n",
    );
    let slot = nodes.keyslot("{ord}");
    let slot_arg = slot.to_string();
    let mut c = memshift.client();
    c.set_read_timeout(Duration::from_secs(30))
        .expect("timeout");
    let mut reordered = Vec::new();
    for m in 0..MOVES {
        let from = nodes.master_of(slot);
        let to = nodes
            .masters()
            .into_iter()
            .find(|&i| i != from)
            .expect("another master");
        for i in 0..KEYS {
            nodes.cmd(from, &[b"DEL", key(i).as_bytes()]);
        }
        let to_id = nodes.node_id(to);
        for i in 0..6 {
            nodes.cmd(
                i,
                &[b"CLUSTER", b"SETSLOT", slot_arg.as_bytes(), b"NODE", &to_id],
            );
        }
        nodes.wait_ok();
        c.send(&pipeline(m)).expect("send the pipeline");
        check_pipeline(&mut c, m, &mut reordered);
    }
    assert!(
        reordered.is_empty(),
        "{} gets did not see the set pipelined just before them; first: {:?}",
        reordered.len(),
        &reordered[..reordered.len().min(10)]
    );
}

/// `ROUNDS` times: a set of every key, each followed by its get.
fn pipeline(m: usize) -> Vec<u8> {
    let mut batch = Vec::new();
    for r in 0..ROUNDS {
        for i in 0..KEYS {
            let v = format!("{m}-{r}");
            batch.extend_from_slice(
                format!(
                    "set {} 0 0 {}\r\n{v}\r\nget {}\r\n",
                    key(i),
                    v.len(),
                    key(i)
                )
                .as_bytes(),
            );
        }
    }
    batch
}

/// Reads `pipeline(m)`'s replies; a get that did not see its set goes to
/// `reordered`.
fn check_pipeline(c: &mut McClient, m: usize, reordered: &mut Vec<String>) {
    for r in 0..ROUNDS {
        for i in 0..KEYS {
            let want = format!("{m}-{r}");
            let stored = c.read_reply().expect("set reply");
            assert!(
                matches!(&stored[..], [Unit::Line(l)] if l == b"STORED\r\n"),
                "set {} (pipeline {m}, round {r}): {stored:?}",
                key(i)
            );
            let got = c.read_reply().expect("get reply");
            let value = match &got[..] {
                [Unit::Value { block, .. }, Unit::Line(end)] if end == b"END\r\n" => {
                    String::from_utf8_lossy(&block[..block.len() - 2]).into_owned()
                }
                [Unit::Line(end)] if end == b"END\r\n" => "(miss)".to_string(),
                other => panic!("get {}: {other:?}", key(i)),
            };
            if value != want {
                reordered.push(format!("{}: want {want}, got {value}", key(i)));
            }
        }
    }
}

fn key(i: usize) -> String {
    format!("{{ord}}k{i}")
}
