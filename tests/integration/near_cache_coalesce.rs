//! Near-cache miss coalescing (`[near_cache] coalesce_misses`), real
//! processes: one memshift (`threads = 1`, so every connection shares one
//! worker thread and its in-flight reads) over one Redis shard, near cache
//! on, keys admitted on their first read.
//!
//! - a herd: 200 connections `get` one key that is not cached while the
//!   shard is frozen (`SIGSTOP`: every read the proxy sends queues up), so
//!   without coalescing each would be a Redis read. With it on, all get
//!   the value and Redis counts far fewer than 200 reads of it; after a
//!   hot reload to `coalesce_misses = false`, the same herd costs Redis at
//!   least one read per connection (the herd can tell the two apart);
//! - consistency: a get pipelined after a write of the key never shares
//!   a read sent before the write (the shard frozen meanwhile); and a soak:
//!   readers hammer one key while a writer replaces it; a read sent after
//!   a write's reply always returns that write's value;
//! - failure: the shard is frozen, then killed, while reads wait on one
//!   in flight (and the leading connection already went away): every
//!   connection gets one reply (the value, or a miss: `redis.read_errors_as_misses`) within a
//!   bound, and works again once the shard is back;
//! - a lost leader: the leading connection is closed as a slow consumer
//!   while the shard is frozen; its waiters send their own reads and get
//!   the value as soon as the shard thaws (not after their own timeout);
//! - session order: a connection that joined a read and then pipelines a
//!   write of the key leaves the read it joined (nothing is coalesced) and
//!   gets the old value, `STORED`, then the new value.

use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use memshift_tests::ops_support::{mc_stats, metric, redis_command_calls, wait_until};
use memshift_tests::process::start_memshift_on_free_ports;
use memshift_tests::{
    memshift_config, require_tools, ClusterOptions, McClient, Memshift, RedisServer,
};

const HERD: usize = 200;
const RELOADS_OK: &str = "memshift_config_reloads_total{result=\"ok\"}";
/// A reply may take this long on a loaded 2-core box (frozen shard
/// included); a hang is anything past it.
const REPLY_BOUND: Duration = Duration::from_secs(30);

struct Setup {
    memshift: Memshift,
    admin: u16,
    shard: RedisServer,
    opts: ClusterOptions,
}

fn near_cache_table(coalesce: bool) -> String {
    format!(
        "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 1\ncoalesce_misses = {coalesce}\n"
    )
}

fn start(timeout_ms: u64) -> Setup {
    start_with(timeout_ms, 1, "", "")
}

/// [`start`] with `threads` worker threads and more `[server]` and
/// `[redis]` lines.
fn start_with(timeout_ms: u64, threads: usize, server_extra: &str, redis_extra: &str) -> Setup {
    let shard = RedisServer::start();
    let opts = ClusterOptions {
        shards: 1,
        extra_tables: near_cache_table(true),
        timeout_ms,
        server_extra: format!("threads = {threads}\n{server_extra}"),
        redis_extra: redis_extra.to_owned(),
    };
    let addrs = [shard.addr()];
    let (memshift, admin, _) =
        start_memshift_on_free_ports(|port, admin| memshift_config(port, admin, &addrs, &opts));
    // The invalidation connection is up: reads are admitted from now on.
    shard.wait_tracking_clients(1);

    Setup {
        memshift,
        admin,
        shard,
        opts,
    }
}

/// Redis read commands so far: GETs (a fill's, inside its MULTI/EXEC,
/// counts too) and MGETs.
fn redis_reads(shard: &RedisServer) -> u64 {
    let info = shard.cmd(&[b"INFO", b"commandstats"]);
    ["get", "mget"]
        .iter()
        .map(|command| redis_command_calls(&info, command))
        .sum()
}

fn coalesced(c: &mut McClient) -> u64 {
    mc_stats(c).expect("stats")["near_cache_coalesced"]
        .parse()
        .expect("a count")
}

/// Replace (not write-through: the key stays uncached) `key` with `value`.
fn replace(c: &mut McClient, key: &str, value: &str) {
    let req = format!("replace {key} 0 0 {}\r\n{value}\r\n", value.len());
    assert_eq!(
        c.request_str(req.as_bytes()).expect("replace"),
        "STORED\r\n"
    );
}

/// `clients` each send `get key` at once (after a barrier), while the
/// shard is frozen; thawed once all were sent. Each connection's reply.
fn herd(setup: &Setup, clients: &mut Vec<McClient>, key: &str) -> Vec<String> {
    let barrier = Arc::new(Barrier::new(clients.len() + 1));
    setup.shard.signal(libc::SIGSTOP);
    let handles: Vec<_> = clients
        .drain(..)
        .map(|mut c| {
            let barrier = barrier.clone();
            let req = format!("get {key}\r\n");
            thread::spawn(move || {
                barrier.wait();
                c.send(req.as_bytes()).expect("send");
                c
            })
        })
        .collect();
    barrier.wait();
    let sent: Vec<McClient> = handles
        .into_iter()
        .map(|h| h.join().expect("sender"))
        .collect();
    // Let the proxy read every request while the shard is still frozen.
    thread::sleep(Duration::from_millis(300));
    setup.shard.signal(libc::SIGCONT);
    let readers: Vec<_> = sent
        .into_iter()
        .map(|mut c| {
            thread::spawn(move || {
                c.set_read_timeout(REPLY_BOUND).expect("timeout");
                let reply = read_get_reply(&mut c);
                (c, reply)
            })
        })
        .collect();
    readers
        .into_iter()
        .map(|h| {
            let (c, reply) = h.join().expect("reader");
            clients.push(c);
            reply
        })
        .collect()
}

/// One get reply: `VALUE … END`, `END` or an error line.
fn read_get_reply(c: &mut McClient) -> String {
    let mut out = String::new();
    loop {
        let line = c.read_line().expect("a reply within the bound");
        let line = String::from_utf8_lossy(&line).into_owned();
        out.push_str(&line);
        if line.starts_with("VALUE ") {
            let data = c.read_line().expect("data");
            out.push_str(&String::from_utf8_lossy(&data));
            continue;
        }
        return out;
    }
}

fn connect(setup: &Setup, n: usize) -> Vec<McClient> {
    (0..n).map(|_| setup.memshift.client()).collect()
}

/// A memshift with `threads` worker threads (10 s timeouts), an admin
/// client, the herd's connections, and `key` set.
fn herd_setup(threads: usize, key: &str) -> (Setup, McClient, Vec<McClient>) {
    let setup = start_with(10_000, threads, "", "");
    let mut admin = setup.memshift.client();
    let clients = connect(&setup, HERD);
    admin.set(key, b"v0").expect("set");
    (setup, admin, clients)
}

/// Replace `key` with `value` (uncached), send the herd, check every reply
/// is the new value: the Redis reads and coalesced reads it cost.
fn herd_round(
    setup: &Setup,
    admin: &mut McClient,
    clients: &mut Vec<McClient>,
    key: &str,
    value: &str,
) -> (u64, u64) {
    replace(admin, key, value);
    let (reads, joined) = (redis_reads(&setup.shard), coalesced(admin));
    let want = format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len());
    for reply in herd(setup, clients, key) {
        assert_eq!(reply, want, "{key} = {value}");
    }
    (redis_reads(&setup.shard) - reads, coalesced(admin) - joined)
}

#[test]
fn near_cache_coalesce_a_herd_costs_one_read_and_off_costs_one_each() {
    if !require_tools("near_cache_coalesce_herd", &["redis-server"]) {
        return;
    }
    let (setup, mut admin, mut clients) = herd_setup(1, "herd");
    for round in 1..=3 {
        let value = format!("value-{round}");
        let (reads, joined) = herd_round(&setup, &mut admin, &mut clients, "herd", &value);
        println!("coalescing on, round {round}: {reads} Redis reads, {joined} coalesced");
        assert!(
            reads < HERD as u64 / 2,
            "round {round}: {reads} Redis reads for a herd of {HERD}"
        );
        assert!(joined > 0, "round {round}: nothing coalesced");
    }
    assert!(
        metric(setup.admin, "memshift_near_cache_coalesced_total") > 0.0,
        "the metric counts what stats does"
    );

    // Hot reload to off: the same herd now costs a read per connection.
    let reloads = metric(setup.admin, RELOADS_OK);
    let off = memshift_config(
        setup.memshift.port(),
        setup.admin,
        &[setup.shard.addr()],
        &ClusterOptions {
            extra_tables: near_cache_table(false),
            ..setup.opts.clone()
        },
    );
    std::fs::write(setup.memshift.config_path(), off).expect("config");
    setup.memshift.sighup();
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(10),
        "reload",
        || (metric(setup.admin, RELOADS_OK) > reloads).then_some(()),
    );
    let (reads, joined) = herd_round(&setup, &mut admin, &mut clients, "herd", "off");
    println!("coalescing off: {reads} Redis reads, {joined} coalesced");
    assert_eq!(joined, 0, "coalesced while off");
    assert!(reads >= HERD as u64 / 2, "off: only {reads} Redis reads");
}

#[test]
fn near_cache_coalesce_a_herd_on_two_threads() {
    if !require_tools("near_cache_coalesce_herd_threads", &["redis-server"]) {
        return;
    }
    // Sessions move between worker threads: a leader may be answered on
    // another thread than the one its waiters joined on.
    let (setup, mut admin, mut clients) = herd_setup(2, "herd2");
    for round in 1..=5 {
        let value = format!("value-{round}");
        let (reads, _) = herd_round(&setup, &mut admin, &mut clients, "herd2", &value);
        println!("two threads, round {round}: {reads} Redis reads");
        // One read per thread, at most a few more.
        assert!(
            reads < HERD as u64 / 2,
            "round {round}: {reads} Redis reads"
        );
    }
}

#[test]
fn near_cache_coalesce_a_read_after_a_writes_reply_sees_the_write() {
    if !require_tools("near_cache_coalesce_consistency", &["redis-server"]) {
        return;
    }
    let setup = start(5_000);
    let mut writer = setup.memshift.client();
    let mut checker = setup.memshift.client();
    writer.set("cons", b"0").expect("set");
    // Deterministic first: a read sent before a write is in flight (the
    // shard is frozen); the writer's own get, pipelined after its write,
    // must not share it.
    let mut leader = setup.memshift.client();
    for round in 1..=5 {
        let new = format!("new{round}");
        // Not cached: the leader's get is a Redis read.
        replace(&mut checker, "cons", "old");
        setup.shard.signal(libc::SIGSTOP);
        leader.send(b"get cons\r\n").expect("send");
        thread::sleep(Duration::from_millis(200));
        let req = format!("replace cons 0 0 {}\r\n{new}\r\nget cons\r\n", new.len());
        writer.send(req.as_bytes()).expect("send");
        thread::sleep(Duration::from_millis(200));
        setup.shard.signal(libc::SIGCONT);
        leader.set_read_timeout(REPLY_BOUND).expect("timeout");
        writer.set_read_timeout(REPLY_BOUND).expect("timeout");
        // Concurrent with the write.
        let first = read_get_reply(&mut leader);
        assert!(first.starts_with("VALUE cons 0 "), "{first}");
        assert_eq!(writer.read_line().expect("stored"), b"STORED\r\n");
        let want = format!("VALUE cons 0 {}\r\n{new}\r\nEND\r\n", new.len());
        assert_eq!(read_get_reply(&mut writer), want, "round {round}");
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Readers keep reads of the key in flight (leaders and waiters).
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let mut c = setup.memshift.client();
            let stop = stop.clone();
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Pipelined, so that several are in flight at once.
                    c.send(b"get cons\r\nget cons\r\nget cons\r\n")
                        .expect("send");
                    for _ in 0..3 {
                        let reply = read_get_reply(&mut c);
                        assert!(reply.starts_with("VALUE cons 0 "), "{reply}");
                    }
                    n += 3;
                }
                n
            })
        })
        .collect();
    let rounds = 400;
    for i in 1..=rounds {
        let value = i.to_string();
        // Alternate a write-through set and a plain replace.
        if i % 2 == 0 {
            writer.set("cons", value.as_bytes()).expect("set");
        } else {
            replace(&mut writer, "cons", &value);
        }
        let got = checker.get("cons").expect("get");
        assert_eq!(
            got.as_deref(),
            Some(value.as_bytes()),
            "round {i}: a read after the write's reply"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|h| h.join().expect("reader")).sum();
    let joined = coalesced(&mut checker);
    println!("{rounds} writes, {reads} concurrent reads, {joined} coalesced");
}

#[test]
fn near_cache_coalesce_waiters_of_a_failed_read_all_get_an_answer() {
    if !require_tools("near_cache_coalesce_failure", &["redis-server"]) {
        return;
    }
    // Short backend timeout: the frozen shard fails reads.
    let mut setup = start(1_000);
    let mut admin = setup.memshift.client();
    admin.set("fail", b"alive").expect("set");
    replace(&mut admin, "fail", "alive");
    let mut clients = connect(&setup, 50);

    // 1. Frozen past the timeout: the leader times out; every waiter gets
    //    the value (re-read) or a miss (the failure), once.
    let before = Instant::now();
    setup.shard.signal(libc::SIGSTOP);
    // The leading connection goes away before any answer.
    let mut leader = setup.memshift.client();
    leader.send(b"get fail\r\n").expect("send");
    thread::sleep(Duration::from_millis(100));
    drop(leader);
    for c in clients.iter_mut() {
        c.send(b"get fail\r\n").expect("send");
    }
    thread::sleep(Duration::from_millis(1_500));
    setup.shard.signal(libc::SIGCONT);
    for c in clients.iter_mut() {
        c.set_read_timeout(REPLY_BOUND).expect("timeout");
        let reply = read_get_reply(c);
        assert!(
            // A timed-out read is a miss (redis.read_errors_as_misses).
            reply == "VALUE fail 0 5\r\nalive\r\nEND\r\n" || reply == "END\r\n",
            "{reply}"
        );
    }
    assert!(before.elapsed() < REPLY_BOUND, "answered within the bound");
    assert_one_reply_each(&mut clients);
    for c in clients.iter_mut() {
        let got = wait_until(
            Duration::from_secs(30),
            Duration::from_millis(20),
            "a read",
            || c.get("fail").ok(),
        );
        assert_eq!(got.as_deref(), Some(&b"alive"[..]));
    }

    // 2. Killed while reads wait (connection lost): everyone gets a
    //    miss (or the value, if it was read first), then works
    //    again once the shard is back.
    replace(&mut admin, "fail", "alive");
    setup.shard.signal(libc::SIGSTOP);
    for c in clients.iter_mut() {
        c.send(b"get fail\r\n").expect("send");
    }
    thread::sleep(Duration::from_millis(300));
    setup.shard.stop();
    for c in clients.iter_mut() {
        c.set_read_timeout(REPLY_BOUND).expect("timeout");
        let reply = read_get_reply(c);
        assert!(
            reply == "END\r\n" || reply == "VALUE fail 0 5\r\nalive\r\nEND\r\n",
            "{reply}"
        );
    }
    assert_one_reply_each(&mut clients);
    setup.shard.restart();
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        "the shard back",
        || admin.set("fail", b"back").ok(),
    );
    for c in clients.iter_mut() {
        let got = wait_until(
            Duration::from_secs(30),
            Duration::from_millis(20),
            "a read",
            || c.get("fail").ok(),
        );
        assert_eq!(got.as_deref(), Some(&b"back"[..]));
    }
    let _ = TcpStream::connect(setup.memshift.addr()).expect("still accepting");
}

/// No connection got a second reply to its one request.
fn assert_one_reply_each(clients: &mut [McClient]) {
    thread::sleep(Duration::from_millis(500));
    for c in clients.iter_mut() {
        c.set_read_timeout(Duration::from_millis(20))
            .expect("timeout");
        assert!(c.read_line().is_err(), "a second reply");
        c.set_read_timeout(REPLY_BOUND).expect("timeout");
    }
}

#[test]
fn near_cache_coalesce_waiters_of_a_lost_leader_read_for_themselves() {
    if !require_tools("near_cache_coalesce_lost_leader", &["redis-server"]) {
        return;
    }
    // Long timeouts: only the re-read answers the waiters quickly.
    let setup = start_with(10_000, 1, "max_pending_replies = 20\n", "");
    let mut admin = setup.memshift.client();
    admin.set("lost", b"alive").expect("set");
    replace(&mut admin, "lost", "alive");
    let mut leader = setup.memshift.client();
    // Small replies first: the session's in-flight estimate shrinks, so
    // its later pipeline is dispatched at once (and overflows the limit).
    for _ in 0..40 {
        assert_eq!(leader.get("warm").expect("get"), None);
    }
    let mut waiters = connect(&setup, 20);
    let closed = slow_consumers(&mut admin);
    setup.shard.signal(libc::SIGSTOP);
    leader.send(b"get lost\r\n").expect("send");
    thread::sleep(Duration::from_millis(200));
    for c in waiters.iter_mut() {
        c.send(b"get lost\r\n").expect("send");
    }
    thread::sleep(Duration::from_millis(200));
    let mut more = Vec::new();
    for i in 0..40 {
        more.extend_from_slice(format!("get other{i}\r\n").as_bytes());
    }
    leader.send(&more).expect("send");
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(10),
        "the leader closed",
        || (slow_consumers(&mut admin) > closed).then_some(()),
    );
    setup.shard.signal(libc::SIGCONT);
    let thawed = Instant::now();
    for c in waiters.iter_mut() {
        c.set_read_timeout(REPLY_BOUND).expect("timeout");
        assert_eq!(read_get_reply(c), "VALUE lost 0 5\r\nalive\r\nEND\r\n");
    }
    // A waiter left to its own deadline would answer after 30 s.
    let took = thawed.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "answered {took:?} after the thaw"
    );
    assert_one_reply_each(&mut waiters);
}

#[test]
fn near_cache_coalesce_a_joined_read_followed_by_its_own_write_keeps_order() {
    if !require_tools("near_cache_coalesce_session_order", &["redis-server"]) {
        return;
    }
    let setup = start_with(10_000, 1, "", "connections_per_shard = 2\n");
    let mut admin = setup.memshift.client();
    let mut leader = setup.memshift.client();
    let mut writer = setup.memshift.client();
    admin.set("order", b"v0").expect("set");
    for round in 1..=5 {
        let old = format!("old{round}");
        let new = format!("new{round}");
        replace(&mut admin, "order", &old);
        let joined = coalesced(&mut admin);
        setup.shard.signal(libc::SIGSTOP);
        leader.send(b"get order\r\n").expect("send");
        thread::sleep(Duration::from_millis(200));
        // Joins the leader's read, then writes the key.
        let req = format!(
            "get order\r\nreplace order 0 0 {}\r\n{new}\r\nget order\r\n",
            new.len()
        );
        writer.send(req.as_bytes()).expect("send");
        thread::sleep(Duration::from_millis(200));
        setup.shard.signal(libc::SIGCONT);
        leader.set_read_timeout(REPLY_BOUND).expect("timeout");
        writer.set_read_timeout(REPLY_BOUND).expect("timeout");
        let value = |v: &str| format!("VALUE order 0 {}\r\n{v}\r\nEND\r\n", v.len());
        // Concurrent with the write (no reply yet when it was sent).
        let first = read_get_reply(&mut leader);
        assert!(
            first == value(&old) || first == value(&new),
            "round {round}: {first}"
        );
        assert_eq!(read_get_reply(&mut writer), value(&old), "round {round}");
        assert_eq!(writer.read_line().expect("stored"), b"STORED\r\n");
        assert_eq!(read_get_reply(&mut writer), value(&new), "round {round}");
        // The writer left the flight before the leader's answer.
        assert_eq!(coalesced(&mut admin), joined, "round {round}");
    }
}

/// A `flush_all` writes every key: a waiter dispatched before it leaves its
/// flight ahead of it, as before a write of its own key. (It used to stay,
/// and a later write of its key took it out and sent its read after the
/// flush: a miss where memcached has the item.)
#[test]
fn near_cache_coalesce_a_joined_read_followed_by_flush_all_keeps_order() {
    if !require_tools("near_cache_coalesce_flush_order", &["redis-server"]) {
        return;
    }
    let setup = start_with(10_000, 1, "", "");
    let mut admin = setup.memshift.client();
    let mut c = setup.memshift.client();
    for round in 1..=3 {
        let key = format!("flushed{round}");
        // Not write-through: the key stays uncached, so the gets leads.
        add_uncached(&mut admin, &key, "v");
        setup.shard.signal(libc::SIGSTOP);
        let req = format!("gets {key}\r\nget {key}\r\nflush_all\r\nset {key} 0 0 1\r\nw\r\n");
        c.send(req.as_bytes()).expect("send");
        thread::sleep(Duration::from_millis(200));
        setup.shard.signal(libc::SIGCONT);
        c.set_read_timeout(REPLY_BOUND).expect("timeout");
        let gets = read_get_reply(&mut c);
        assert!(
            gets.starts_with(&format!("VALUE {key} 0 1 ")),
            "round {round}: {gets}"
        );
        let get = read_get_reply(&mut c);
        assert_eq!(
            get,
            format!("VALUE {key} 0 1\r\nv\r\nEND\r\n"),
            "round {round}"
        );
        assert_eq!(c.read_line().expect("flushed"), b"OK\r\n", "round {round}");
        assert_eq!(
            c.read_line().expect("stored"),
            b"STORED\r\n",
            "round {round}"
        );
    }
}

/// Add (not write-through: the key stays uncached) `key` with `value`.
fn add_uncached(c: &mut McClient, key: &str, value: &str) {
    let req = format!("add {key} 0 0 {}\r\n{value}\r\n", value.len());
    assert_eq!(c.request_str(req.as_bytes()).expect("add"), "STORED\r\n");
}

fn slow_consumers(c: &mut McClient) -> u64 {
    mc_stats(c)
        .expect("stats")
        .get("slow_consumers_closed")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
