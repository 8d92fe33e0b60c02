//! A client's pipelined requests stay in order across `-MOVED`: with
//! `connections_per_shard = 4`, requests a cluster node redirects go to the
//! new owner on the session's own connection (lane), as the requests sent
//! there directly do. Picking the connection by request number instead
//! spread one client's `set` and the `get` after it over different
//! connections, and the node could run the `get` first.

use std::time::Duration;

use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::{require_tools, Unit};

const TOOLS: &[&str] = &["redis-server", "redis-cli"];
/// Keys of one slot (one hash tag), each set then read `ROUNDS` times in
/// one pipelined write.
const KEYS: usize = 50;
const ROUNDS: usize = 8;
/// Times the slot moves (each move: one pipelined write redirected).
const MOVES: usize = 6;

#[test]
fn cluster_redirects_keep_a_clients_pipelined_order() {
    if !require_tools("cluster_redirects_keep_a_clients_pipelined_order", TOOLS) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    // No periodic refresh within the test: only a -MOVED re-reads the map,
    // so the requests of each pipelined write are redirected.
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
        // Move the slot (its keys first) to another master, behind
        // memshift's back.
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
        c.send(&batch).expect("send the pipeline");
        for r in 0..ROUNDS {
            for i in 0..KEYS {
                let want = format!("{m}-{r}");
                let stored = c.read_reply().expect("set reply");
                assert!(
                    matches!(&stored[..], [Unit::Line(l)] if l == b"STORED\r\n"),
                    "set {} (move {m}, round {r}): {stored:?}",
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
    assert!(
        reordered.is_empty(),
        "{} gets did not see the set pipelined just before them; first: {:?}",
        reordered.len(),
        &reordered[..reordered.len().min(10)]
    );
}

fn key(i: usize) -> String {
    format!("{{ord}}k{i}")
}
