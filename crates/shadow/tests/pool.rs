//! The legacy pool client against real memcached processes.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{bounded, single, wait_up, Memcached};
use memshift_shadow::{
    unix_now, BackendError, Expiry, LegacyError, LegacyPool, LegacyRequest, QueueSettings,
    ReplyShape, ReplyTo, Route, ShadowOp, ShadowQueue, TaggedReply,
};
use tokio::sync::mpsc;

#[tokio::test]
async fn set_get_round_trips_flags_and_raw_reply() {
    let mc = Memcached::start();
    let pool = single(mc.addr(), 1000);
    bounded(10, async {
        wait_up(&pool).await;
        for flags in [0u32, 1, 65_535, 4_294_967_295] {
            let key = format!("flags:{flags}");
            pool.set(key.as_bytes(), flags, 0, b"value\r\nwith crlf")
                .await
                .expect("set");
            let item = pool.get(key.as_bytes()).await.expect("get").expect("hit");
            assert_eq!(item.flags, flags);
            assert_eq!(item.data, Bytes::from_static(b"value\r\nwith crlf"));
            assert_eq!(item.cas, None);
        }
        // The raw reply is exactly what memcached sent, for pass-through.
        pool.set(b"raw", 4_294_967_295, 0, b"a").await.expect("set");
        let reply = pool
            .call(
                Route::Key(b"raw"),
                Bytes::from_static(b"get raw\r\n"),
                ReplyShape::UntilEnd,
            )
            .await
            .expect("get");
        assert_eq!(
            reply.raw().as_ref(),
            b"VALUE raw 4294967295 1\r\na\r\nEND\r\n"
        );
        let reply = pool
            .call(
                Route::Key(b"raw"),
                Bytes::from_static(b"gets raw nope\r\n"),
                ReplyShape::UntilEnd,
            )
            .await
            .expect("gets");
        let items: Vec<_> = reply.items().collect();
        assert_eq!(items.len(), 1);
        assert!(items[0].cas.is_some());

        assert_eq!(pool.get(b"missing").await.expect("get"), None);
        assert!(pool.delete(b"raw").await.expect("delete"));
        assert!(!pool.delete(b"raw").await.expect("delete"));
        assert!(!pool.touch(b"raw", 10).await.expect("touch"));

        let hits = pool
            .get_many(&["flags:0", "flags:1", "nope", "flags:4294967295"])
            .await
            .expect("get_many");
        let mut keys: Vec<_> = hits.iter().map(|i| i.key.clone()).collect();
        keys.sort();
        assert_eq!(keys, ["flags:0", "flags:1", "flags:4294967295"]);

        // Long multi-get lines (100 keys of 200 bytes per line).
        let long_keys: Vec<String> = (0..300).map(|i| format!("{i:0>200}")).collect();
        for key in &long_keys {
            pool.set(key.as_bytes(), 9, 0, b"L").await.expect("set");
        }
        let hits = pool.get_many(&long_keys).await.expect("get_many");
        assert_eq!(hits.len(), 300);
        assert!(hits.iter().all(|i| i.flags == 9 && i.data.as_ref() == b"L"));

        assert_eq!(pool.version(0).await.expect("version"), "1.6.18");
        pool.flush_all().await.expect("flush_all");
        assert_eq!(pool.get(b"flags:0").await.expect("get"), None);
    })
    .await;
}

#[tokio::test]
async fn large_value_spans_many_reads() {
    let mc = Memcached::start();
    let pool = single(mc.addr(), 2000);
    bounded(10, async {
        let data: Vec<u8> = (0..900_000u32).map(|i| (i % 251) as u8).collect();
        pool.set(b"big", 7, 0, &data).await.expect("set");
        let item = pool.get(b"big").await.expect("get").expect("hit");
        assert_eq!(item.flags, 7);
        assert!(item.data == data, "data differs");
        // Over the item size limit: memcached refuses, the connection stays
        // in sync.
        let too_big = vec![b'x'; 2 * 1024 * 1024];
        match pool.set(b"huge", 0, 0, &too_big).await {
            Err(LegacyError::Server(line)) => assert!(line.starts_with("SERVER_ERROR"), "{line}"),
            other => panic!("expected a SERVER_ERROR, got {other:?}"),
        }
        assert_eq!(
            pool.get(b"big").await.expect("get").map(|i| i.flags),
            Some(7)
        );
    })
    .await;
}

#[tokio::test]
async fn pipelines_thousand_requests_from_several_tasks() {
    let mc = Memcached::start();
    let pool = Arc::new(single(mc.addr(), 2000));
    bounded(20, async {
        wait_up(&pool).await;
        let mut tasks = Vec::new();
        for t in 0..8 {
            let pool = pool.clone();
            tasks.push(tokio::spawn(async move {
                // Queue all 125 sets before awaiting any: a real pipeline.
                let sets: Vec<_> = (0..125)
                    .map(|i| {
                        let key = format!("t{t}:k{i}");
                        let mut buf = bytes::BytesMut::new();
                        memshift_protocol::memcache::client::storage(
                            &mut buf,
                            memshift_protocol::memcache::StorageCommand::Set,
                            key.as_bytes(),
                            i,
                            0,
                            format!("v{t}-{i}").as_bytes(),
                            false,
                        )
                        .expect("encode");
                        pool.enqueue(Route::Key(key.as_bytes()), buf.freeze(), ReplyShape::Single)
                    })
                    .collect();
                for set in sets {
                    assert_eq!(set.await.expect("set").raw().as_ref(), b"STORED\r\n");
                }
                for i in 0..125u32 {
                    let key = format!("t{t}:k{i}");
                    let item = pool.get(key.as_bytes()).await.expect("get").expect("hit");
                    assert_eq!(item.flags, i);
                    assert_eq!(item.data, format!("v{t}-{i}").into_bytes());
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }

        // The session path: 1000 gets tagged (seq, part) on one channel.
        let (tx, mut rx) = mpsc::unbounded_channel::<TaggedReply>();
        for seq in 0..1000u64 {
            let key = format!("t{}:k{}", seq % 8, seq % 125);
            pool.send_for_key(
                key.as_bytes(),
                LegacyRequest {
                    bytes: Bytes::from(format!("get {key}\r\n")),
                    shape: ReplyShape::UntilEnd,
                    reply: ReplyTo::Tagged {
                        tx: tx.clone(),
                        seq,
                        part: (seq % 3) as u32,
                    },
                },
            );
        }
        let mut seen = HashSet::new();
        for _ in 0..1000 {
            let reply = rx.recv().await.expect("a reply");
            assert_eq!(reply.part, (reply.seq % 3) as u32);
            let items: Vec<_> = reply.result.expect("ok").items().collect();
            assert_eq!(items.len(), 1);
            let want = format!("v{}-{}", reply.seq % 8, reply.seq % 125);
            assert_eq!(items[0].data, want.into_bytes());
            assert!(seen.insert(reply.seq));
        }
    })
    .await;
}

#[tokio::test]
async fn keys_land_on_the_server_placement_chose() {
    let servers = [Memcached::start(), Memcached::start(), Memcached::start()];
    let addrs: Vec<String> = servers.iter().map(|m| m.addr()).collect();
    let placement = |key: &[u8]| (memshift_ring::xxh3(7, key) % 3) as usize;
    let pool: LegacyPool =
        LegacyPool::start(addrs.clone(), Box::new(placement), common::settings(1000));
    let direct: Vec<LegacyPool> = addrs.iter().map(|a| single(a.clone(), 1000)).collect();
    bounded(20, async {
        let mut per_server = [0usize; 3];
        for i in 0..300 {
            let key = format!("placed:{i}");
            pool.set(key.as_bytes(), i, 0, b"x").await.expect("set");
            let chosen = placement(key.as_bytes());
            assert_eq!(pool.server_for_key(key.as_bytes()), chosen);
            per_server[chosen] += 1;
            for (s, server) in direct.iter().enumerate() {
                let found = server.get(key.as_bytes()).await.expect("direct get");
                assert_eq!(found.is_some(), s == chosen, "{key} on server {s}");
            }
        }
        assert!(per_server.iter().all(|&n| n > 50), "{per_server:?}");
        // An out-of-range placement is taken modulo, never a panic.
        let odd: LegacyPool =
            LegacyPool::start(addrs.clone(), Box::new(|_| 7), common::settings(1000));
        assert_eq!(odd.server_for_key(b"k"), 1);
        odd.set(b"k", 0, 0, b"v").await.expect("set");
        assert!(direct[1].get(b"k").await.expect("get").is_some());
    })
    .await;
}

#[tokio::test]
async fn meta_get_reports_ttl_and_flags() {
    let mc = Memcached::start();
    let pool = single(mc.addr(), 1000);
    bounded(10, async {
        pool.set(b"ttl", 4_294_967_295, 100, b"bin\0ary")
            .await
            .expect("set");
        let item = pool
            .meta_get_with_ttl(b"ttl")
            .await
            .expect("mg")
            .expect("hit");
        assert_eq!(item.flags, 4_294_967_295);
        assert_eq!(item.data, Bytes::from_static(b"bin\0ary"));
        let ttl = item.ttl_remaining.expect("a ttl");
        assert!((98..=100).contains(&ttl), "ttl {ttl}");

        pool.set(b"forever", 3, 0, b"").await.expect("set");
        let item = pool
            .meta_get_with_ttl(b"forever")
            .await
            .expect("mg")
            .expect("hit");
        assert_eq!(
            (item.flags, item.ttl_remaining, item.data.len()),
            (3, None, 0)
        );

        // Absolute exptime (more than 30 days means a unix time).
        let at = unix_now() as i64 + 3600;
        pool.set(b"abs", 0, at, b"v").await.expect("set");
        let ttl = pool
            .meta_get_with_ttl(b"abs")
            .await
            .expect("mg")
            .and_then(|i| i.ttl_remaining)
            .expect("ttl");
        // memcached's clock ticks once a second and lags: allow a little slack.
        assert!((3590..=3602).contains(&ttl), "ttl {ttl}");

        assert_eq!(pool.meta_get_with_ttl(b"nope").await.expect("mg"), None);
    })
    .await;
}

#[tokio::test]
async fn metadump_lists_every_key_decoded() {
    let mc = Memcached::start();
    let pool = single(mc.addr(), 1000);
    bounded(30, async {
        let mut want = HashMap::new();
        let mut pending = Vec::new();
        for i in 0..1000 {
            // Keys that need URI encoding in the dump: %, :, /, UTF-8.
            let key = match i % 4 {
                0 => format!("plain{i}"),
                1 => format!("pct%{i}/x"),
                2 => format!("ünï:{i}"),
                _ => format!("q?a={i}&b"),
            };
            let exptime = if i % 2 == 0 { 0 } else { 3600 };
            want.insert(Bytes::from(key.clone()), exptime);
            let p = pool.clone_set(key, exptime);
            pending.push(p);
        }
        for p in pending {
            p.await;
        }
        let dump = pool.metadump_all(0).await.expect("metadump");
        assert_eq!(dump.len(), 1000);
        let now = unix_now() as i64;
        for entry in &dump {
            let exptime = want
                .get(&entry.key)
                .unwrap_or_else(|| panic!("unknown key {:?}", entry.key));
            if *exptime == 0 {
                assert_eq!(entry.exp, -1);
            } else {
                assert!(
                    (now + 3590..=now + 3602).contains(&entry.exp),
                    "exp {}",
                    entry.exp
                );
            }
            assert!(entry.size.is_some_and(|s| s > 0));
        }
        let keys: HashSet<_> = dump.iter().map(|e| e.key.clone()).collect();
        assert_eq!(keys.len(), 1000);
        // A second dump right after works too (the crawler is free again).
        let mut n = 0;
        pool.metadump_each(0, |_| n += 1).await.expect("metadump");
        assert_eq!(n, 1000);
        assert!(matches!(
            pool.metadump_all(5).await,
            Err(LegacyError::NoSuchServer(5))
        ));
    })
    .await;
}

/// Helper trait so the dump test can queue many sets at once.
trait CloneSet {
    fn clone_set(
        &self,
        key: String,
        exptime: i64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

impl CloneSet for LegacyPool {
    fn clone_set(
        &self,
        key: String,
        exptime: i64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let mut buf = bytes::BytesMut::new();
        memshift_protocol::memcache::client::storage(
            &mut buf,
            memshift_protocol::memcache::StorageCommand::Set,
            key.as_bytes(),
            0,
            exptime,
            b"v",
            false,
        )
        .expect("encode");
        let fut = self.enqueue(Route::Key(key.as_bytes()), buf.freeze(), ReplyShape::Single);
        Box::pin(async move {
            assert_eq!(fut.await.expect("set").raw().as_ref(), b"STORED\r\n");
        })
    }
}

#[tokio::test]
async fn killed_server_fails_fast_and_recovers_without_a_new_pool() {
    let mut mc = Memcached::start();
    let pool = single(mc.addr(), 1000);
    bounded(30, async {
        wait_up(&pool).await;
        pool.set(b"k", 1, 0, b"v").await.expect("set");
        mc.kill();
        // Every request fails, and fast (no waiting for the timeout).
        for _ in 0..20 {
            let started = Instant::now();
            let err = pool.get(b"k").await.expect_err("server is down");
            assert!(
                matches!(
                    err,
                    LegacyError::Backend(BackendError::Unavailable | BackendError::ConnectionLost)
                ),
                "{err:?}"
            );
            assert!(
                started.elapsed() < Duration::from_millis(200),
                "{:?}",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!pool.is_up(0));

        mc.restart();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if pool.set(b"k", 2, 0, b"again").await.is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "pool never recovered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let item = pool.get(b"k").await.expect("get").expect("hit");
        assert_eq!((item.flags, item.data.as_ref()), (2, &b"again"[..]));
        wait_up(&pool).await;
    })
    .await;
}

#[tokio::test]
async fn stopped_server_times_out_then_recovers() {
    let mut mc = Memcached::start();
    let pool = single(mc.addr(), 200);
    bounded(30, async {
        wait_up(&pool).await;
        pool.set(b"k", 0, 0, b"v").await.expect("set");
        mc.stop();
        let started = Instant::now();
        let gets = ["k", "k2", "k3"].map(|k| {
            pool.enqueue(
                Route::Key(k.as_bytes()),
                Bytes::from(format!("get {k}\r\n")),
                ReplyShape::UntilEnd,
            )
        });
        let results = futures_join(gets.into()).await;
        let took = started.elapsed();
        for r in results {
            assert_eq!(r, Err(LegacyError::Backend(BackendError::Timeout)));
        }
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        // Still stopped: reconnecting succeeds at the TCP level (the kernel
        // accepts) but the `version` handshake gets no answer, so the server
        // is marked down and requests fail fast instead of each waiting.
        let deadline = Instant::now() + Duration::from_secs(5);
        while pool.is_up(0) {
            assert!(Instant::now() < deadline, "hung server still marked up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut fast = 0;
        for _ in 0..10 {
            let started = Instant::now();
            match pool.get(b"k").await {
                Err(LegacyError::Backend(BackendError::Unavailable)) => {}
                other => panic!("unexpected {other:?}"),
            }
            // At worst it waited for one handshake attempt (200 ms).
            let took = started.elapsed();
            assert!(took < Duration::from_millis(600), "{took:?}");
            fast += usize::from(took < Duration::from_millis(50));
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        assert!(fast >= 5, "only {fast} of 10 failed fast");
        mc.cont();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match pool.get(b"k").await {
                Ok(item) => {
                    assert_eq!(item.map(|i| i.data), Some(Bytes::from_static(b"v")));
                    break;
                }
                Err(_) => {
                    assert!(Instant::now() < deadline, "never recovered");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    })
    .await;
}

#[tokio::test]
async fn idle_connection_notices_a_hung_server() {
    let mut mc = Memcached::start();
    let pool = single(mc.addr(), 200);
    bounded(30, async {
        wait_up(&pool).await;
        // No requests at all: the idle ping finds out.
        mc.stop();
        let deadline = Instant::now() + Duration::from_secs(5);
        while pool.is_up(0) {
            assert!(Instant::now() < deadline, "hung server still marked up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        mc.cont();
        wait_up(&pool).await;
        pool.set(b"k", 0, 0, b"v")
            .await
            .expect("set after recovery");
    })
    .await;
}

/// Await futures concurrently (no `futures` crate here).
async fn futures_join<F>(futs: Vec<F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("join"));
    }
    out
}

#[tokio::test]
async fn bad_requests_are_refused_before_the_wire() {
    let mc = Memcached::start();
    let pool = single(mc.addr(), 1000);
    bounded(10, async {
        assert!(matches!(
            pool.get(b"has space").await,
            Err(LegacyError::BadKey(_))
        ));
        assert!(matches!(
            pool.set(&[b'k'; 251], 0, 0, b"v").await,
            Err(LegacyError::BadKey(_))
        ));
        let noreply = pool
            .call(
                Route::Key(b"k"),
                Bytes::from_static(b"set k 0 0 1 noreply\r\nv\r\n"),
                ReplyShape::Single,
            )
            .await;
        assert!(matches!(noreply, Err(LegacyError::BadRequest(_))));
        assert!(matches!(
            pool.call(
                Route::Server(3),
                Bytes::from_static(b"version\r\n"),
                ReplyShape::Single
            )
            .await,
            Err(LegacyError::NoSuchServer(3))
        ));
        // An unknown command gets memcached's ERROR as the reply; the
        // connection stays in sync.
        let reply = pool
            .call(
                Route::Server(0),
                Bytes::from_static(b"bogus\r\n"),
                ReplyShape::Single,
            )
            .await
            .expect("reply");
        assert_eq!(reply.raw().as_ref(), b"ERROR\r\n");
        pool.set(b"k", 5, 0, b"v").await.expect("set");
        assert_eq!(pool.get(b"k").await.expect("get").map(|i| i.flags), Some(5));
    })
    .await;
}

#[tokio::test]
async fn pool_as_shadow_sink_replicates_state() {
    let mc = Memcached::start();
    let pool = Arc::new(single(mc.addr(), 1000));
    bounded(10, async {
        let queue = ShadowQueue::start(
            QueueSettings::new(
                100,
                memshift_shadow::BreakerSettings {
                    failures: 3,
                    cooldown: Duration::from_secs(1),
                },
            ),
            pool.clone(),
            Arc::new(memshift_shadow::queue::NoopObserver),
        );
        let now = unix_now();
        let set = |key: &'static str, flags, expiry, data: &'static str| ShadowOp::Set {
            key: Bytes::from_static(key.as_bytes()),
            flags,
            expiry,
            data: Bytes::from_static(data.as_bytes()),
        };
        queue.try_push(set("a", 1, Expiry::Never, "1"));
        queue.try_push(set("a", 2, Expiry::At(now + 500), "2"));
        queue.try_push(set("b", 3, Expiry::Never, "3"));
        queue.try_push(ShadowOp::Delete {
            key: Bytes::from_static(b"b"),
        });
        queue.try_push(set("c", 4, Expiry::Never, "4"));
        // Already expired: becomes a delete.
        queue.try_push(set("c", 5, Expiry::At(now - 10), "5"));
        queue.try_push(set("d", 6, Expiry::Never, "6"));
        queue.try_push(ShadowOp::Touch {
            key: Bytes::from_static(b"d"),
            expiry: Expiry::At(now + 1000),
        });
        queue.try_push(ShadowOp::Delete {
            key: Bytes::from_static(b"never-existed"),
        });
        assert!(
            queue
                .flush(tokio::time::Instant::now() + Duration::from_secs(5))
                .await
        );

        let a = pool.meta_get_with_ttl(b"a").await.expect("mg").expect("a");
        assert_eq!((a.flags, a.data.as_ref()), (2, &b"2"[..]));
        assert!(a.ttl_remaining.is_some_and(|t| (490..=500).contains(&t)));
        assert_eq!(pool.get(b"b").await.expect("get"), None);
        assert_eq!(pool.get(b"c").await.expect("get"), None);
        let d = pool.meta_get_with_ttl(b"d").await.expect("mg").expect("d");
        assert!(d.ttl_remaining.is_some_and(|t| (990..=1000).contains(&t)));

        queue.try_push(ShadowOp::FlushAll);
        assert!(
            queue
                .flush(tokio::time::Instant::now() + Duration::from_secs(5))
                .await
        );
        assert_eq!(pool.get(b"a").await.expect("get"), None);
    })
    .await;
}
