//! libmemcached's `memccapable -a` (ASCII tests) and `memccapable -b`
//! (binary protocol tests) against a real memcached 1.6 and against
//! memshift, over standalone shards and (ASCII) in `mode = "cluster"`:
//! every test that passes against memcached must pass against memshift.
//! Also with the near cache on (`[near_cache] enabled = true`, every read
//! admitted): its hits must answer exactly what memcached answers.

use std::process::Command;
use std::time::Duration;

use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::{
    require_tools, run_with_timeout, Cluster, ClusterOptions, McClient, Memcached,
};

/// `(test name, status)` from lines like `ascii set      [pass]` (or
/// `binary set`, with `prefix` "binary ").
fn parse(output: &str, prefix: &str) -> Vec<(String, String)> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim_end();
            let open = line.rfind('[')?;
            let status = line[open + 1..].strip_suffix(']')?;
            let name = line[..open].trim();
            (name.starts_with(prefix) && !status.is_empty())
                .then(|| (name.to_string(), status.to_ascii_lowercase()))
        })
        .collect()
}

/// `mode`: `-a` (ASCII) or `-b` (binary).
fn run(port: u16, mode: &str) -> (Vec<(String, String)>, String) {
    let mut cmd = Command::new("memccapable");
    cmd.args([mode, "-h", "127.0.0.1", "-p", &port.to_string(), "-t", "5"]);
    let out = run_with_timeout(cmd, Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    let text = format!("{}{}", out.stdout, out.stderr);
    let prefix = if mode == "-b" { "binary " } else { "ascii " };
    (parse(&text, prefix), text)
}

fn passed(results: &[(String, String)]) -> usize {
    results.iter().filter(|(_, s)| s == "pass").count()
}

/// The memccapable tests that pass against memcached and not against
/// memshift, as `name: status` lines.
fn regressions(want: &[(String, String)], got: &[(String, String)]) -> Vec<String> {
    want.iter()
        .filter(|(_, s)| s == "pass")
        .filter_map(|(name, _)| {
            let status = got
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s.as_str())
                .unwrap_or("not run");
            (status != "pass").then(|| format!("{name}: {status}"))
        })
        .collect()
}

/// The last `n` characters of `text`.
fn tail(text: &str, n: usize) -> String {
    let skip = text.chars().count().saturating_sub(n);
    text.chars().skip(skip).collect()
}

/// A memshift over standalone shards (the default test `Cluster`): its port,
/// and its stderr for the failure message (the closure owns the processes,
/// so they live until the comparison is done).
fn over_shards() -> (u16, Box<dyn Fn() -> String>) {
    let cluster = Cluster::start();
    let port = cluster.memshift.port();
    (
        port,
        Box::new(move || {
            // The whole cluster (shards too), not just its memshift field:
            // the closure keeps it running until the end.
            let cluster = &cluster;
            cluster.memshift.stderr()
        }),
    )
}

#[test]
fn memccapable_ascii() {
    compare_with_memcached(
        "memccapable_ascii",
        "-a",
        &["memccapable", "memcached", "redis-server"],
        over_shards,
    );
}

#[test]
fn memccapable_binary() {
    compare_with_memcached(
        "memccapable_binary",
        "-b",
        &["memccapable", "memcached", "redis-server"],
        over_shards,
    );
}

/// A memshift over standalone shards listening on a unix socket, reached
/// through a TCP relay (memccapable has no unix-socket option): the bytes
/// memccapable sends and reads cross memshift's unix listener unchanged.
fn over_unix_socket() -> (u16, Box<dyn Fn() -> String>) {
    let cluster = Cluster::start_on_unix_socket(ClusterOptions::default());
    let path = cluster
        .addr()
        .strip_prefix("unix:")
        .expect("a unix listener")
        .to_owned();
    let port = memshift_tests::socket::tcp_relay_to(std::path::Path::new(&path));
    (
        port,
        Box::new(move || {
            // The whole cluster (shards too): the closure keeps it running.
            let cluster = &cluster;
            cluster.memshift.stderr()
        }),
    )
}

#[test]
fn memccapable_ascii_unix_socket() {
    compare_with_memcached(
        "memccapable_ascii_unix_socket",
        "-a",
        &["memccapable", "memcached", "redis-server"],
        over_unix_socket,
    );
}

#[test]
fn memccapable_binary_unix_socket() {
    compare_with_memcached(
        "memccapable_binary_unix_socket",
        "-b",
        &["memccapable", "memcached", "redis-server"],
        over_unix_socket,
    );
}

/// A memshift over standalone shards with the near cache on, every read
/// admitted, started only once every shard's invalidation connection is
/// tracking (otherwise nothing would be cached and the run would prove
/// nothing about it).
fn over_shards_with_near_cache() -> (u16, Box<dyn Fn() -> String>) {
    let cluster = Cluster::start_with(ClusterOptions {
        extra_tables: "[near_cache]\nenabled = true\nadmit_reads = 1\n".into(),
        timeout_ms: 2000,
        ..ClusterOptions::default()
    });
    for shard in &cluster.shards {
        shard.wait_tracking_clients(1);
    }
    let port = cluster.memshift.port();
    (
        port,
        Box::new(move || {
            // The whole cluster, as in `over_shards`: it keeps the shards up.
            let cluster = &cluster;
            cluster.memshift.stderr()
        }),
    )
}

/// A `near_cache_*` counter of memshift's `stats`.
fn near_cache_stat(port: u16, name: &str) -> (u64, String) {
    let mut c = McClient::connect(&format!("127.0.0.1:{port}")).expect("connect for stats");
    let stats = c.request_str(b"stats\r\n").expect("stats");
    let line = format!("STAT near_cache_{name} ");
    let n = stats
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no near_cache_{name} line in stats:\n{stats}"));
    (n, stats)
}

/// The ASCII run must have been answered from the near cache at least
/// once, or it tested nothing of it.
fn assert_near_cache_hits(port: u16) {
    let (hits, stats) = near_cache_stat(port, "hits");
    assert!(
        hits > 0,
        "memccapable -a was never answered from the near cache:\n{stats}"
    );
}

/// memccapable -b reads each key once after writing it, so nothing hits;
/// its gets must still have filled the cache (then any hit is checked by
/// the differential tests).
fn assert_near_cache_filled(port: u16) {
    let (admissions, stats) = near_cache_stat(port, "admissions");
    assert!(
        admissions > 0,
        "memccapable -b never filled the near cache:\n{stats}"
    );
}

#[test]
fn memccapable_ascii_near_cache() {
    compare_with_memcached_then(
        "memccapable_ascii_near_cache",
        "-a",
        &["memccapable", "memcached", "redis-server"],
        over_shards_with_near_cache,
        assert_near_cache_hits,
    );
}

#[test]
fn memccapable_binary_near_cache() {
    compare_with_memcached_then(
        "memccapable_binary_near_cache",
        "-b",
        &["memccapable", "memcached", "redis-server"],
        over_shards_with_near_cache,
        assert_near_cache_filled,
    );
}

/// The ASCII tests with memshift in `mode = "cluster"` on a 6-node Redis
/// Cluster.
#[test]
fn memccapable_ascii_redis_cluster() {
    compare_with_memcached(
        "memccapable_ascii_redis_cluster",
        "-a",
        &["memccapable", "memcached", "redis-server", "redis-cli"],
        || {
            let nodes = RedisClusterNodes::start();
            let (memshift, _) = nodes.memshift("");
            let port = memshift.port();
            (
                port,
                Box::new(move || {
                    // Keeps the cluster nodes running until the end.
                    let _nodes = &nodes;
                    memshift.stderr()
                }),
            )
        },
    );
}

/// memccapable `mode` (`-a` or `-b`) against memcached, then against the
/// memshift `start` gives.
fn compare_with_memcached(
    test: &str,
    mode: &str,
    tools: &[&str],
    start: impl FnOnce() -> (u16, Box<dyn Fn() -> String>),
) {
    compare_with_memcached_then(test, mode, tools, start, |_| {});
}

/// [`compare_with_memcached`], then `after(port)` while memshift still runs.
fn compare_with_memcached_then(
    test: &str,
    mode: &str,
    tools: &[&str],
    start: impl FnOnce() -> (u16, Box<dyn Fn() -> String>),
    after: impl FnOnce(u16),
) {
    if !require_tools(test, tools) {
        return;
    }
    let reference = Memcached::start();
    let (want, want_text) = run(reference.port(), mode);
    assert!(
        !want.is_empty(),
        "could not parse memccapable's output against memcached:\n{want_text}"
    );
    drop(reference);

    let (port, stderr) = start();
    let (got, got_text) = run(port, mode);
    eprintln!(
        "{test}: memcached passes {}/{}, memshift passes {}/{}",
        passed(&want),
        want.len(),
        passed(&got),
        want.len()
    );
    let regressions = regressions(&want, &got);
    assert!(
        regressions.is_empty(),
        "memccapable tests that pass against memcached but not against memshift:\n  {}\n\nmemccapable output against memshift:\n{got_text}\nmemshift stderr (tail):\n{}",
        regressions.join("\n  "),
        tail(&stderr(), 3000)
    );
    after(port);
}

/// `memccapable -b` through memshift in the `memcached` and `warmup`
/// phases: every binary request is forwarded to the legacy memcached (as
/// the classic or meta command it became) and answered as memcached would.
#[test]
fn memccapable_binary_forwarded_to_legacy_memcached() {
    use memshift_tests::migration_support::{MigrationOptions, MigrationSetup};
    if !require_tools(
        "memccapable_binary_forwarded_to_legacy_memcached",
        &["memccapable", "memcached", "redis-server"],
    ) {
        return;
    }
    for phase in ["memcached", "warmup"] {
        let setup = MigrationSetup::start(MigrationOptions {
            redis_shards: 1,
            phase: phase.into(),
            ..MigrationOptions::default()
        });
        let port: u16 = setup
            .proxy
            .addr()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("memshift port");
        let (got, text) = run(port, "-b");
        let failed: Vec<_> = got.iter().filter(|(_, s)| s != "pass").collect();
        assert!(
            got.len() >= 27 && failed.is_empty(),
            "phase {phase}: memccapable -b through memshift: {failed:?}\n{text}"
        );
    }
}
