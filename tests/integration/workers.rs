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

/// Three workers: every one serves clients (the acceptor hands connections
/// out in turn), and every client reads its own writes, over connections
/// spread on all of them.
#[test]
fn every_worker_serves_its_share_of_the_connections() {
    if !require_tools(
        "every_worker_serves_its_share_of_the_connections",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = Cluster::start_with(ClusterOptions {
        server_extra: format!("threads = {WORKERS}\n"),
        timeout_ms: 5000,
        ..ClusterOptions::default()
    });
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
    // Connected in order, so the acceptor hands out PER_WORKER to each.
    let clients: Vec<McClient> = (0..WORKERS * PER_WORKER)
        .map(|_| cluster.client())
        .collect();
    let loads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, mut client)| {
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    let key = format!("w{c}-{}", round % 50);
                    let value = format!("{c}:{round}");
                    client.set(&key, value.as_bytes()).expect("set");
                    let got = client.get(&key).expect("get");
                    assert_eq!(got.as_deref(), Some(value.as_bytes()), "{key}");
                }
            })
        })
        .collect();
    for l in loads {
        l.join().expect("client thread");
    }
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
