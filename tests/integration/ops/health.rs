//! `redis.on_shard_down`: "fail" (fast SERVER_ERROR, no re-hash) vs "eject"
//! (the shard leaves the ring after `eject_after_failures` failed health
//! checks and comes back when it answers again). With
//! `read_errors_as_misses = false`, so a failed read is told from a miss.

use std::time::{Duration, Instant};

use memshift_tests::ops_support::{http_get, wait_until};
use memshift_tests::{escape, require_tools, Cluster, McClient, Resp};

use super::{
    assert_get, key, log_count, opts, reload, value, wait_log, write_and_place, BACK, DOWN, POLL,
    REACT, TIMEOUT_MS,
};

const N: usize = 90;
const VICTIM: usize = 1;

fn ready_status(cluster: &Cluster) -> u16 {
    http_get(cluster.admin_port, "/ready").map_or(0, |(s, _)| s)
}

/// `set` through memshift; the raw reply.
fn try_set(cluster: &Cluster, k: &str, v: &[u8]) -> Vec<u8> {
    try_set_on(&mut cluster.client(), k, v)
}

fn try_set_on(c: &mut McClient, k: &str, v: &[u8]) -> Vec<u8> {
    let mut req = format!("set {k} 0 0 {}\r\n", v.len()).into_bytes();
    req.extend_from_slice(v);
    req.extend_from_slice(b"\r\n");
    c.request(&req)
        .unwrap_or_else(|e| panic!("set {k}: no reply: {e}"))
}

fn is_server_error(reply: &[u8]) -> bool {
    reply.starts_with(b"SERVER_ERROR ")
        && reply.ends_with(b"\r\n")
        && !reply[..reply.len() - 2].contains(&b'\n')
}

#[test]
fn fail_policy_fails_fast_without_rehash_and_recovers() {
    if !require_tools(
        "fail_policy_fails_fast_without_rehash_and_recovers",
        &["redis-server"],
    ) {
        return;
    }
    let mut cluster = Cluster::start_with(opts(
        3,
        "",
        "on_shard_down = \"fail\"\neject_after_failures = 2\nhealth_check_interval_ms = 100\nread_errors_as_misses = false",
    ));
    let placement = write_and_place(&cluster, "fail", N, 0);
    let victims: Vec<usize> = (0..N).filter(|&i| placement[i] == VICTIM).collect();
    let healthy: Vec<usize> = (0..N).filter(|&i| placement[i] != VICTIM).collect();
    assert!(victims.len() >= 5, "placement {placement:?}");
    wait_until(REACT, POLL, "/ready to answer 200", || {
        (ready_status(&cluster) == 200).then_some(())
    });

    cluster.shards[VICTIM].stop();
    // The health checks notice (and /ready says so), but routing stays.
    wait_until(REACT, POLL, "the shard to be marked down", || {
        cluster
            .memshift
            .stderr()
            .contains("redis shard marked down")
            .then_some(())
    });
    assert_eq!(ready_status(&cluster), 503, "/ready with a shard down");

    let fast = Duration::from_millis(TIMEOUT_MS / 2);
    let mut c = cluster.client();
    for &i in &victims {
        let k = key("fail", i);
        for req in [
            format!("get {k}\r\n").into_bytes(),
            format!("set {k} 0 0 1\r\nx\r\n").into_bytes(),
        ] {
            let started = Instant::now();
            let reply = c
                .request(&req)
                .unwrap_or_else(|e| panic!("{}: no reply: {e}", escape(&req, 40)));
            let took = started.elapsed();
            assert!(
                is_server_error(&reply),
                "{} with its shard down under on_shard_down = \"fail\": want one SERVER_ERROR line \
                 (no re-hash), got {}",
                escape(&req, 40),
                escape(&reply, 200)
            );
            assert!(
                took < fast,
                "{} took {took:?} to fail (timeout_ms = {TIMEOUT_MS}; a down shard must fail fast)",
                escape(&req, 40)
            );
        }
    }
    for (s, shard) in cluster.shards.iter().enumerate() {
        if s != VICTIM {
            for &i in &victims {
                assert_eq!(
                    shard.cmd(&[b"EXISTS", key("fail", i).as_bytes()]).as_int(),
                    Some(0),
                    "{} was re-hashed to shard {s} under the fail policy",
                    key("fail", i)
                );
            }
        }
    }
    for &i in &healthy {
        assert_get(
            &mut c,
            &key("fail", i),
            Some(&value("fail", i, 0)),
            "another shard is down",
        );
        c.set(&key("fail", i), &value("fail", i, 1))
            .expect("set with another shard down");
    }

    cluster.shards[VICTIM].restart();
    let probe = key("fail", victims[0]);
    wait_until(
        REACT,
        Duration::from_millis(100),
        "the restarted shard to serve again",
        || (try_set(&cluster, &probe, b"back") == b"STORED\r\n").then_some(()),
    );
    wait_until(REACT, POLL, "/ready to answer 200 again", || {
        (ready_status(&cluster) == 200).then_some(())
    });
    wait_victims_served(
        &cluster,
        "fail",
        &victims,
        2,
        "the restarted shard's keys to work",
    );
    let mut c = cluster.client();
    for &i in &victims {
        let k = key("fail", i);
        assert_eq!(
            cluster.shard_holding(k.as_bytes()),
            Some(VICTIM),
            "{k} after the restart"
        );
    }
    for &i in &healthy {
        assert_get(
            &mut c,
            &key("fail", i),
            Some(&value("fail", i, 1)),
            "after the restart",
        );
    }
}

const EJECT: &str =
    "on_shard_down = \"eject\"\neject_after_failures = 3\nhealth_check_interval_ms = 100\nread_errors_as_misses = false";

/// Polls until every victim key can be set and read back through one new
/// connection (SERVER_ERROR is allowed while polling: the ring or a
/// connection may not have caught up yet); any other wrong reply fails.
fn wait_victims_served(cluster: &Cluster, prefix: &str, victims: &[usize], round: u32, what: &str) {
    let deadline = Instant::now() + REACT;
    loop {
        let mut c = cluster.client();
        let mut failed = None;
        for &i in victims {
            let (k, v) = (key(prefix, i), value(prefix, i, round));
            let reply = try_set_on(&mut c, &k, &v);
            if is_server_error(&reply) {
                failed = Some(format!("set {k}: {}", escape(&reply, 200)));
                break;
            }
            assert_eq!(
                reply,
                b"STORED\r\n",
                "{what}: set {k}: {}",
                escape(&reply, 200)
            );
            assert_get(&mut c, &k, Some(&v), what);
        }
        let Some(failed) = failed else {
            return;
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {REACT:?} waiting for {what}; last reply: {failed}\n{}",
            cluster.memshift.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn eject_policy_moves_keys_while_down_and_back_after() {
    if !require_tools(
        "eject_policy_moves_keys_while_down_and_back_after",
        &["redis-server"],
    ) {
        return;
    }
    let mut cluster = Cluster::start_with(opts(3, "", EJECT));
    let placement = write_and_place(&cluster, "ej", N, 0);
    let victims: Vec<usize> = (0..N).filter(|&i| placement[i] == VICTIM).collect();
    let healthy: Vec<usize> = (0..N).filter(|&i| placement[i] != VICTIM).collect();
    assert!(victims.len() >= 5, "placement {placement:?}");

    cluster.shards[VICTIM].stop();
    wait_victims_served(
        &cluster,
        "ej",
        &victims,
        1,
        "the down shard's keys to be served by the others",
    );
    let log = cluster.memshift.stderr();
    assert!(
        log.contains("redis shard marked down") && log.contains("failures=3"),
        "no log of the shard marked down after eject_after_failures = 3 failed checks:\n{log}"
    );
    for &i in &victims {
        let holder = cluster.shard_holding(key("ej", i).as_bytes());
        assert!(
            matches!(holder, Some(s) if s != VICTIM),
            "{} set while its shard is ejected is on {holder:?}",
            key("ej", i)
        );
    }
    // Only the ejected shard's keys moved.
    let mut c = cluster.client();
    for &i in &healthy {
        assert_get(
            &mut c,
            &key("ej", i),
            Some(&value("ej", i, 0)),
            "a shard is ejected",
        );
    }

    // Back: the ring includes it again (it restarted empty).
    cluster.shards[VICTIM].restart();
    let probe = key("ej", victims[0]);
    wait_until(
        REACT,
        Duration::from_millis(100),
        "the restarted shard to rejoin the ring",
        || {
            // The shard restarted empty: the key is there only once it routes back.
            let _ = try_set(&cluster, &probe, b"x");
            (cluster.shards[VICTIM]
                .cmd(&[b"EXISTS", probe.as_bytes()])
                .as_int()
                == Some(1))
            .then_some(())
        },
    );
    wait_victims_served(
        &cluster,
        "ej",
        &victims,
        2,
        "the rejoined shard's keys to work",
    );
    for &i in &victims {
        assert_eq!(
            cluster.shards[VICTIM]
                .cmd(&[b"EXISTS", key("ej", i).as_bytes()])
                .as_int(),
            Some(1),
            "{} set after the shard came back is not on it",
            key("ej", i)
        );
    }
    for &i in &healthy {
        assert_get(
            &mut c,
            &key("ej", i),
            Some(&value("ej", i, 0)),
            "after the shard rejoined",
        );
    }
    assert!(
        cluster
            .memshift
            .stderr()
            .contains("redis shard healthy again"),
        "{}",
        cluster.memshift.stderr()
    );
}

#[test]
fn eject_policy_survives_a_reload_while_a_shard_is_down() {
    if !require_tools(
        "eject_policy_survives_a_reload_while_a_shard_is_down",
        &["redis-server"],
    ) {
        return;
    }
    let mut cluster = Cluster::start_with(opts(3, "", EJECT));
    let placement = write_and_place(&cluster, "ejr", N, 0);
    let victims: Vec<usize> = (0..N).filter(|&i| placement[i] == VICTIM).collect();
    assert!(victims.len() >= 5, "placement {placement:?}");
    cluster.shards[VICTIM].stop();
    wait_victims_served(
        &cluster,
        "ejr",
        &victims,
        1,
        "the down shard's keys to be served by the others",
    );

    // An unrelated reload (same shards) while the shard is still down: it
    // must stay out of the ring.
    let config = cluster
        .config
        .replace("[server]\n", "[server]\nidle_timeout_ms = 0\n");
    reload(&cluster, &config, "ok");
    wait_victims_served(
        &cluster,
        "ejr",
        &victims,
        2,
        "the ejected shard's keys to be served by the others after a SIGHUP",
    );
}

/// The replies of `get` for each of `keys` on one connection: `Ok(Some)`,
/// `Ok(None)` for a miss, `Err` for a SERVER_ERROR.
fn read_all(
    cluster: &Cluster,
    prefix: &str,
    keys: &[usize],
) -> Vec<Result<Option<Vec<u8>>, String>> {
    let mut c = cluster.client();
    keys.iter()
        .map(|&i| {
            let k = key(prefix, i);
            let raw = c
                .request(format!("get {k}\r\n").as_bytes())
                .unwrap_or_else(|e| panic!("get {k}: no reply: {e}"));
            if is_server_error(&raw) {
                return Err(String::from_utf8_lossy(&raw).into_owned());
            }
            if raw == b"END\r\n" {
                return Ok(None);
            }
            let header = format!("VALUE {k} 0 ");
            assert!(
                raw.starts_with(header.as_bytes()),
                "get {k}: {}",
                escape(&raw, 200)
            );
            let start = raw.iter().position(|&b| b == b'\n').map_or(0, |p| p + 1);
            Ok(Some(raw[start..raw.len() - 7].to_vec()))
        })
        .collect()
}

/// Every key reads its round-`round` value or a miss, never anything else.
fn assert_not_stale(
    cluster: &Cluster,
    prefix: &str,
    keys: &[usize],
    round: u32,
    what: &str,
) -> usize {
    let mut misses = 0;
    for (&i, got) in keys.iter().zip(read_all(cluster, prefix, keys)) {
        match got {
            Ok(Some(v)) => assert_eq!(
                v,
                value(prefix, i, round),
                "{what}: {} read {:?}, an older value than the acknowledged round {round}",
                key(prefix, i),
                String::from_utf8_lossy(&v)
            ),
            Ok(None) => misses += 1,
            Err(e) => panic!("{what}: get {}: {e}", key(prefix, i)),
        }
    }
    misses
}

/// Issue 13 (twemproxy #604): under `eject`, a read after an acknowledged
/// write returns that value or a miss, never an older one — across an
/// ejection and rejoin (SIGSTOP/SIGCONT), and across a second ejection
/// (the fallback shards must not serve what the first one left there).
#[test]
fn eject_policy_never_serves_a_value_older_than_an_acknowledged_write() {
    if !require_tools(
        "eject_policy_never_serves_a_value_older_than_an_acknowledged_write",
        &["redis-server"],
    ) {
        return;
    }
    const PREFIX: &str = "stale";
    let mut cluster = Cluster::start_with(opts(
        2,
        "",
        "on_shard_down = \"eject\"\neject_after_failures = 1\nhealth_check_interval_ms = 200\nread_errors_as_misses = false",
    ));
    let placement = write_and_place(&cluster, PREFIX, 60, 0);
    let victims: Vec<usize> = (0..placement.len())
        .filter(|&i| placement[i] == 0)
        .collect();
    assert!(victims.len() >= 5, "placement {placement:?}");

    // 1. Frozen: the keys move to the other shard and get round 1 there.
    cluster.shards[0].signal(libc::SIGSTOP);
    wait_victims_served(
        &cluster,
        PREFIX,
        &victims,
        1,
        "the frozen shard's keys to move",
    );
    // Round 1 as the fallback holds it, to plant it again in 1b.
    let mut fallback = cluster.shards[1].client();
    let round_1: Vec<Vec<u8>> = victims
        .iter()
        .map(|&i| {
            let k = key(PREFIX, i);
            match fallback.cmd(&[b"DUMP", k.as_bytes()]).expect("DUMP") {
                Resp::Bulk(Some(dump)) => dump,
                other => panic!("round 1 of {k} is not on the fallback: {other:?}"),
            }
        })
        .collect();
    let rejoins = log_count(&cluster, BACK);
    cluster.shards[0].signal(libc::SIGCONT);
    wait_log(&cluster, BACK, rejoins);
    let misses_after_rejoin =
        assert_not_stale(&cluster, PREFIX, &victims, 1, "after the shard rejoined");

    // 1b. A round-1 write that reached the fallback after the rejoin's
    //     delete (it travelled on another connection): planted there
    //     directly, as that race leaves it.
    for (&i, dump) in victims.iter().zip(&round_1) {
        let k = key(PREFIX, i);
        let reply = fallback
            .cmd(&[b"RESTORE", k.as_bytes(), b"0", dump, b"REPLACE"])
            .expect("RESTORE on the fallback");
        assert!(
            matches!(&reply, Resp::Simple(ok) if ok == "OK"),
            "plant {k}: {reply:?}"
        );
    }

    // 2. Round 2 is written where the keys live now (the rejoined shard),
    //    then that shard dies: the fallback must not serve round 1.
    let mut c = cluster.client();
    for &i in &victims {
        let reply = try_set_on(&mut c, &key(PREFIX, i), &value(PREFIX, i, 2));
        assert_eq!(reply, b"STORED\r\n", "round 2: {}", escape(&reply, 200));
    }
    cluster.shards[0].stop();
    wait_until(
        REACT,
        POLL,
        "the dead shard's keys to be served again",
        || {
            read_all(&cluster, PREFIX, &victims[..1])[0]
                .is_ok()
                .then_some(())
        },
    );
    let misses_second =
        assert_not_stale(&cluster, PREFIX, &victims, 2, "after the second ejection");
    eprintln!(
        "eject staleness: {} keys; misses after rejoin {misses_after_rejoin}, after the second ejection {misses_second}",
        victims.len()
    );
}

/// Whether `shard` (asked directly: others may be frozen) holds `key`.
fn holds(cluster: &Cluster, shard: usize, key: &str) -> bool {
    cluster.shards[shard]
        .cmd(&[b"EXISTS", key.as_bytes()])
        .as_int()
        == Some(1)
}

/// Two shards out at once. Shard 0 is frozen and ejected: its keys move,
/// some to shard 1 (round 0 there). Shard 1 is frozen too: those keys move
/// to shard 2 (round 1). Shard 1 rejoins while shard 0 is still out: the
/// keys route back to it and it must not serve its round 0. Round 2 is
/// written there; shard 1 is frozen again: shard 2 must not serve round 1.
#[test]
fn eject_policy_a_rejoin_while_another_shard_is_out_never_serves_an_older_copy() {
    if !require_tools(
        "eject_policy_a_rejoin_while_another_shard_is_out_never_serves_an_older_copy",
        &["redis-server"],
    ) {
        return;
    }
    const PREFIX: &str = "twice";
    let cluster = Cluster::start_with(opts(
        3,
        "",
        "on_shard_down = \"eject\"\neject_after_failures = 1\nhealth_check_interval_ms = 100\nread_errors_as_misses = false",
    ));
    let placement = write_and_place(&cluster, PREFIX, 120, 0);
    let on_0: Vec<usize> = (0..placement.len())
        .filter(|&i| placement[i] == 0)
        .collect();

    cluster.shards[0].signal(libc::SIGSTOP);
    wait_victims_served(&cluster, PREFIX, &on_0, 0, "shard 0's keys to move");
    let victims: Vec<usize> = on_0
        .iter()
        .copied()
        .filter(|&i| holds(&cluster, 1, &key(PREFIX, i)))
        .collect();
    assert!(
        victims.len() >= 3,
        "{} of shard 0's keys moved to shard 1",
        victims.len()
    );

    cluster.shards[1].signal(libc::SIGSTOP);
    wait_victims_served(
        &cluster,
        PREFIX,
        &victims,
        1,
        "those keys to move to shard 2",
    );
    let rejoins = log_count(&cluster, BACK);
    cluster.shards[1].signal(libc::SIGCONT);
    wait_log(&cluster, BACK, rejoins);
    let misses_rejoin = assert_not_stale(
        &cluster,
        PREFIX,
        &victims,
        1,
        "shard 1 rejoined, shard 0 still out",
    );

    let mut c = cluster.client();
    for &i in &victims {
        let reply = try_set_on(&mut c, &key(PREFIX, i), &value(PREFIX, i, 2));
        assert_eq!(reply, b"STORED\r\n", "round 2: {}", escape(&reply, 200));
        assert!(
            holds(&cluster, 1, &key(PREFIX, i)),
            "round 2 of {} goes to the rejoined shard 1",
            key(PREFIX, i)
        );
    }
    let downs = log_count(&cluster, DOWN);
    cluster.shards[1].signal(libc::SIGSTOP);
    wait_log(&cluster, DOWN, downs);
    wait_until(REACT, POLL, "the keys to be served again", || {
        read_all(&cluster, PREFIX, &victims[..1])[0]
            .is_ok()
            .then_some(())
    });
    let misses_again = assert_not_stale(
        &cluster,
        PREFIX,
        &victims,
        2,
        "shard 1 ejected again, shard 0 still out",
    );
    for s in &cluster.shards[..2] {
        s.signal(libc::SIGCONT);
    }
    eprintln!(
        "eject, two shards out: {} keys; misses after the rejoin {misses_rejoin}, after the second ejection {misses_again}",
        victims.len()
    );
}
