//! Near cache (`[near_cache] enabled = true`), real processes: two memshift
//! processes A and B over the same two Redis shards, both with the near
//! cache on and `max_ttl_ms` at a minute, so a missed invalidation shows as
//! a stale read for far longer than any poll here waits.
//!
//! - a write through A, a raw Redis `SET` and a raw `DEL` of the item key
//!   are seen through B within a bounded delivery delay (p50/max printed);
//! - read-your-writes: set then get on one connection of one proxy always
//!   returns the new value (no polling);
//! - `CLIENT KILL` of B's invalidation connections, then a raw write while
//!   they are down: B never serves the cached value afterwards, and caches
//!   again once they are back.

use std::time::{Duration, Instant};

use memshift_tests::migration_support::encode_item;
use memshift_tests::ops_support::{metric, poll_until, wait_until};
use memshift_tests::process::start_memshift_on_free_ports;
use memshift_tests::{
    escape, memshift_config, require_tools, ClusterOptions, McClient, Memshift, RedisServer, Resp,
};

/// How long an invalidation may take to reach B on a loaded 2-core box.
const DELIVERY: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(1);
const ROUNDS: usize = 40;
const HITS: &str = "memshift_near_cache_hits_total";

struct Pair {
    a: Memshift,
    b: Memshift,
    b_admin: u16,
    shards: Vec<RedisServer>,
}

fn start() -> Pair {
    let shards: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
    let opts = ClusterOptions {
        shards: 2,
        extra_tables: "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 2\n".into(),
        ..ClusterOptions::default()
    };
    let (a, _, _) =
        start_memshift_on_free_ports(|port, admin| memshift_config(port, admin, &addrs, &opts));
    let (b, b_admin, _) =
        start_memshift_on_free_ports(|port, admin| memshift_config(port, admin, &addrs, &opts));
    let pair = Pair {
        a,
        b,
        b_admin,
        shards,
    };
    pair.wait_tracking();
    pair
}

impl Pair {
    /// Both proxies' invalidation connections are up on every shard
    /// (RESP3 clients in `CLIENT LIST`).
    fn wait_tracking(&self) {
        for s in &self.shards {
            wait_until(DELIVERY, POLL * 10, "two tracking connections", || {
                (tracking_ids(s).len() == 2).then_some(())
            });
        }
    }

    fn shard_of(&self, key: &str) -> &RedisServer {
        wait_until(DELIVERY, POLL, "the key in Redis", || {
            self.shards
                .iter()
                .find(|s| s.cmd(&[b"EXISTS", key.as_bytes()]).as_int() == Some(1))
        })
    }

    /// Read `key` through B until one read is a near-cache hit of `want`.
    fn cache_in_b(&self, c: &mut McClient, key: &str, want: &[u8]) {
        wait_until(DELIVERY, POLL, "a near-cache hit in B", || {
            let before = metric(self.b_admin, HITS);
            let got = c.get(key).expect("get through B");
            assert_eq!(got.as_deref(), Some(want), "{key} through B");
            (metric(self.b_admin, HITS) > before).then_some(())
        });
    }
}

/// Ids of the RESP3 (tracking) clients of a shard.
fn tracking_ids(s: &RedisServer) -> Vec<String> {
    let Resp::Bulk(Some(list)) = s.cmd(&[b"CLIENT", b"LIST"]) else {
        panic!("CLIENT LIST");
    };
    String::from_utf8_lossy(&list)
        .lines()
        .filter(|l| l.contains(" resp=3"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

/// Poll B until `key` reads as `want`; the time it took.
fn seen_by(c: &mut McClient, key: &str, want: Option<&[u8]>) -> Duration {
    let started = Instant::now();
    let last = std::cell::RefCell::new(None);
    poll_until(DELIVERY, POLL, || {
        let got = c.get(key).expect("get through B");
        let ok = got.as_deref() == want;
        *last.borrow_mut() = got;
        ok.then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{key}: B still reads {:?} {DELIVERY:?} after the write of {:?}",
            last.borrow().as_deref().map(|v| escape(v, 40)),
            want.map(|v| escape(v, 40))
        )
    });
    started.elapsed()
}

fn report(what: &str, mut delays: Vec<Duration>) {
    delays.sort();
    println!(
        "near cache: {what}: {} writes seen through B, delay p50 {:?} max {:?}",
        delays.len(),
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
}

#[test]
fn near_cache_writes_elsewhere_are_seen_within_the_delivery_delay() {
    if !require_tools("near_cache_writes_elsewhere", &["redis-server"]) {
        return;
    }
    let pair = start();
    let (mut a, mut b) = (pair.a.client(), pair.b.client());
    let mut through_a = Vec::new();
    let mut raw = Vec::new();
    for round in 0..ROUNDS {
        let key = format!("nc:{round}");
        let old = format!("old-{round}").into_bytes();
        a.set(&key, &old).expect("set through A");
        pair.cache_in_b(&mut b, &key, &old);

        // A write through the other proxy.
        let new = format!("new-{round}").into_bytes();
        a.set(&key, &new).expect("set through A");
        through_a.push(seen_by(&mut b, &key, Some(&new)));

        // A raw Redis SET of the item, then a raw DEL.
        pair.cache_in_b(&mut b, &key, &new);
        let shard = pair.shard_of(&key);
        let item = encode_item(0, format!("raw-{round}").as_bytes());
        assert_eq!(
            shard.cmd(&[b"SET", key.as_bytes(), &item]),
            Resp::Simple("OK".into())
        );
        raw.push(seen_by(
            &mut b,
            &key,
            Some(format!("raw-{round}").as_bytes()),
        ));
        pair.cache_in_b(&mut b, &key, format!("raw-{round}").as_bytes());
        assert_eq!(shard.cmd(&[b"DEL", key.as_bytes()]).as_int(), Some(1));
        raw.push(seen_by(&mut b, &key, None));
    }
    report("set through A", through_a);
    report("raw SET/DEL in Redis", raw);
}

#[test]
fn near_cache_reads_its_own_writes() {
    if !require_tools("near_cache_reads_its_own_writes", &["redis-server"]) {
        return;
    }
    let pair = start();
    let mut b = pair.b.client();
    let key = "nc:ryw";
    for round in 0..300 {
        let value = format!("v{round}").into_bytes();
        b.set(key, &value).expect("set");
        // Twice: the second read may be served by the near cache.
        for _ in 0..2 {
            assert_eq!(b.get(key).expect("get").as_deref(), Some(&value[..]));
        }
        // Pipelined: a write and the read after it, in one packet.
        let next = format!("w{round}");
        b.send(format!("set {key} 0 0 {}\r\n{next}\r\nget {key}\r\n", next.len()).as_bytes())
            .expect("pipelined set + get");
        let mut reply: Vec<u8> = Vec::new();
        for _ in 0..2 {
            reply.extend(b.read_reply().expect("reply").iter().flat_map(|u| u.raw()));
        }
        let want = format!(
            "STORED\r\nVALUE {key} 0 {}\r\n{next}\r\nEND\r\n",
            next.len()
        );
        assert_eq!(escape(&reply, 200), escape(want.as_bytes(), 200));
        assert_eq!(
            b.get(key).expect("get").as_deref(),
            Some(next.as_bytes()),
            "round {round}"
        );
    }
    assert!(
        metric(pair.b_admin, HITS) > 0.0,
        "the near cache never served a read"
    );
}

#[test]
fn near_cache_drops_a_shard_when_its_invalidation_connection_dies() {
    if !require_tools(
        "near_cache_invalidation_connection_killed",
        &["redis-server"],
    ) {
        return;
    }
    let pair = start();
    let (mut a, mut b) = (pair.a.client(), pair.b.client());
    for round in 0..5 {
        let key = format!("nc:kill:{round}");
        a.set(&key, b"cached").expect("set through A");
        pair.cache_in_b(&mut b, &key, b"cached");
        let shard = pair.shard_of(&key);
        // Kill every tracking connection of the shard, then write while
        // they are gone: no invalidation can be delivered for this write.
        for id in tracking_ids(shard) {
            shard.cmd(&[b"CLIENT", b"KILL", b"ID", id.as_bytes()]);
        }
        let item = encode_item(0, b"written-while-down");
        shard.cmd(&[b"SET", key.as_bytes(), &item]);
        let took = seen_by(&mut b, &key, Some(b"written-while-down"));
        // And never the old value again.
        for _ in 0..50 {
            assert_eq!(
                b.get(&key).expect("get").as_deref(),
                Some(&b"written-while-down"[..])
            );
        }
        println!("near cache: kill round {round}: new value seen after {took:?}");
        // The connections come back and B caches again.
        pair.wait_tracking();
        pair.cache_in_b(&mut b, &key, b"written-while-down");
    }
    assert!(
        metric(
            pair.b_admin,
            "memshift_near_cache_invalidations_total{kind=\"all\"}"
        ) >= 5.0
    );
}
