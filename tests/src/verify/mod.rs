//! A verifying load client (issue 13): N threads, each owning its keys
//! `<prefix>:<client>:<i>`, every value naming its client, key and write
//! sequence (`c3:k17:s42:<padding>`), so every reply can be checked against
//! what this client wrote and had acknowledged.
//!
//! It counts what can never be right (cross-talk: another client's or key's
//! value, a value never written, a reply that is not an answer to the
//! request; stale: a value older than the last acknowledged write of the key
//! or than a value already read) and records what a scenario may or may not
//! allow (SERVER_ERRORs, misses of acknowledged keys, replies slower than
//! the request timeout, broken connections). Whether a miss is allowed
//! depends on where the key lives, which the scenario decides afterwards.
//!
//! Requests are sequential per client (one in flight), bounded in count and
//! time: the load stops by itself.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::client::{escape, McClient, Unit};

mod report;
pub use report::{ErrorReply, Miss, Unanswered, VerifyReport};

/// How to run the load.
#[derive(Debug, Clone)]
pub struct VerifyConfig {
    pub clients: usize,
    pub keys_per_client: usize,
    /// Bytes of padding after the `c:k:s:` header (varied by up to 16 more).
    pub padding: usize,
    /// A reply slower than this is counted in `over_timeout`; the socket's
    /// read timeout is this too, so nothing can hang.
    pub request_timeout: Duration,
    /// Hard bounds: each client stops after this many ops or this long.
    pub max_ops_per_client: u64,
    pub max_duration: Duration,
    /// A server close ends the client (drain) instead of counting as a
    /// connection error and reconnecting.
    pub stop_on_close: bool,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            clients: 8,
            keys_per_client: 32,
            padding: 40,
            request_timeout: Duration::from_secs(5),
            max_ops_per_client: 200_000,
            max_duration: Duration::from_secs(60),
            stop_on_close: false,
        }
    }
}

/// The running load.
pub struct VerifyLoad {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    threads: Vec<JoinHandle<ClientLog>>,
    keys: Vec<String>,
}

impl VerifyLoad {
    /// Starts `cfg.clients` threads against the memcached listener `addr`.
    pub fn start(addr: &str, prefix: &str, cfg: VerifyConfig) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let keys = (0..cfg.clients)
            .flat_map(|c| (0..cfg.keys_per_client).map(move |i| key_name(prefix, c, i)))
            .collect();
        let threads = (0..cfg.clients)
            .map(|id| {
                let client = Client::new(id, addr, prefix, &cfg, stop.clone(), ops.clone());
                thread::Builder::new()
                    .name(format!("verify-{id}"))
                    .spawn(move || client.run())
                    .expect("spawn a verifying client")
            })
            .collect();
        VerifyLoad {
            stop,
            ops,
            threads,
            keys,
        }
    }

    /// Operations completed so far (any outcome).
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// Whether every client has stopped (limits reached or server closed).
    pub fn finished(&self) -> bool {
        self.threads.iter().all(JoinHandle::is_finished)
    }

    /// Polls until `n` more operations than now have completed, or the
    /// clients stopped, or `timeout`. Returns whether the ops were done.
    pub fn wait_ops(&self, n: u64, timeout: Duration) -> bool {
        let target = self.ops() + n;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && !self.finished() {
            if self.ops() >= target {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.ops() >= target
    }

    /// Stops the clients and merges what they saw.
    pub fn stop(self) -> VerifyReport {
        self.stop.store(true, Ordering::Relaxed);
        let mut r = VerifyReport {
            keys: self.keys,
            ..VerifyReport::default()
        };
        for t in self.threads {
            let log = t.join().expect("a verifying client panicked");
            r.ops += log.ops;
            r.cross_talk.extend(log.cross_talk);
            r.stale.extend(log.stale);
            r.errors.extend(log.errors);
            r.misses.extend(log.misses);
            r.over_timeout.extend(log.over_timeout);
            r.connection_errors.extend(log.connection_errors);
            r.unanswered_at_close.extend(log.unanswered);
            r.closed_by_server += usize::from(log.closed_by_server);
            r.latencies.extend(log.timed.iter().map(|&(_, d)| d));
            r.timed.extend(log.timed);
        }
        r.latencies.sort_unstable();
        r
    }
}

pub fn key_name(prefix: &str, client: usize, i: usize) -> String {
    format!("{prefix}:{client}:{i}")
}

/// The exact value client `c` writes to its key `k` at sequence `s`.
pub fn value_for(c: usize, k: usize, s: u64, padding: usize) -> Vec<u8> {
    let mut v = format!("c{c}:k{k}:s{s}:").into_bytes();
    let fill = b'a' + (s % 26) as u8;
    v.resize(v.len() + padding + (s % 17) as usize, fill);
    v
}

/// `(client, key, seq)` named by a value's header.
fn parse_value(v: &[u8]) -> Option<(usize, usize, u64)> {
    let text = std::str::from_utf8(v.get(..v.len().min(64))?).ok()?;
    let mut parts = text.splitn(4, ':');
    let c = parts.next()?.strip_prefix('c')?.parse().ok()?;
    let k = parts.next()?.strip_prefix('k')?.parse().ok()?;
    let s = parts.next()?.strip_prefix('s')?.parse().ok()?;
    Some((c, k, s))
}

#[derive(Debug, Default, Clone)]
struct KeyState {
    /// Sequence of the last acknowledged set or delete (0: none).
    acked_seq: u64,
    acked_present: bool,
    acked_at: Option<Instant>,
    /// Highest sequence read since (reads never go back).
    last_read: u64,
    /// Every set sequence ever sent for this key (acknowledged or not).
    sent_sets: Vec<u64>,
    /// A delete after the last acknowledged op failed: it may have run.
    maybe_deleted: bool,
}

#[derive(Default)]
struct ClientLog {
    ops: u64,
    cross_talk: Vec<String>,
    stale: Vec<String>,
    errors: Vec<ErrorReply>,
    misses: Vec<Miss>,
    over_timeout: Vec<String>,
    connection_errors: Vec<String>,
    unanswered: Vec<Unanswered>,
    closed_by_server: bool,
    timed: Vec<(Instant, Duration)>,
}

enum Op {
    Set(usize),
    Get(Vec<usize>),
    Delete(usize),
}

struct Client {
    id: usize,
    addr: String,
    prefix: String,
    cfg: VerifyConfig,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    keys: Vec<KeyState>,
    seq: u64,
    rng: u64,
    log: ClientLog,
}

/// How a request ended at the connection level.
enum Outcome {
    Reply(Vec<Unit>),
    /// Nothing (or part of a reply) within the timeout.
    TimedOut,
    /// EOF or reset; whether part of a reply had arrived.
    Closed(bool),
}

impl Client {
    fn new(
        id: usize,
        addr: &str,
        prefix: &str,
        cfg: &VerifyConfig,
        stop: Arc<AtomicBool>,
        ops: Arc<AtomicU64>,
    ) -> Self {
        Client {
            id,
            addr: addr.to_string(),
            prefix: prefix.to_string(),
            cfg: cfg.clone(),
            stop,
            ops,
            keys: vec![KeyState::default(); cfg.keys_per_client],
            seq: 0,
            rng: 0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            log: ClientLog::default(),
        }
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*: deterministic per client, no dependency.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn key(&self, k: usize) -> String {
        key_name(&self.prefix, self.id, k)
    }

    fn connect(&mut self) -> Option<McClient> {
        let deadline = Instant::now() + self.cfg.request_timeout;
        loop {
            match McClient::connect_with_timeout(&self.addr, self.cfg.request_timeout) {
                Ok(c) => return Some(c),
                Err(e) if Instant::now() >= deadline || self.cfg.stop_on_close => {
                    if !self.cfg.stop_on_close {
                        self.log
                            .connection_errors
                            .push(format!("client {}: connect: {e}", self.id));
                    }
                    return None;
                }
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn run(mut self) -> ClientLog {
        let started = Instant::now();
        let mut conn = self.connect();
        while let Some(c) = conn.as_mut() {
            if self.stop.load(Ordering::Relaxed)
                || self.log.ops >= self.cfg.max_ops_per_client
                || started.elapsed() >= self.cfg.max_duration
            {
                break;
            }
            let op = self.pick();
            let (req, what) = self.request(&op);
            let sent_at = Instant::now();
            let outcome = match c.send(&req) {
                Ok(()) => read_reply(c),
                Err(_) => Outcome::Closed(false),
            };
            let took = sent_at.elapsed();
            self.log.ops += 1;
            self.ops.fetch_add(1, Ordering::Relaxed);
            if took > self.cfg.request_timeout {
                self.log.over_timeout.push(format!(
                    "client {}: {what}: {took:?} (timeout {:?})",
                    self.id, self.cfg.request_timeout
                ));
            }
            match outcome {
                Outcome::Reply(units) => {
                    self.log.timed.push((sent_at, took));
                    if !self.check(&op, &what, &units) {
                        // The stream may be out of step: start afresh.
                        conn = self.connect();
                    }
                }
                Outcome::TimedOut => {
                    self.unknown(&op);
                    self.log.over_timeout.push(format!(
                        "client {}: {what}: no complete reply within {:?}",
                        self.id, self.cfg.request_timeout
                    ));
                    conn = self.connect();
                }
                Outcome::Closed(partial) => {
                    self.unknown(&op);
                    if self.cfg.stop_on_close {
                        self.log.closed_by_server = true;
                        self.log.unanswered.push(Unanswered {
                            request: what,
                            sent_at,
                            partial,
                        });
                        break;
                    }
                    self.log.connection_errors.push(format!(
                        "client {}: {what}: connection closed (partial reply: {partial})",
                        self.id
                    ));
                    conn = self.connect();
                }
            }
        }
        if conn.is_none() && self.cfg.stop_on_close {
            self.log.closed_by_server = true;
        }
        if let (Some(c), true) = (conn.as_mut(), self.cfg.stop_on_close) {
            // Drain: after the last reply the server closes, sends nothing.
            let (rest, closed) =
                c.read_until_closed_or_idle(self.cfg.request_timeout, self.cfg.request_timeout);
            if !rest.is_empty() {
                self.log.cross_talk.push(format!(
                    "client {}: bytes after the last reply: {}",
                    self.id,
                    escape(&rest, 200)
                ));
            }
            self.log.closed_by_server |= closed;
        }
        self.log
    }

    fn pick(&mut self) -> Op {
        let n = self.cfg.keys_per_client;
        let r = self.next_rand();
        let k = (self.next_rand() % n as u64) as usize;
        match r % 100 {
            0..=39 => Op::Set(k),
            40..=69 => Op::Get(vec![k]),
            70..=84 => {
                let count = 2 + (self.next_rand() % 3) as usize;
                let keys = (0..count.min(n)).map(|j| (k + j * 7) % n).collect();
                Op::Get(dedup(keys))
            }
            _ => Op::Delete(k),
        }
    }

    /// The request bytes, and a short description for reports.
    fn request(&mut self, op: &Op) -> (Vec<u8>, String) {
        match op {
            Op::Set(k) => {
                self.seq += 1;
                let s = self.seq;
                self.keys[*k].sent_sets.push(s);
                let v = value_for(self.id, *k, s, self.cfg.padding);
                let key = self.key(*k);
                let mut req =
                    format!("set {key} {} 0 {}\r\n", self.flags(*k), v.len()).into_bytes();
                req.extend_from_slice(&v);
                req.extend_from_slice(b"\r\n");
                (req, format!("set {key} s{s}"))
            }
            Op::Get(keys) => {
                let names: Vec<String> = keys.iter().map(|&k| self.key(k)).collect();
                let line = format!("get {}", names.join(" "));
                (format!("{line}\r\n").into_bytes(), line)
            }
            Op::Delete(k) => {
                self.seq += 1;
                let key = self.key(*k);
                (
                    format!("delete {key}\r\n").into_bytes(),
                    format!("delete {key} s{}", self.seq),
                )
            }
        }
    }

    fn flags(&self, k: usize) -> u32 {
        (self.id * 1000 + k) as u32
    }

    /// An op whose outcome is unknown (error, timeout, closed connection).
    fn unknown(&mut self, op: &Op) {
        if let Op::Delete(k) = op {
            self.keys[*k].maybe_deleted = true;
        }
    }

    fn acked(&mut self, k: usize, present: bool) {
        let st = &mut self.keys[k];
        st.acked_seq = self.seq;
        st.acked_present = present;
        st.acked_at = Some(Instant::now());
        st.maybe_deleted = false;
    }

    /// Checks one reply; false when it is not an answer to the request.
    fn check(&mut self, op: &Op, what: &str, units: &[Unit]) -> bool {
        let id = self.id;
        let bad = |log: &mut ClientLog, why: &str| {
            let raw: Vec<u8> = units.iter().flat_map(Unit::raw).collect();
            log.cross_talk
                .push(format!("client {id}: {what}: {why}: {}", escape(&raw, 200)));
            false
        };
        if let [Unit::Line(l)] = units {
            if l.starts_with(b"SERVER_ERROR ") && !l[..l.len() - 1].contains(&b'\n') {
                let keys = match op {
                    Op::Set(k) | Op::Delete(k) => vec![self.key(*k)],
                    Op::Get(ks) => ks.iter().map(|&k| self.key(k)).collect(),
                };
                self.log.errors.push(ErrorReply {
                    keys,
                    line: String::from_utf8_lossy(l).trim_end().to_string(),
                    at: Instant::now(),
                });
                self.unknown(op);
                return true;
            }
        }
        match op {
            Op::Set(k) => match units {
                [u] if u.is_line(b"STORED\r\n") => {
                    self.acked(*k, true);
                    true
                }
                _ => bad(&mut self.log, "not a set reply"),
            },
            Op::Delete(k) => match units {
                [u] if u.is_line(b"DELETED\r\n") => {
                    let st = &self.keys[*k];
                    // Something was there: an acknowledged write, or a set
                    // that failed but may have run. Otherwise it is a value
                    // an acknowledged delete had removed.
                    let possible =
                        st.acked_present || st.sent_sets.last().is_some_and(|&s| s > st.acked_seq);
                    if !possible {
                        self.log.stale.push(format!(
                            "client {id}: {what}: DELETED a key deleted at s{} (acknowledged)",
                            st.acked_seq
                        ));
                    }
                    self.acked(*k, false);
                    true
                }
                [u] if u.is_line(b"NOT_FOUND\r\n") => {
                    self.miss(*k);
                    self.acked(*k, false);
                    true
                }
                _ => bad(&mut self.log, "not a delete reply"),
            },
            Op::Get(keys) => {
                let Some((end, values)) = units.split_last() else {
                    return bad(&mut self.log, "empty reply");
                };
                if !end.is_line(b"END\r\n") {
                    return bad(&mut self.log, "no END");
                }
                // Values come in request order, each key at most once.
                let mut next = 0usize;
                let mut hit = vec![false; keys.len()];
                for u in values {
                    let Unit::Value {
                        key, flags, block, ..
                    } = u
                    else {
                        return bad(&mut self.log, "a line among the values");
                    };
                    let Some(pos) = keys[next..]
                        .iter()
                        .position(|&k| self.key(k).as_bytes() == key.as_slice())
                    else {
                        return bad(&mut self.log, "a key not asked for, or out of order");
                    };
                    let k = keys[next + pos];
                    next += pos + 1;
                    hit[next - 1] = true;
                    if flags.as_slice() != self.flags(k).to_string().as_bytes() {
                        return bad(&mut self.log, "wrong flags");
                    }
                    if !block.ends_with(b"\r\n") {
                        return bad(&mut self.log, "data block not followed by \\r\\n");
                    }
                    let data = &block[..block.len() - 2];
                    if !self.check_value(k, data, what) {
                        return bad(&mut self.log, "a value this key was never given");
                    }
                }
                for (j, &k) in keys.iter().enumerate() {
                    if !hit[j] {
                        self.miss(k);
                    }
                }
                true
            }
        }
    }

    /// A hit on key `k`: false for a value never written to it by this
    /// client (cross-talk); counts a stale read.
    fn check_value(&mut self, k: usize, data: &[u8], what: &str) -> bool {
        let Some((c, kk, s)) = parse_value(data) else {
            return false;
        };
        let st = &self.keys[k];
        if c != self.id
            || kk != k
            || st.sent_sets.binary_search(&s).is_err()
            || data != value_for(c, kk, s, self.cfg.padding).as_slice()
        {
            return false;
        }
        if s < st.acked_seq {
            self.log.stale.push(format!(
                "client {}: {what}: read s{s}, older than the acknowledged {} at s{}",
                self.id,
                if st.acked_present { "write" } else { "delete" },
                st.acked_seq
            ));
        } else if s < st.last_read {
            self.log.stale.push(format!(
                "client {}: {what}: read s{s} after having read s{}",
                self.id, st.last_read
            ));
        }
        let st = &mut self.keys[k];
        st.last_read = st.last_read.max(s);
        true
    }

    fn miss(&mut self, k: usize) {
        let st = &self.keys[k];
        if !st.acked_present || st.maybe_deleted {
            return;
        }
        if let Some(acked_at) = st.acked_at {
            self.log.misses.push(Miss {
                key: self.key(k),
                acked_seq: st.acked_seq,
                acked_at,
                seen_at: Instant::now(),
            });
        }
    }
}

fn dedup(mut keys: Vec<usize>) -> Vec<usize> {
    let mut seen = Vec::with_capacity(keys.len());
    keys.retain(|k| {
        let new = !seen.contains(k);
        seen.push(*k);
        new
    });
    keys
}

/// Reads one reply (the socket's read timeout bounds each read).
fn read_reply(c: &mut McClient) -> Outcome {
    let mut units = Vec::new();
    loop {
        match c.read_unit() {
            Ok(u) => {
                let more = matches!(u, Unit::Value { .. });
                units.push(u);
                if !more {
                    return Outcome::Reply(units);
                }
            }
            Err(e) => {
                return match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Outcome::TimedOut,
                    _ => Outcome::Closed(!units.is_empty() || c.has_buffered()),
                }
            }
        }
    }
}
