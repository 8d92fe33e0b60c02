//! memshift in `mode = "cluster"` while the cluster changes under load
//! (issue 16's checks): a verifying client (each connection owns its keys
//! and remembers the last acknowledged value) runs while
//! - a master is SIGKILLed and its replica promoted: its keys fail fast,
//!   then are served again with no restart and no reload; no wrong values;
//!   the seconds of errors and the acknowledged writes the cluster lost are
//!   printed;
//! - `redis-cli --cluster reshard` moves slots between masters: zero errors,
//!   zero wrong values (`-ASK`/`-MOVED`/`-TRYAGAIN` handled);
//! - a 7th node joins (`add-node`) and `rebalance` gives it slots: zero
//!   errors, and memshift uses the new master without a reload.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use memshift_tests::redis_cluster::{NodeOptions, RedisClusterNodes};
use memshift_tests::{
    require_tools, McClient, RedisClient, Resp, VerifyConfig, VerifyLoad, VerifyReport,
};

const TOOLS: &[&str] = &["redis-server", "redis-cli"];
/// `redis.timeout_ms` of the memshift these tests start.
const REDIS_TIMEOUT: Duration = Duration::from_millis(1000);
/// Bound for anything the load or the cluster must get done.
const PHASE: Duration = Duration::from_secs(120);

fn load(memshift_addr: &str, prefix: &str) -> VerifyLoad {
    load_with(memshift_addr, prefix, 6)
}

fn load_with(memshift_addr: &str, prefix: &str, clients: usize) -> VerifyLoad {
    let cfg = VerifyConfig {
        clients,
        keys_per_client: 40,
        // Far above `redis.timeout_ms`: a request that hangs past it still
        // shows, without timing noise on a loaded box.
        request_timeout: Duration::from_secs(5),
        max_ops_per_client: u64::MAX,
        max_duration: Duration::from_secs(600),
        ..VerifyConfig::default()
    };
    VerifyLoad::start(memshift_addr, prefix, cfg)
}

fn run_ops(load: &VerifyLoad, n: u64, what: &str) {
    assert!(
        load.wait_ops(n, PHASE),
        "the verifying load did not complete {n} ops within {PHASE:?} ({what}); {} ops so far",
        load.ops()
    );
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

/// Load while the cluster changes: zero errors, zero misses of
/// acknowledged keys, zero wrong values, no reply later than the timeout.
fn assert_untouched(r: &VerifyReport, what: &str) {
    r.assert_no_wrong_values(what);
    assert!(
        r.errors.is_empty(),
        "{what}: {} SERVER_ERROR replies; first ones: {:#?}",
        r.errors.len(),
        &r.errors[..r.errors.len().min(10)]
    );
    assert!(
        r.misses.is_empty(),
        "{what}: {} misses of acknowledged keys; first ones: {:#?}",
        r.misses.len(),
        &r.misses[..r.misses.len().min(10)]
    );
}

/// Prints what the load saw between `from` and `to` (the change).
fn print_window(test: &str, r: &VerifyReport, from: Instant, to: Instant) {
    let (n, p99, max) = r.window(from, to);
    eprintln!(
        "{test}: {} ops in all, {n} during the change ({}), p99 {:?}, max {:?}; overall p99 {:?}, max {:?}",
        r.ops,
        secs(to - from),
        p99,
        max,
        r.quantile(0.99),
        r.max_latency()
    );
}

/// SIGKILL a master under load; its replica is promoted (node timeout 1 s).
/// Without full coverage required, the other masters keep serving while
/// the dead one's slots have no owner: only its keys may fail.
#[test]
fn cluster_failover_under_load() {
    failover("cluster_failover_under_load", false);
}

/// The same with Redis' default `cluster-require-full-coverage yes`: from
/// the moment the dead master is marked failed until the promotion, every
/// node answers `CLUSTERDOWN`, so any key may fail in that window (counted
/// and printed); still no wrong value, and every key served again.
#[test]
fn cluster_failover_under_load_full_coverage() {
    failover("cluster_failover_under_load_full_coverage", true);
}

fn failover(test: &str, require_full_coverage: bool) {
    if !require_tools(test, TOOLS) {
        return;
    }
    let mut nodes = RedisClusterNodes::start_with(NodeOptions {
        node_timeout_ms: 1000,
        require_full_coverage,
    });
    let memshift = memshift_telling_errors(&nodes);
    let load = load(memshift.addr(), "fo");
    run_ops(&load, 2000, "before the kill");

    let ranges = nodes.slot_ranges();
    let victim = ranges[0].2;
    let victim_slots: Vec<(u16, u16)> = ranges
        .iter()
        .filter(|r| r.2 == victim)
        .map(|r| (r.0, r.1))
        .collect();
    let on_victim = |slot: u16| victim_slots.iter().any(|&(a, b)| (a..=b).contains(&slot));
    // The keys the load uses, and which of them the victim serves.
    let keys: Vec<String> = (0..6)
        .flat_map(|c| (0..40).map(move |i| memshift_tests::verify::key_name("fo", c, i)))
        .collect();
    let victim_keys: HashSet<String> = keys
        .iter()
        .filter(|k| on_victim(nodes.keyslot(k)))
        .cloned()
        .collect();
    assert!(!victim_keys.is_empty(), "some keys live on the victim");
    let probe = victim_keys.iter().next().cloned().unwrap_or_default();

    let killed_at = Instant::now();
    nodes.stop(victim);
    // Right after the kill, its keys fail fast (or, on a very slow box,
    // are already served by the promoted replica).
    let mut c = memshift.client();
    let asked = Instant::now();
    let reply = c
        .request_str(format!("get {probe}\r\n").as_bytes())
        .expect("a reply");
    let fast_fail = asked.elapsed();
    assert!(
        reply.starts_with("SERVER_ERROR ") || reply.ends_with("END\r\n"),
        "get of a key on the killed master: {reply:?}"
    );
    assert!(
        fast_fail < REDIS_TIMEOUT + Duration::from_secs(3),
        "a get of a key on the killed master took {fast_fail:?}"
    );

    nodes.wait_failed_over(victim, PHASE);
    let promoted_at = Instant::now();
    // Every key is served again (no SERVER_ERROR), with no restart/reload.
    let all_served = |c: &mut McClient| {
        keys.iter().all(|k| {
            c.request_str(format!("get {k}\r\n").as_bytes())
                .is_ok_and(|r| !r.starts_with("SERVER_ERROR"))
        })
    };
    let deadline = killed_at + Duration::from_secs(60);
    let mut c =
        McClient::connect_with_timeout(memshift.addr(), Duration::from_secs(5)).expect("connect");
    while !all_served(&mut c) {
        assert!(
            Instant::now() < deadline,
            "not every key served again 60 s after the kill"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let served_at = Instant::now();
    run_ops(&load, 3000, "after the failover");
    let r = load.stop();

    // Never a wrong value: another key's or client's, or one never written.
    assert!(
        r.cross_talk.is_empty(),
        "{} wrong values; first ones: {:#?}",
        r.cross_talk.len(),
        &r.cross_talk[..r.cross_talk.len().min(10)]
    );
    assert!(
        r.over_timeout.is_empty() && r.connection_errors.is_empty(),
        "requests not answered in time or broken connections: {:#?} {:#?}",
        &r.over_timeout[..r.over_timeout.len().min(10)],
        &r.connection_errors[..r.connection_errors.len().min(10)]
    );
    // Errors: only after the kill, only for requests with a key on the
    // killed master, none once every key was served again.
    let settle = Duration::from_secs(2);
    for e in &r.errors {
        assert!(
            e.at >= killed_at && e.at <= served_at + settle,
            "an error outside the failover: {e:?}"
        );
        assert!(
            require_full_coverage || e.keys.iter().any(|k| victim_keys.contains(k)),
            "an error for keys on masters that stayed up: {e:?}"
        );
    }
    let elsewhere = r
        .errors
        .iter()
        .filter(|e| !e.keys.iter().any(|k| victim_keys.contains(k)))
        .count();
    // What the cluster lost (acknowledged by the dead master, never
    // replicated): misses, or an older value read, of its keys only.
    let key_of_stale = |s: &String| {
        keys.iter()
            .find(|k| s.contains(&format!(" {k}")))
            .cloned()
            .unwrap_or_default()
    };
    let mut lost: HashSet<String> = HashSet::new();
    for m in &r.misses {
        assert!(
            victim_keys.contains(&m.key),
            "an acknowledged key on a master that stayed up was lost: {m:?}"
        );
        assert!(
            m.acked_at <= promoted_at,
            "lost a key written after the failover: {m:?}"
        );
        lost.insert(m.key.clone());
    }
    for s in &r.stale {
        let k = key_of_stale(s);
        assert!(
            victim_keys.contains(&k),
            "an older value read for a key on a master that stayed up: {s}"
        );
        lost.insert(k);
    }
    let error_secs = r
        .error_span()
        .map_or(Duration::ZERO, |(first, last)| last - first);
    print_window(test, &r, killed_at, served_at);
    eprintln!(
        "{test}: first get after the kill {fast_fail:?} ({}); promotion seen {} after the kill; \
         every key served {} after the kill; SERVER_ERRORs: {} over {} ({elsewhere} without a key on the killed master; \
         {} keys, {} on the killed master); lost acknowledged keys: {} ({} misses, {} older values)",
        reply.trim_end(),
        secs(promoted_at - killed_at),
        secs(served_at - killed_at),
        r.errors.len(),
        secs(error_secs),
        keys.len(),
        victim_keys.len(),
        lost.len(),
        r.misses.len(),
        r.stale.len(),
    );
}

/// Filler keys put in the hash-tagged slot the reshard moves first.
const FILLER_KEYS: usize = 30_000;

/// `redis-cli --cluster reshard` moves 1500 slots between two masters
/// while the load runs: zero errors, zero wrong values. One load spreads
/// its keys over every slot; another keeps all of its keys in one slot
/// among the moved ones (a `{hash tag}`), padded with filler keys so that
/// slot takes a while to migrate: its multi-gets mix keys already moved,
/// not yet moved and deleted, which the nodes refuse with `-TRYAGAIN` for
/// as long as the migration lasts.
#[test]
fn cluster_reshard_under_load() {
    let test = "cluster_reshard_under_load";
    if !require_tools(test, TOOLS) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    let masters = nodes.masters();
    let (from, to) = (masters[0], masters[1]);
    // redis-cli moves a source's slots from its lowest up.
    let first = nodes
        .slot_ranges()
        .iter()
        .filter(|r| r.2 == from)
        .map(|r| r.0)
        .min()
        .expect("the source serves slots");
    let tag = (0..)
        .map(|i| format!("{{rs{i}}}"))
        .find(|t| (first..first + 100).contains(&nodes.keyslot(t)))
        .expect("a tag in the moved slots");
    let mut filler = RedisClient::connect(&nodes.addrs()[from], Duration::from_secs(10))
        .expect("connect to the source");
    for chunk in 0..FILLER_KEYS / 1000 {
        let keys: Vec<String> = (0..1000)
            .map(|i| format!("{tag}:filler:{}", chunk * 1000 + i))
            .collect();
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for k in &keys {
            args.push(k.as_bytes());
            args.push(b"x");
        }
        assert_eq!(
            filler.cmd(&args).expect("MSET"),
            Resp::Simple("OK".into()),
            "filler keys"
        );
    }
    let memshift = memshift_telling_errors(&nodes);
    let spread = load_with(memshift.addr(), "rs", 4);
    let tagged = load_with(memshift.addr(), &tag, 4);
    run_ops(&spread, 1000, "before the reshard");
    run_ops(&tagged, 1000, "before the reshard");
    let (from_id, to_id) = (nodes.node_id(from), nodes.node_id(to));
    let (from_id, to_id) = (
        String::from_utf8_lossy(&from_id).into_owned(),
        String::from_utf8_lossy(&to_id).into_owned(),
    );
    let started = Instant::now();
    let ops_before = spread.ops() + tagged.ops();
    nodes.redis_cli(&[
        "reshard",
        &nodes.addrs()[from],
        "--cluster-from",
        &from_id,
        "--cluster-to",
        &to_id,
        "--cluster-slots",
        "1500",
        "--cluster-yes",
    ]);
    let ended = Instant::now();
    let ops_during = spread.ops() + tagged.ops() - ops_before;
    nodes.wait_ok();
    assert_eq!(
        nodes.master_of(nodes.keyslot(&tag)),
        to,
        "the tagged slot moved"
    );
    run_ops(&spread, 1000, "after the reshard");
    run_ops(&tagged, 1000, "after the reshard");
    for (name, r) in [("spread", spread.stop()), ("tagged", tagged.stop())] {
        let what = format!("{test} ({name} keys)");
        print_window(&what, &r, started, ended);
        eprintln!(
            "{what}: SERVER_ERRORs {}, misses {}, wrong values {}",
            r.errors.len(),
            r.misses.len(),
            r.cross_talk.len() + r.stale.len()
        );
        assert_untouched(&r, &what);
    }
    eprintln!("{test}: {ops_during} ops during the reshard");
    assert!(ops_during > 0, "the load ran during the reshard");
}

/// A 7th node joins as an empty master and `rebalance
/// --cluster-use-empty-masters` moves slots to it under load: zero errors,
/// and memshift serves its keys without a reload.
#[test]
fn cluster_add_node_and_rebalance_under_load() {
    let test = "cluster_add_node_and_rebalance_under_load";
    if !require_tools(test, TOOLS) {
        return;
    }
    let mut nodes = RedisClusterNodes::start();
    let memshift = memshift_telling_errors(&nodes);
    let load = load(memshift.addr(), "an");
    run_ops(&load, 2000, "before the new node");
    let started = Instant::now();
    let added = nodes.add_master();
    let ops_before = load.ops();
    nodes.redis_cli(&[
        "rebalance",
        &nodes.addrs()[nodes.live_node()],
        "--cluster-use-empty-masters",
    ]);
    let ended = Instant::now();
    let ops_during = load.ops() - ops_before;
    nodes.wait_ok();
    assert!(
        nodes.masters().contains(&added),
        "the new node serves slots after the rebalance"
    );
    // The load keeps writing: some of its keys now live on the new master,
    // which only memshift's own connections to it can have put there.
    run_ops(&load, 3000, "after the rebalance");
    let r = load.stop();
    let on_new = r
        .keys
        .iter()
        .filter(|k| nodes.master_of(nodes.keyslot(k)) == added)
        .count();
    let mut c = memshift.client();
    let served_by_new = r
        .keys
        .iter()
        .filter(|k| nodes.master_of(nodes.keyslot(k)) == added)
        .filter(|k| {
            c.request_str(format!("get {k}\r\n").as_bytes())
                .is_ok_and(|reply| !reply.starts_with("SERVER_ERROR"))
        })
        .count();
    print_window(test, &r, started, ended);
    eprintln!(
        "{test}: {ops_during} ops during the rebalance; {on_new} of {} keys on the new master; \
         SERVER_ERRORs {}, misses {}, wrong values {}",
        r.keys.len(),
        r.errors.len(),
        r.misses.len(),
        r.cross_talk.len() + r.stale.len()
    );
    assert!(ops_during > 0, "the load ran during the rebalance");
    assert!(on_new > 0, "some keys moved to the new master");
    assert_eq!(
        served_by_new, on_new,
        "every key on the new master is served"
    );
    assert_untouched(&r, test);
}

/// memshift on `nodes` with `read_errors_as_misses = false`: the checks
/// tell a failed read (allowed during a failover) from a miss (a lost key).
fn memshift_telling_errors(nodes: &RedisClusterNodes) -> memshift_tests::Memshift {
    let redis = "timeout_ms = 1000\ncluster_refresh_ms = 500\nread_errors_as_misses = false\n";
    nodes.memshift_with("", redis).0
}
