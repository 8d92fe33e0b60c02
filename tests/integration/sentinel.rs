//! Sentinel-managed shards (issue 26), real processes: each shard a primary
//! and a replica, three sentinels (quorum 2, `down-after-milliseconds`
//! 1000), memshift with `[redis] sentinels` and `{ master = "sN" }` shards.
//!
//! - SIGKILL of one shard's primary under a verifying load (values name
//!   their writer and sequence): that shard's requests fail only between the
//!   kill and Sentinel's promotion + 1 s, the other shards' never; no
//!   cross-talk; stale reads only on the failed shard, counted as the
//!   acknowledged writes asynchronous replication lost.
//! - A write the old primary acknowledged and never replicated (its replica
//!   cut off first) and that memshift's near cache holds, then the primary
//!   paused: after the switch memshift answers the promoted replica's
//!   value, never the lost one.
//! - SIGSTOP of a primary past `down-after-milliseconds`, then SIGCONT: it
//!   comes back as a replica; nothing memshift acknowledged after the switch
//!   is lost (it was not written to the old primary).
//! - A sentinel killed, then a failover: memshift follows it through the
//!   other two.
//!
//! Metrics: `memshift_backend_primary_changes_total` and the info-style
//! `memshift_backend_primary{shard,addr}`, `stats` and `INFO` lines.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use memshift_tests::ops_support::{metric, metrics_text, poll_until};
use memshift_tests::process::start_memshift_on_free_ports;
use memshift_tests::sentinel::{role, SentinelTopology};
use memshift_tests::{require_tools, Memshift, Resp, VerifyConfig, VerifyLoad, VerifyReport};

const TIMEOUT_MS: u64 = 500;
/// After the promotion the failed shard answers again within this (issue 26).
const AFTER_PROMOTION: Duration = Duration::from_secs(1);
/// A failover on a loaded 2-core box: down-after (1 s) + election + promotion.
const FAILOVER_WITHIN: Duration = Duration::from_secs(30);
/// Load kept running after the promotion, to see the shard serve again.
const SETTLED_LOAD: Duration = Duration::from_secs(3);

struct Setup {
    topo: SentinelTopology,
    memshift: Memshift,
    admin: u16,
    config: String,
    /// `server.resp_listen`
    resp: String,
}

fn setup(shards: usize, near_cache: bool) -> Option<Setup> {
    setup_with(shards, near_cache, None)
}

/// `sentinels`: which of the three memshift is told about (default: all).
fn setup_with(shards: usize, near_cache: bool, sentinels: Option<&[usize]>) -> Option<Setup> {
    if !require_tools("sentinel", &["redis-server"]) {
        return None;
    }
    let topo = SentinelTopology::start(shards);
    let sentinels = match sentinels {
        None => topo.sentinel_list(),
        Some(which) => which
            .iter()
            .map(|&i| format!("\"{}\"", topo.sentinels[i].addr()))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let near = if near_cache {
        "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 1\n"
    } else {
        ""
    };
    let mut resp = String::new();
    // `read_errors_as_misses = false`: the verifying load counts a miss of a
    // key it wrote as a lost acknowledged write, so the failed shard's reads
    // during the failover must answer errors (counted as errors), not the
    // misses they answer by default.
    let (memshift, admin, config) = start_memshift_on_free_ports(|port, admin| {
        resp = format!("127.0.0.1:{}", memshift_tests::free_port());
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nresp_listen = \"{resp}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [redis]\nsentinels = [{}]\nshards = [{}]\ntimeout_ms = {TIMEOUT_MS}\nread_errors_as_misses = false\n\
             [migration]\nphase = \"redis\"\n{near}",
            sentinels,
            topo.shard_list()
        )
    });
    Some(Setup {
        topo,
        memshift,
        admin,
        config,
        resp,
    })
}

/// Which shard (index) holds each of the load's keys: every key is set
/// once through memshift and looked up on the primaries.
fn placement(s: &Setup, keys: &[String]) -> HashMap<String, usize> {
    let mut c = s.memshift.client();
    keys.iter()
        .map(|k| {
            c.set(k, b"placement").expect("set before the load");
            let shard = s
                .topo
                .shards
                .iter()
                .position(|sh| sh.nodes[0].cmd(&[b"EXISTS", k.as_bytes()]).as_int() == Some(1))
                .unwrap_or_else(|| panic!("{k} is on no primary"));
            // The load starts from nothing of its own.
            let deleted = c.request(format!("delete {k}\r\n").as_bytes()).unwrap();
            assert_eq!(deleted, b"DELETED\r\n");
            (k.clone(), shard)
        })
        .collect()
}

fn load_keys(prefix: &str, cfg: &VerifyConfig) -> Vec<String> {
    (0..cfg.clients)
        .flat_map(|c| {
            (0..cfg.keys_per_client).map(move |i| memshift_tests::verify::key_name(prefix, c, i))
        })
        .collect()
}

fn load_config() -> VerifyConfig {
    VerifyConfig {
        clients: 6,
        keys_per_client: 24,
        request_timeout: Duration::from_secs(5),
        max_duration: Duration::from_secs(90),
        ..VerifyConfig::default()
    }
}

/// What the load saw, split by the failed shard and the others.
struct Split {
    victim_errors: Vec<Instant>,
    healthy_errors: Vec<String>,
    victim_stale: usize,
    healthy_stale: Vec<String>,
    victim_misses: usize,
    healthy_misses: Vec<String>,
}

fn split(report: &VerifyReport, place: &HashMap<String, usize>, victim: usize) -> Split {
    let on_victim = |text: &str| {
        place
            .iter()
            .any(|(k, &s)| s == victim && names_key(text, k))
    };
    let mut out = Split {
        victim_errors: Vec::new(),
        healthy_errors: Vec::new(),
        victim_stale: 0,
        healthy_stale: Vec::new(),
        victim_misses: 0,
        healthy_misses: Vec::new(),
    };
    for e in &report.errors {
        if e.keys.iter().any(|k| place.get(k) == Some(&victim)) {
            out.victim_errors.push(e.at);
        } else {
            out.healthy_errors.push(format!("{:?}: {}", e.keys, e.line));
        }
    }
    for s in &report.stale {
        if on_victim(s) {
            if out.victim_stale < 8 {
                println!("stale on the failed shard: {s}");
            }
            out.victim_stale += 1;
        } else {
            out.healthy_stale.push(s.clone());
        }
    }
    for m in &report.misses {
        if place.get(&m.key) == Some(&victim) {
            out.victim_misses += 1;
        } else {
            out.healthy_misses.push(m.key.clone());
        }
    }
    out
}

/// Whether a report line (`client 3: get a b: read …`) names `key`.
fn names_key(text: &str, key: &str) -> bool {
    text.split(' ').any(|w| w.trim_end_matches(':') == key)
}

/// Runs the load, lets `fault` break shard `victim` (returning when the
/// fault started), waits for Sentinel's promotion, and checks the issue's
/// bounds. Returns (fault at, promoted at, split).
fn under_load(
    s: &Setup,
    victim: usize,
    prefix: &str,
    fault: impl FnOnce(&Setup) -> Instant,
    after_switch: impl FnOnce(&Setup, &str),
) -> (Instant, Instant, Split) {
    let cfg = load_config();
    let keys = load_keys(prefix, &cfg);
    let place = placement(s, &keys);
    for shard in 0..s.topo.shards.len() {
        assert!(
            place.values().any(|&p| p == shard),
            "no key on shard {shard}"
        );
    }
    let master = s.topo.shards[victim].name.clone();
    let old = s.topo.primary_of(&master);
    let load = VerifyLoad::start(s.memshift.addr(), prefix, cfg);
    assert!(
        load.wait_ops(2000, Duration::from_secs(30)),
        "load did not start"
    );
    let fault_at = fault(s);
    let (new, promoted_at) = s.topo.wait_switch(&master, &old, FAILOVER_WITHIN);
    after_switch(s, &old);
    std::thread::sleep(SETTLED_LOAD);
    let before = load.ops();
    assert!(
        load.wait_ops(500, Duration::from_secs(20)),
        "the load stalled after the switch"
    );
    let report = load.stop();
    assert!(report.ops > before, "no ops after the switch");
    for (what, list) in [
        ("cross-talk", &report.cross_talk),
        ("over the timeout", &report.over_timeout),
        ("connection errors", &report.connection_errors),
    ] {
        assert!(list.is_empty(), "failover of {master}: {what}: {list:#?}");
    }
    let split = split(&report, &place, victim);
    println!(
        "{master}: {old} -> {new}; promotion {:?} after the fault; {} ops; errors on {master}: {} (last {:?} after the promotion); lost acknowledged writes seen: {} stale reads, {} misses",
        promoted_at - fault_at,
        report.ops,
        split.victim_errors.len(),
        split
            .victim_errors
            .iter()
            .max()
            .map(|&l| l.saturating_duration_since(promoted_at)),
        split.victim_stale,
        split.victim_misses,
    );
    assert!(
        split.healthy_errors.is_empty(),
        "errors on healthy shards: {:?}",
        &split.healthy_errors[..split.healthy_errors.len().min(10)]
    );
    assert!(
        split.healthy_stale.is_empty(),
        "stale values on healthy shards: {:?}",
        &split.healthy_stale[..split.healthy_stale.len().min(10)]
    );
    assert!(
        split.healthy_misses.is_empty(),
        "acknowledged keys missing on healthy shards: {:?}",
        split.healthy_misses
    );
    for &at in &split.victim_errors {
        assert!(at >= fault_at, "{master}: an error before the fault");
        assert!(
            at <= promoted_at + AFTER_PROMOTION,
            "{master}: an error {:?} after the promotion (bound {AFTER_PROMOTION:?})",
            at - promoted_at
        );
    }
    assert_eq!(&s.topo.primary_of(&master), &new);
    (fault_at, promoted_at, split)
}

/// A manual failover of `master`, asked of the first Sentinel.
fn ask_failover(s: &Setup, master: &str) {
    let reply = s.topo.sentinels[0]
        .cmd(&[b"SENTINEL", b"FAILOVER", master.as_bytes()])
        .expect("SENTINEL FAILOVER");
    assert_eq!(reply, Resp::Simple("OK".into()));
}

/// Until memshift has followed a switch of `master`.
fn wait_followed(s: &Setup, master: &str) {
    let changes = format!("memshift_backend_primary_changes_total{{shard=\"{master}\"}}");
    poll_until(Duration::from_secs(10), Duration::from_millis(1), || {
        (metric(s.admin, &changes) >= 1.0).then_some(())
    })
    .expect("memshift follows the switch");
}

#[test]
fn sentinel_primary_killed_under_load() {
    let Some(s) = setup(3, true) else {
        return;
    };
    let victim = 1;
    let (_, _, split) = under_load(
        &s,
        victim,
        "sk",
        |s| {
            let addr = s.topo.primary_of(&s.topo.shards[victim].name);
            let idx = s.topo.shards[victim].node_index(&addr);
            // Read before the signal: memshift fails the killed primary's
            // requests within microseconds, and a busy machine may not run
            // this thread again before some clients have their errors.
            let at = Instant::now();
            s.topo.shards[victim].nodes[idx].signal(libc::SIGKILL);
            at
        },
        |_, _| {},
    );
    // Asynchronous replication: a write acknowledged in the last moments
    // before the kill may be lost; only a handful can be.
    assert!(
        split.victim_stale + split.victim_misses <= 20,
        "more lost writes than a SIGKILL can lose"
    );
    let name = &s.topo.shards[victim].name;
    let changes = metric(
        s.admin,
        &format!("memshift_backend_primary_changes_total{{shard=\"{name}\"}}"),
    );
    assert_eq!(changes, 1.0, "{}", metrics_text(s.admin));
    let now = s.topo.primary_of(name);
    let gauge = metric(
        s.admin,
        &format!("memshift_backend_primary{{shard=\"{name}\",addr=\"{now}\"}}"),
    );
    assert_eq!(gauge, 1.0, "{}", metrics_text(s.admin));
    let stats = s.memshift.client().request_str(b"stats\r\n").unwrap();
    assert!(
        stats.contains(&format!("STAT redis_primary:{name} {now}\r\n"))
            && stats.contains(&format!("STAT redis_primary_changes:{name} 1\r\n")),
        "{stats}"
    );
    assert!(
        s.memshift
            .stderr()
            .contains("redis primary switched (Sentinel)"),
        "no switch log line"
    );
    let info = memshift_tests::RedisClient::connect(&s.resp, Duration::from_secs(5))
        .and_then(|mut c| c.cmd(&[b"INFO"]))
        .expect("RESP INFO");
    let Resp::Bulk(Some(info)) = info else {
        panic!("INFO: {info:?}");
    };
    let info = String::from_utf8_lossy(&info);
    assert!(
        info.contains(&format!("redis_primary_{name}:{now}\r\n"))
            && info.contains(&format!("redis_primary_changes_{name}:1\r\n")),
        "{info}"
    );
}

#[test]
fn sentinel_lost_write_does_not_live_on_in_the_near_cache() {
    lost_write_not_served(Failover::Pause);
}

#[test]
fn sentinel_lost_write_not_served_after_a_manual_failover() {
    lost_write_not_served(Failover::Manual);
}

/// How the primary holding a lost write loses its place.
#[derive(Clone, Copy, PartialEq)]
enum Failover {
    /// SIGSTOP: its invalidation connection stays open, silent.
    Pause,
    /// `SENTINEL FAILOVER`: it stays up, and is demoted after the switch.
    Manual,
}

fn lost_write_not_served(how: Failover) {
    let Some(s) = setup(2, true) else {
        return;
    };
    let shard = &s.topo.shards[0];
    let mut c = s.memshift.client();
    // A key of shard 0.
    let key = (0..1000)
        .map(|i| format!("lw:{i}"))
        .find(|k| {
            c.set(k, b"v1-replicated").unwrap();
            shard.nodes[0].cmd(&[b"EXISTS", k.as_bytes()]).as_int() == Some(1)
        })
        .expect("a key on shard 0");
    let primary = &shard.nodes[0];
    // Replicated before the replica is cut off.
    primary.cmd(&[b"WAIT", b"1", b"5000"]);
    // The replica cannot come back (its AUTH is refused); connections made
    // before (memshift's, the sentinels') stay authenticated.
    // One connection: a new one would need the password.
    let mut admin = primary.client();
    for cmd in [
        &[&b"CONFIG"[..], b"SET", b"requirepass", b"cut-off"][..],
        &[b"CLIENT", b"KILL", b"TYPE", b"replica"],
    ] {
        let reply = admin.cmd(cmd).unwrap();
        assert!(!matches!(reply, Resp::Error(_)), "{cmd:?}: {reply:?}");
    }
    c.set(&key, b"v2-lost").unwrap();
    assert_eq!(c.get(&key).unwrap().as_deref(), Some(&b"v2-lost"[..]));
    assert_eq!(c.get(&key).unwrap().as_deref(), Some(&b"v2-lost"[..]));
    let hits_before = metric(s.admin, "memshift_near_cache_hits_total");
    assert!(hits_before > 0.0, "the near cache served nothing");
    let old = primary.addr();
    // Not killed: the invalidation connection to it stays open (paused:
    // its pings go unanswered for a while; manual: it answers until its
    // demotion), so only the switch itself can drop the shard's near-cache
    // entries in time.
    match how {
        Failover::Pause => primary.signal(libc::SIGSTOP),
        Failover::Manual => {
            ask_failover(&s, &shard.name);
        }
    }
    let fault_at = Instant::now();
    let (new, promoted_at) = s.topo.wait_switch(&shard.name, &old, FAILOVER_WITHIN);
    wait_followed(&s, &shard.name);
    // From the switch on: errors until memshift follows, then the promoted
    // replica's value, never the lost write.
    let value = poll_until(Duration::from_secs(20), Duration::from_millis(5), || {
        match c.get(&key) {
            Ok(Some(v)) => Some(v),
            // A failed read answered as a miss (`read_errors_as_misses`).
            Ok(None) => None,
            Err(_) => {
                c = s.memshift.client();
                None
            }
        }
    })
    .expect("the key answers after the switch");
    println!(
        "lost write: answered {:?} {:?} after the promotion ({:?} after the fault)",
        String::from_utf8_lossy(&value),
        promoted_at.elapsed(),
        promoted_at - fault_at,
    );
    assert_eq!(value, b"v1-replicated");
    // The lost write really was lost: the promoted replica never had it.
    let raw = shard.node(&new).cmd(&[b"GET", key.as_bytes()]);
    assert!(
        matches!(&raw, Resp::Bulk(Some(v)) if v.ends_with(b"v1-replicated")),
        "{raw:?}"
    );
    for _ in 0..20 {
        assert_eq!(c.get(&key).unwrap().as_deref(), Some(&b"v1-replicated"[..]));
    }
    if how == Failover::Pause {
        primary.signal(libc::SIGCONT);
    }
}

#[test]
fn sentinel_paused_primary_returns_as_replica() {
    let Some(s) = setup(2, false) else {
        return;
    };
    let victim = 0;
    let paused = std::cell::Cell::new(usize::MAX);
    let (_, _, split) = under_load(
        &s,
        victim,
        "sp",
        |s| {
            let addr = s.topo.primary_of(&s.topo.shards[victim].name);
            let idx = s.topo.shards[victim].node_index(&addr);
            paused.set(idx);
            let at = Instant::now();
            s.topo.shards[victim].nodes[idx].signal(libc::SIGSTOP);
            at
        },
        |s, old| {
            // Resumed once memshift follows the switch: a primary that
            // resumes before (Sentinel promotes the replica tens of ms
            // before it announces the switch) is still the primary to
            // memshift, and what it acknowledges then is lost, as
            // docs/config.md says ("Sentinel").
            wait_followed(s, &s.topo.shards[victim].name);
            let node = s.topo.shards[victim].node(old);
            node.signal(libc::SIGCONT);
            poll_until(Duration::from_secs(30), Duration::from_millis(50), || {
                (role(node) == "slave").then_some(())
            })
            .expect("the old primary comes back as a replica");
        },
    );
    // Paused, not killed: the replica had every acknowledged write, and
    // nothing was written to the old primary once it came back.
    assert_eq!(
        (split.victim_stale, split.victim_misses),
        (0, 0),
        "acknowledged writes lost"
    );
    let node = &s.topo.shards[victim].nodes[paused.get()];
    assert_eq!(role(node), "slave");
}

#[test]
fn sentinel_killed_memshift_follows_through_the_others() {
    let Some(mut s) = setup(2, false) else {
        return;
    };
    // The first sentinel of the list: the one memshift follows.
    s.topo.sentinels[0].kill();
    let mut c = s.memshift.client();
    for i in 0..50 {
        c.set(&format!("sk:{i}"), b"before")
            .expect("works with a sentinel down");
    }
    let name = s.topo.shards[1].name.clone();
    let old = s.topo.primary_of(&name);
    let idx = s.topo.shards[1].node_index(&old);
    s.topo.shards[1].nodes[idx].signal(libc::SIGKILL);
    let (new, promoted_at) = s.topo.wait_switch(&name, &old, FAILOVER_WITHIN);
    // Every key answers again within the bound.
    let deadline = promoted_at + AFTER_PROMOTION + Duration::from_secs(1);
    poll_until(Duration::from_secs(20), Duration::from_millis(10), || {
        let mut c = s.memshift.client();
        (0..50)
            .all(|i| c.set(&format!("sk:{i}"), b"after").is_ok())
            .then_some(())
    })
    .expect("every key writable after the failover");
    let answered = Instant::now();
    println!(
        "followed {old} -> {new} through the remaining sentinels {:?} after the promotion",
        answered - promoted_at
    );
    assert!(
        answered <= deadline,
        "writes failed {:?} after the promotion",
        answered - promoted_at
    );
    let changes = metric(
        s.admin,
        &format!("memshift_backend_primary_changes_total{{shard=\"{name}\"}}"),
    );
    assert_eq!(changes, 1.0);
}

#[test]
fn sentinel_shards_are_a_copy_source() {
    let Some(s) = setup(2, false) else {
        return;
    };
    let mut c = s.memshift.client();
    for i in 0..200 {
        c.set(&format!("cp:{i}"), format!("v{i}").as_bytes())
            .expect("set through memshift");
    }
    let target = memshift_tests::RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let to = dir.path().join("to.toml");
    std::fs::write(
        &to,
        format!(
            "[server]\nlisten = \"127.0.0.1:1\"\n[redis]\nshards = [\"{}\"]\n[migration]\nphase = \"redis\"\n",
            target.addr()
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(memshift_tests::memshift_bin());
    cmd.arg("copy")
        .arg("--from-shards")
        .arg(s.memshift.config_path())
        .arg("--config")
        .arg(&to);
    let out = memshift_tests::run_with_timeout(cmd, Duration::from_secs(120)).unwrap();
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(target.dbsize(), 200, "{}", out.stdout);
}

#[test]
fn sentinel_manual_failover_demoted_primary_is_not_written() {
    let Some(s) = setup(2, true) else {
        return;
    };
    let shard = &s.topo.shards[0];
    let old = s.topo.primary_of(&shard.name);
    let mut c = s.memshift.client();
    // The old primary stays up and is demoted: only the switch (and the
    // `ROLE` check of every connect) keeps memshift off it.
    ask_failover(&s, &shard.name);
    let (new, _) = s.topo.wait_switch(&shard.name, &old, FAILOVER_WITHIN);
    wait_followed(&s, &shard.name);
    // Written at once: Sentinel demotes the old primary only later, and a
    // write it acknowledged meanwhile would be lost at its resync.
    let keys: Vec<String> = (0..300).map(|i| format!("mf:{i}")).collect();
    for k in &keys {
        c.set(k, b"after").expect("set after the switch");
    }
    poll_until(Duration::from_secs(30), Duration::from_millis(50), || {
        let info = shard.node(&old).cmd(&[b"INFO", b"replication"]);
        let synced = matches!(&info, Resp::Bulk(Some(i))
            if String::from_utf8_lossy(i).contains("master_link_status:up"));
        (role(shard.node(&old)) == "slave" && synced).then_some(())
    })
    .expect("the old primary is demoted and synced");
    for k in &keys {
        assert_eq!(c.get(k).unwrap().as_deref(), Some(&b"after"[..]), "{k}");
    }
    let on_shard: Vec<&String> = keys
        .iter()
        .filter(|k| shard.node(&new).cmd(&[b"EXISTS", k.as_bytes()]).as_int() == Some(1))
        .collect();
    assert!(!on_shard.is_empty(), "no key landed on {}", shard.name);
    // Replicated to the demoted node from the new primary; never refused
    // there (a write to a replica would have failed the set above).
    assert_eq!(role(shard.node(&old)), "slave");
    assert_eq!(
        metric(
            s.admin,
            &format!(
                "memshift_backend_primary{{shard=\"{}\",addr=\"{old}\"}}",
                shard.name
            )
        ),
        0.0
    );
}

/// A RESP session's held connection (its `WATCH`) to a primary Sentinel
/// replaces is dropped at the switch: the `EXEC` after it is aborted (the
/// watch is gone), never acknowledged by the old primary and then lost.
/// The old primary accepts writes even once demoted
/// (`replica-read-only no`), so a transaction sent to it would succeed.
#[test]
fn sentinel_failover_drops_a_held_connection_to_the_old_primary() {
    let Some(s) = setup(1, false) else {
        return;
    };
    let shard = &s.topo.shards[0];
    let old = s.topo.primary_of(&shard.name);
    let ok = Resp::Simple("OK".into());
    assert_eq!(
        shard
            .node(&old)
            .cmd(&[b"CONFIG", b"SET", b"replica-read-only", b"no"]),
        ok
    );
    let mut c = memshift_tests::RedisClient::connect(&s.resp, Duration::from_secs(10))
        .expect("connect to the RESP port");
    assert_eq!(c.cmd(&[b"WATCH", b"held:k"]).expect("WATCH"), ok);

    ask_failover(&s, &shard.name);
    let (new, _) = s.topo.wait_switch(&shard.name, &old, FAILOVER_WITHIN);
    wait_followed(&s, &shard.name);

    assert_eq!(c.cmd(&[b"MULTI"]).expect("MULTI"), ok);
    assert_eq!(
        c.cmd(&[b"SET", b"held:k", b"v"]).expect("SET"),
        Resp::Simple("QUEUED".into())
    );
    let exec = c.cmd(&[b"EXEC"]).expect("EXEC");
    let on_new = shard.node(&new).cmd(&[b"GET", b"held:k"]);
    assert_eq!(
        exec,
        Resp::Array(None),
        "EXEC after the switch must abort (the WATCH died with the old primary's connection); \
         the new primary holds {on_new:?}"
    );
    // The next transaction runs on the new primary.
    assert_eq!(c.cmd(&[b"MULTI"]).expect("MULTI"), ok);
    c.cmd(&[b"SET", b"held:k", b"w"]).expect("SET");
    let exec = c.cmd(&[b"EXEC"]).expect("EXEC");
    assert_eq!(exec, Resp::Array(Some(vec![ok.clone()])));
    assert_eq!(
        c.cmd(&[b"GET", b"held:k"]).expect("GET"),
        Resp::Bulk(Some(b"w".to_vec()))
    );
    assert_eq!(
        shard.node(&new).cmd(&[b"EXISTS", b"held:k"]).as_int(),
        Some(1),
        "on the new primary"
    );
}

#[test]
fn sentinel_list_reloads_live() {
    // Told about the first sentinel only, then (SIGHUP) about the other
    // two: only the new list can tell memshift of the failover below.
    let Some(mut s) = setup_with(2, false, Some(&[0])) else {
        return;
    };
    let first = format!("\"{}\"", s.topo.sentinels[0].addr());
    let others = format!(
        "\"{}\", \"{}\"",
        s.topo.sentinels[1].addr(),
        s.topo.sentinels[2].addr()
    );
    s.memshift
        .rewrite_config(&s.config.replace(&first, &others));
    s.memshift.sighup();
    poll_until(Duration::from_secs(20), Duration::from_millis(20), || {
        (metric(s.admin, "memshift_config_reloads_total{result=\"ok\"}") >= 1.0).then_some(())
    })
    .expect("the reload is applied");
    s.topo.sentinels[0].kill();
    let name = s.topo.shards[1].name.clone();
    let old = s.topo.primary_of(&name);
    let idx = s.topo.shards[1].node_index(&old);
    let mut c = s.memshift.client();
    c.set("rl:before", b"x").expect("works across the reload");
    s.topo.shards[1].nodes[idx].signal(libc::SIGKILL);
    s.topo.wait_switch(&name, &old, FAILOVER_WITHIN);
    wait_followed(&s, &name);
    let mut c = s.memshift.client();
    for i in 0..50 {
        c.set(&format!("rl:{i}"), b"after")
            .expect("set after the failover");
    }
}
