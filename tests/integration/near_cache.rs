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
//!   again once they are back;
//! - a shard restart (its data lost) drops that shard's entries;
//! - with `tracking-table-max-keys 10` on the shards, raw writes of 100
//!   cached keys are all seen;
//! - multi-key get/gets are answered per key from the cache, in request
//!   order, with the same invalidation; gat/gats/touch invalidate; `stats`
//!   has `near_cache_*` lines only with the near cache on.
//!
//! The two-proxy zipf soak is `near_cache_zipf.rs`.

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

pub(crate) struct Pair {
    pub(crate) a: Memshift,
    pub(crate) b: Memshift,
    pub(crate) b_admin: u16,
    pub(crate) shards: Vec<RedisServer>,
}

fn start() -> Pair {
    start_pair(2, 2)
}

/// A and B over `shards` fresh shards, near cache on in both (entries live
/// up to a minute; a key is admitted on its `admit_reads`-th read).
pub(crate) fn start_pair(shards: usize, admit_reads: u32) -> Pair {
    start_pair_with(shards, admit_reads, "")
}

/// [`start_pair`] with more `[server]` lines (e.g. `threads = 1`).
pub(crate) fn start_pair_with(shards: usize, admit_reads: u32, server_extra: &str) -> Pair {
    let shards: Vec<RedisServer> = (0..shards).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
    let opts = ClusterOptions {
        shards: shards.len(),
        extra_tables: format!(
            "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = {admit_reads}\n"
        ),
        // Generous: a slow reply on a loaded box must not fail a read.
        timeout_ms: 2000,
        server_extra: server_extra.to_owned(),
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
    pub(crate) fn wait_tracking(&self) {
        for s in &self.shards {
            s.wait_tracking_clients(2);
        }
    }

    pub(crate) fn shard_of(&self, key: &str) -> &RedisServer {
        &self.shards[self.shard_index(key)]
    }

    pub(crate) fn shard_index(&self, key: &str) -> usize {
        wait_until(DELIVERY, POLL, "the key in Redis", || {
            self.shards
                .iter()
                .position(|s| s.cmd(&[b"EXISTS", key.as_bytes()]).as_int() == Some(1))
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
        for id in shard.tracking_client_ids() {
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

/// `get`/`gets` of several keys through `c`: the whole reply, escaped.
fn multi(c: &mut McClient, cmd: &str, keys: &[&str]) -> String {
    c.send(format!("{cmd} {}\r\n", keys.join(" ")).as_bytes())
        .expect("send multi-get");
    let units = c.read_reply().expect("multi-get reply");
    let raw: Vec<u8> = units.iter().flat_map(|u| u.raw()).collect();
    escape(&raw, 4000)
}

/// The reply memcached gives to `get` of `keys`, with `value(key)` for hits.
fn expected(keys: &[&str], value: impl Fn(&str) -> Option<String>) -> String {
    let mut want = String::new();
    for k in keys {
        if let Some(v) = value(k) {
            want.push_str(&format!("VALUE {k} 0 {}\r\n{v}\r\n", v.len()));
        }
    }
    want.push_str("END\r\n");
    escape(want.as_bytes(), 4000)
}

#[test]
fn near_cache_multi_get_answers_each_key_in_request_order() {
    if !require_tools("near_cache_multi_get", &["redis-server"]) {
        return;
    }
    let pair = start();
    let (mut a, mut b) = (pair.a.client(), pair.b.client());
    let names: Vec<String> = (0..10).map(|i| format!("nc:m:{i}")).collect();
    for (i, k) in names.iter().enumerate() {
        a.set(k, format!("a-{i}").as_bytes())
            .expect("set through A");
    }
    // Misses in between, a key twice: order and duplicates as memcached.
    let mut keys: Vec<&str> = names.iter().map(String::as_str).collect();
    keys.insert(3, "nc:m:absent");
    keys.push("nc:m:0");
    let current = |gen: &dyn Fn(usize) -> String| {
        let gen = |k: &str| -> Option<String> {
            let i: usize = k.strip_prefix("nc:m:")?.parse().ok()?;
            Some(gen(i))
        };
        expected(&keys, gen)
    };
    let old = current(&|i| format!("a-{i}"));
    // Until a whole multi-get is answered from the cache.
    wait_until(
        DELIVERY,
        POLL,
        "a multi-get served from the near cache",
        || {
            let before = metric(pair.b_admin, HITS);
            assert_eq!(multi(&mut b, "get", &keys), old);
            (metric(pair.b_admin, HITS) >= before + 10.0).then_some(())
        },
    );

    // Writes through A and in Redis are seen in the multi-get.
    a.set("nc:m:3", b"A-3").expect("set through A");
    let item = encode_item(0, b"R-7");
    pair.shard_of("nc:m:7").cmd(&[b"SET", b"nc:m:7", &item]);
    let new = current(&|i| match i {
        3 => "A-3".into(),
        7 => "R-7".into(),
        _ => format!("a-{i}"),
    });
    poll_until(DELIVERY, POLL, || {
        (multi(&mut b, "get", &keys) == new).then_some(())
    })
    .unwrap_or_else(|| panic!("B still answers {}", multi(&mut b, "get", &keys)));
    for _ in 0..20 {
        assert_eq!(multi(&mut b, "get", &keys), new);
    }

    // gets: current CAS uniques, the same as a single-key gets shows.
    let gets = multi(&mut b, "gets", &["nc:m:1", "nc:m:2"]);
    for k in ["nc:m:1", "nc:m:2"] {
        let one = multi(&mut b, "gets", &[k]);
        let header = one.split("\\r\\n").next().expect("VALUE line");
        assert!(gets.contains(header), "{gets} lacks {header}");
    }

    // Read-your-writes in one pipelined packet: the write, then a multi-get.
    b.send(b"set nc:m:5 0 0 3\r\nB-5\r\nget nc:m:4 nc:m:5 nc:m:6\r\n")
        .expect("pipelined set + get");
    let mut reply: Vec<u8> = Vec::new();
    for _ in 0..2 {
        reply.extend(b.read_reply().expect("reply").iter().flat_map(|u| u.raw()));
    }
    assert_eq!(
        escape(&reply, 400),
        escape(
            b"STORED\r\nVALUE nc:m:4 0 3\r\na-4\r\nVALUE nc:m:5 0 3\r\nB-5\r\nVALUE nc:m:6 0 3\r\na-6\r\nEND\r\n",
            400
        )
    );

    // gat / gats / touch that expire the item: never served from the cache.
    for (i, cmd) in [
        (1, "gat -1 nc:m:1\r\n"),
        (2, "gats -1 nc:m:2\r\n"),
        (8, "touch nc:m:8 -1\r\n"),
    ] {
        let k = format!("nc:m:{i}");
        wait_until(DELIVERY, POLL, "cached in B", || {
            let before = metric(pair.b_admin, HITS);
            multi(&mut b, "get", &[&k, "nc:m:9"]);
            (metric(pair.b_admin, HITS) >= before + 2.0).then_some(())
        });
        b.send(cmd.as_bytes()).expect("send gat/touch");
        b.read_reply().expect("gat/touch reply");
        assert_eq!(
            multi(&mut b, "get", &[&k, "nc:m:9"]),
            expected(&[&k, "nc:m:9"], |x| (x == "nc:m:9").then(|| "a-9".into())),
            "{cmd:?}"
        );
    }

    // `stats`: near_cache_* lines with the near cache on, none without.
    let stats = b.request_str(b"stats\r\n").expect("stats");
    for line in [
        "near_cache_hits",
        "near_cache_misses",
        "near_cache_bytes",
        "near_cache_entries",
    ] {
        assert!(
            stats.contains(&format!("STAT {line} ")),
            "{line} in:\n{stats}"
        );
    }
    let hits: f64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("STAT near_cache_hits "))
        .and_then(|v| v.trim().parse().ok())
        .expect("near_cache_hits value");
    assert!(hits > 0.0 && hits <= metric(pair.b_admin, HITS));
    let plain = memshift_tests::Cluster::start_with(ClusterOptions {
        shards: 1,
        ..ClusterOptions::default()
    });
    let stats = plain.client().request_str(b"stats\r\n").expect("stats");
    assert!(!stats.contains("near_cache"), "{stats}");
}

#[test]
fn near_cache_drops_a_restarted_shards_entries() {
    if !require_tools("near_cache_shard_restart", &["redis-server"]) {
        return;
    }
    let mut pair = start();
    let (mut a, mut b) = (pair.a.client(), pair.b.client());
    for round in 0..3 {
        let key = format!("nc:restart:{round}");
        a.set(&key, b"cached").expect("set through A");
        pair.cache_in_b(&mut b, &key, b"cached");
        let shard = pair.shard_index(&key);
        // Data lost with the restart: the key is gone from Redis.
        pair.shards[shard].restart();
        let deadline = Instant::now() + DELIVERY * 4;
        // Until B answers again (errors while it reconnects): a miss, never
        // the cached item.
        loop {
            match b.get(&key) {
                Ok(got) => {
                    assert_eq!(got, None, "{key}: cached item served after the restart");
                    break;
                }
                Err(_) if Instant::now() < deadline => {
                    b = pair.b.client();
                    std::thread::sleep(POLL * 10);
                }
                Err(e) => panic!("B does not answer after the restart: {e}"),
            }
        }
        for _ in 0..50 {
            assert_eq!(b.get(&key).expect("get").as_deref(), None);
        }
        // Tracking again: B caches that shard's keys again.
        pair.wait_tracking();
        a.set(&key, b"after").expect("set through A");
        pair.cache_in_b(&mut b, &key, b"after");
        assert_eq!(b.get(&key).expect("get").as_deref(), Some(&b"after"[..]));
    }
}

#[test]
fn near_cache_tracking_table_overflow_serves_nothing_stale() {
    if !require_tools("near_cache_tracking_overflow", &["redis-server"]) {
        return;
    }
    let pair = start();
    for s in &pair.shards {
        assert_eq!(
            s.cmd(&[b"CONFIG", b"SET", b"tracking-table-max-keys", b"10"]),
            Resp::Simple("OK".into())
        );
    }
    let (mut a, mut b) = (pair.a.client(), pair.b.client());
    let keys: Vec<String> = (0..100).map(|i| format!("nc:of:{i}")).collect();
    for k in &keys {
        a.set(k, b"cached").expect("set through A");
        pair.cache_in_b(&mut b, k, b"cached");
    }
    let mut delays = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let value = format!("raw-{i}");
        let item = encode_item(0, value.as_bytes());
        pair.shard_of(k).cmd(&[b"SET", k.as_bytes(), &item]);
        delays.push(seen_by(&mut b, k, Some(value.as_bytes())));
    }
    // And none of them ever reads old again.
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            b.get(k).expect("get").as_deref(),
            Some(format!("raw-{i}").as_bytes())
        );
    }
    report("raw SET with tracking-table-max-keys 10", delays);
}
