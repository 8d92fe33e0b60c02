//! `SIGHUP` with a cluster config: the documented switch from standalone
//! shards to a cluster (copy, reload with `mode = "cluster"`, verify), and a
//! reload in cluster mode applying new seeds and a new `timeout_ms`.

use std::process::Command;
use std::time::Duration;

use memshift_tests::ops_support::{metric, wait_until};
use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::{memshift_bin, require_tools, run_with_timeout, Cluster, McClient};

const TOOLS: &[&str] = &["redis-server", "redis-cli"];
const RELOAD_OK: &str = "memshift_config_reloads_total{result=\"ok\"}";
const RELOAD_ERROR: &str = "memshift_config_reloads_total{result=\"error\"}";

/// The `[admin] listen` port of a test config.
fn admin_port(config: &str) -> u16 {
    let admin = config.split("[admin]").nth(1).expect("an [admin] table");
    let line = admin
        .lines()
        .find(|l| l.starts_with("listen"))
        .expect("admin listen");
    line.trim_end_matches('"')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("admin port")
}

/// `config` with its `[redis]` table's first line replaced by `redis`.
fn with_redis(config: &str, first_line: &str, redis: &str) -> String {
    let line = config
        .lines()
        .find(|l| l.starts_with(first_line))
        .unwrap_or_else(|| panic!("no line {first_line:?} in:\n{config}"));
    config.replacen(line, redis, 1)
}

fn seeds(addrs: &[String]) -> String {
    addrs
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn wait_reloads(admin: u16, series: &str, want: f64) {
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(50),
        &format!("{series} = {want}"),
        || (metric(admin, series) >= want).then_some(()),
    );
}

/// Standalone shards → cluster on a running memshift: copy, rewrite the
/// config with `mode = "cluster"`, SIGHUP; the same connection keeps being
/// served, now from the cluster, with the same CAS; `--verify` agrees.
#[test]
fn reload_switches_from_shards_to_a_cluster() {
    if !require_tools("reload_switches_from_shards_to_a_cluster", TOOLS) {
        return;
    }
    let shards = Cluster::start();
    let admin = admin_port(&shards.config);
    let mut c = shards.client();
    let keys: Vec<String> = (0..200).map(|i| format!("switch:{i}")).collect();
    for k in &keys {
        c.set(k, format!("v-{k}").as_bytes()).expect("set");
    }
    let before: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| c.request(format!("gets {k}\r\n").as_bytes()).expect("gets"))
        .collect();

    let nodes = RedisClusterNodes::start();
    let cluster_config = with_redis(
        &shards.config,
        "shards = [",
        &format!(
            "mode = \"cluster\"\ncluster_nodes = [{}]\ncluster_refresh_ms = 500",
            seeds(&nodes.addrs()[..2])
        ),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let (old, new) = (dir.path().join("old.toml"), dir.path().join("new.toml"));
    std::fs::write(&old, &shards.config).expect("write");
    std::fs::write(&new, &cluster_config).expect("write");
    let copy = |extra: &[&str]| {
        let mut cmd = Command::new(memshift_bin());
        cmd.arg("copy")
            .arg("--from-shards")
            .arg(&old)
            .arg("--config")
            .arg(&new)
            .args(extra);
        run_with_timeout(cmd, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"))
    };
    let out = copy(&[]);
    assert!(
        out.status.success() && out.stdout.contains("200 copied"),
        "copy:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    // Only in the cluster: tells when memshift reads from it.
    let probe = "switch:probe";
    let node = nodes.master_of(nodes.keyslot(probe));
    let item = memshift_tests::migration_support::encode_item(0, b"in-cluster");
    nodes.cmd(node, &[b"SET", probe.as_bytes(), &item]);
    assert_eq!(c.get(probe).expect("get"), None);

    shards.memshift.rewrite_config(&cluster_config);
    shards.memshift.sighup();
    wait_reloads(admin, RELOAD_OK, 1.0);
    // The connection opened before the reload reads the cluster now.
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        "reads from the cluster",
        || (c.get(probe).ok()? == Some(b"in-cluster".to_vec())).then_some(()),
    );
    for (k, want) in keys.iter().zip(&before) {
        let got = c.request(format!("gets {k}\r\n").as_bytes()).expect("gets");
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "key {k}"
        );
    }
    let out = copy(&["--verify"]);
    assert!(
        out.status.success() && out.stdout.contains("200 match, 0 mismatches"),
        "verify:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    // New writes go to the cluster only.
    c.set("switch:after", b"new").expect("set");
    assert!(
        shards.shard_holding(b"switch:after").is_none(),
        "a write after the switch reached a standalone shard"
    );
}

/// A request to a node paused longer than `timeout_ms` fails; after a
/// reload with a longer timeout (and other seeds) the same wait succeeds. A
/// reload whose seeds all refuse is refused, and memshift keeps serving.
#[test]
fn cluster_reload_applies_seeds_and_timeout() {
    if !require_tools("cluster_reload_applies_seeds_and_timeout", TOOLS) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    let (memshift, config) = nodes.memshift("");
    let admin = admin_port(&config);
    let key = "reload:key";
    let mut c = memshift.client();
    // Longer than the pauses below, on a loaded box too.
    c.set_read_timeout(Duration::from_secs(30))
        .expect("timeout");
    c.set(key, b"v").expect("set");
    let node = nodes.master_of(nodes.keyslot(key));
    let paused_get = |c: &mut McClient, pause_ms: u64| {
        let ms = pause_ms.to_string();
        nodes.cmd(node, &[b"CLIENT", b"PAUSE", ms.as_bytes(), b"ALL"]);
        let reply = c.request_str(format!("get {key}\r\n").as_bytes());
        // Wait out the pause before the next step.
        wait_until(
            Duration::from_secs(30),
            Duration::from_millis(50),
            "the pause to end",
            || c.get(key).ok().flatten().map(|_| ()),
        );
        reply.expect("get")
    };
    // timeout_ms = 1000 (the helper's) against a 3 s pause.
    // Timed out: a miss (redis.read_errors_as_misses).
    let reply = paused_get(&mut c, 3000);
    assert_eq!(reply, "END\r\n");

    // Seeds that all refuse: the reload is refused, the old config serves.
    let dead = format!("\"127.0.0.1:{}\"", memshift_tests::free_port());
    let line = config
        .lines()
        .find(|l| l.starts_with("cluster_nodes"))
        .expect("cluster_nodes")
        .to_string();
    memshift.rewrite_config(&config.replacen(&line, &format!("cluster_nodes = [{dead}]"), 1));
    memshift.sighup();
    wait_reloads(admin, RELOAD_ERROR, 1.0);
    assert_eq!(c.get(key).expect("get"), Some(b"v".to_vec()));

    // Other seeds and a 10 s timeout: the same 3 s pause is waited out.
    let reloaded = config
        .replacen(
            &line,
            &format!("cluster_nodes = [{}]", seeds(&nodes.addrs()[2..4])),
            1,
        )
        .replacen("timeout_ms = 1000", "timeout_ms = 10000", 1);
    assert_ne!(reloaded, config);
    memshift.rewrite_config(&reloaded);
    memshift.sighup();
    wait_reloads(admin, RELOAD_OK, 1.0);
    // The reload's node connections come up in the background: one read
    // through them first, so the pause cannot catch their handshake (which
    // `connect_timeout_ms`, not `timeout_ms`, bounds).
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        "a read through the reloaded nodes",
        || c.get(key).ok().flatten().map(|_| ()),
    );
    let reply = paused_get(&mut c, 3000);
    assert_eq!(reply, "VALUE reload:key 0 1\r\nv\r\nEND\r\n");
}
