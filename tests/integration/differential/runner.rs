//! The two sides (reference memcached and the target), their connections,
//! and one exchange of a batch with both.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use memshift_tests::ops_support::metric;
use memshift_tests::redis_cluster::RedisClusterNodes;
use memshift_tests::{escape, require_tools, Cluster, ClusterOptions, McClient, Memcached, Unit};

use super::normalise::{compare, meta_cas, CasMap};
use super::MAX_ITEM;

/// The reference memcached. With its LRU maintainer (and so the segmented
/// LRU and its asynchronous bumps) and crawler threads off, only the
/// connection ever holds a reference to an item, so an incr/decr result that
/// is shorter is always padded in place, memcached's usual behaviour. With
/// them on, a recently read item is sometimes still referenced by a bump
/// queue and memcached allocates a new, shorter item instead: a timing race.
const REFERENCE_ARGS: [&str; 6] = [
    "-I",
    "1m",
    "-m",
    "256",
    "-o",
    "no_lru_maintainer,no_lru_crawler",
];

// ---------------------------------------------------------------------------
// the two sides

pub(super) enum Target {
    Memcached(Memcached),
    Memshift(Box<Cluster>),
}

impl Target {
    pub(super) fn addr(&self) -> String {
        match self {
            Target::Memcached(m) => m.addr(),
            Target::Memshift(c) => c.addr().to_string(),
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            Target::Memcached(_) => "memcached (self-check)",
            Target::Memshift(_) => "memshift",
        }
    }

    pub(super) fn diagnostics(&self) -> String {
        match self {
            Target::Memcached(m) => tail(&m.log(), 2000),
            Target::Memshift(c) => tail(&c.memshift.stderr(), 4000),
        }
    }
}

pub(super) fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

fn self_check() -> bool {
    matches!(std::env::var("DIFF_TARGET").as_deref(), Ok("memcached"))
}

/// `[near_cache]` for a target run with the near cache on: every read
/// admitted, so each get after the first is a cache candidate.
pub(super) const NEAR_CACHE_ON: &str = "[near_cache]\nenabled = true\nadmit_reads = 1\n";

/// `DIFF_NEAR_CACHE=1`: the generated stream runs against memshift with
/// the near cache on.
fn near_cache_from_env() -> bool {
    matches!(std::env::var("DIFF_NEAR_CACHE").as_deref(), Ok("1"))
}

pub(super) fn start_sides(test: &str) -> Option<(Memcached, Target)> {
    start_sides_with(test, near_cache_from_env())
}

/// [`start_sides`], with memshift's near cache on or off.
pub(super) fn start_sides_with(test: &str, near_cache: bool) -> Option<(Memcached, Target)> {
    start_sides_on(test, false, near_cache).map(|(r, t, _)| (r, t))
}

/// `start_sides`; with `redis_cluster`, memshift runs in cluster mode on a
/// 6-node Redis Cluster (returned: it must outlive the test).
pub(super) fn start_sides_on(
    test: &str,
    redis_cluster: bool,
    near_cache: bool,
) -> Option<(Memcached, Target, Option<RedisClusterNodes>)> {
    if redis_cluster && !self_check() {
        if !require_tools(test, &["memcached", "redis-server", "redis-cli"]) {
            return None;
        }
        let reference = Memcached::start_with_args(&REFERENCE_ARGS);
        let nodes = RedisClusterNodes::start();
        let (memshift, config) = nodes.memshift(&format!("max_item_size = {MAX_ITEM}\n"));
        let target = Target::Memshift(Box::new(Cluster {
            memshift,
            shards: Vec::new(),
            admin_port: 0,
            config,
        }));
        return Some((reference, target, Some(nodes)));
    }
    start_standalone(test, near_cache, false).map(|(r, t)| (r, t, None))
}

/// The reference, and memshift over 3 standalone shards listening on a
/// unix socket (`unix:/path`) instead of TCP.
pub(super) fn start_sides_over_unix_socket(test: &str) -> Option<(Memcached, Target)> {
    start_standalone(test, false, true)
}

/// The reference, and memshift with one worker thread (`threads = 1`:
/// tokio's current-thread scheduler, which CI's two cores would otherwise
/// never run; the benchmarks run memshift that way).
pub(super) fn start_sides_one_worker(test: &str) -> Option<(Memcached, Target)> {
    start_standalone_with(test, false, false, ONE_WORKER)
}

/// `[server]` lines of the one-worker variants.
pub(super) const ONE_WORKER: &str = "threads = 1\n";

fn start_standalone(
    test: &str,
    near_cache: bool,
    unix_listen: bool,
) -> Option<(Memcached, Target)> {
    start_standalone_with(test, near_cache, unix_listen, "")
}

fn start_standalone_with(
    test: &str,
    near_cache: bool,
    unix_listen: bool,
    server_extra: &str,
) -> Option<(Memcached, Target)> {
    let tools: &[&str] = if self_check() {
        &["memcached"]
    } else {
        &["memcached", "redis-server"]
    };
    if !require_tools(test, tools) {
        return None;
    }
    let reference = Memcached::start_with_args(&REFERENCE_ARGS);
    let target = if self_check() {
        Target::Memcached(Memcached::start_with_args(&REFERENCE_ARGS))
    } else {
        let opts = ClusterOptions {
            server_extra: format!("max_item_size = {MAX_ITEM}\n{server_extra}"),
            // Generous: on a loaded CI box a slow Redis reply must not turn
            // into a SERVER_ERROR that memcached would never send.
            timeout_ms: 2000,
            extra_tables: if near_cache {
                NEAR_CACHE_ON.into()
            } else {
                String::new()
            },
            ..ClusterOptions::default()
        };
        Target::Memshift(Box::new(if unix_listen {
            Cluster::start_on_unix_socket(opts)
        } else {
            Cluster::start_with(opts)
        }))
    };
    if let (true, Target::Memshift(c)) = (near_cache, &target) {
        wait_tracking(&c.shards);
    }
    Some((reference, target))
}

pub(super) struct Side {
    pub(super) name: String,
    pub(super) addr: String,
    pub(super) conn: McClient,
    /// Last CAS unique this side showed for each key.
    pub(super) last_cas: HashMap<Vec<u8>, u64>,
}

impl Side {
    pub(super) fn connect(name: &str, addr: &str) -> Side {
        Side {
            name: name.to_string(),
            addr: addr.to_string(),
            conn: connect(addr),
            last_cas: HashMap::new(),
        }
    }

    pub(super) fn reconnect(&mut self) {
        self.conn = connect(&self.addr);
        self.last_cas.clear();
    }

    /// Reads units until the sentinel's `VERSION` line (included).
    pub(super) fn read_batch(&mut self, track_cas: bool) -> Result<Vec<Unit>, (Vec<Unit>, String)> {
        let mut units = Vec::new();
        loop {
            match self.conn.read_unit() {
                Ok(u) => {
                    let done = u.line_starts_with(b"VERSION ");
                    if let Unit::Value {
                        key, cas: Some(c), ..
                    } = &u
                    {
                        if track_cas {
                            self.last_cas.insert(key.clone(), *c);
                        }
                    }
                    if let Some((key, c)) = meta_cas(&u) {
                        if track_cas {
                            self.last_cas.insert(key, c);
                        }
                    }
                    units.push(u);
                    if done {
                        return Ok(units);
                    }
                    if units.len() > 200_000 {
                        return Err((units, "more than 200000 reply units".into()));
                    }
                }
                Err(e) => return Err((units, format!("{}: {e}", self.name))),
            }
        }
    }
}

pub(super) fn connect(addr: &str) -> McClient {
    McClient::connect_with_timeout(addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

pub(super) fn render_units(units: &[Unit]) -> String {
    let mut s = String::new();
    for (i, u) in units.iter().enumerate() {
        let _ = writeln!(s, "      [{i}] {}", escape(&u.raw(), 200));
    }
    if units.is_empty() {
        s.push_str("      (nothing)\n");
    }
    s
}

/// Sends one batch (already rendered per side, sentinel included) to both
/// sides and compares the replies.
pub(super) fn exchange(
    r: &mut Side,
    t: &mut Side,
    cas: &mut CasMap,
    rb: &[u8],
    tb: &[u8],
    track_cas: bool,
) -> Result<(Vec<Unit>, Vec<Unit>), Mismatch> {
    r.conn
        .send(rb)
        .unwrap_or_else(|e| panic!("send to reference memcached: {e}"));
    let t_send = t.conn.send(tb);
    let r_units = match r.read_batch(track_cas) {
        Ok(units) => units,
        Err((units, e)) => {
            return Err(Mismatch {
                reference_failed: true,
                unit: units.len(),
                why: format!("the reference memcached did not answer up to the sentinel ({e})"),
                r_units: units,
                t_units: Vec::new(),
            })
        }
    };
    let (t_units, t_err) = match t_send {
        Err(e) => (Vec::new(), Some(format!("send failed: {e}"))),
        Ok(()) => match t.read_batch(track_cas) {
            Ok(units) => (units, None),
            Err((units, e)) => (units, Some(e)),
        },
    };
    let verdict = match t_err {
        Some(e) => Err((t_units.len(), format!("target failed to answer: {e}"))),
        None => compare(cas, &r_units, &t_units),
    };
    match verdict {
        Ok(()) => Ok((r_units, t_units)),
        Err((unit, why)) => Err(Mismatch {
            reference_failed: false,
            unit,
            why,
            r_units,
            t_units,
        }),
    }
}

/// How an exchange went wrong: the first differing reply unit and why.
pub(super) struct Mismatch {
    pub(super) reference_failed: bool,
    pub(super) unit: usize,
    pub(super) why: String,
    pub(super) r_units: Vec<Unit>,
    pub(super) t_units: Vec<Unit>,
}

/// Until memshift's invalidation connection is up on every shard (a RESP3
/// client): before that, nothing is cached.
fn wait_tracking(shards: &[memshift_tests::RedisServer]) {
    for s in shards {
        s.wait_tracking_clients(1);
    }
}

/// Near-cache mode: the script in segments, each `get`/`gets` line sent
/// twice more (to both sides), each in a segment of its own, so the repeats
/// are read after the first read's reply and can be near-cache hits (the
/// first fill is usually dropped again by the invalidation of the write
/// just before it, which Redis pushes back to this proxy too). Identical
/// reads in a row answer the same on memcached; the line after a storage
/// command is its data and is left alone.
fn read_twice(script: &[u8]) -> Vec<Vec<u8>> {
    let mut segments = Vec::new();
    const STORAGE: [&[u8]; 7] = [
        b"set ",
        b"add ",
        b"replace ",
        b"append ",
        b"prepend ",
        b"cas ",
        b"ms ",
    ];
    let mut out = Vec::with_capacity(script.len() * 2);
    let mut data_next = false;
    let mut rest = script;
    while !rest.is_empty() {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(rest.len(), |p| p + 2);
        let (line, tail) = rest.split_at(end);
        out.extend_from_slice(line);
        let complete = line.ends_with(b"\r\n");
        if !data_next && complete && (line.starts_with(b"get ") || line.starts_with(b"gets ")) {
            segments.push(std::mem::take(&mut out));
            segments.push(line.to_vec());
            out.extend_from_slice(line);
        }
        data_next = !data_next && STORAGE.iter().any(|c| line.starts_with(c));
        rest = tail;
    }
    segments.push(out);
    segments
}

/// With the near cache on, it must have answered reads: a run it never
/// served proves nothing about it.
pub(super) fn assert_near_cache_served(target: &Target) {
    if let Target::Memshift(c) = target {
        if c.admin_port != 0 {
            let hits = metric(c.admin_port, "memshift_near_cache_hits_total");
            let text = memshift_tests::ops_support::metrics_text(c.admin_port);
            let near: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("memshift_near_cache"))
                .collect();
            assert!(hits > 0.0, "the near cache answered no read: {near:?}");
        }
    }
}

/// Runs `script` on one connection of fresh servers, comparing replies.
pub(super) fn run_script<B: AsRef<[u8]>>(test: &str, script: &[(&str, B)]) {
    run_script_on(test, script, false, near_cache_from_env())
}

/// [`run_script`], with memshift's near cache on or off.
pub(super) fn run_script_with<B: AsRef<[u8]>>(test: &str, script: &[(&str, B)], near_cache: bool) {
    run_script_on(test, script, false, near_cache)
}

/// [`run_script`] against memshift with one worker thread
/// ([`start_sides_one_worker`]).
pub(super) fn run_script_one_worker<B: AsRef<[u8]>>(test: &str, script: &[(&str, B)]) {
    let Some((reference, target)) = start_sides_one_worker(test) else {
        return;
    };
    compare_script(&reference, &target, script, false);
}

/// [`run_script`], memshift on a Redis Cluster when `redis_cluster`.
pub(crate) fn run_script_on<B: AsRef<[u8]>>(
    test: &str,
    script: &[(&str, B)],
    redis_cluster: bool,
    near_cache: bool,
) {
    let Some((reference, target, _nodes)) = start_sides_on(test, redis_cluster, near_cache) else {
        return;
    };
    compare_script(&reference, &target, script, near_cache);
}

fn compare_script<B: AsRef<[u8]>>(
    reference: &Memcached,
    target: &Target,
    script: &[(&str, B)],
    near_cache: bool,
) {
    let mut r = Side::connect("reference memcached", &reference.addr());
    let mut t = Side::connect(target.name(), &target.addr());
    let mut cas = CasMap::default();
    let mut diffs = Vec::new();
    for (name, bytes) in script {
        let segments = if near_cache {
            read_twice(bytes.as_ref())
        } else {
            vec![bytes.as_ref().to_vec()]
        };
        for script in &segments {
            let mut req = script.to_vec();
            req.extend_from_slice(b"version\r\n");
            let Err(m) = exchange(&mut r, &mut t, &mut cas, &req, &req, false) else {
                continue;
            };
            {
                assert!(
                    !m.reference_failed,
                    "script {name:?}: the reference memcached did not answer: {}",
                    m.why
                );
                diffs.push(format!(
                    "script {name:?}: {}, first differing reply unit [{}]\n  sent: {}\n  reference memcached replied:\n{}  {} replied:\n{}",
                    m.why,
                    m.unit,
                    escape(script, 400),
                    render_units(&m.r_units),
                    target.name(),
                    render_units(&m.t_units)
                ));
                r.reconnect();
                t.reconnect();
            }
            break;
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {} fixed scripts differ:\n{}",
        diffs.len(),
        script.len(),
        diffs.join("\n")
    );
    if near_cache {
        assert_near_cache_served(target);
    }
}
