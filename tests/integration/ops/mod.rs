//! Operations: what an SRE relies on to run memshift for years (issue 7).
//!
//! * `reload`: SIGHUP adds/removes shards under load, refuses invalid files,
//!   reports settings that need a restart.
//! * `drain`: SIGTERM finishes in-flight requests and exits 0.
//! * `health`: `on_shard_down = "fail"` vs `"eject"` with a shard stopped and
//!   restarted.
//! * `limits`: slow consumers, max connections, idle timeout.
//! * `faults`: kills, pauses, reloads, SIGTERM and a slow consumer under a
//!   verifying load (no cross-talk, no stale values, no lost writes).
//! * `slow_consumer`: a client that never reads does not stall the others.
//! * `resp_faults`: a slow consumer, an abort storm and hostile bytes on the
//!   RESP port (drain on both ports: `drain`).
//!
//! Everything runs against real `redis-server` and `memshift` processes;
//! every wait is a poll with a deadline.

mod drain;
mod faults;
mod health;
mod limits;
mod reload;
mod resp_faults;
mod slow_consumer;

use std::time::Duration;

use memshift_tests::ops_support::{metric, set_many, wait_until};
use memshift_tests::{memshift_config, Cluster, ClusterOptions, McClient};

/// Generous per-request timeout: a loaded CI box with debug builds must not
/// turn a slow reply into a client error.
const TIMEOUT_MS: u64 = 2000;
/// How long to wait for memshift to react to a signal or a shard change.
const REACT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(25);

/// memshift's log lines when a shard is marked down and when it is back.
const DOWN: &str = "redis shard marked down";
const BACK: &str = "redis shard healthy again";

/// How many times memshift has logged `line`.
fn log_count(cluster: &Cluster, line: &str) -> usize {
    cluster.memshift.stderr().matches(line).count()
}

/// Waits until memshift has logged `line` more than `before` times.
fn wait_log(cluster: &Cluster, line: &str, before: usize) {
    wait_until(REACT, POLL, line, || {
        (log_count(cluster, line) > before).then_some(())
    });
}

fn opts(shards: usize, server_extra: &str, redis_extra: &str) -> ClusterOptions {
    ClusterOptions {
        shards,
        timeout_ms: TIMEOUT_MS,
        server_extra: server_extra.to_string(),
        redis_extra: redis_extra.to_string(),
        extra_tables: String::new(),
    }
}

/// The cluster's config with another list of shard addresses.
fn config_for(cluster: &Cluster, shards: &[String], opts: &ClusterOptions) -> String {
    memshift_config(cluster.memshift.port(), cluster.admin_port, shards, opts)
}

fn reloads(cluster: &Cluster, result: &str) -> f64 {
    metric(
        cluster.admin_port,
        &format!("memshift_config_reloads_total{{result=\"{result}\"}}"),
    )
}

/// Writes `config` over the running one, sends SIGHUP and waits until the
/// reload counter with `result` ("ok" / "error") has moved.
fn reload(cluster: &Cluster, config: &str, result: &str) {
    let before = reloads(cluster, result);
    cluster.memshift.rewrite_config(config);
    cluster.memshift.sighup();
    wait_until(
        REACT,
        POLL,
        &format!("a reload counted as {result}"),
        || (reloads(cluster, result) > before).then_some(()),
    );
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}:{i:05}")
}

fn value(prefix: &str, i: usize, round: u32) -> Vec<u8> {
    format!("{prefix}-value-{i}-{round}").into_bytes()
}

/// Sets `n` keys `prefix:i` through memshift and returns the shard each one
/// landed on (found by asking every Redis).
fn write_and_place(cluster: &Cluster, prefix: &str, n: usize, round: u32) -> Vec<usize> {
    let items: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| (key(prefix, i), value(prefix, i, round)))
        .collect();
    let mut c = cluster.client();
    set_many(&mut c, &items).expect("set keys through memshift");
    (0..n)
        .map(|i| {
            cluster
                .shard_holding(key(prefix, i).as_bytes())
                .unwrap_or_else(|| panic!("{} is on no shard", key(prefix, i)))
        })
        .collect()
}

/// `get` that must answer exactly `want`.
fn assert_get(c: &mut McClient, key: &str, want: Option<&[u8]>, context: &str) {
    let got = c
        .get(key)
        .unwrap_or_else(|e| panic!("get {key} ({context}): {e}"));
    assert_eq!(
        got.as_deref(),
        want,
        "get {key} ({context}): got {:?}, want {:?}",
        got.as_deref().map(String::from_utf8_lossy),
        want.map(String::from_utf8_lossy)
    );
}

/// A RESP request (a multibulk of `args`).
fn resp_command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}
