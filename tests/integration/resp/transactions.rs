//! Transactions on one shard and blocking pops (docs/resp.md,
//! "Transactions", "Blocking pops"): redis-py and redis-cli through
//! memshift (3 shards, hash tag "{}") against one plain Redis; a
//! transaction across shards refused with nothing applied; the bound on
//! held connections, and a client leaving mid-BLPOP; the near cache after a
//! transaction; one slot of a real Redis Cluster.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memshift_tests::ops_support::{metric, wait_until};
use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::resp_proxy::start_resp_memshift;
use memshift_tests::{redis_py_python, require_tools, Memshift, RedisClient, RedisServer, Resp};

const SCRIPT: &str = include_str!("transactions.py");
const IN_USE: &str = "memshift_redis_dedicated_connections";

/// memshift over 3 fresh shards with hash tags on; returns it, the shards,
/// its RESP port and its admin port.
fn start(redis_extra: &str, extra_tables: &str) -> (Memshift, Vec<RedisServer>, u16, u16) {
    start_with_server(redis_extra, extra_tables, "")
}

/// [`start`], with more `[server]` lines.
fn start_with_server(
    redis_extra: &str,
    extra_tables: &str,
    server_extra: &str,
) -> (Memshift, Vec<RedisServer>, u16, u16) {
    let shards: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
    let (memshift, resp, admin) = start_resp_memshift(&addrs, |o| {
        o.timeout_ms = 2000;
        o.server_extra.push_str(server_extra);
        o.redis_extra.push_str(redis_extra);
        o.extra_tables
            .push_str(&format!("[ring]\nhash_tag = \"{{}}\"\n\n{extra_tables}"));
    });
    (memshift, shards, resp, admin)
}

fn run_script(port: u16, proto: u8, mode: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("transactions.py");
    std::fs::write(&script, SCRIPT).expect("write script");
    let mut cmd = Command::new(redis_py_python());
    cmd.arg(&script)
        .arg("127.0.0.1")
        .arg(port.to_string())
        .arg(proto.to_string())
        .arg(mode);
    let what = format!("transactions.py {mode} on port {port} (RESP{proto})");
    super::clients::run_client(cmd, "TRANSACTIONS DONE", &what)
}

fn connect(port: u16) -> RedisClient {
    RedisClient::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(30)).expect("connect")
}

fn cmd(c: &mut RedisClient, line: &str) -> Resp {
    let args: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
    c.cmd(&args).unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn bulk(s: &str) -> Resp {
    Resp::Bulk(Some(s.as_bytes().to_vec()))
}

fn ok() -> Resp {
    Resp::Simple("OK".into())
}

fn queued() -> Resp {
    Resp::Simple("QUEUED".into())
}

fn is_error(r: &Resp, prefix: &str) -> bool {
    matches!(r, Resp::Error(e) if e.starts_with(prefix))
}

#[test]
fn redis_py_transactions_and_blocking_pops_match_plain_redis() {
    redis_py_transactions_match(
        "redis_py_transactions_and_blocking_pops_match_plain_redis",
        "",
    );
}

/// The same with one worker thread (tokio's current-thread scheduler):
/// blocking pops and held connections share the one thread with everyone.
#[test]
fn redis_py_transactions_match_plain_redis_with_one_worker() {
    redis_py_transactions_match(
        "redis_py_transactions_match_plain_redis_with_one_worker",
        "threads = 1\n",
    );
}

fn redis_py_transactions_match(test: &str, server_extra: &str) {
    if !require_tools(test, &["python3", "redis-server"]) {
        return;
    }
    let (memshift, _shards, resp, _) = start_with_server("", "", server_extra);
    let plain = RedisServer::start();
    for proto in [2, 3] {
        let want = run_script(plain.port(), proto, "same");
        let got = run_script(resp, proto, "same");
        assert_eq!(
            got,
            want,
            "RESP{proto}: memshift differs from plain Redis\nmemshift stderr:\n{}",
            memshift.stderr()
        );
        assert!(
            want.contains("WatchError"),
            "the WATCH conflict ran: {want}"
        );
    }
}

#[test]
fn go_redis_transactions_and_blocking_pops_match_plain_redis() {
    if !require_tools(
        "go_redis_transactions_and_blocking_pops_match_plain_redis",
        &["go", "redis-server"],
    ) {
        return;
    }
    let bin = super::clients::go_redis_workload();
    let (_memshift, _shards, resp, _) = start("", "");
    let plain = RedisServer::start();
    let run = |port: u16, proto: u8| super::clients::run_go_workload(&bin, port, proto, &["tx"]);
    for proto in [3, 2] {
        let want = run(plain.port(), proto);
        assert!(want.contains("txfailed=true"), "{want}");
        assert_eq!(run(resp, proto), want, "go-redis RESP{proto}");
    }
}

#[test]
fn transaction_across_shards_is_refused_and_applies_nothing() {
    if !require_tools(
        "transaction_across_shards_is_refused_and_applies_nothing",
        &["python3", "redis-server"],
    ) {
        return;
    }
    let (_memshift, shards, resp, _) = start("", "");
    let out = run_script(resp, 2, "cross");
    assert!(out.contains("CROSSSLOT memshift"), "{out}");
    assert!(out.contains("unchanged: True"), "{out}");
    assert!(
        out.contains(&format!("counters: {:?}", ["None"; 12]).replace('"', "")),
        "{out}"
    );
    // The keys did span shards.
    let holding = shards
        .iter()
        .filter(|s| {
            connect(s.port())
                .cmd(&[b"DBSIZE"])
                .ok()
                .and_then(|r| r.as_int())
                > Some(0)
        })
        .count();
    assert!(holding >= 2, "the transaction's keys should span shards");
}

#[test]
fn redis_cli_multi_exec_matches_plain_redis() {
    if !require_tools(
        "redis_cli_multi_exec_matches_plain_redis",
        &["redis-cli", "redis-server"],
    ) {
        return;
    }
    let (_memshift, _shards, resp, _) = start("", "");
    let plain = RedisServer::start();
    let script = "FLUSHALL\nMULTI\nSET {u}a 1\nINCR {u}a\nGET {u}a\nPING\nEXEC\nEXEC\nDISCARD\n\
                  MULTI\nMULTI\nSET {u}b\nEXEC\nGET {u}b\nWATCH {u}a\nGET {u}a\nMULTI\n\
                  WATCH {u}a\nAPPEND {u}a x\nEXEC\nMULTI\nEXEC\nMULTI\nEXEC x\nEXEC\n\
                  MULTI\nPING a b\nPING\nEXEC\nMULTI\nECHO\nEXEC\nMULTI\nINCR {u}a\nEXEC\n";
    let run = |port: u16| {
        let mut child = Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn redis-cli");
        {
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(script.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("redis-cli output");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let want = run(plain.port());
    assert!(want.contains("EXECABORT"), "{want}");
    assert_eq!(run(resp), want);
}

#[test]
fn held_connections_are_bounded_and_released_by_a_client_that_leaves() {
    if !require_tools(
        "held_connections_are_bounded_and_released_by_a_client_that_leaves",
        &["redis-server"],
    ) {
        return;
    }
    // timeout_ms (2 s) must not cut a longer blocking call short.
    let (memshift, _shards, resp, admin) = start("max_dedicated_connections = 2\n", "");
    let in_use = |n: f64| {
        wait_until(
            Duration::from_secs(10),
            Duration::from_millis(20),
            &format!("{n} dedicated connections in use"),
            || (metric(admin, IN_USE) == n).then_some(()),
        )
    };
    let mut blocked: Vec<TcpStream> = (0..2)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", resp)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            let line = format!("*3\r\n$5\r\nBLPOP\r\n$4\r\n{{q}}{i}\r\n$1\r\n0\r\n");
            s.write_all(line.as_bytes()).expect("send BLPOP");
            s
        })
        .collect();
    in_use(2.0);
    let mut c = connect(resp);
    // The bound: refused at once, and a transaction is not applied.
    assert!(is_error(
        &cmd(&mut c, "BLPOP {q}x 0"),
        "ERR memshift: every dedicated"
    ));
    assert_eq!(cmd(&mut c, "MULTI"), ok());
    assert_eq!(cmd(&mut c, "SET {q}t 1"), queued());
    assert!(is_error(
        &cmd(&mut c, "EXEC"),
        "ERR memshift: every dedicated"
    ));
    assert_eq!(cmd(&mut c, "GET {q}t"), Resp::Bulk(None));
    // A client that leaves mid-BLPOP frees its connection.
    drop(blocked.remove(0));
    in_use(1.0);
    // A blocking call's own timeout applies, not timeout_ms (2 s here):
    // 2.5 s of waiting answers nil, not a backend timeout.
    let t0 = Instant::now();
    assert_eq!(cmd(&mut c, "BLPOP {q}x 2.5"), Resp::Array(None));
    assert!(t0.elapsed() >= Duration::from_millis(2400));
    // The other blocked client is woken by a push.
    assert_eq!(cmd(&mut c, "RPUSH {q}1 woken"), Resp::Int(1));
    let want = b"*2\r\n$4\r\n{q}1\r\n$5\r\nwoken\r\n";
    let mut got = vec![0u8; want.len()];
    blocked[0].read_exact(&mut got).expect("BLPOP reply");
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
    // Both connections stay open, idle, for the next sessions: they are
    // reused (same shard) or closed for their permit (another shard).
    in_use(2.0);
    for tag in ["q", "z", "y"] {
        assert_eq!(cmd(&mut c, "MULTI"), ok());
        assert_eq!(cmd(&mut c, &format!("SET {{{tag}}}t 1")), queued());
        assert_eq!(cmd(&mut c, "EXEC"), Resp::Array(Some(vec![ok()])));
    }
    assert_eq!(metric(admin, IN_USE), 2.0);
    assert!(memshift.stderr().find("panicked").is_none());
}

#[test]
fn transaction_writes_reach_near_cache_readers() {
    if !require_tools(
        "transaction_writes_reach_near_cache_readers",
        &["redis-server"],
    ) {
        return;
    }
    let (_memshift, _shards, resp, _) = start("", "[near_cache]\nenabled = true\n");
    let mut c = connect(resp);
    assert_eq!(cmd(&mut c, "SET {n}k v1"), ok());
    for _ in 0..4 {
        assert_eq!(cmd(&mut c, "GET {n}k"), bulk("v1"));
    }
    assert_eq!(cmd(&mut c, "MULTI"), ok());
    assert_eq!(cmd(&mut c, "SET {n}k v2"), queued());
    assert_eq!(cmd(&mut c, "GET {n}k"), queued());
    assert_eq!(
        cmd(&mut c, "EXEC"),
        Resp::Array(Some(vec![ok(), bulk("v2")]))
    );
    assert_eq!(cmd(&mut c, "GET {n}k"), bulk("v2"));
}

#[test]
fn transactions_on_a_redis_cluster_run_on_one_slot() {
    if !require_tools(
        "transactions_on_a_redis_cluster_run_on_one_slot",
        &["redis-server", "redis-cli"],
    ) {
        return;
    }
    let nodes = RedisClusterNodes::start();
    let (_memshift, resp, _) = super::cluster::start(&nodes, "");
    let mut c = connect(resp);
    let mut other = connect(resp);
    assert_eq!(cmd(&mut c, "MULTI"), ok());
    assert_eq!(cmd(&mut c, "SET {s}a 1"), queued());
    assert_eq!(cmd(&mut c, "INCR {s}a"), queued());
    assert_eq!(cmd(&mut c, "GET {s}b"), queued());
    assert_eq!(
        cmd(&mut c, "EXEC"),
        Resp::Array(Some(vec![ok(), Resp::Int(2), Resp::Bulk(None)]))
    );
    // Two slots (of one master, then of two): refused, nothing applied.
    let slot = |k: &str| nodes.keyslot(k);
    let same_master = (0..1000)
        .map(|i| format!("x:{i}"))
        .find(|k| {
            slot(k) != slot("x:a") && nodes.master_of(slot(k)) == nodes.master_of(slot("x:a"))
        })
        .expect("a key of another slot on the same master");
    let other_master = (0..1000)
        .map(|i| format!("y:{i}"))
        .find(|k| nodes.master_of(slot(k)) != nodes.master_of(slot("x:a")))
        .expect("a key on another master");
    for second in [same_master, other_master] {
        assert_eq!(cmd(&mut c, "MULTI"), ok());
        assert_eq!(cmd(&mut c, "SET x:a 1"), queued());
        assert!(is_error(
            &cmd(&mut c, &format!("SET {second} 1")),
            "CROSSSLOT"
        ));
        assert!(is_error(&cmd(&mut c, "EXEC"), "EXECABORT"));
        assert_eq!(cmd(&mut c, "GET x:a"), Resp::Bulk(None));
        assert_eq!(cmd(&mut c, &format!("GET {second}")), Resp::Bulk(None));
    }
    // WATCH on the slot's master: a conflicting write aborts EXEC.
    assert_eq!(cmd(&mut c, "WATCH {s}a"), ok());
    assert_eq!(cmd(&mut other, "SET {s}a 5"), ok());
    assert_eq!(cmd(&mut c, "MULTI"), ok());
    assert_eq!(cmd(&mut c, "INCR {s}a"), queued());
    assert_eq!(cmd(&mut c, "EXEC"), Resp::Array(None));
    assert_eq!(cmd(&mut c, "WATCH {s}a"), ok());
    assert_eq!(cmd(&mut c, "MULTI"), ok());
    assert_eq!(cmd(&mut c, "INCR {s}a"), queued());
    assert_eq!(cmd(&mut c, "EXEC"), Resp::Array(Some(vec![Resp::Int(6)])));
    // Blocking pops on one slot.
    assert_eq!(cmd(&mut c, "BLPOP {s}q {s}r 0.2"), Resp::Array(None));
    assert_eq!(cmd(&mut other, "RPUSH {s}r v"), Resp::Int(1));
    assert_eq!(
        cmd(&mut c, "BLPOP {s}q {s}r 1"),
        Resp::Array(Some(vec![bulk("{s}r"), bulk("v")]))
    );
    assert!(is_error(
        &cmd(&mut c, "BLPOP x:a y:a 0.2"),
        "ERR memshift: BLPOP's keys"
    ));
}

#[test]
fn a_lost_shard_connection_never_turns_an_applied_exec_into_a_failure() {
    if !require_tools(
        "a_lost_shard_connection_never_turns_an_applied_exec_into_a_failure",
        &["redis-server"],
    ) {
        return;
    }
    let (_memshift, shards, resp, _) = start("", "");
    let mut c = connect(resp);
    // The shards' pipelined connections reconnect: poll until a GET reads
    // `want` (a failure says what was read last).
    let get = |c: &mut RedisClient, want: Resp| {
        let mut last = None;
        let found = wait_until_or(Duration::from_secs(10), || {
            last = Some(c.cmd(&[b"GET", b"{f}k"]));
            matches!(&last, Some(Ok(r)) if *r == want)
        });
        assert!(found, "GET {{f}}k: want {want:?}, last read {last:?}");
    };
    // The connection holding a WATCH is closed by the shard before EXEC:
    // the watch is gone, EXEC aborts (nil) and applies nothing.
    assert_eq!(cmd(&mut c, "WATCH {f}k"), ok());
    for s in &shards {
        let killed = connect(s.port()).cmd(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
        assert!(matches!(killed, Ok(Resp::Int(_))), "{killed:?}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cmd(&mut c, "MULTI"), ok());
    assert_eq!(cmd(&mut c, "SET {f}k lost"), queued());
    assert_eq!(cmd(&mut c, "EXEC"), Resp::Array(None));
    get(&mut c, Resp::Bulk(None));
    // The shard stops answering once EXEC is written: memshift cannot know
    // whether it ran and must not say it failed. It ran once resumed.
    assert_eq!(cmd(&mut c, "WATCH {f}k"), ok());
    for s in &shards {
        s.signal(libc::SIGSTOP);
    }
    assert_eq!(cmd(&mut c, "MULTI"), ok());
    assert_eq!(cmd(&mut c, "SET {f}k applied"), queued());
    let exec = cmd(&mut c, "EXEC");
    for s in &shards {
        s.signal(libc::SIGCONT);
    }
    assert!(
        is_error(&exec, "ERR memshift: the shard's connection was lost after EXEC was sent; the transaction may or may not have been applied"),
        "{exec:?}"
    );
    get(&mut c, bulk("applied"));
}

/// Poll `f` every 50 ms until it holds or `within` passed.
fn wait_until_or(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn pipelined_requests_around_exec_watch_and_blpop_keep_their_order() {
    if !require_tools(
        "pipelined_requests_around_exec_watch_and_blpop_keep_their_order",
        &["redis-server"],
    ) {
        return;
    }
    let (_memshift, _shards, resp, _) = start("", "");
    let plain = RedisServer::start();
    // One write: EXEC, WATCH and BLPOP run on other connections than the
    // requests around them, which must still see each other's effects.
    let script = "SET {p}k 1|MULTI|INCR {p}k|EXEC|GET {p}k|INCR {p}k|WATCH {p}k|GET {p}k|\
                  MULTI|INCR {p}k|EXEC|GET {p}k|RPUSH {p}l a|BLPOP {p}l 0.1|LLEN {p}l|\
                  BLPOP {p}l 0.1|SET {p}k 10|MULTI|GET {p}k|EXEC";
    let lines: Vec<Vec<&[u8]>> = script
        .split('|')
        .map(|l| l.split_whitespace().map(str::as_bytes).collect())
        .collect();
    let cmds: Vec<&[&[u8]]> = lines.iter().map(Vec::as_slice).collect();
    for _ in 0..5 {
        let want = connect(plain.port()).pipeline(&cmds).expect("plain Redis");
        let got = connect(resp).pipeline(&cmds).expect("memshift");
        assert_eq!(got, want);
    }
}

/// SIGTERM: a client blocked in `BLPOP q 0` does not hold the drain until
/// `drain_timeout_ms` (30 s here): the call is abandoned (the shard
/// unblocked) and the client's connection closed once the reply before it
/// is written, with no reply to the call and nothing pipelined after it
/// run, as Redis closes its clients when it shuts down (docs/resp.md,
/// "Blocking pops"). Without that rule the close comes at the deadline.
#[test]
fn drain_closes_a_client_blocked_in_blpop() {
    if !require_tools("drain_closes_a_client_blocked_in_blpop", &["redis-server"]) {
        return;
    }
    let shard = RedisServer::start();
    let (mut memshift, resp, _) = start_resp_memshift(&[shard.addr()], |o| {
        o.server_extra.push_str("drain_timeout_ms = 30000\n");
    });
    let mut s = TcpStream::connect(("127.0.0.1", resp)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    s.write_all(
        b"*1\r\n$4\r\nPING\r\n*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n\
          *3\r\n$3\r\nSET\r\n$5\r\nafter\r\n$1\r\n1\r\n",
    )
    .expect("send");
    let mut pong = [0u8; 7];
    s.read_exact(&mut pong).expect("PING's reply");
    assert_eq!(&pong, b"+PONG\r\n");
    let mut direct = connect(shard.port());
    let mut blocked = || blocked_clients(&mut direct);
    let (react, poll) = (Duration::from_secs(20), Duration::from_millis(20));
    wait_until(react, poll, "the BLPOP to block on the shard", || {
        (blocked() == Some(1)).then_some(())
    });
    let t0 = Instant::now();
    memshift.sigterm();
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("reading until the close: {e}\n{}", memshift.stderr()),
    }
    let took = t0.elapsed();
    assert!(rest.is_empty(), "a reply to the call or after it: {rest:?}");
    assert!(
        took < Duration::from_secs(15),
        "closed {took:?} after SIGTERM (the drain deadline is 30 s)\n{}",
        memshift.stderr()
    );
    wait_until(react, poll, "the shard to unblock", || {
        (blocked() == Some(0)).then_some(())
    });
    let status = memshift
        .wait_exit(Duration::from_secs(20))
        .expect("memshift did not exit after SIGTERM");
    assert_eq!(status.code(), Some(0), "exit status: {status}");
    assert_eq!(cmd(&mut direct, "EXISTS after"), Resp::Int(0));
    assert!(!memshift.stderr().contains("panicked"));
    eprintln!("a client blocked in BLPOP was closed {took:?} after SIGTERM");
}

/// `INFO clients`' `blocked_clients` counts a client waiting in `BLPOP`, as
/// Redis does: 1 while it waits, 0 once it is answered, and 0 again after a
/// client that left mid-call. Checked against one plain Redis, then
/// memshift.
#[test]
fn info_blocked_clients_counts_a_client_in_blpop_as_redis_does() {
    if !require_tools(
        "info_blocked_clients_counts_a_client_in_blpop_as_redis_does",
        &["redis-server"],
    ) {
        return;
    }
    let plain = RedisServer::start();
    let shard = RedisServer::start();
    let (_memshift, resp, _) = start_resp_memshift(&[shard.addr()], |_| {});
    for (name, port) in [("redis", plain.port()), ("memshift", resp)] {
        let mut info = connect(port);
        let mut blocked = || blocked_clients(&mut info);
        assert_eq!(blocked(), Some(0), "{name}: before");
        let (react, poll) = (Duration::from_secs(20), Duration::from_millis(20));
        // Answered: pushed to.
        let mut waiter = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        waiter
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        waiter
            .write_all(b"*3\r\n$5\r\nBLPOP\r\n$2\r\nbq\r\n$1\r\n0\r\n")
            .expect("BLPOP");
        wait_until(react, poll, "the BLPOP to count as blocked", || {
            (blocked() == Some(1)).then_some(())
        });
        let mut pusher = connect(port);
        assert_eq!(cmd(&mut pusher, "LPUSH bq v"), Resp::Int(1), "{name}");
        let mut reply = [0u8; 19];
        waiter.read_exact(&mut reply).expect("BLPOP's reply");
        assert_eq!(&reply, b"*2\r\n$2\r\nbq\r\n$1\r\nv\r\n", "{name}");
        wait_until(react, poll, "the answered BLPOP to leave the count", || {
            (blocked() == Some(0)).then_some(())
        });
        // Left mid-call.
        let mut leaver = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        leaver
            .write_all(b"*3\r\n$5\r\nBLPOP\r\n$2\r\nbq\r\n$1\r\n0\r\n")
            .expect("BLPOP");
        wait_until(react, poll, "the second BLPOP to count as blocked", || {
            (blocked() == Some(1)).then_some(())
        });
        drop(leaver);
        wait_until(react, poll, "a client that left to leave the count", || {
            (blocked() == Some(0)).then_some(())
        });
    }
}

/// `blocked_clients` of `INFO clients`.
fn blocked_clients(c: &mut RedisClient) -> Option<u32> {
    match cmd(c, "INFO clients") {
        Resp::Bulk(Some(info)) => String::from_utf8_lossy(&info).lines().find_map(|l| {
            l.strip_prefix("blocked_clients:")?
                .trim()
                .parse::<u32>()
                .ok()
        }),
        other => panic!("INFO clients: {other:?}"),
    }
}
