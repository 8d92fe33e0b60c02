//! Near cache soak, real processes: two memshift processes A and B over the
//! same 3 Redis shards, both with the near cache on (every read admitted,
//! entries kept up to a minute, so a missed invalidation shows as a stale
//! read far longer than the bound below). For ~12 s, on 2,000 keys drawn
//! from a zipf(0.99) distribution:
//!
//! - writers set items through A, through B itself (write-through: B
//!   caches what it stored; each such set is read back at once through B
//!   on the writer's connection) and directly in Redis (`SET`, the item
//!   layout of docs/storage.md), one write per key at a time, each value
//!   carrying its key's version;
//! - readers read through B (single-key and 3-key gets) and check that
//!   1. a read started `BOUND` after a version's acknowledgement returns
//!      that version or a newer one (bounded staleness; the measured delay
//!      from acknowledgement to the last older read is printed);
//!   2. on one connection, a key never reads older than it already read
//!      there (per-key monotonic reads; B's entries are per worker thread
//!      and a connection's task may move between them);
//!   3. an item written with a 2 s TTL is never returned by a read
//!      started after its expiry (+ `CLOCK_SLACK`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memshift_tests::migration_support::encode_item;
use memshift_tests::ops_support::metric;
use memshift_tests::{require_tools, McClient, Resp, Unit};

use crate::near_cache::start_pair;

const KEYS: usize = 2_000;
const ZIPF_S: f64 = 0.99;
const RUN: Duration = Duration::from_secs(12);
/// Every read started this long after a write's acknowledgement sees it
/// (generous: a loaded 2-core box; the measured delays are printed).
const BOUND: Duration = Duration::from_secs(3);
/// Every 10th key is written with this TTL.
const TTL_S: u64 = 2;
/// Slack on the expiry check: Redis counts the TTL from when it ran the write.
const CLOCK_SLACK: Duration = Duration::from_millis(100);
const READERS: usize = 3;

fn key(i: usize) -> String {
    format!("z:{i}")
}

fn has_ttl(i: usize) -> bool {
    i.is_multiple_of(10)
}

/// A value: `<key index>:<version>:` padded to 100 bytes.
fn value(i: usize, version: u64) -> Vec<u8> {
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(100, b'.');
    v
}

fn version_of(data: &[u8]) -> u64 {
    let s = std::str::from_utf8(data).expect("ASCII value");
    s.split(':')
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("version in value")
}

/// Deterministic xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(s) over 0..n by inverse CDF.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 1..=n {
            total += 1.0 / (k as f64).powf(s);
            cdf.push(total);
        }
        cdf.iter_mut().for_each(|c| *c /= total);
        Zipf(cdf)
    }

    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.0.partition_point(|&c| c < u).min(self.0.len() - 1)
    }
}

/// Per key: the versions acknowledged so far, with when.
#[derive(Default)]
struct KeyLog {
    next: u64,
    /// (version, acknowledged at, expires at)
    acked: Vec<(u64, Instant, Option<Instant>)>,
}

impl KeyLog {
    /// The newest version acknowledged before `t - BOUND`.
    fn floor(&self, t: Instant) -> u64 {
        self.acked
            .iter()
            .rev()
            .find(|(_, at, _)| *at + BOUND <= t)
            .map_or(0, |(v, _, _)| *v)
    }

    fn acked_at(&self, version: u64) -> Option<(Instant, Option<Instant>)> {
        self.acked
            .iter()
            .find(|(v, _, _)| *v == version)
            .map(|(_, at, exp)| (*at, *exp))
    }

    /// When the first version newer than `version` was acknowledged.
    fn superseded_at(&self, version: u64) -> Option<Instant> {
        self.acked
            .iter()
            .find(|(v, _, _)| *v > version)
            .map(|(_, at, _)| *at)
    }
}

type Log = Arc<Vec<Mutex<KeyLog>>>;

#[derive(Default)]
struct ReaderReport {
    reads: u64,
    /// Read start − acknowledgement of the first newer version, for each
    /// read that returned an older version than the newest acknowledged.
    stale: Vec<Duration>,
    /// Older than a version this connection already read.
    regressions: u64,
    errors: Vec<String>,
}

/// Through B: the set, then a get on the same connection reads it back
/// (read-your-writes; B may answer from its cache).
fn write_through_b(c: &mut McClient, i: usize, v: u64) {
    write_through_a(c, i, v);
    let got = c.get(&key(i)).expect("get through B");
    let got = got.as_deref().map(version_of);
    assert_eq!(got, Some(v), "{}: read back through B", key(i));
}

fn write_through_a(c: &mut McClient, i: usize, v: u64) {
    let data = value(i, v);
    let ttl = if has_ttl(i) { TTL_S } else { 0 };
    let mut req = format!("set {} 0 {ttl} {}\r\n", key(i), data.len()).into_bytes();
    req.extend_from_slice(&data);
    req.extend_from_slice(b"\r\n");
    let reply = c.request(&req).expect("set through A");
    assert_eq!(reply, b"STORED\r\n", "set {}", key(i));
}

fn write_raw(redis: &mut memshift_tests::RedisClient, i: usize, v: u64) {
    let item = encode_item(0, &value(i, v));
    let k = key(i);
    let ttl_ms = (TTL_S * 1000).to_string();
    let mut args: Vec<&[u8]> = vec![b"SET", k.as_bytes(), &item];
    if has_ttl(i) {
        args.extend_from_slice(&[b"PX", ttl_ms.as_bytes()]);
    }
    assert_eq!(
        redis.cmd(&args).expect("raw SET"),
        Resp::Simple("OK".into())
    );
}

/// Write one new version of a zipf-drawn key, holding its log entry so
/// each key's versions reach Redis in order.
fn write_one(log: &Log, zipf: &Zipf, rng: &mut Rng, write: &mut dyn FnMut(usize, u64)) {
    let i = zipf.sample(rng);
    let mut entry = log[i].lock().expect("key log");
    entry.next += 1;
    let v = entry.next;
    let sent = Instant::now();
    write(i, v);
    let acked = Instant::now();
    let expires = has_ttl(i).then(|| sent + Duration::from_secs(TTL_S));
    entry.acked.push((v, acked, expires));
}

fn check_read(
    log: &Log,
    report: &mut ReaderReport,
    seen: &mut HashMap<usize, u64>,
    i: usize,
    started: Instant,
    data: Option<&[u8]>,
) {
    report.reads += 1;
    let entry = log[i].lock().expect("key log");
    let Some(data) = data else {
        // A miss: only a key with a TTL may (every key was written first).
        if !has_ttl(i) {
            report.errors.push(format!("{}: a miss (no TTL)", key(i)));
        }
        return;
    };
    let v = version_of(data);
    let floor = entry.floor(started);
    if v < floor {
        report.errors.push(format!(
            "{}: read version {v} started {BOUND:?}+ after version {floor} was acknowledged",
            key(i)
        ));
    }
    match entry.acked_at(v) {
        Some((_, Some(expires))) if started > expires + CLOCK_SLACK => {
            report.errors.push(format!(
                "{}: version {v} read {:?} after its expiry",
                key(i),
                started - expires
            ));
        }
        Some(_) => {}
        // A read answered before the writer logged it (it holds the lock
        // around the write only): fine, it is the newest.
        None if v == entry.next => {}
        None => report
            .errors
            .push(format!("{}: unknown version {v}", key(i))),
    }
    if let Some(at) = entry.superseded_at(v) {
        if at < started {
            report.stale.push(started - at);
        }
    }
    let last = seen.entry(i).or_insert(0);
    if v < *last {
        report.regressions += 1;
        report.errors.push(format!(
            "{}: read version {v} after version {last} on the same connection",
            key(i)
        ));
    }
    *last = (*last).max(v);
}

fn read_loop(addr: &str, log: Log, stop: Arc<AtomicBool>, seed: u64) -> ReaderReport {
    let zipf = Zipf::new(KEYS, ZIPF_S);
    let mut rng = Rng(seed);
    let mut c = McClient::connect(addr).expect("connect to B");
    let mut report = ReaderReport::default();
    let mut seen = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let n = if rng.next().is_multiple_of(4) { 3 } else { 1 };
        let keys: Vec<usize> = (0..n).map(|_| zipf.sample(&mut rng)).collect();
        let names: Vec<String> = keys.iter().map(|&i| key(i)).collect();
        let started = Instant::now();
        c.send(format!("get {}\r\n", names.join(" ")).as_bytes())
            .expect("send get");
        let units = c.read_reply().expect("get reply");
        let mut values: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for u in &units {
            match u {
                Unit::Value { key, .. } => {
                    values.insert(key.clone(), u.data().unwrap_or_default().to_vec());
                }
                u if u.is_line(b"END\r\n") => {}
                other => report
                    .errors
                    .push(format!("unexpected reply unit {:?}", other.raw())),
            }
        }
        for (&i, name) in keys.iter().zip(&names) {
            let data = values.get(name.as_bytes()).map(Vec::as_slice);
            check_read(&log, &mut report, &mut seen, i, started, data);
        }
    }
    report
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

#[test]
fn near_cache_zipf_soak_two_proxies_bounded_staleness_and_expiry() {
    if !require_tools("near_cache_zipf_soak", &["redis-server"]) {
        return;
    }
    let pair = start_pair(3, 1);
    pair.wait_tracking();
    let log: Log = Arc::new((0..KEYS).map(|_| Mutex::new(KeyLog::default())).collect());

    // Version 1 of every key through A, and where it lives (for raw writes;
    // looked up at once, before a TTL key expires).
    let mut a = pair.a.client();
    let mut shards: Vec<_> = pair
        .shards
        .iter()
        .map(|s| {
            memshift_tests::RedisClient::connect(&s.addr(), Duration::from_secs(5))
                .expect("connect to a shard")
        })
        .collect();
    let mut shard_of = Vec::with_capacity(KEYS);
    for (i, entry) in log.iter().enumerate() {
        let mut entry = entry.lock().expect("key log");
        entry.next = 1;
        let sent = Instant::now();
        write_through_a(&mut a, i, 1);
        let expires = has_ttl(i).then(|| sent + Duration::from_secs(TTL_S));
        entry.acked.push((1, Instant::now(), expires));
        let k = key(i);
        let holders: Vec<usize> = (0..shards.len())
            .filter(|&s| {
                shards[s]
                    .cmd(&[b"EXISTS", k.as_bytes()])
                    .expect("EXISTS")
                    .as_int()
                    == Some(1)
            })
            .collect();
        assert_eq!(holders.len(), 1, "{k} on shards {holders:?}");
        shard_of.push(holders[0]);
    }
    let shard_of = Arc::new(shard_of);

    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let (log, stop) = (log.clone(), stop.clone());
        let (a_addr, shard_of) = (pair.a.addr().to_string(), shard_of.clone());
        let b_addr = pair.b.addr().to_string();
        let shards: Vec<String> = pair.shards.iter().map(|s| s.addr()).collect();
        writers.push(std::thread::spawn(move || {
            let zipf = Zipf::new(KEYS, ZIPF_S);
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w + 1));
            let mut writes = 0u64;
            // Writers 0 and 1 through A, writer 2 straight into Redis,
            // writer 3 through B.
            let mut through_a = (w < 2).then(|| McClient::connect(&a_addr).expect("connect to A"));
            let mut through_b = (w == 3).then(|| McClient::connect(&b_addr).expect("connect to B"));
            let mut redis: Vec<_> = shards
                .iter()
                .map(|s| {
                    memshift_tests::RedisClient::connect(s, Duration::from_secs(5))
                        .expect("connect to a shard")
                })
                .collect();
            while !stop.load(Ordering::Relaxed) {
                write_one(
                    &log,
                    &zipf,
                    &mut rng,
                    &mut |i, v| match (&mut through_a, &mut through_b) {
                        (Some(c), _) => write_through_a(c, i, v),
                        (_, Some(c)) => write_through_b(c, i, v),
                        _ => write_raw(&mut redis[shard_of[i]], i, v),
                    },
                );
                writes += 1;
                // Reads should outnumber writes (~10:1 here).
                std::thread::sleep(Duration::from_millis(2));
            }
            writes
        }));
    }
    let readers: Vec<_> = (0..READERS as u64)
        .map(|r| {
            let (log, stop) = (log.clone(), stop.clone());
            let addr = pair.b.addr().to_string();
            std::thread::spawn(move || read_loop(&addr, log, stop, 0xC0FF_EE00 + r))
        })
        .collect();
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    let writes: u64 = writers.into_iter().map(|w| w.join().expect("writer")).sum();
    let reports: Vec<ReaderReport> = readers
        .into_iter()
        .map(|r| r.join().expect("reader"))
        .collect();

    let reads: u64 = reports.iter().map(|r| r.reads).sum();
    let regressions: u64 = reports.iter().map(|r| r.regressions).sum();
    let mut stale: Vec<Duration> = reports.iter().flat_map(|r| r.stale.clone()).collect();
    stale.sort();
    let errors: Vec<&String> = reports.iter().flat_map(|r| &r.errors).collect();
    let hits = metric(pair.b_admin, "memshift_near_cache_hits_total");
    println!(
        "near cache zipf soak: {writes} writes, {reads} key reads through B, {hits} near-cache hits; \
         {} reads older than an acknowledged write: delay p50 {:?} p99 {:?} max {:?}; \
         {regressions} per-connection regressions",
        stale.len(),
        percentile(&stale, 0.5),
        percentile(&stale, 0.99),
        stale.last().copied().unwrap_or_default(),
    );
    assert!(
        errors.is_empty(),
        "{} violations, first ones:\n{}",
        errors.len(),
        errors
            .iter()
            .take(20)
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        reads > 1_000 && writes > 100,
        "too little load to mean anything"
    );
    assert!(
        hits > reads as f64 / 10.0,
        "the near cache served too little to be tested"
    );
}
