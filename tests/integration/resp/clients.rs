//! redis-py (RESP2 and RESP3) and redis-cli run one scripted workload
//! through memshift's RESP port (3 shards) and against one plain Redis:
//! the replies must be identical line for line.

use std::process::{Command, Stdio};
use std::time::Duration;

use memshift_tests::{redis_py_python, require_tools, run_with_timeout, RedisServer, RespCluster};

const WORKLOAD_PY: &str = include_str!("workload.py");
const WORKLOAD_CLI: &str = include_str!("workload.redis-cli");

pub(super) fn redis_py(
    python: &std::path::Path,
    script: &std::path::Path,
    port: u16,
    proto: u8,
) -> String {
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .arg("127.0.0.1")
        .arg(port.to_string())
        .arg(proto.to_string());
    let what = format!("redis-py workload on port {port} (RESP{proto})");
    run_client(cmd, "WORKLOAD DONE", &what)
}

/// Run a client workload (3 minutes at most); its output, which must
/// contain `done` (the workload ran to its end).
pub(super) fn run_client(cmd: Command, done: &str, what: &str) -> String {
    let out = run_with_timeout(cmd, Duration::from_secs(180)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success() && out.stdout.contains(done),
        "{what} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// The first line where `got` differs from `want`, for the failure message.
fn first_difference(want: &str, got: &str) -> String {
    for (i, (w, g)) in want.lines().zip(got.lines()).enumerate() {
        if w != g {
            return format!("line {}:\n  redis:    {w}\n  memshift: {g}", i + 1);
        }
    }
    format!(
        "line counts differ: redis {}, memshift {}",
        want.lines().count(),
        got.lines().count()
    )
}

#[test]
fn redis_py_workload_matches_plain_redis() {
    if !require_tools(
        "redis_py_workload_matches_plain_redis",
        &["python3", "redis-server"],
    ) {
        return;
    }
    let cluster = RespCluster::start();
    redis_py_matches_plain_redis(&cluster);
    // MSET through the RESP port spreads keys over every shard.
    let mut c = memshift_tests::RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(10))
        .expect("connect");
    let mut mset: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
    for i in 0..30 {
        mset.push(format!("spread:{i}").into_bytes());
        mset.push(b"v".to_vec());
    }
    let args: Vec<&[u8]> = mset.iter().map(|a| a.as_slice()).collect();
    assert_eq!(
        c.cmd(&args).expect("mset"),
        memshift_tests::Resp::Simple("OK".into())
    );
    let sizes: Vec<i64> = cluster.shards.iter().map(|s| s.dbsize()).collect();
    assert!(
        sizes.iter().all(|&n| n > 0),
        "30 keys not spread: {sizes:?}"
    );
    assert_eq!(sizes.iter().sum::<i64>(), 30);
}

/// The redis-py workload through `cluster` and through a plain Redis, in
/// RESP2 and RESP3: the same output.
fn redis_py_matches_plain_redis(cluster: &RespCluster) {
    for out in same_redis_py_output(cluster, WORKLOAD_PY) {
        assert!(out.lines().count() > 150, "the workload ran: {out}");
    }
}

/// `script` (redis-py; args host, port, protocol) through `cluster` and
/// against a plain Redis, in RESP2 and RESP3: the same output (returned).
pub(super) fn same_redis_py_output(cluster: &RespCluster, script: &str) -> Vec<String> {
    let python = redis_py_python();
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = tmp.path().join("script.py");
    std::fs::write(&path, script).expect("write the script");
    let plain = RedisServer::start();
    let mut outputs = Vec::new();
    for proto in [2, 3] {
        let want = redis_py(&python, &path, plain.port(), proto);
        let got = redis_py(&python, &path, cluster.resp_port, proto);
        assert!(
            want == got,
            "RESP{proto}: memshift differs from plain Redis at {}\nmemshift stderr:\n{}",
            first_difference(&want, &got),
            cluster.memshift.stderr()
        );
        outputs.push(want);
    }
    outputs
}

/// The same with the near cache on, every key admitted on its first read
/// (so the workload's repeated reads are hits).
#[test]
fn redis_py_workload_with_near_cache_matches_plain_redis() {
    if !require_tools(
        "redis_py_workload_with_near_cache_matches_plain_redis",
        &["python3", "redis-server"],
    ) {
        return;
    }
    let cluster = RespCluster::start_with_tables(
        3,
        "",
        "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 1\n",
    );
    // Nothing of a shard is cached before its invalidation connection is
    // up (on a busy machine that can take longer than the workload).
    for shard in &cluster.shards {
        shard.wait_tracking_clients(1);
    }
    redis_py_matches_plain_redis(&cluster);
    let hits =
        memshift_tests::ops_support::metric(cluster.admin_port, "memshift_near_cache_hits_total");
    assert!(hits > 0.0, "the workload never hit the near cache");
}

pub(super) fn redis_cli(port: u16, proto: u8) -> String {
    let mut cmd = Command::new("redis-cli");
    cmd.arg(format!("-{proto}"))
        .arg("-p")
        .arg(port.to_string())
        .stdin(Stdio::piped());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn redis-cli");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(WORKLOAD_CLI.as_bytes())
            .expect("write stdin");
    }
    let out = child.wait_with_output().expect("redis-cli output");
    assert!(out.status.success(), "redis-cli failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn redis_cli_workload_matches_plain_redis() {
    if !require_tools(
        "redis_cli_workload_matches_plain_redis",
        &["redis-cli", "redis-server"],
    ) {
        return;
    }
    let cluster = RespCluster::start();
    let plain = RedisServer::start();
    for proto in [2, 3] {
        let want = redis_cli(plain.port(), proto);
        let got = redis_cli(cluster.resp_port, proto);
        assert!(
            want == got,
            "redis-cli -{proto}: memshift differs from plain Redis at {}",
            first_difference(&want, &got)
        );
        assert!(want.lines().count() > 60, "the workload ran: {want}");
    }
    // MGET/MSET/DEL crossed shards: the 6 keys were spread (checked by
    // writing them again and looking inside the shards).
    let mut c = memshift_tests::RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(10))
        .expect("connect");
    for k in ["k1", "k2", "k3", "k4", "k5", "k6"] {
        c.cmd(&[b"SET", k.as_bytes(), b"v"]).expect("set");
    }
    let holding = cluster.shards.iter().filter(|s| s.dbsize() > 0).count();
    assert!(holding >= 2, "6 keys all on one shard?");
}

/// Build the go-redis workload (`goredis/`, modules from the Go module
/// proxy on first use, cached under the target dir).
pub(super) fn go_redis_workload() -> std::path::PathBuf {
    memshift_tests::go::go_build("tests/integration/resp/goredis", "goredis-workload")
}

/// Run the go-redis workload `bin` (with `extra` arguments: a mode) on
/// `port` in RESP`proto`; its output.
pub(super) fn run_go_workload(
    bin: &std::path::Path,
    port: u16,
    proto: u8,
    extra: &[&str],
) -> String {
    let mut cmd = Command::new(bin);
    cmd.arg(format!("127.0.0.1:{port}"))
        .arg(proto.to_string())
        .args(extra);
    let what = format!("go-redis workload {extra:?} on port {port} (RESP{proto})");
    run_client(cmd, "GO WORKLOAD DONE", &what)
}

#[test]
fn go_redis_workload_matches_plain_redis() {
    if !require_tools(
        "go_redis_workload_matches_plain_redis",
        &["go", "redis-server"],
    ) {
        return;
    }
    let bin = go_redis_workload();
    let cluster = RespCluster::start();
    let plain = RedisServer::start();
    let run = |port: u16, proto: u8| run_go_workload(&bin, port, proto, &[]);
    // go-redis speaks RESP3 by default (HELLO 3); RESP2 too.
    for proto in [3, 2] {
        let want = run(plain.port(), proto);
        let got = run(cluster.resp_port, proto);
        assert!(
            want == got,
            "go-redis RESP{proto}: memshift differs from plain Redis at {}",
            first_difference(&want, &got)
        );
    }
}
