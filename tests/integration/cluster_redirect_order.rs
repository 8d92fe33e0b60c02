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

use memshift_tests::ops_support::{mc_stats, redis_command_calls, wait_until};
use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::resp_proxy::wait_for_resp_listener;
use memshift_tests::{free_port, require_tools, McClient, Memshift, RedisClient, Resp, Unit};

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
    let Some((nodes, memshift)) = start("cluster_redirects_keep_a_clients_pipelined_order", "")
    else {
        return;
    };
    let slot = nodes.keyslot("{ord}");
    let slot_arg = slot.to_string();
    let (from, to) = start_migration(&nodes, slot);
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
    assert_in_order(&reordered);
}

/// A client's pipelined order across `-MOVED`: the slot moves (its keys
/// first) to another master behind memshift's back, then one pipelined
/// write of set/get pairs. The first replies redirect and make memshift
/// re-read the slot map while the rest of the pipeline is being
/// dispatched: a request routed by the new map would go to the new node
/// directly and could get there before the earlier ones still being
/// redirected (one run in five did, `{ord}k19: want 0-0, got (miss)`,
/// before `redis::route_pin`: the session routes by the map its waiting
/// requests were routed by).
#[test]
fn cluster_moved_mid_pipeline_keeps_a_clients_order() {
    let Some((nodes, memshift)) = start("cluster_moved_mid_pipeline_keeps_a_clients_order", "")
    else {
        return;
    };
    let slot = nodes.keyslot("{ord}");
    let mut c = memshift.client();
    c.set_read_timeout(Duration::from_secs(30))
        .expect("timeout");
    let mut reordered = Vec::new();
    for m in 0..MOVES {
        move_slot(&nodes, slot);
        c.send(&pipeline(m)).expect("send the pipeline");
        check_pipeline(&mut c, m, &mut reordered);
    }
    assert_in_order(&reordered);
}

/// The same over the RESP port: pipelined `SET`/`GET` pairs across slot
/// moves behind memshift's back.
#[test]
fn cluster_moved_mid_pipeline_keeps_a_resp_clients_order() {
    let resp_port = free_port();
    let Some((nodes, memshift)) = start(
        "cluster_moved_mid_pipeline_keeps_a_resp_clients_order",
        &format!("resp_listen = \"127.0.0.1:{resp_port}\""),
    ) else {
        return;
    };
    wait_for_resp_listener(&memshift, resp_port);
    let slot = nodes.keyslot("{ord}");
    let mut c = RedisClient::connect(&format!("127.0.0.1:{resp_port}"), Duration::from_secs(30))
        .expect("connect to the RESP port");
    let mut reordered = Vec::new();
    for m in 0..MOVES {
        move_slot(&nodes, slot);
        let keys: Vec<String> = (0..KEYS).map(key).collect();
        let values: Vec<String> = (0..ROUNDS).map(|r| format!("{m}-{r}")).collect();
        let mut cmds: Vec<[&[u8]; 3]> = Vec::new();
        let mut gets: Vec<[&[u8]; 2]> = Vec::new();
        for v in &values {
            for k in &keys {
                cmds.push([b"SET", k.as_bytes(), v.as_bytes()]);
                gets.push([b"GET", k.as_bytes()]);
            }
        }
        let mut pipeline: Vec<&[&[u8]]> = Vec::new();
        for (set, get) in cmds.iter().zip(&gets) {
            pipeline.push(set);
            pipeline.push(get);
        }
        let replies = c.pipeline(&pipeline).expect("pipeline");
        for (pair, (set, get)) in replies.chunks(2).zip(cmds.iter().zip(&gets)) {
            if pair[0] != Resp::Simple("OK".into()) {
                eprintln!("DEBUGLOG {}", memshift.stderr());
            }
            assert_eq!(pair[0], Resp::Simple("OK".into()), "{set:?}");
            if pair[1] != Resp::Bulk(Some(set[2].to_vec())) {
                reordered.push(format!(
                    "{}: want {}, got {:?}",
                    String::from_utf8_lossy(get[1]),
                    String::from_utf8_lossy(set[2]),
                    pair[1]
                ));
            }
        }
    }
    assert_in_order(&reordered);
}

/// A near-cache fill (`MULTI`, `GET`, `PTTL`, `EXEC`) redirected, on the
/// memcached port and the RESP port: with the slot mid-migration, the
/// migrating node refuses the queued GET with `-ASK` (then `-EXECABORT`);
/// memshift sends the transaction again after `ASKING` to the importing
/// node, which runs it. Then the slot moves behind memshift's back:
/// `-MOVED`, followed. Each time the read answers the value, and the cache
/// fills (later reads are hits).
#[test]
fn cluster_near_cache_fills_follow_ask_and_moved() {
    let resp_port = free_port();
    let Some((nodes, memshift)) = start(
        "cluster_near_cache_fills_follow_ask_and_moved",
        &format!(
            "resp_listen = \"127.0.0.1:{resp_port}\"\n\
             [near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 1\n"
        ),
    ) else {
        return;
    };
    wait_for_resp_listener(&memshift, resp_port);
    let slot = nodes.keyslot("{nc}");
    let mut c = memshift.client();
    c.set_read_timeout(Duration::from_secs(30))
        .expect("timeout");
    let mut r = RedisClient::connect(&format!("127.0.0.1:{resp_port}"), Duration::from_secs(30))
        .expect("connect to the RESP port");
    let stat = |c: &mut McClient, name: &str| -> u64 {
        mc_stats(c).expect("stats")[name].parse().expect("a count")
    };
    let hits = |c: &mut McClient| stat(c, "near_cache_hits");
    // A write's invalidation push reaches memshift on its own connection,
    // maybe after the read sent next, whose fill it then refuses (right:
    // the write could be newer than what the read saw). Wait for it.
    let pushed = |c: &mut McClient, before: u64| {
        wait_until(
            Duration::from_secs(20),
            Duration::from_millis(10),
            "the write's invalidation push",
            || (stat(c, "near_cache_invalidations") > before).then_some(()),
        );
    };
    let execs =
        |node: usize| redis_command_calls(&nodes.cmd(node, &[b"INFO", b"commandstats"]), "exec");
    // A read of `key` on the memcached port (`c`) or the RESP port (`r`).
    let read = |c: &mut McClient, r: &mut RedisClient, resp: bool, key: &str| match resp {
        false => c.get(key).expect("get"),
        true => match r.cmd(&[b"GET", key.as_bytes()]).expect("GET") {
            Resp::Bulk(value) => value,
            other => panic!("GET {key}: {other:?}"),
        },
    };

    // -ASK: `add` is not written through, so the key is not cached yet.
    let (_, to) = start_migration(&nodes, slot);
    for (key, resp) in [("{nc}asked", false), ("{nc}asked-resp", true)] {
        let invalidations = stat(&mut c, "near_cache_invalidations");
        c.send(format!("add {key} 5 0 5\r\nhello\r\n").as_bytes())
            .expect("send");
        assert_eq!(c.read_line().expect("add"), b"STORED\r\n");
        pushed(&mut c, invalidations);
        let before = (hits(&mut c), execs(to));
        assert_eq!(read(&mut c, &mut r, resp, key), Some(b"hello".to_vec()));
        assert!(
            execs(to) > before.1,
            "{key}: the fill ran on the importing node"
        );
        assert_eq!(read(&mut c, &mut r, resp, key), Some(b"hello".to_vec()));
        assert_eq!(
            hits(&mut c),
            before.0 + 1,
            "{key}: the fill filled the cache"
        );
    }

    // -MOVED, once per port (each read's redirect re-reads the slot map):
    // the slot's new owner holds an item memshift has not seen (format 1:
    // version, flags, CAS, data).
    for (key, resp) in [("{nc}moved", false), ("{nc}moved-resp", true)] {
        move_slot(&nodes, slot);
        let to = nodes.master_of(slot);
        let mut item = vec![1u8];
        item.extend_from_slice(&7u32.to_be_bytes());
        item.extend_from_slice(&42u64.to_be_bytes());
        item.extend_from_slice(b"moved");
        let invalidations = stat(&mut c, "near_cache_invalidations");
        nodes.cmd(to, &[b"SET", key.as_bytes(), &item]);
        pushed(&mut c, invalidations);
        let before = (hits(&mut c), execs(to));
        if resp {
            assert_eq!(read(&mut c, &mut r, resp, key), Some(b"moved".to_vec()));
        } else {
            c.send(format!("gets {key}\r\n").as_bytes()).expect("send");
            let value = format!("VALUE {key} 7 5 42\r\n");
            assert_eq!(c.read_line().expect("value"), value.as_bytes());
            assert_eq!(c.read_line().expect("data"), b"moved\r\n");
            assert_eq!(c.read_line().expect("end"), b"END\r\n");
        }
        assert!(execs(to) > before.1, "{key}: the fill ran on the new owner");
        // The redirect made memshift re-read the slot map: the key's
        // entries now live under the new owner's tracking connection, so
        // the next read may fill again before reads hit.
        wait_until(
            Duration::from_secs(20),
            Duration::from_millis(10),
            "a near-cache hit of the moved key",
            || {
                assert_eq!(read(&mut c, &mut r, resp, key), Some(b"moved".to_vec()));
                (hits(&mut c) > before.0).then_some(())
            },
        );
    }
}

/// No read missed the write pipelined just before it.
fn assert_in_order(reordered: &[String]) {
    assert!(
        reordered.is_empty(),
        "{} reads did not see the write pipelined just before them; first: {:?}",
        reordered.len(),
        &reordered[..reordered.len().min(10)]
    );
}

/// A 6-node cluster and a memshift over it (with `server_extra`), or
/// `None` when the tools are missing. No periodic refresh within the tests:
/// only a redirect re-reads the slot map.
fn start(test: &str, server_extra: &str) -> Option<(RedisClusterNodes, Memshift)> {
    if !require_tools(test, TOOLS) {
        return None;
    }
    let nodes = RedisClusterNodes::start();
    let (memshift, _) = nodes.memshift_with(
        server_extra,
        "timeout_ms = 5000\ncluster_refresh_ms = 600000\nconnections_per_shard = 4\n",
    );
    Some((nodes, memshift))
}

/// Leaves `slot` mid-migration from its master to another one
/// (`IMPORTING` there, `MIGRATING` on the owner): every request for a key
/// the owner does not hold is redirected with `-ASK`. Returns (owner,
/// importing node).
fn start_migration(nodes: &RedisClusterNodes, slot: u16) -> (usize, usize) {
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
    (from, to)
}

/// Moves `slot` (its keys deleted first) to another master, behind
/// memshift's back, the way a resharding tool does (importing, migrating,
/// then the owner set on the new node first, which raises its config
/// epoch so the cluster's gossip never hands the slot back), and waits
/// until every node names the new owner.
fn move_slot(nodes: &RedisClusterNodes, slot: u16) {
    let slot_arg = slot.to_string();
    for i in 0..KEYS {
        nodes.cmd(nodes.master_of(slot), &[b"DEL", key(i).as_bytes()]);
    }
    let (from, to) = start_migration(nodes, slot);
    let to_id = nodes.node_id(to);
    let owned_by_to = |node: usize| {
        nodes.cmd(
            node,
            &[b"CLUSTER", b"SETSLOT", slot_arg.as_bytes(), b"NODE", &to_id],
        );
    };
    owned_by_to(to);
    owned_by_to(from);
    for i in (0..6).filter(|&i| i != to && i != from) {
        owned_by_to(i);
    }
    nodes.wait_ok();
    let owner_seen_by = |n: usize| {
        nodes.slot_ranges_from(n).and_then(|ranges| {
            ranges
                .into_iter()
                .find(|&(a, b, _)| (a..=b).contains(&slot))
                .map(|r| r.2)
        })
    };
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(10),
        "every node to name the slot's new owner",
        || (0..6).all(|n| owner_seen_by(n) == Some(to)).then_some(()),
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
