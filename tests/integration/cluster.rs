//! memshift in `mode = "cluster"` on a real 6-node Redis Cluster (3
//! masters, 3 replicas): the differential scripts, a multi-get across
//! slots and nodes, and a slot moved under memshift (`-MOVED`).

use std::time::Duration;

use memshift_tests::ops_support::wait_until;
use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::require_tools;

use crate::differential::{run_script_on, FIXED_SCRIPT, META_SCRIPT};

const TOOLS: &[&str] = &["redis-server", "redis-cli"];

#[test]
fn cluster_differential_fixed_script() {
    run_script_on(
        "cluster_differential_fixed_script",
        FIXED_SCRIPT,
        true,
        false,
    );
}

#[test]
fn cluster_differential_meta_script() {
    run_script_on("cluster_differential_meta_script", META_SCRIPT, true, false);
}

#[test]
fn cluster_multi_get_across_slots_and_nodes() {
    if !require_tools("cluster_multi_get_across_slots_and_nodes", TOOLS) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    let (memshift, _) = nodes.memshift("");
    let mut c = memshift.client();
    let keys: Vec<String> = (0..60).map(|i| format!("mg:{i}")).collect();
    // Keys on every master, several per slot group via a hash tag.
    let mut all: Vec<String> = keys.clone();
    all.extend((0..5).map(|i| format!("{{tag}}:{i}")));
    let masters: std::collections::HashSet<usize> = all
        .iter()
        .map(|k| nodes.master_of(nodes.keyslot(k)))
        .collect();
    assert_eq!(masters.len(), 3, "the keys should span every master");
    for k in &all {
        c.set(k, format!("v-{k}").as_bytes()).expect("set");
    }
    let mut req = b"get".to_vec();
    for k in all.iter().chain(["mg:absent".to_string()].iter()) {
        req.push(b' ');
        req.extend_from_slice(k.as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    let reply = c.request_str(&req).expect("multi-get");
    let mut expected = String::new();
    for k in &all {
        let v = format!("v-{k}");
        expected.push_str(&format!("VALUE {k} 0 {}\r\n{v}\r\n", v.len()));
    }
    expected.push_str("END\r\n");
    assert_eq!(reply, expected);
    // flush_all empties every master.
    assert_eq!(
        c.request_str(b"flush_all\r\n").expect("flush_all"),
        "OK\r\n"
    );
    assert_eq!(
        c.request_str(b"get mg:1 mg:2 {tag}:0\r\n").expect("get"),
        "END\r\n"
    );
}

/// Move a key's slot to another master under memshift: the key is still
/// served, with no error, through `-MOVED` (then the refreshed map).
#[test]
fn cluster_moved_slot_is_followed() {
    if !require_tools("cluster_moved_slot_is_followed", TOOLS) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    let (memshift, _) = nodes.memshift("");
    let mut c = memshift.client();
    let key = "moved:key";
    c.set(key, b"before").expect("set");
    let slot = nodes.keyslot(key);
    let from = nodes.master_of(slot);
    let to = (0..6)
        .find(|&i| i != from && nodes.masters().contains(&i))
        .expect("another master");
    let slot_arg = slot.to_string();
    let (from_id, to_id) = (nodes.node_id(from), nodes.node_id(to));
    // The documented manual migration: importing, migrating, move the keys, assign.
    nodes.cmd(
        to,
        &[
            b"CLUSTER",
            b"SETSLOT",
            slot_arg.as_bytes(),
            b"IMPORTING",
            &from_id,
        ],
    );
    nodes.cmd(
        from,
        &[
            b"CLUSTER",
            b"SETSLOT",
            slot_arg.as_bytes(),
            b"MIGRATING",
            &to_id,
        ],
    );
    let to_port = nodes.addrs()[to]
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    nodes.cmd(
        from,
        &[
            b"MIGRATE",
            b"127.0.0.1",
            to_port.as_bytes(),
            key.as_bytes(),
            b"0",
            b"5000",
        ],
    );
    // Mid-migration the key lives on the target: reached through -ASK.
    assert_eq!(
        c.get(key).expect("get during migration").as_deref(),
        Some(&b"before"[..])
    );
    for i in 0..6 {
        nodes.cmd(
            i,
            &[b"CLUSTER", b"SETSLOT", slot_arg.as_bytes(), b"NODE", &to_id],
        );
    }
    nodes.wait_ok();
    for n in 0..20 {
        let v = format!("after-{n}");
        c.set(key, v.as_bytes()).expect("set after move");
        assert_eq!(c.get(key).expect("get after move"), Some(v.into_bytes()));
    }
    // The refreshed map sends the key to its new owner directly.
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        "the value on the new owner",
        || (nodes.cmd(to, &[b"EXISTS", key.as_bytes()]).as_int() == Some(1)).then_some(()),
    );
}
