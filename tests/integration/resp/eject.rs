//! `on_shard_down = "eject"` over the RESP port: a read after an
//! acknowledged `SET` or `DEL` returns that write's result, never an older
//! value, across an ejection, the rejoin and a second ejection (the same
//! guarantee `ops::health` checks over the memcached port).

use std::time::Duration;

use memshift_tests::ops_support::wait_until;
use memshift_tests::resp_proxy::start_resp_memshift;
use memshift_tests::{require_tools, RedisClient, RedisServer, Resp, RespCluster};

const REACT: Duration = Duration::from_secs(20);
const REJOINED: &str = "redis shard healthy again";

fn start() -> RespCluster {
    let shards: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
    let (memshift, resp_port, admin_port) = start_resp_memshift(&addrs, |o| {
        o.timeout_ms = 500;
        o.redis_extra.push_str(
            "on_shard_down = \"eject\"\neject_after_failures = 1\nhealth_check_interval_ms = 100\n",
        );
    });
    RespCluster {
        memshift,
        shards,
        resp_port,
        admin_port,
    }
}

fn client(cluster: &RespCluster) -> RedisClient {
    RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(10)).expect("connect")
}

fn key(i: usize) -> String {
    format!("ej:{i:03}")
}

fn value(i: usize, round: u32) -> Vec<u8> {
    format!("v-{i}-{round}").into_bytes()
}

fn is_ok(r: &Resp) -> bool {
    matches!(r, Resp::Simple(s) if s == "OK")
}

/// Polls `f` until it returns true or `REACT` passes.
fn wait(what: &str, mut f: impl FnMut() -> bool) {
    wait_until(REACT, Duration::from_millis(20), what, || f().then_some(()));
}

/// Every key's reply to GET: the value, or None for nil.
fn read(cluster: &RespCluster, keys: &[usize], what: &str) -> Vec<Option<Vec<u8>>> {
    let mut c = client(cluster);
    keys.iter()
        .map(
            |&i| match c.cmd(&[b"GET", key(i).as_bytes()]).expect("GET") {
                Resp::Bulk(v) => v,
                other => panic!("{what}: GET {}: {other:?}", key(i)),
            },
        )
        .collect()
}

#[test]
fn resp_eject_never_reads_a_value_older_than_an_acknowledged_write() {
    if !require_tools(
        "resp_eject_never_reads_a_value_older_than_an_acknowledged_write",
        &["redis-server"],
    ) {
        return;
    }
    let mut cluster = start();
    let mut c = client(&cluster);
    for i in 0..60 {
        assert!(is_ok(
            &c.cmd(&[b"SET", key(i).as_bytes(), &value(i, 0)])
                .expect("SET")
        ));
    }
    let mut owner = cluster.shards[0].client();
    let victims: Vec<usize> = (0..60)
        .filter(|&i| {
            owner
                .cmd(&[b"EXISTS", key(i).as_bytes()])
                .expect("EXISTS")
                .as_int()
                == Some(1)
        })
        .collect();
    assert!(victims.len() >= 5, "{} keys on shard 0", victims.len());
    // Round 1 while shard 0 is frozen and ejected: half the keys are set on
    // the fallback, half deleted there.
    let deleted = |i: usize| i % 2 == 1;
    cluster.shards[0].signal(libc::SIGSTOP);
    wait("the frozen shard's keys to move", || {
        let mut c = client(&cluster);
        is_ok(
            &c.cmd(&[b"SET", key(victims[0]).as_bytes(), &value(victims[0], 1)])
                .expect("SET"),
        )
    });
    for &i in &victims {
        let reply = if deleted(i) {
            c.cmd(&[b"DEL", key(i).as_bytes()]).expect("DEL")
        } else {
            c.cmd(&[b"SET", key(i).as_bytes(), &value(i, 1)])
                .expect("SET")
        };
        assert!(
            is_ok(&reply) || reply.as_int().is_some(),
            "round 1 of {}: {reply:?}",
            key(i)
        );
    }
    let mut fallback = cluster.shards[1].client();
    let round_1: Vec<(usize, Vec<u8>)> = victims
        .iter()
        .filter(|&&i| !deleted(i))
        .map(
            |&i| match fallback.cmd(&[b"DUMP", key(i).as_bytes()]).expect("DUMP") {
                Resp::Bulk(Some(dump)) => (i, dump),
                other => panic!("round 1 of {} is not on the fallback: {other:?}", key(i)),
            },
        )
        .collect();

    let rejoins = cluster.memshift.stderr().matches(REJOINED).count();
    cluster.shards[0].signal(libc::SIGCONT);
    wait("the resumed shard to rejoin", || {
        cluster.memshift.stderr().matches(REJOINED).count() > rejoins
    });
    for (&i, got) in victims.iter().zip(read(&cluster, &victims, "rejoined")) {
        let newest = (!deleted(i)).then(|| value(i, 1));
        assert!(
            got.is_none() || got == newest,
            "after the rejoin {} read {:?}, older than the acknowledged round 1",
            key(i),
            got.map(|v| String::from_utf8_lossy(&v).into_owned())
        );
    }

    // A round-1 write that reached the fallback after the rejoin's delete,
    // as that race leaves it; then round 2 on the rejoined owner, and the
    // owner dies: the fallback must not serve round 1.
    for (i, dump) in &round_1 {
        let reply = fallback
            .cmd(&[b"RESTORE", key(*i).as_bytes(), b"0", dump, b"REPLACE"])
            .expect("RESTORE");
        assert!(is_ok(&reply), "plant {}: {reply:?}", key(*i));
    }
    for &i in &victims {
        let reply = c
            .cmd(&[b"SET", key(i).as_bytes(), &value(i, 2)])
            .expect("SET");
        assert!(is_ok(&reply), "round 2 of {}: {reply:?}", key(i));
    }
    cluster.shards[0].stop();
    wait("the dead shard's keys to be served again", || {
        let mut c = client(&cluster);
        matches!(
            c.cmd(&[b"GET", key(victims[0]).as_bytes()]),
            Ok(Resp::Bulk(_))
        )
    });
    for (&i, got) in victims
        .iter()
        .zip(read(&cluster, &victims, "second ejection"))
    {
        assert!(
            got.is_none(),
            "after the second ejection {} read {:?}: round 2 died with its shard, anything else is older",
            key(i),
            got.map(|v| String::from_utf8_lossy(&v).into_owned())
        );
    }
}
