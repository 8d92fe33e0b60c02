//! `[redis] read_errors_as_misses` (on by default): with one of three
//! shards killed, or frozen (`SIGSTOP`, reads time out), reads of its keys
//! are misses while every other key is answered; writes of its keys keep
//! their error. Under load from several clients: requests touching only
//! healthy keys get no error, multi-gets answer their healthy keys, no
//! stale value and no value of another key (values encode their key).
//! Also: the switch off (today's `SERVER_ERROR`) and its live reload, mg
//! and binary gets, the near cache (a substituted miss is never cached),
//! and the miss bytes against a real memcached's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use memshift_tests::ops_support::{mc_stats, metric, wait_until};
use memshift_tests::{escape, require_tools, Cluster, ClusterOptions, McClient, Memcached, Resp};

const KEYS: usize = 90;
const VICTIM: usize = 2;
/// How long the load runs while the shard is out.
const LOAD: Duration = Duration::from_secs(3);

fn key(i: usize) -> String {
    format!("rm:{i:03}")
}

/// A value naming its key and the round that wrote it.
fn value(i: usize, round: u32) -> Vec<u8> {
    format!("{}={round}", key(i)).into_bytes()
}

struct Setup {
    cluster: Cluster,
    victims: Vec<usize>,
    healthy: Vec<usize>,
}

fn setup(timeout_ms: u64, extra_tables: &str) -> Setup {
    let cluster = Cluster::start_with(ClusterOptions {
        timeout_ms,
        extra_tables: extra_tables.to_string(),
        ..ClusterOptions::default()
    });
    let mut c = cluster.client();
    for i in 0..KEYS {
        // `add`, not `set`: with the near cache on, a plain set is written
        // through and cached, and the reads below must go to the shards.
        let mut req = format!("add {} 0 0 {}\r\n", key(i), value(i, 0).len()).into_bytes();
        req.extend_from_slice(&value(i, 0));
        req.extend_from_slice(b"\r\n");
        assert_eq!(c.request(&req).expect("add"), b"STORED\r\n");
    }
    let placement: Vec<Option<usize>> = (0..KEYS)
        .map(|i| cluster.shard_holding(key(i).as_bytes()))
        .collect();
    let victims: Vec<usize> = (0..KEYS)
        .filter(|&i| placement[i] == Some(VICTIM))
        .collect();
    let healthy: Vec<usize> = (0..KEYS)
        .filter(|&i| placement[i] != Some(VICTIM))
        .collect();
    assert!(
        victims.len() >= 5 && healthy.len() >= 20,
        "placement {placement:?}"
    );
    Setup {
        cluster,
        victims,
        healthy,
    }
}

/// `get`/`gets` of `keys`: the values in the reply, by key; panics on
/// anything but VALUE units and END.
fn multi_get(
    c: &mut McClient,
    verb: &str,
    keys: &[usize],
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let names: Vec<String> = keys.iter().map(|&i| key(i)).collect();
    let req = format!("{verb} {}\r\n", names.join(" "));
    c.send(req.as_bytes()).map_err(|e| e.to_string())?;
    let units = c.read_reply().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for u in units {
        match u {
            memshift_tests::Unit::Value { key, block, .. } => out.push((
                String::from_utf8_lossy(&key).into_owned(),
                block[..block.len() - 2].to_vec(),
            )),
            memshift_tests::Unit::Line(l) if l == b"END\r\n" => {}
            memshift_tests::Unit::Line(l) => return Err(escape(&l, 200)),
        }
    }
    Ok(out)
}

/// Poll (up to 15 s) until a `get` of `keys` answers `values` of them.
fn wait_values(c: &mut McClient, keys: &[usize], values: usize, what: &str) {
    wait_until(
        Duration::from_secs(15),
        Duration::from_millis(100),
        what,
        || {
            let got = multi_get(c, "get", keys).ok()?;
            (got.len() == values).then_some(())
        },
    );
}

/// Several clients for [`LOAD`]: multi-gets mixing healthy and victim keys,
/// single gets of either, sets of healthy keys (new rounds) and, with
/// `write_victims`, of victim keys (a frozen shard may apply them when it
/// resumes: not then). Returns a report of every violation (empty: none).
fn load(s: &Setup, write_victims: bool) -> Vec<String> {
    let stop = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for t in 0..4usize {
        let mut c = s.cluster.client();
        let (victims, healthy) = (s.victims.clone(), s.healthy.clone());
        let (stop, requests) = (stop.clone(), requests.clone());
        threads.push(thread::spawn(move || {
            let mut bad = Vec::new();
            // This thread's healthy keys and the round it last stored.
            let mine: Vec<usize> = healthy.iter().copied().filter(|i| i % 4 == t).collect();
            let mut round = vec![0u32; KEYS];
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) && bad.len() < 5 {
                n += 1;
                let h = mine[n % mine.len()];
                let v = victims[n % victims.len()];
                let other = healthy[(n * 7) % healthy.len()];
                let verb = if n.is_multiple_of(2) { "get" } else { "gets" };
                match multi_get(&mut c, verb, &[h, v, other]) {
                    Err(e) => bad.push(format!("{verb} healthy+victim: {e}")),
                    Ok(got) => {
                        for (k, val) in &got {
                            let i: usize = k[3..].parse().unwrap_or(usize::MAX);
                            if victims.contains(&i) {
                                bad.push(format!("{k} (down shard) answered {}", escape(val, 60)));
                            } else if !val.starts_with(format!("{k}=").as_bytes()) {
                                bad.push(format!(
                                    "{k} answered another key's value {}",
                                    escape(val, 60)
                                ));
                            } else if i == h && *val != value(h, round[h]) {
                                bad.push(format!(
                                    "{k}: stale {} (round {})",
                                    escape(val, 60),
                                    round[h]
                                ));
                            }
                        }
                        if got
                            .iter()
                            .filter(|(k, _)| *k == key(h) || *k == key(other))
                            .count()
                            != 2
                        {
                            bad.push(format!("{verb}: healthy keys missing from {got:?}"));
                        }
                    }
                }
                match multi_get(&mut c, "get", &[v]) {
                    Ok(got) if got.is_empty() => {}
                    other => bad.push(format!("get of a down shard's key: {other:?}")),
                }
                round[h] += 1;
                let mut req =
                    format!("set {} 0 0 {}\r\n", key(h), value(h, round[h]).len()).into_bytes();
                req.extend_from_slice(&value(h, round[h]));
                req.extend_from_slice(b"\r\n");
                match c.request(&req) {
                    Ok(r) if r == b"STORED\r\n" => {}
                    other => bad.push(format!("set of a healthy key: {other:?}")),
                }
                if write_victims && n.is_multiple_of(5) {
                    let req = format!("set {} 0 0 1\r\nx\r\n", key(v));
                    match c.request(req.as_bytes()) {
                        Ok(r) if r.starts_with(b"SERVER_ERROR ") => {}
                        other => bad.push(format!("set of a down shard's key: {other:?}")),
                    }
                }
                requests.fetch_add(3, Ordering::Relaxed);
            }
            bad
        }));
    }
    thread::sleep(LOAD);
    stop.store(true, Ordering::Relaxed);
    let bad: Vec<String> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("load thread"))
        .collect();
    assert!(
        requests.load(Ordering::Relaxed) > 20,
        "the load made almost no requests"
    );
    bad
}

fn read_and_write_checks(c: &mut McClient, victim: &str) {
    // A read is a miss, flags as memcached returns them on a miss.
    for (req, want) in [
        (format!("mg {victim} v f\r\n"), "EN\r\n".to_string()),
        (
            format!("mg {victim} v k O77\r\n"),
            format!("EN k{victim} O77\r\n"),
        ),
        (format!("mg {victim} v T30\r\n"), "EN\r\n".to_string()),
        (format!("mg {victim} v q\r\nmn\r\n"), "MN\r\n".to_string()),
        (format!("gat 30 {victim}\r\n"), "END\r\n".to_string()),
    ] {
        let got = c.request_str(req.as_bytes()).expect("reply");
        assert_eq!(got, want, "{}", req.trim_end());
    }
    // Writing or vivifying reads keep their error.
    for req in [
        format!("mg {victim} v N30\r\n"),
        format!("mg {victim} T30\r\n"),
        format!("ms {victim} 1\r\nx\r\n"),
        format!("delete {victim}\r\n"),
        format!("touch {victim} 10\r\n"),
        format!("incr {victim} 1\r\n"),
    ] {
        let got = c.request(req.as_bytes()).expect("reply");
        assert!(
            got.starts_with(b"SERVER_ERROR "),
            "{}: {}",
            req.trim_end(),
            escape(&got, 100)
        );
    }
}

/// The status of one binary request's response.
fn binary_status(addr: &str, req: &[u8]) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut s, req).unwrap();
    let mut header = [0u8; 24];
    std::io::Read::read_exact(&mut s, &mut header).expect("binary header");
    u16::from_be_bytes([header[6], header[7]])
}

/// Binary: Get and GAT are misses ("Not found", 1); Touch (a write) keeps
/// an error status.
fn binary_checks(addr: &str, victim: &str) {
    let k = victim.as_bytes();
    assert_eq!(binary_status(addr, &binary(0x00, k, b"", 1)), 1, "Get");
    assert_eq!(
        binary_status(addr, &binary(0x1d, k, &[0, 0, 0, 30], 2)),
        1,
        "GAT"
    );
    let touch = binary_status(addr, &binary(0x1c, k, &[0, 0, 0, 30], 3));
    assert!(touch > 1, "Touch of a down shard's key: status {touch:#x}");
}

/// A binary request (no extras unless given).
fn binary(opcode: u8, key: &[u8], extras: &[u8], opaque: u32) -> Vec<u8> {
    let mut out = vec![0x80, opcode];
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&((key.len() + extras.len()) as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out
}

/// Every miss form, one request at a time, up to a final `mn`/noop: the
/// reply bytes.
fn miss_bytes(addr: &str, key: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let text = [
        format!("get {key}\r\n"),
        format!("gets {key}\r\n"),
        format!("gat 0 {key}\r\n"),
        format!("gats 0 {key} {key}\r\n"),
        format!("mg {key} v\r\n"),
        format!("mg {key} s v f t c k O5\r\n"),
        format!("mg {key} v q\r\nmn\r\n"),
    ];
    let mut c = McClient::connect(addr).expect("connect");
    for req in &text {
        out.push(c.request(req.as_bytes()).expect("text reply"));
    }
    // Binary: Get, GetK, GetQ + GetKQ + Noop, GAT.
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let k = key.as_bytes();
    for (req, replies) in [
        (binary(0x00, k, b"", 1), 1),
        (binary(0x0c, k, b"", 2), 1),
        (
            [
                binary(0x09, k, b"", 3),
                binary(0x0d, k, b"", 4),
                binary(0x0a, b"", b"", 5),
            ]
            .concat(),
            1,
        ),
        (binary(0x1d, k, &[0, 0, 0, 0], 6), 1),
    ] {
        std::io::Write::write_all(&mut s, &req).unwrap();
        let mut got = Vec::new();
        for _ in 0..replies {
            let mut header = [0u8; 24];
            std::io::Read::read_exact(&mut s, &mut header).expect("binary header");
            let body = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
            let mut rest = vec![0u8; body];
            std::io::Read::read_exact(&mut s, &mut rest).expect("binary body");
            got.extend_from_slice(&header);
            got.extend_from_slice(&rest);
        }
        out.push(got);
    }
    out
}

#[test]
fn killed_shard_reads_are_misses() {
    if !require_tools("killed_shard_reads_are_misses", &["redis-server"]) {
        return;
    }
    let mut s = setup(500, "");
    s.cluster.shards[VICTIM].stop();
    let bad = load(&s, true);
    assert!(bad.is_empty(), "with shard {VICTIM} killed: {bad:#?}");
    let mut c = s.cluster.client();
    let victim = key(s.victims[0]);
    read_and_write_checks(&mut c, &victim);
    binary_checks(s.cluster.addr(), &victim);

    // Counted on the down shard only, and in `stats`.
    let shard = |i: usize| {
        metric(
            s.cluster.admin_port,
            &format!(
                "memshift_read_errors_as_misses_total{{shard=\"{}\"}}",
                s.cluster.shards[i].addr()
            ),
        )
    };
    assert!(shard(VICTIM) > 0.0);
    assert_eq!(shard((VICTIM + 1) % 3), 0.0);
    let stats = mc_stats(&mut c).expect("stats");
    let counted: u64 = stats["read_errors_as_misses"].parse().unwrap();
    assert_eq!(counted as f64, shard(VICTIM), "stats and the metric agree");
    let log = s.cluster.memshift.stderr();
    let lines = log.matches("answered as misses").count();
    assert!(
        (1..=2).contains(&lines),
        "one log line per 10 s, got {lines}:\n{log}"
    );

    // Live reload: off gives today's SERVER_ERROR for the whole request.
    let mixed = format!("get {} {victim}\r\n", key(s.healthy[0]));
    let off = s
        .cluster
        .config
        .replace("[redis]\n", "[redis]\nread_errors_as_misses = false\n");
    s.cluster.memshift.rewrite_config(&off);
    s.cluster.memshift.sighup();
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(100),
        "the switch off",
        || {
            let got = c.request(mixed.as_bytes()).expect("reply");
            got.starts_with(b"SERVER_ERROR ").then_some(())
        },
    );
    for req in [format!("get {victim}\r\n"), format!("mg {victim} v\r\n")] {
        let got = c.request(req.as_bytes()).expect("reply");
        assert!(
            got.starts_with(b"SERVER_ERROR "),
            "{req}: {}",
            escape(&got, 100)
        );
    }
    s.cluster.memshift.rewrite_config(&s.cluster.config);
    s.cluster.memshift.sighup();
    wait_values(&mut c, &[s.healthy[0], s.victims[0]], 1, "the switch on");
}

#[test]
fn paused_shard_reads_are_misses_and_not_cached() {
    if !require_tools(
        "paused_shard_reads_are_misses_and_not_cached",
        &["redis-server"],
    ) {
        return;
    }
    let s = setup(
        300,
        "[near_cache]\nenabled = true\nmax_ttl_ms = 60000\nadmit_reads = 1\n",
    );
    s.cluster.shards[VICTIM].signal(libc::SIGSTOP);
    let bad = load(&s, false);
    let mut c = s.cluster.client();
    let victim = key(s.victims[0]);
    let (mg_ok, got) = (
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            read_and_write_checks(&mut c, &victim)
        })),
        multi_get(&mut c, "get", &[s.victims[1]]),
    );
    s.cluster.shards[VICTIM].signal(libc::SIGCONT);
    assert!(bad.is_empty(), "with shard {VICTIM} paused: {bad:#?}");
    if let Err(e) = mg_ok {
        std::panic::resume_unwind(e);
    }
    assert_eq!(got, Ok(Vec::new()), "a paused shard's key is a miss");
    // Back (once the proxy reconnected): the real values, twice (the
    // second may come from the near cache); a substituted miss was never
    // cached. Each worker has its own connection to the shard, reconnected
    // after its own backoff: wait through both clients (a new one, and the
    // one that read the misses, which may be on the other worker). A miss
    // the near cache kept would keep `c` from ever seeing the values.
    let mut fresh = s.cluster.client();
    for (client, what) in [
        (&mut fresh, "the shard back"),
        (&mut c, "the shard back for c"),
    ] {
        wait_values(client, &[s.healthy[0], s.victims[1]], 2, what);
    }
    for _ in 0..2 {
        for &i in &s.victims[1..] {
            let want = vec![(key(i), value(i, 0))];
            let got = multi_get(&mut c, "get", &[i]);
            assert_eq!(got, Ok(want), "{} after the shard resumed", key(i));
        }
    }
}

/// The bytes of each miss form (text, meta, binary) for a key of a down
/// shard equal a real memcached's for a key it does not have.
#[test]
fn miss_bytes_match_memcached() {
    if !require_tools("miss_bytes_match_memcached", &["redis-server", "memcached"]) {
        return;
    }
    let mut s = setup(500, "");
    let memcached = Memcached::start();
    s.cluster.shards[VICTIM].stop();
    let victim = key(s.victims[0]);
    let want = miss_bytes(&memcached.addr(), &victim);
    let got = miss_bytes(s.cluster.addr(), &victim);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(escape(g, 300), escape(w, 300), "miss form {i}");
    }
}

/// RESP keeps Redis' semantics with the switch on: a `GET` or `MGET` with
/// a key on the down shard is an error, never a nil ("no such key"); keys
/// elsewhere are served.
#[test]
fn resp_reads_of_a_down_shard_stay_errors() {
    if !require_tools("resp_reads_of_a_down_shard_stay_errors", &["redis-server"]) {
        return;
    }
    let mut cluster = memshift_tests::RespCluster::start();
    let mut r = memshift_tests::RedisClient::connect(&cluster.resp_addr(), Duration::from_secs(10))
        .expect("connect RESP");
    for i in 0..KEYS {
        let (k, v) = (key(i), value(i, 0));
        r.cmd(&[b"SET", k.as_bytes(), &v]).expect("SET");
    }
    let on = |s: usize, i: usize| {
        cluster.shards[s]
            .cmd(&[b"EXISTS", key(i).as_bytes()])
            .as_int()
            == Some(1)
    };
    let victim = (0..KEYS)
        .find(|&i| on(VICTIM, i))
        .expect("a key on the victim");
    let healthy = (0..KEYS).find(|&i| on(0, i)).expect("a key elsewhere");
    cluster.shards[VICTIM].stop();
    let (v, h) = (key(victim), key(healthy));
    let got = r.cmd(&[b"GET", v.as_bytes()]).expect("GET");
    assert!(
        matches!(got, Resp::Error(_)),
        "GET of a down shard's key: {got:?}"
    );
    let got = r.cmd(&[b"MGET", h.as_bytes(), v.as_bytes()]).expect("MGET");
    assert!(matches!(got, Resp::Error(_)), "MGET with one: {got:?}");
    let got = r.cmd(&[b"GET", h.as_bytes()]).expect("GET");
    assert_eq!(got, Resp::Bulk(Some(value(healthy, 0))));
}
