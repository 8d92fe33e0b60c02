//! libmemcached's `memccapable -a` (ASCII tests) against a real memcached
//! 1.6 and against memshift, over standalone shards and in `mode =
//! "cluster"`: every test that passes against memcached must pass against
//! memshift.

use std::process::Command;
use std::time::Duration;

use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::{require_tools, run_with_timeout, Cluster, Memcached};

/// `(test name, status)` from lines like `ascii set      [pass]`.
fn parse(output: &str) -> Vec<(String, String)> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim_end();
            let open = line.rfind('[')?;
            let status = line[open + 1..].strip_suffix(']')?;
            let name = line[..open].trim();
            (name.starts_with("ascii ") && !status.is_empty())
                .then(|| (name.to_string(), status.to_ascii_lowercase()))
        })
        .collect()
}

fn run(port: u16) -> (Vec<(String, String)>, String) {
    let mut cmd = Command::new("memccapable");
    cmd.args(["-a", "-h", "127.0.0.1", "-p", &port.to_string(), "-t", "5"]);
    let out = run_with_timeout(cmd, Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    let text = format!("{}{}", out.stdout, out.stderr);
    (parse(&text), text)
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

/// memccapable against memcached, then against the memshift `start` gives:
/// its port, and its stderr for the failure message (the closure owns the
/// processes, so they live until the comparison is done).
fn compare_with_memcached(
    test: &str,
    tools: &[&str],
    start: impl FnOnce() -> (u16, Box<dyn Fn() -> String>),
) {
    if !require_tools(test, tools) {
        return;
    }
    let reference = Memcached::start();
    let (want, want_text) = run(reference.port());
    assert!(
        !want.is_empty(),
        "could not parse memccapable's output against memcached:\n{want_text}"
    );
    drop(reference);

    let (port, stderr) = start();
    let (got, got_text) = run(port);
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
}

#[test]
fn memccapable_ascii() {
    compare_with_memcached(
        "memccapable_ascii",
        &["memccapable", "memcached", "redis-server"],
        || {
            let cluster = Cluster::start();
            let port = cluster.memshift.port();
            (
                port,
                Box::new(move || {
                    // The whole cluster (shards too), not just its memshift
                    // field: the closure keeps it running until the end.
                    let cluster = &cluster;
                    cluster.memshift.stderr()
                }),
            )
        },
    );
}

/// The same, with memshift in `mode = "cluster"` on a 6-node Redis Cluster.
#[test]
fn memccapable_ascii_redis_cluster() {
    compare_with_memcached(
        "memccapable_ascii_redis_cluster",
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
