//! `server.threads > 1`: one runtime per worker thread, client connections
//! handed to the workers in turn, each worker's sessions on its own shard
//! connections (`crates/proxy/src/workers.rs`).

use std::fs;
use std::thread;

use memshift_tests::{require_tools, Cluster, ClusterOptions, McClient};

const WORKERS: usize = 3;
/// Connections per worker, each with its own keys.
const PER_WORKER: usize = 2;
const ROUNDS: usize = 400;

/// The worker threads of process `pid`, by name, with their CPU time so
/// far (ns, from `schedstat`).
fn worker_cpu(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !comm.starts_with("memshift-w") {
            continue;
        }
        let ns = fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        out.push((comm.to_string(), ns));
    }
    out.sort();
    out
}

/// memshift with `WORKERS` workers over 3 shards (`redis_extra` added to
/// its `[redis]` table); `None` without `redis-server`.
fn start_workers(test: &str, redis_extra: &str) -> Option<Cluster> {
    if !require_tools(test, &["redis-server"]) {
        return None;
    }
    Some(Cluster::start_with(ClusterOptions {
        server_extra: format!("threads = {WORKERS}\n"),
        redis_extra: redis_extra.to_string(),
        timeout_ms: 5000,
        ..ClusterOptions::default()
    }))
}

/// `WORKERS * PER_WORKER` clients, connected in order (so the acceptor
/// hands `PER_WORKER` to each worker), each running `load(index, client)`
/// on a thread of its own; returns once all have.
fn each_client(cluster: &Cluster, load: fn(usize, &mut McClient)) {
    let clients: Vec<McClient> = (0..WORKERS * PER_WORKER)
        .map(|_| cluster.client())
        .collect();
    let loads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, mut client)| thread::spawn(move || load(c, &mut client)))
        .collect();
    for l in loads {
        l.join().expect("client thread");
    }
}

/// Three workers: every one serves clients (the acceptor hands connections
/// out in turn), and every client reads its own writes, over connections
/// spread on all of them.
#[test]
fn every_worker_serves_its_share_of_the_connections() {
    let Some(cluster) = start_workers("every_worker_serves_its_share_of_the_connections", "")
    else {
        return;
    };
    let pid = cluster.memshift.pid().expect("memshift runs");
    let before = worker_cpu(pid);
    let names: Vec<&str> = before.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names.len(),
        WORKERS,
        "one thread per worker: {names:?}\n{}",
        cluster.memshift.stderr()
    );
    assert!(
        cluster.memshift.stderr().contains("worker_pool=true"),
        "{}",
        cluster.memshift.stderr()
    );
    each_client(&cluster, |c, client| {
        for round in 0..ROUNDS {
            let key = format!("w{c}-{}", round % 50);
            let value = format!("{c}:{round}");
            client.set(&key, value.as_bytes()).expect("set");
            let got = client.get(&key).expect("get");
            assert_eq!(got.as_deref(), Some(value.as_bytes()), "{key}");
        }
    });
    let after = worker_cpu(pid);
    // Idle workers only ping their shards (microseconds); each served
    // PER_WORKER * ROUNDS * 2 requests (milliseconds even in release).
    for ((name, b), (_, a)) in before.iter().zip(&after) {
        let ms = a.saturating_sub(*b) as f64 / 1e6;
        assert!(
            ms >= 2.0,
            "{name} used {ms:.2} ms of CPU: it served no connection ({after:?} after, {before:?} before)"
        );
    }
}

/// `connections_per_shard` not a multiple of the worker count: some
/// sessions' shard connections run on another worker, so their replies
/// cross threads (through the home worker's mailbox inbox,
/// `backend::mailbox`). Every client still reads its own writes, in order,
/// one request at a time, pipelined, and in multi-gets over every shard.
#[test]
fn replies_from_another_workers_connections_arrive_in_order() {
    let Some(cluster) = start_workers(
        "replies_from_another_workers_connections_arrive_in_order",
        "connections_per_shard = 2\n",
    ) else {
        return;
    };
    each_client(&cluster, |c, client| {
        for round in 0..ROUNDS / 4 {
            let keys: Vec<String> = (0..10).map(|k| format!("x{c}-{k}")).collect();
            // Ten sets and a multi-get of all ten, in one write.
            let mut batch = Vec::new();
            let mut expect = Vec::new();
            for key in &keys {
                let value = format!("{c}:{round}:{key}");
                batch.extend_from_slice(
                    format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
                );
                expect.extend_from_slice(b"STORED\r\n");
            }
            batch.extend_from_slice(format!("get {}\r\n", keys.join(" ")).as_bytes());
            for key in &keys {
                let value = format!("{c}:{round}:{key}");
                expect.extend_from_slice(
                    format!("VALUE {key} 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
                );
            }
            expect.extend_from_slice(b"END\r\n");
            client.send(&batch).expect("send");
            let got = client.read_exact_n(expect.len()).expect("replies");
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&expect),
                "client {c}, round {round}"
            );
            let one = &keys[round % keys.len()];
            let got = client.get(one).expect("get");
            assert_eq!(
                got.as_deref(),
                Some(format!("{c}:{round}:{one}").as_bytes()),
                "{one}"
            );
        }
    });
}

/// The same over the RESP port: ten `SET`s and an `MGET` of the ten in one
/// write, from clients whose replies cross threads, answered byte for byte
/// in order.
#[test]
fn resp_replies_from_another_workers_connections_arrive_in_order() {
    use std::io::{Read, Write};

    use memshift_tests::resp_proxy::start_resp_memshift;
    use memshift_tests::RedisServer;

    if !require_tools(
        "resp_replies_from_another_workers_connections_arrive_in_order",
        &["redis-server"],
    ) {
        return;
    }
    let shards: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
    let (_memshift, resp_port, _) = start_resp_memshift(&addrs, |opts| {
        opts.server_extra
            .push_str(&format!("threads = {WORKERS}\n"));
        opts.redis_extra.push_str("connections_per_shard = 2\n");
        opts.timeout_ms = 5000;
    });
    let loads: Vec<_> = (0..WORKERS * PER_WORKER)
        .map(|c| {
            let mut conn = std::net::TcpStream::connect(("127.0.0.1", resp_port)).expect("connect");
            conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .expect("timeout");
            thread::spawn(move || {
                for round in 0..ROUNDS / 4 {
                    let keys: Vec<String> = (0..10).map(|k| format!("r{c}-{k}")).collect();
                    let mut batch = Vec::new();
                    let mut expect = Vec::new();
                    let mut mget = format!("*{}\r\n$4\r\nMGET\r\n", keys.len() + 1);
                    let mut values = format!("*{}\r\n", keys.len());
                    for key in &keys {
                        let value = format!("{c}:{round}:{key}");
                        batch.extend_from_slice(
                            format!(
                                "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
                                key.len(),
                                value.len()
                            )
                            .as_bytes(),
                        );
                        expect.extend_from_slice(b"+OK\r\n");
                        mget.push_str(&format!("${}\r\n{key}\r\n", key.len()));
                        values.push_str(&format!("${}\r\n{value}\r\n", value.len()));
                    }
                    batch.extend_from_slice(mget.as_bytes());
                    expect.extend_from_slice(values.as_bytes());
                    conn.write_all(&batch).expect("send");
                    let mut got = vec![0u8; expect.len()];
                    conn.read_exact(&mut got).expect("replies");
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&expect),
                        "client {c}, round {round}"
                    );
                }
            })
        })
        .collect();
    for l in loads {
        l.join().expect("client thread");
    }
}
