//! `redis.read_from = "replica_preferred"` (issue 26 item 2), real
//! processes: one Sentinel shard (a primary and a replica, three
//! sentinels) with a long `down-after-milliseconds`, so a paused primary
//! stays the primary (no failover in these tests).
//!
//! - plain `get` and RESP `GET` are served by the replica (its
//!   `keyspace_hits` grow, the primary's do not), `gets` by the primary;
//! - the primary paused: plain gets keep answering from the replica, while
//!   sets and gets fail within the timeout;
//! - the replica paused, then killed: reads fall back to the primary (a
//!   read the replica fails is sent once more there);
//! - a reload to `read_from = "primary"` sends plain reads to the primary;
//! - near cache on: a read served by the replica never fills it (fills
//!   read the primary).

use std::time::{Duration, Instant};

use memshift_tests::ops_support::{metric, poll_until};
use memshift_tests::process::{start_memshift_on_free_ports, RedisServer};
use memshift_tests::sentinel::SentinelTopology;
use memshift_tests::{require_tools, Memshift, RedisClient, Resp};

/// Sentinel never sees the paused primary as down during a test.
const DOWN_AFTER_MS: u64 = 60_000;
const TIMEOUT_MS: u64 = 500;
const REPLICAS_SEEN: &str = "memshift_replica_reads_total{shard=\"s1\"}";

struct Setup {
    topo: SentinelTopology,
    memshift: Memshift,
    admin: u16,
    resp: String,
    config: String,
}

fn setup(near: &str) -> Option<Setup> {
    if !require_tools("sentinel_replica", &["redis-server"]) {
        return None;
    }
    let topo = SentinelTopology::start_with(1, DOWN_AFTER_MS);
    let mut resp = String::new();
    let (memshift, admin, config) = start_memshift_on_free_ports(|port, admin| {
        resp = format!("127.0.0.1:{}", memshift_tests::free_port());
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nresp_listen = \"{resp}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [redis]\nsentinels = [{}]\nshards = [{}]\ntimeout_ms = {TIMEOUT_MS}\nread_from = \"replica_preferred\"\n\
             [migration]\nphase = \"redis\"\n{near}",
            topo.sentinel_list(),
            topo.shard_list()
        )
    });
    let s = Setup {
        topo,
        memshift,
        admin,
        resp,
        config,
    };
    // The replica is chosen with Sentinel's periodic re-ask (every second).
    // A new key each time: with the near cache on, a key read before (or
    // set through memshift) is served from the cache, never the replica.
    let mut c = s.memshift.client();
    c.set("probe", b"x").expect("set probe");
    let mut probe = 0u32;
    let chosen = poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
        probe += 1;
        let _ = c.get(&format!("probe-{probe}"));
        (metric(s.admin, REPLICAS_SEEN) > 0.0).then_some(())
    });
    assert!(chosen.is_some(), "no read went to a replica within 20 s");
    Some(s)
}

impl Setup {
    fn primary(&self) -> &RedisServer {
        &self.topo.shards[0].nodes[0]
    }

    fn replica(&self) -> &RedisServer {
        &self.topo.shards[0].nodes[1]
    }

    fn resp_client(&self) -> RedisClient {
        RedisClient::connect(&self.resp, Duration::from_secs(5)).expect("connect to RESP")
    }
}

/// `keyspace_hits` of a node's `INFO stats`.
fn hits(node: &RedisServer) -> u64 {
    let Resp::Bulk(Some(info)) = node.cmd(&[b"INFO", b"stats"]) else {
        panic!("INFO stats of {}", node.addr());
    };
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("keyspace_hits:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no keyspace_hits from {}", node.addr()))
}

/// Waits until the replica holds `key` (replication is asynchronous).
fn replicated(s: &Setup, key: &str) {
    let there = poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
        (s.replica().cmd(&[b"EXISTS", key.as_bytes()]).as_int() == Some(1)).then_some(())
    });
    assert!(there.is_some(), "{key} never reached the replica");
}

#[test]
fn plain_reads_go_to_the_replica_and_gets_to_the_primary() {
    let Some(s) = setup("") else { return };
    let mut c = s.memshift.client();
    c.set("k", b"v1").unwrap();
    replicated(&s, "k");
    let (p0, r0) = (hits(s.primary()), hits(s.replica()));
    for _ in 0..20 {
        assert_eq!(c.get("k").unwrap().as_deref(), Some(&b"v1"[..]));
    }
    let reply = c.request(b"get k probe\r\n").unwrap();
    assert!(reply.ends_with(b"END\r\n"), "{reply:?}");
    let mut r = s.resp_client();
    for _ in 0..5 {
        let got = r.cmd(&[b"GET", b"k"]).unwrap();
        assert_eq!(got, Resp::Bulk(Some(b"v1".to_vec())));
    }
    assert_eq!(
        r.cmd(&[b"EXISTS", b"k", b"probe"]).unwrap().as_int(),
        Some(2)
    );
    let (p1, r1) = (hits(s.primary()), hits(s.replica()));
    // 20 gets, a multi-get of 2, 5 GETs, EXISTS of 2.
    assert!(r1 - r0 >= 29, "replica hits {r0} -> {r1}");
    assert_eq!(p1, p0, "the primary served plain reads");

    // gets (its CAS may be used by a cas) reads the primary.
    for _ in 0..10 {
        let reply = c.request_str(b"gets k\r\n").unwrap();
        assert!(reply.starts_with("VALUE k 0 2 "), "{reply}");
    }
    assert!(hits(s.primary()) >= p1 + 10);
    assert_eq!(hits(s.replica()), r1, "gets went to the replica");
    // Counted per request: 20 + 1 + 5 + 1.
    assert!(metric(s.admin, REPLICAS_SEEN) >= 27.0);
}

#[test]
fn with_the_primary_paused_plain_gets_answer_from_the_replica() {
    let Some(s) = setup("") else { return };
    let mut c = s.memshift.client();
    c.set("k", b"before").unwrap();
    replicated(&s, "k");
    s.primary().signal(libc::SIGSTOP);
    let bound = Duration::from_millis(TIMEOUT_MS * 4);
    for _ in 0..20 {
        let start = Instant::now();
        assert_eq!(c.get("k").unwrap().as_deref(), Some(&b"before"[..]));
        assert!(start.elapsed() < bound, "get took {:?}", start.elapsed());
    }
    let set = c.request_str(b"set k 0 0 5\r\nafter\r\n").unwrap();
    assert!(
        set.starts_with("SERVER_ERROR"),
        "set on a paused primary: {set}"
    );
    let gets = c.request_str(b"gets k\r\n").unwrap();
    assert!(
        gets.starts_with("SERVER_ERROR") || gets == "END\r\n",
        "gets on a paused primary: {gets}"
    );
    let mut r = s.resp_client();
    assert_eq!(
        r.cmd(&[b"GET", b"k"]).unwrap(),
        Resp::Bulk(Some(b"before".to_vec()))
    );
    s.primary().signal(libc::SIGCONT);
    // Back: writes work again (the replica never took one).
    let back = poll_until(Duration::from_secs(15), Duration::from_millis(100), || {
        c.set("k", b"after").ok()
    });
    assert!(back.is_some(), "sets did not recover after SIGCONT");
}

#[test]
fn a_failed_replica_sends_reads_to_the_primary() {
    let Some(mut s) = setup("") else { return };
    let mut c = s.memshift.client();
    c.set("k", b"v").unwrap();
    replicated(&s, "k");
    let bound = Duration::from_millis(TIMEOUT_MS * 3);
    let check = |c: &mut memshift_tests::McClient, what: &str| {
        for i in 0..10 {
            let start = Instant::now();
            assert_eq!(
                c.get("k").unwrap().as_deref(),
                Some(&b"v"[..]),
                "read {i}, replica {what}"
            );
            assert!(
                start.elapsed() < bound,
                "read {i}, replica {what}: {:?}",
                start.elapsed()
            );
        }
    };
    // Paused: the read in flight times out there and is answered by the
    // primary; the next ones find the replica connection down.
    let p0 = hits(s.primary());
    s.replica().signal(libc::SIGSTOP);
    check(&mut c, "paused");
    s.replica().signal(libc::SIGCONT);
    assert!(hits(s.primary()) > p0, "the primary answered none");
    // Killed: its connection is lost at once.
    s.topo.shards[0].nodes[1].stop();
    check(&mut c, "killed");
}

#[test]
fn a_reload_to_primary_reads_stops_replica_reads() {
    let Some(s) = setup("") else { return };
    let mut c = s.memshift.client();
    c.set("k", b"v").unwrap();
    replicated(&s, "k");
    s.memshift.rewrite_config(&s.config.replace(
        "read_from = \"replica_preferred\"",
        "read_from = \"primary\"",
    ));
    s.memshift.sighup();
    poll_until(Duration::from_secs(20), Duration::from_millis(20), || {
        (metric(s.admin, "memshift_config_reloads_total{result=\"ok\"}") >= 1.0).then_some(())
    })
    .expect("the reload is applied");
    let (p0, r0) = (hits(s.primary()), hits(s.replica()));
    for _ in 0..10 {
        assert_eq!(c.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    }
    assert_eq!(hits(s.replica()), r0, "a plain get read the replica");
    assert!(hits(s.primary()) >= p0 + 10);
}

#[test]
fn the_near_cache_never_fills_from_a_replica_read() {
    // A key is admitted on its second read within the window.
    let near = "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 2\nadmit_window_ms = 60000\n";
    let Some(s) = setup(near) else { return };
    let mut c = s.memshift.client();
    // The replica's copy of `k` made to differ from the primary's (items
    // as memshift encodes them, copied from other keys; written on the
    // nodes, not through memshift, whose write-through sets would fill).
    c.set("from_primary", b"primary").unwrap();
    c.set("from_replica", b"replica").unwrap();
    let raw = |key: &[u8]| match s.primary().cmd(&[b"GET", key]) {
        Resp::Bulk(Some(raw)) => raw,
        other => panic!("raw item: {other:?}"),
    };
    let (raw_p, raw_r) = (raw(b"from_primary"), raw(b"from_replica"));
    assert_eq!(
        s.primary().cmd(&[b"SET", b"k", &raw_p]),
        Resp::Simple("OK".into())
    );
    replicated(&s, "k");
    let replica = s.replica();
    replica.cmd(&[b"CONFIG", b"SET", b"replica-read-only", b"no"]);
    assert_eq!(
        replica.cmd(&[b"SET", b"k", &raw_r]),
        Resp::Simple("OK".into())
    );
    // 1st read: not admitted, a plain GET: the replica's value.
    assert_eq!(c.get("k").unwrap().as_deref(), Some(&b"replica"[..]));
    // 2nd: admitted, read to fill, from the primary; then cache hits.
    for i in 0..5 {
        assert_eq!(
            c.get("k").unwrap().as_deref(),
            Some(&b"primary"[..]),
            "read {i} after the replica's answer"
        );
    }
    let hits_metric = metric(s.admin, "memshift_near_cache_hits_total");
    assert!(hits_metric >= 1.0, "no near-cache hit: {hits_metric}");
}
