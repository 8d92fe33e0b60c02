//! Near cache write-through, real processes (two memshift processes A and
//! B over two Redis shards, near cache on in both, entries kept up to a
//! minute): a plain `set` through a proxy fills that proxy's cache with
//! the item it stored (its invalidation connection sends the set and
//! tracks with `NOLOOP`, so its own push does not evict it).
//!
//! - a set through B, then a get through B is a near-cache hit of the new
//!   item, flags and CAS as Redis holds them (`gets` through A);
//! - a write through A or straight into Redis right after (or at the same
//!   time as) a set through B is seen through B within the delivery bound,
//!   and the older value is never read again;
//! - a set with an exptime is never served once Redis has expired it;
//! - a set Redis refuses (`OOM`) leaves no entry: the next read is a miss
//!   that reads the old item from Redis.

use std::time::{Duration, Instant};

use memshift_tests::migration_support::encode_item;
use memshift_tests::ops_support::{metric, wait_until};
use memshift_tests::{escape, require_tools, McClient, RedisClient, Resp};

use crate::near_cache::{start_pair, start_pair_with};

const HITS: &str = "memshift_near_cache_hits_total";
const DELIVERY: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(1);

fn set_flags(c: &mut McClient, key: &str, flags: u32, exptime: u32, value: &[u8]) -> String {
    let mut req = format!("set {key} {flags} {exptime} {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    c.request_str(&req).expect("set")
}

/// `VALUE key flags bytes cas` of a `gets` reply: (flags, cas, data).
fn gets(c: &mut McClient, key: &str) -> Option<(String, String, String)> {
    let reply = c
        .request_str(format!("gets {key}\r\n").as_bytes())
        .expect("gets");
    let mut lines = reply.split("\r\n");
    let head = lines.next()?;
    let f: Vec<&str> = head.split(' ').collect();
    if f.first() != Some(&"VALUE") {
        assert_eq!(reply, "END\r\n", "gets {key}");
        return None;
    }
    Some((f[2].to_owned(), f[4].to_owned(), lines.next()?.to_owned()))
}

#[test]
fn near_cache_write_through_serves_a_set_from_the_cache() {
    if !require_tools("near_cache_write_through_hit", &["redis-server"]) {
        return;
    }
    let pair = start_pair(2, 2);
    let (mut a, mut b) = (pair.a.client(), pair.b.client());
    let rounds = 100;
    let mut hits = 0;
    for round in 0..rounds {
        let key = format!("nc:wt:{}", round % 10);
        let value = format!("value-{round}");
        assert_eq!(
            set_flags(&mut b, &key, 42, 0, value.as_bytes()),
            "STORED\r\n"
        );
        let before = metric(pair.b_admin, HITS);
        // The first read after the set: no admission read needed.
        let got = gets(&mut b, &key).expect("gets through B");
        if metric(pair.b_admin, HITS) > before {
            hits += 1;
        }
        assert_eq!(got.2, value, "{key} through B");
        assert_eq!(got.0, "42", "flags of {key}");
        // A reads what Redis holds: from Redis, or from its own cache once
        // the invalidation of B's set has reached it (keys repeat every
        // 10 rounds, so A may still hold the older item for one delivery).
        wait_until(DELIVERY, POLL, "A to read the item B cached", || {
            (gets(&mut a, &key).as_ref() == Some(&got)).then_some(())
        });
    }
    // A connection's task may move between worker threads (the stores are
    // per thread), so not every read hits; without write-through none does.
    assert!(
        hits * 2 >= rounds,
        "only {hits} of {rounds} reads right after a set were near-cache hits"
    );
}

#[test]
fn near_cache_write_through_never_masks_a_later_write() {
    if !require_tools("near_cache_write_through_masking", &["redis-server"]) {
        return;
    }
    // One worker thread: one store, so a masked write cannot be healed by
    // a read of the newer item on another thread (see docs/near-cache.md).
    let pair = start_pair_with(2, 1, "threads = 1");
    let mut b = pair.b.client();
    let a_addr = pair.a.addr().to_string();
    let b_addr = pair.b.addr().to_string();
    let mut a = pair.a.client();
    for k in 0..7 {
        a.set(&format!("nc:wtm:{k}"), b"first")
            .expect("set through A");
    }
    let mut delays = Vec::new();
    for round in 0..150u32 {
        let key = format!("nc:wtm:{}", round % 7);
        let mine = format!("b-{round}");
        let theirs = format!("x-{round}");
        if round % 5 == 1 {
            // In one Redis event-loop cycle, B's set first: writes paused,
            // both sent, then released together. BCAST merges the two into
            // one push, which the raw write (the last) makes Redis send.
            let shard = pair.shard_of(&key);
            let addr = shard.addr();
            assert_eq!(
                shard.cmd(&[b"CLIENT", b"PAUSE", b"300", b"WRITE"]),
                Resp::Simple("OK".into())
            );
            // On the reading connection (stores are per worker thread).
            let mut req = format!("set {key} 0 0 {}\r\n", mine.len()).into_bytes();
            req.extend_from_slice(mine.as_bytes());
            req.extend_from_slice(b"\r\n");
            b.send(&req).expect("set through B");
            std::thread::sleep(Duration::from_millis(100));
            let item = encode_item(0, theirs.as_bytes());
            let mut raw = RedisClient::connect(&addr, DELIVERY).expect("connect to the shard");
            assert_eq!(
                raw.cmd(&[b"SET", key.as_bytes(), &item]).expect("raw SET"),
                Resp::Simple("OK".into())
            );
            let reply: Vec<u8> = b
                .read_reply()
                .expect("set reply")
                .iter()
                .flat_map(|u| u.raw())
                .collect();
            assert_eq!(reply, b"STORED\r\n");
        } else if round % 3 == 0 {
            // In turn: the set through B, then a raw write in Redis.
            assert_eq!(set_flags(&mut b, &key, 0, 0, mine.as_bytes()), "STORED\r\n");
            let shard = pair.shard_of(&key);
            let item = encode_item(0, theirs.as_bytes());
            shard.cmd(&[b"SET", key.as_bytes(), &item]);
        } else {
            // At the same time: through B and through A, from two threads,
            // so both may land in one Redis event-loop cycle.
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
            let (k1, k2) = (key.clone(), key.clone());
            let (m, t) = (mine.clone(), theirs.clone());
            let (b1, b2) = (barrier.clone(), barrier);
            let (ba, aa) = (b_addr.clone(), a_addr.clone());
            let tb = std::thread::spawn(move || {
                let mut c = McClient::connect(&ba).expect("connect to B");
                b1.wait();
                assert_eq!(set_flags(&mut c, &k1, 0, 0, m.as_bytes()), "STORED\r\n");
            });
            let ta = std::thread::spawn(move || {
                let mut c = McClient::connect(&aa).expect("connect to A");
                b2.wait();
                assert_eq!(set_flags(&mut c, &k2, 0, 0, t.as_bytes()), "STORED\r\n");
            });
            tb.join().expect("set through B");
            ta.join().expect("set through A");
        }
        // Both acknowledged: whatever Redis holds now is final.
        let shard = pair.shard_of(&key);
        let Resp::Bulk(Some(raw)) = shard.cmd(&[b"GET", key.as_bytes()]) else {
            panic!("{key} in Redis");
        };
        let last = if raw.ends_with(theirs.as_bytes()) {
            theirs
        } else {
            mine
        };
        let started = Instant::now();
        wait_until(DELIVERY, POLL, "B reads the last write", || {
            let got = b.get(&key).expect("get through B");
            (got.as_deref() == Some(last.as_bytes())).then_some(())
        });
        delays.push(started.elapsed());
        for _ in 0..20 {
            let got = b.get(&key).expect("get through B");
            assert_eq!(
                got.as_deref().map(|v| escape(v, 40)),
                Some(escape(last.as_bytes(), 40)),
                "{key}: round {round} read an older value after the newer one"
            );
        }
    }
    delays.sort();
    println!(
        "near cache write-through: last write seen through B after p50 {:?} max {:?}",
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
    assert!(metric(pair.b_admin, HITS) > 0.0, "B served nothing");
}

#[test]
fn near_cache_write_through_set_expires_on_time() {
    if !require_tools("near_cache_write_through_expiry", &["redis-server"]) {
        return;
    }
    let pair = start_pair(2, 2);
    let mut b = pair.b.client();
    for round in 0..3 {
        let key = format!("nc:wte:{round}");
        assert_eq!(set_flags(&mut b, &key, 0, 1, b"short-lived"), "STORED\r\n");
        let shard = pair.shard_of(&key);
        let before = metric(pair.b_admin, HITS);
        assert_eq!(
            b.get(&key).expect("get").as_deref(),
            Some(&b"short-lived"[..])
        );
        let cached = metric(pair.b_admin, HITS) > before;
        // Until Redis has expired it, then never again through B.
        wait_until(DELIVERY, POLL, "Redis expires the key", || {
            (shard.cmd(&[b"EXISTS", key.as_bytes()]).as_int() == Some(0)).then_some(())
        });
        for _ in 0..20 {
            assert_eq!(
                b.get(&key).expect("get").as_deref(),
                None,
                "{key} served after Redis expired it (cached: {cached})"
            );
        }
    }
}

#[test]
fn near_cache_write_through_refused_set_leaves_no_entry() {
    if !require_tools("near_cache_write_through_refused", &["redis-server"]) {
        return;
    }
    let pair = start_pair(2, 2);
    let mut b = pair.b.client();
    let key = "nc:wtr";
    assert_eq!(set_flags(&mut b, key, 0, 0, b"old"), "STORED\r\n");
    assert_eq!(b.get(key).expect("get").as_deref(), Some(&b"old"[..]));
    let shard = pair.shard_of(key);
    let config = |v: &[u8]| {
        assert_eq!(
            shard.cmd(&[b"CONFIG", b"SET", b"maxmemory", v]),
            Resp::Simple("OK".into())
        );
    };
    let errors = format!(
        "memshift_backend_errors_total{{backend=\"redis\",shard=\"{}\",kind=\"server\"}}",
        shard.addr()
    );
    let errors_before = metric(pair.b_admin, &errors);
    config(b"1");
    let reply = set_flags(&mut b, key, 0, 0, b"refused");
    config(b"0");
    assert!(
        reply.starts_with("SERVER_ERROR"),
        "set over maxmemory: {reply:?}"
    );
    // The refusal counts against the shard, as on a data connection.
    assert_eq!(
        metric(pair.b_admin, &errors),
        errors_before + 1.0,
        "{errors}"
    );
    let before = metric(pair.b_admin, HITS);
    assert_eq!(b.get(key).expect("get").as_deref(), Some(&b"old"[..]));
    assert_eq!(
        metric(pair.b_admin, HITS),
        before,
        "the read after a refused set was served from the near cache"
    );
}
