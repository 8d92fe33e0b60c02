//! One item, two protocols: pymemcache writes read by redis-py and the
//! reverse, with flags, TTL, counters and the CAS a RESP write changes.

use std::process::Command;
use std::time::Duration;

use memshift_tests::{redis_py_python, require_tools, run_with_timeout, RespCluster};

#[test]
fn pymemcache_and_redis_py_share_items() {
    if !require_tools(
        "pymemcache_and_redis_py_share_items",
        &["python3", "redis-server"],
    ) {
        return;
    }
    let python = redis_py_python();
    let tmp = tempfile::tempdir().expect("temp dir");
    let script = tmp.path().join("cross_protocol.py");
    std::fs::write(&script, include_str!("cross_protocol.py")).expect("write script");
    let cluster = RespCluster::start();
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .arg(cluster.memshift.port().to_string())
        .arg(cluster.resp_port.to_string());
    for s in &cluster.shards {
        cmd.arg(s.port().to_string());
    }
    let out = run_with_timeout(cmd, Duration::from_secs(180)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success() && out.stdout.contains("CROSS PROTOCOL OK"),
        "cross-protocol script failed ({}):\n{}\n{}\nmemshift stderr:\n{}",
        out.status,
        out.stdout,
        out.stderr,
        cluster.memshift.stderr()
    );
    // Both protocols count into the same family, by protocol.
    let metrics = memshift_tests::ops_support::metrics_text(cluster.admin_port);
    let count = |labels: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("memshift_requests_total{{{labels}}} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    assert!(
        count("protocol=\"resp\",command=\"get\"") > 0.0
            && count("protocol=\"resp\",command=\"incr\"") > 0.0
            && count("protocol=\"text\",command=\"gets\"") > 0.0,
        "per-protocol request counts missing:\n{metrics}"
    );
}
