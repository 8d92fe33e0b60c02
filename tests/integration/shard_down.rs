//! Shard down: with one Redis shard stopped, keys on the other shards keep
//! working and keys on the stopped one get a `SERVER_ERROR ...` line within
//! the configured timeout (plus a margin); after the shard restarts on the
//! same port the proxy reconnects by itself and those keys work again.

use std::thread::sleep;
use std::time::{Duration, Instant};

use memshift_tests::{escape, require_tools, Cluster, ClusterOptions};

const TIMEOUT_MS: u64 = 500;
/// Allowed on top of `timeout_ms` for a failing request (a loaded CI box).
const MARGIN: Duration = Duration::from_millis(2500);
const KEYS: usize = 60;
const VICTIM: usize = 1;

fn key(i: usize) -> String {
    format!("sd:{i:03}")
}

fn value(i: usize, round: u32) -> Vec<u8> {
    format!("value-{i}-{round}").into_bytes()
}

#[test]
fn shard_down_fails_fast_and_recovers() {
    if !require_tools("shard_down_fails_fast_and_recovers", &["redis-server"]) {
        return;
    }
    // The switch off: reads of the down shard fail (on: see
    // `shard_down_misses`).
    let mut cluster = Cluster::start_with(ClusterOptions {
        timeout_ms: TIMEOUT_MS,
        redis_extra: "read_errors_as_misses = false\n".into(),
        ..ClusterOptions::default()
    });
    let mut c = cluster.client();
    for i in 0..KEYS {
        c.set(&key(i), &value(i, 0)).expect("set before the outage");
    }
    let placement: Vec<usize> = (0..KEYS)
        .map(|i| {
            cluster
                .shard_holding(key(i).as_bytes())
                .unwrap_or_else(|| panic!("{} is on no shard", key(i)))
        })
        .collect();
    for s in 0..3 {
        assert!(
            placement.contains(&s),
            "no key of {KEYS} landed on shard {s}: placement {placement:?}"
        );
    }
    let victims: Vec<usize> = (0..KEYS).filter(|&i| placement[i] == VICTIM).collect();
    let healthy: Vec<usize> = (0..KEYS).filter(|&i| placement[i] != VICTIM).collect();

    cluster.shards[VICTIM].stop();

    // Keys on the stopped shard fail fast with SERVER_ERROR.
    let limit = Duration::from_millis(TIMEOUT_MS) + MARGIN;
    for &i in victims.iter().take(5) {
        for req in [
            format!("get {}\r\n", key(i)).into_bytes(),
            format!("set {} 0 0 1\r\nx\r\n", key(i)).into_bytes(),
        ] {
            let started = Instant::now();
            let reply = c.request(&req).unwrap_or_else(|e| {
                panic!("{}: no reply with the shard down: {e}", escape(&req, 60))
            });
            let took = started.elapsed();
            assert!(
                reply.starts_with(b"SERVER_ERROR ")
                    && reply.ends_with(b"\r\n")
                    && !reply[..reply.len() - 2].contains(&b'\n'),
                "{} with its shard down: want one SERVER_ERROR line, got {}",
                escape(&req, 60),
                escape(&reply, 200)
            );
            assert!(
                took <= limit,
                "{} took {took:?} to fail with the shard down (timeout_ms = {TIMEOUT_MS}, allowed {limit:?})",
                escape(&req, 60)
            );
        }
    }
    // A multi-get with a key on the stopped shard is answered with the error
    // as a whole: its keys are not misses, and memcached never answers part
    // of a get (issue 13).
    let mixed = format!("get {} {}\r\n", key(healthy[0]), key(victims[0]));
    let reply = c.request(mixed.as_bytes()).expect("multi-get reply");
    assert!(
        reply.starts_with(b"SERVER_ERROR ") && !reply[..reply.len() - 2].contains(&b'\n'),
        "{} with one shard down: want one SERVER_ERROR line, got {}",
        escape(mixed.as_bytes(), 60),
        escape(&reply, 200)
    );
    // Keys elsewhere keep working, on the same connection and on new ones.
    let mut fresh = cluster.client();
    for &i in &healthy {
        assert_eq!(
            c.get(&key(i)).expect("get healthy key"),
            Some(value(i, 0)),
            "{} (shard {}) while shard {VICTIM} is down",
            key(i),
            placement[i]
        );
        fresh.set(&key(i), &value(i, 1)).expect("set healthy key");
        assert_eq!(fresh.get(&key(i)).expect("get"), Some(value(i, 1)));
    }

    cluster.shards[VICTIM].restart();

    // The proxy reconnects by itself: poll until a victim key can be set.
    let first = victims[0];
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut probe = cluster.client();
        let reply = probe
            .request(format!("set {} 0 0 2\r\nok\r\n", key(first)).as_bytes())
            .unwrap_or_default();
        if reply == b"STORED\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "keys of shard {VICTIM} still fail 15 s after it restarted: last reply {}",
            escape(&reply, 200)
        );
        sleep(Duration::from_millis(200));
    }
    // The restarted shard lost its data (no persistence); everything works.
    for &i in &victims {
        let got = c.get(&key(i)).expect("get after restart");
        if i == first {
            assert_eq!(got.as_deref(), Some(&b"ok"[..]));
        } else {
            assert_eq!(
                got,
                None,
                "{} survived a restart without persistence?",
                key(i)
            );
        }
        c.set(&key(i), &value(i, 2)).expect("set after restart");
        assert_eq!(c.get(&key(i)).expect("get"), Some(value(i, 2)));
        assert_eq!(cluster.shard_holding(key(i).as_bytes()), Some(VICTIM));
    }
    for &i in &healthy {
        assert_eq!(c.get(&key(i)).expect("get"), Some(value(i, 1)));
    }
}
