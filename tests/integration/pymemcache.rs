//! A real client: pymemcache (pinned, see `memshift_tests::PYMEMCACHE`) in
//! the suite's venv under `target/test-venv`,
//! run against memshift; then the Redis shards are inspected directly to see
//! that the keys really are spread over all three.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use memshift_tests::{pymemcache_python, require_tools, run_with_timeout, Cluster};

const SPREAD_KEYS: usize = 30;

const SCRIPT: &str = r#"
import sys
from pymemcache.client.base import Client
from pymemcache import serde

port = int(sys.argv[1])
n_keys = int(sys.argv[2])
c = Client(("127.0.0.1", port), serde=serde.pickle_serde,
           connect_timeout=5, timeout=5, default_noreply=False)

def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)

# set/get with serde: str, int, dict (flags carry the type)
check(c.set("pm:str", "hello") is True, "set str")
check(c.get("pm:str") == "hello", "get str")
check(c.set("pm:int", 42) is True, "set int")
check(c.get("pm:int") == 42, "get int")
d = {"a": 1, "b": [1, 2, 3], "c": "\u00fc", "bin": b"\r\nEND\r\n\x00"}
check(c.set("pm:dict", d) is True, "set dict")
check(c.get("pm:dict") == d, "get dict")
check(c.get("pm:missing") is None, "get missing")

# get_many over keys that land on all shards
keys = ["pm:key:%03d" % i for i in range(n_keys)]
check(c.set_many({k: "value-" + k for k in keys}) == [], "set_many")
got = c.get_many(keys + ["pm:missing"])
check(got == {k: "value-" + k for k in keys}, "get_many")

# gets / cas
check(c.set("pm:cas", "v1") is True, "set cas key")
v, unique = c.gets("pm:cas")
check(v == "v1" and unique is not None, "gets")
check(c.cas("pm:cas", "v2", unique) is True, "cas with a fresh unique stores")
check(c.cas("pm:cas", "v3", unique) is False, "cas with a stale unique: EXISTS")
check(c.get("pm:cas") == "v2", "value after cas")
check(c.cas("pm:nokey", "x", b"1") is None, "cas on a missing key: NOT_FOUND")

# incr / decr
check(c.set("pm:n", 10) is True, "set counter")
check(c.incr("pm:n", 5) == 15, "incr")
check(c.decr("pm:n", 20) == 0, "decr stops at 0")
check(c.incr("pm:nokey", 1) is None, "incr missing")
check(c.get("pm:n") == 0, "counter value")

# touch
check(c.touch("pm:str", 3600) is True, "touch")
check(c.touch("pm:missing", 3600) is False, "touch missing")

# delete
check(c.delete("pm:str") is True, "delete")
check(c.get("pm:str") is None, "deleted")
check(c.delete("pm:str") is False, "delete missing")

# admin commands memcached answers (memshift: empty groups, no-op limit)
check(c.stats("cachedump", "1", "1") == {}, "stats cachedump: empty")
check(c.cache_memlimit(50) is True, "cache_memlimit")
check(b"curr_connections" in c.stats(), "stats")
check(isinstance(c.stats("slabs"), dict), "stats slabs")
check(c.stats("items") == {}, "stats items: empty")
check(c.stats("settings").get(b"detail_enabled") == b"no", "stats settings")

print("PYMEMCACHE OK", flush=True)
"#;

fn write_script(dir: &Path) -> PathBuf {
    let path = dir.join("pymemcache_check.py");
    std::fs::write(&path, SCRIPT).expect("write script");
    path
}

#[test]
fn pymemcache_client() {
    if !require_tools("pymemcache_client", &["python3", "redis-server"]) {
        return;
    }
    let python = pymemcache_python();
    let cluster = Cluster::start();
    let tmp = tempfile::tempdir().expect("temp dir");
    let script = write_script(tmp.path());
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .arg(cluster.memshift.port().to_string())
        .arg(SPREAD_KEYS.to_string());
    let out = run_with_timeout(cmd, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success() && out.stdout.contains("PYMEMCACHE OK"),
        "pymemcache script failed ({}):\n{}\n{}\nmemshift stderr:\n{}",
        out.status,
        out.stdout,
        out.stderr,
        cluster.memshift.stderr()
    );

    // Look inside Redis: every key on exactly one shard, every shard used.
    let mut per_shard = [0usize; 3];
    for i in 0..SPREAD_KEYS {
        let key = format!("pm:key:{i:03}");
        let holders: Vec<usize> = cluster
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.keys().iter().any(|k| k == key.as_bytes()))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            holders.len(),
            1,
            "{key} is on shards {holders:?}, want exactly one"
        );
        per_shard[holders[0]] += 1;
    }
    let sizes: Vec<i64> = cluster.shards.iter().map(|s| s.dbsize()).collect();
    eprintln!("pymemcache: {SPREAD_KEYS} keys per shard {per_shard:?}, DBSIZE {sizes:?}");
    assert!(
        per_shard.iter().all(|&n| n > 0),
        "keys not spread over all 3 shards: {per_shard:?}"
    );
}
