//! `memshift copy --from-shards`: 3 standalone shards filled through
//! memshift (flags, TTLs, CAS from `gets`) are copied into a 6-node Redis
//! Cluster; memshift in cluster mode then serves the same values, flags and
//! CAS, the TTLs are carried within bounds, `--verify` finds 0 mismatches,
//! and a key changed in the cluster makes `--verify` exit 1 and name it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::{memshift_bin, require_tools, run_with_timeout, Cluster, CommandOutput, Resp};

const TOOLS: &[&str] = &["redis-server", "redis-cli"];
const ITEMS: usize = 600;
const FLAGS: [u32; 4] = [0, 1, 65_535, u32::MAX];

/// What `gets` returned: (flags, data, cas).
type Got = (u32, Vec<u8>, u64);

fn gets(c: &mut memshift_tests::McClient, key: &str) -> Option<Got> {
    let reply = c
        .request(format!("gets {key}\r\n").as_bytes())
        .expect("gets");
    let text = String::from_utf8_lossy(&reply).into_owned();
    if text == "END\r\n" {
        return None;
    }
    let (head, rest) = text.split_once("\r\n").expect("a VALUE line");
    let words: Vec<&str> = head.split(' ').collect();
    assert_eq!(words[0], "VALUE", "{text:?}");
    let len: usize = words[3].parse().expect("length");
    Some((
        words[2].parse().expect("flags"),
        rest.as_bytes()[..len].to_vec(),
        words[4].parse().expect("cas"),
    ))
}

/// TTL of item `i` in seconds (0: none).
fn exptime(i: usize) -> u64 {
    [0, 600, 3600][i % 3]
}

fn key(i: usize) -> String {
    // A few hash-tagged keys: several keys of one cluster slot.
    if i.is_multiple_of(50) {
        format!("{{copy-tag}}:{i}")
    } else {
        format!("copy:{i}")
    }
}

fn copy(config: &Path, from: &Path, args: &[&str]) -> CommandOutput {
    let mut cmd = Command::new(memshift_bin());
    cmd.arg("copy")
        .arg("--from-shards")
        .arg(from)
        .arg("--config")
        .arg(config)
        .args(args);
    run_with_timeout(cmd, Duration::from_secs(180)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn copy_from_shards_into_a_cluster_then_verify() {
    if !require_tools("copy_from_shards_into_a_cluster_then_verify", TOOLS) {
        return;
    }
    let shards = Cluster::start();
    let mut c = shards.client();
    let loaded_at = Instant::now();
    for i in 0..ITEMS {
        let data = format!("value-{i}-{}", "x".repeat(i % 40));
        let req = format!(
            "set {} {} {} {}\r\n{data}\r\n",
            key(i),
            FLAGS[i % FLAGS.len()],
            exptime(i),
            data.len()
        );
        assert_eq!(c.request_str(req.as_bytes()).expect("set"), "STORED\r\n");
    }
    // A meta-written item (format version 2: its state byte travels too).
    assert_eq!(
        c.request_str(b"ms copy:meta 2 F9 T0\r\nhi\r\n")
            .expect("ms"),
        "HD\r\n"
    );
    let want: Vec<(String, Got)> = (0..ITEMS)
        .map(key)
        .chain(["copy:meta".to_string()])
        .map(|k| {
            let got = gets(&mut c, &k).expect("item written");
            (k, got)
        })
        .collect();
    // Not a memshift item, on every shard: its owner's is skipped as
    // foreign, the two others as not on their owner shard.
    for shard in &shards.shards {
        shard.cmd(&[b"HSET", b"foreign:hash", b"f", b"v"]);
    }

    let nodes = RedisClusterNodes::start();
    let (memshift, cluster_config) = nodes.memshift("");
    let dir = tempfile::tempdir().expect("temp dir");
    let (old, new) = (dir.path().join("old.toml"), dir.path().join("new.toml"));
    std::fs::write(&old, &shards.config).expect("write old config");
    std::fs::write(&new, &cluster_config).expect("write new config");

    // Paced so that the run lasts a few progress intervals.
    let out = copy(&new, &old, &["--rate", "250"]);
    assert!(
        out.status.success(),
        "copy failed ({}):\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    let copied = ITEMS + 1;
    assert!(
        out.stdout.contains(&format!("{copied} copied"))
            && out.stdout.contains("1 not memshift items")
            && out.stdout.contains("2 not on their owner shard")
            && out.stdout.contains(" 0 failed"),
        "copy summary:\n{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("progress:") && l.contains("items/s") && l.contains("ETA")),
        "no progress line:\n{}",
        out.stdout
    );

    // memshift in cluster mode serves the same items, CAS included.
    let mut m = memshift.client();
    for (k, item) in &want {
        assert_eq!(gets(&mut m, k).as_ref(), Some(item), "key {k}");
    }
    assert_eq!(
        m.request_str(b"get foreign:hash\r\n").expect("get"),
        "END\r\n"
    );
    // Remaining TTLs: at most what was set, at least that minus the time
    // since the load (and a margin for a loaded box), taken after each
    // read: the reads themselves take seconds on a busy box.
    for i in 0..ITEMS {
        let k = key(i);
        let node = nodes.master_of(nodes.keyslot(&k));
        let pttl = nodes.cmd(node, &[b"PTTL", k.as_bytes()]);
        let since = loaded_at.elapsed().as_millis() as i64 + 5_000;
        let Resp::Int(pttl) = pttl else {
            panic!("PTTL {k}: {pttl:?}")
        };
        match exptime(i) {
            0 => assert_eq!(pttl, -1, "key {k} has no TTL"),
            s => {
                let s = s as i64 * 1000;
                assert!(
                    pttl <= s && pttl >= s - since,
                    "key {k}: PTTL {pttl}, set {s}"
                );
            }
        }
    }

    let out = copy(&new, &old, &["--verify"]);
    assert!(
        out.status.success() && out.stdout.contains(" 0 mismatches"),
        "verify ({}):\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout.contains(&format!("{copied} match")),
        "verify summary:\n{}",
        out.stdout
    );

    // A key changed in the cluster: --verify names it and exits 1.
    m.set("copy:7", b"changed").expect("set");
    let out = copy(&new, &old, &["--verify"]);
    assert!(
        !out.status.success()
            && out.stdout.contains("1 mismatches")
            && out.stdout.contains("mismatch: copy:7"),
        "verify after a change ({}):\n{}",
        out.status,
        out.stdout
    );
    // The meta item kept its flags and CAS (read last: `mg` marks it fetched).
    m.send(b"mg copy:meta v f c\r\n").expect("mg");
    let head = String::from_utf8(m.read_line().expect("mg header")).expect("utf-8");
    let data = m.read_line().expect("mg data");
    let cas = want.last().expect("meta").1 .2;
    assert_eq!(
        (head, &data[..]),
        (format!("VA 2 f9 c{cas}\r\n"), &b"hi\r\n"[..])
    );
}

#[test]
fn copy_from_shards_refuses_a_cluster_source() {
    if !require_tools("copy_from_shards_refuses_a_cluster_source", TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[server]\nlisten = \"127.0.0.1:1\"\n[redis]\nmode = \"cluster\"\ncluster_nodes = [\"127.0.0.1:1\"]\n",
    )
    .expect("write");
    let out = copy(&cfg, &cfg, &[]);
    assert!(
        !out.status.success() && out.stderr.contains("standalone shards"),
        "{out:?}"
    );
}
