//! Harness for the migration tests: a legacy memcached that can be stopped
//! and restarted on the same port, memshift over real Redis shards and a
//! legacy pool in a given phase, direct reads/writes of each backend (raw
//! memcached text protocol, raw RESP with memshift's item header), pipelined
//! bulk helpers, the admin endpoint's metrics, and polling with deadlines.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::client::{escape, McClient, Unit};
use crate::env::free_port;
use crate::ops_support::poll_until;
use crate::process::{start_memshift_on_free_ports, toml_list, Memshift, RedisServer};
use crate::resp::Resp;

const POLL: Duration = Duration::from_millis(25);

/// Polls `f` until it gives `Some`, at most `timeout`; the panic names
/// `what` and shows the last state `f` reported through `last`.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut(&mut String) -> Option<T>,
) -> T {
    let mut last = String::new();
    poll_until(timeout, POLL, || f(&mut last)).unwrap_or_else(|| {
        panic!("timed out after {timeout:?} waiting for {what}; last state: {last}")
    })
}

// ---------------------------------------------------------------------------
// a restartable memcached

/// A `memcached` on a fixed loopback port that can be killed and started
/// again on the same port (the "shadow down" test).
pub struct LegacyMemcached {
    port: u16,
    args: Vec<String>,
    dir: TempDir,
    child: Option<Child>,
}

impl LegacyMemcached {
    pub fn start() -> Self {
        Self::start_with_args(&[])
    }

    /// Starts with extra arguments (e.g. `["-m", "256"]`), on a free port.
    pub fn start_with_args(args: &[&str]) -> Self {
        let mut last = String::new();
        for _ in 0..5 {
            let mut m = LegacyMemcached {
                port: free_port(),
                args: args.iter().map(|s| s.to_string()).collect(),
                dir: tempfile::Builder::new()
                    .prefix("memshift-legacy-mc-")
                    .tempdir()
                    .expect("temp dir"),
                child: None,
            };
            match m.spawn() {
                Ok(()) => return m,
                Err(e) => last = e,
            }
        }
        panic!("could not start memcached: {last}");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("memcached.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new("memcached");
        cmd.args(["-l", "127.0.0.1", "-p", &self.port.to_string(), "-U", "0"]);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "root"]);
        }
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; nothing else runs in pre_exec.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|e| format!("spawn memcached: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "memcached exited with {status}: {}",
                    fs::read_to_string(self.log_path()).unwrap_or_default()
                ));
            }
            let up = McClient::connect_with_timeout(&self.addr(), Duration::from_millis(500))
                .and_then(|mut c| c.request(b"version\r\n"))
                .map(|r| r.starts_with(b"VERSION "))
                .unwrap_or(false);
            if up {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err("memcached did not answer within 15 s".into());
            }
            sleep(POLL);
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> McClient {
        McClient::connect(&self.addr())
            .unwrap_or_else(|e| panic!("connect to memcached {}: {e}", self.addr()))
    }

    /// Kills it (SIGKILL): its items are gone.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again, empty, on the same port (retrying while the port is
    /// still busy).
    pub fn restart(&mut self) {
        self.stop();
        let mut last = String::new();
        for _ in 0..40 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            sleep(Duration::from_millis(250));
        }
        panic!("could not restart memcached on port {}: {last}", self.port);
    }
}

impl Drop for LegacyMemcached {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------
// items as each backend holds them

/// An item read straight from memcached with `mg <key> v f t`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McItem {
    pub flags: u32,
    pub data: Vec<u8>,
    /// Remaining seconds; `-1` without expiry.
    pub ttl: i64,
}

/// `mg <key> v f t` on one connection: `None` on a miss.
pub fn mc_get_item(c: &mut McClient, key: &str) -> io::Result<Option<McItem>> {
    c.send(format!("mg {key} v f t\r\n").as_bytes())?;
    let line = c.read_line()?;
    if line == b"EN\r\n" {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&line).into_owned();
    let mut words = text.trim_end().split(' ');
    if words.next() != Some("VA") {
        return Err(io::Error::other(format!("mg {key}: unexpected {text:?}")));
    }
    let len: usize = words
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| io::Error::other(format!("mg {key}: bad length in {text:?}")))?;
    let (mut flags, mut ttl) = (None, None);
    for w in words {
        if let Some(f) = w.strip_prefix('f') {
            flags = f.parse::<u32>().ok();
        } else if let Some(t) = w.strip_prefix('t') {
            ttl = t.parse::<i64>().ok();
        }
    }
    let mut data = c.read_exact_n(len + 2)?;
    data.truncate(len);
    Ok(Some(McItem {
        flags: flags.ok_or_else(|| io::Error::other(format!("mg {key}: no flags in {text:?}")))?,
        data,
        ttl: ttl.ok_or_else(|| io::Error::other(format!("mg {key}: no ttl in {text:?}")))?,
    }))
}

/// An item read straight from Redis (memshift's layout, see
/// `docs/storage.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisItem {
    pub flags: u32,
    pub cas: u64,
    pub data: Vec<u8>,
    /// Redis `TTL`: remaining seconds, `-1` without expiry.
    pub ttl: i64,
    /// Index of the shard that holds it.
    pub shard: usize,
}

/// Decodes memshift's value layout: version byte 1, flags u32 BE, CAS u64
/// BE, data; version 2 has a meta state byte before the data (docs/storage.md).
pub fn decode_item(raw: &[u8]) -> Option<(u32, u64, Vec<u8>)> {
    let header = match raw.first() {
        Some(1) => 13,
        Some(2) => 14,
        _ => return None,
    };
    if raw.len() < header {
        return None;
    }
    let flags = u32::from_be_bytes(raw[1..5].try_into().ok()?);
    let cas = u64::from_be_bytes(raw[5..13].try_into().ok()?);
    Some((flags, cas, raw[header..].to_vec()))
}

/// memshift's value layout for `data` with `flags` (CAS unique 1).
pub fn encode_item(flags: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(13 + data.len());
    v.push(1);
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&1u64.to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// The item `key` as Redis holds it, looking at every shard (a key must be
/// on at most one). Panics on an undecodable value.
pub fn redis_item(shards: &[RedisServer], key: &str) -> Option<RedisItem> {
    let mut found = None;
    for (i, s) in shards.iter().enumerate() {
        let mut c = s.client();
        let raw = match c.cmd(&[b"GET", key.as_bytes()]).expect("redis GET") {
            Resp::Bulk(Some(v)) => v,
            Resp::Bulk(None) => continue,
            other => panic!("redis GET {key}: unexpected {other:?}"),
        };
        let ttl = c
            .cmd(&[b"TTL", key.as_bytes()])
            .expect("redis TTL")
            .as_int()
            .expect("TTL answers an integer");
        let (flags, cas, data) = decode_item(&raw).unwrap_or_else(|| {
            panic!(
                "{key} in Redis is not memshift's layout: {}",
                escape(&raw, 80)
            )
        });
        assert!(
            found.is_none(),
            "{key} is on more than one Redis shard ({} and {i})",
            found.as_ref().map_or(0, |f: &RedisItem| f.shard)
        );
        found = Some(RedisItem {
            flags,
            cas,
            data,
            ttl,
            shard: i,
        });
    }
    found
}

/// Writes `key` into Redis `shard` in memshift's layout (`ttl` 0: none).
pub fn redis_put(shard: &RedisServer, key: &str, flags: u32, data: &[u8], ttl: u64) {
    let value = encode_item(flags, data);
    let ttl_s = ttl.to_string();
    let mut args: Vec<&[u8]> = vec![b"SET", key.as_bytes(), &value];
    if ttl > 0 {
        args.push(b"EX");
        args.push(ttl_s.as_bytes());
    }
    let reply = shard.cmd(&args);
    assert_eq!(reply, Resp::Simple("OK".into()), "redis SET {key}");
}

/// `set` straight on a memcached server.
pub fn mc_put(c: &mut McClient, key: &str, flags: u32, exptime: i64, data: &[u8]) {
    let mut req = format!("set {key} {flags} {exptime} {}\r\n", data.len()).into_bytes();
    req.extend_from_slice(data);
    req.extend_from_slice(b"\r\n");
    let reply = c.request_str(&req).expect("memcached set");
    assert_eq!(reply, "STORED\r\n", "memcached set {key}");
}

/// One item to load.
#[derive(Debug, Clone)]
pub struct LoadItem {
    pub key: String,
    pub flags: u32,
    pub exptime: i64,
    pub data: Vec<u8>,
}

/// Loads items into one memcached fast: pipelined `noreply` sets, then a
/// meta no-op to know they were all processed.
pub fn mc_load(addr: &str, items: &[LoadItem]) {
    let mut c = McClient::connect(addr).expect("connect to memcached");
    let mut buf = Vec::with_capacity(1 << 20);
    for chunk in items.chunks(2000) {
        buf.clear();
        for it in chunk {
            buf.extend_from_slice(
                format!(
                    "set {} {} {} {} noreply\r\n",
                    it.key,
                    it.flags,
                    it.exptime,
                    it.data.len()
                )
                .as_bytes(),
            );
            buf.extend_from_slice(&it.data);
            buf.extend_from_slice(b"\r\n");
        }
        c.send(&buf).expect("send pipelined sets");
        // memcached answers noreply errors anyway; a no-op per chunk keeps
        // the socket buffers from filling up and proves nothing failed.
        let reply = c.request_str(b"mn\r\n").expect("mn");
        assert_eq!(reply, "MN\r\n", "memcached refused a pipelined set");
    }
}

/// Loads items into one Redis server in memshift's layout, pipelined.
pub fn redis_load(addr: &str, items: &[LoadItem]) {
    let stream = TcpStream::connect(addr).expect("connect to redis");
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut writer = stream.try_clone().expect("clone redis stream");
    let mut reader = BufReader::new(stream);
    for chunk in items.chunks(2000) {
        let mut buf = Vec::with_capacity(chunk.len() * 96);
        for it in chunk {
            let value = encode_item(it.flags, &it.data);
            let mut args: Vec<Vec<u8>> = vec![b"SET".to_vec(), it.key.as_bytes().to_vec(), value];
            if it.exptime > 0 {
                args.push(b"EX".to_vec());
                args.push(it.exptime.to_string().into_bytes());
            }
            buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for a in &args {
                buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                buf.extend_from_slice(a);
                buf.extend_from_slice(b"\r\n");
            }
        }
        writer.write_all(&buf).expect("send pipelined SETs");
        let mut line = String::new();
        for _ in chunk {
            line.clear();
            reader.read_line(&mut line).expect("read SET reply");
            assert_eq!(line, "+OK\r\n", "redis refused a pipelined SET");
        }
    }
}

/// Requests in flight at once in [`pipelined_gets`]: below memshift's
/// per-connection limit of requests waiting on a backend (1024), so a batch
/// never depends on memshift resuming a half-parsed read buffer.
pub const PIPELINE_BATCH: usize = 500;

/// `get` of every key through one connection, pipelined by batches of
/// [`PIPELINE_BATCH`]: `(flags, data)` per key, `None` on a miss. Panics on
/// anything but a hit or a miss.
pub fn pipelined_gets(addr: &str, keys: &[String]) -> Vec<Option<(u32, Vec<u8>)>> {
    let mut c = McClient::connect(addr).expect("connect");
    let mut out = Vec::with_capacity(keys.len());
    for batch in keys.chunks(PIPELINE_BATCH) {
        let requests: Vec<u8> = batch
            .iter()
            .flat_map(|k| format!("get {k}\r\n").into_bytes())
            .collect();
        c.send(&requests).expect("send pipelined gets");
        for key in batch {
            out.push(read_get_reply(&mut c, key));
        }
    }
    out
}

/// One `get <key>` reply: `(flags, data)` on a hit.
pub fn read_get_reply(c: &mut McClient, key: &str) -> Option<(u32, Vec<u8>)> {
    let units = c
        .read_reply()
        .unwrap_or_else(|e| panic!("get {key}: no reply: {e}"));
    match units.as_slice() {
        [Unit::Line(l)] if l == b"END\r\n" => None,
        [v @ Unit::Value { key: k, flags, .. }, end] if end.is_line(b"END\r\n") => {
            assert_eq!(k, key.as_bytes(), "get {key}: VALUE for another key");
            let flags: u32 = String::from_utf8_lossy(flags).parse().expect("flags");
            Some((flags, v.data().unwrap_or_default().to_vec()))
        }
        other => panic!(
            "get {key}: unexpected reply {}",
            escape(&other.iter().flat_map(Unit::raw).collect::<Vec<u8>>(), 200)
        ),
    }
}

/// Waits until memcached's LRU maintainer has stopped moving items
/// (`moves_to_cold`, `moves_to_warm`, `moves_within_lru` unchanged for a
/// second): a bulk load is followed by a burst of HOT→COLD moves, and
/// `lru_crawler metadump` passes over items moved while it crawls.
pub fn mc_settle(addr: &str) {
    let mut c = McClient::connect(addr).expect("connect to memcached");
    let mut moves = || {
        let stats = c.request_str(b"stats\r\n").expect("stats");
        ["moves_to_cold", "moves_to_warm", "moves_within_lru"]
            .iter()
            .map(|name| {
                let prefix = format!("STAT {name} ");
                stats
                    .lines()
                    .find_map(|l| l.strip_prefix(prefix.as_str()))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .collect::<Vec<u64>>()
    };
    let mut last = moves();
    let mut stable_since = Instant::now();
    wait_for(
        &format!("memcached {addr} to stop moving items between LRUs"),
        Duration::from_secs(30),
        |state| {
            let now = moves();
            *state = format!("{now:?}");
            if now != last {
                last = now;
                stable_since = Instant::now();
            }
            (stable_since.elapsed() >= Duration::from_secs(1)).then_some(())
        },
    );
}

// ---------------------------------------------------------------------------
// admin endpoint

pub use crate::ops_support::http_get;

/// A parsed `/metrics` scrape.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// (family name, sorted labels) → value.
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
    pub text: String,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = match line.rsplit_once(' ') {
                Some(x) => x,
                None => continue,
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let mut map = BTreeMap::new();
            for pair in labels.split(',').filter(|p| !p.is_empty()) {
                if let Some((k, v)) = pair.split_once('=') {
                    map.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
                }
            }
            samples.push((name.to_string(), map, value));
        }
        Metrics {
            samples,
            text: text.to_string(),
        }
    }

    /// The sum of the samples of `name` whose labels include `labels`, or
    /// `None` if there is none.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut sum = None;
        for (n, l, v) in &self.samples {
            if n == name
                && labels
                    .iter()
                    .all(|(k, want)| l.get(*k).map(String::as_str) == Some(*want))
            {
                *sum.get_or_insert(0.0) += v;
            }
        }
        sum
    }

    /// Like [`Metrics::get`], absent counting as 0 (counters never touched).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }
}

/// Scrapes `/metrics` on the admin port (panics on failure).
pub fn scrape(admin_port: u16) -> Metrics {
    let (status, body) = http_get(admin_port, "/metrics")
        .unwrap_or_else(|e| panic!("GET /metrics on port {admin_port}: {e}"));
    assert_eq!(status, 200, "GET /metrics: {body:.300}");
    Metrics::parse(&body)
}

// ---------------------------------------------------------------------------
// memshift over a legacy pool and Redis shards

/// What to start.
#[derive(Debug, Clone)]
pub struct MigrationOptions {
    pub redis_shards: usize,
    pub memcached_servers: usize,
    /// `[memcached] distribution`
    pub distribution: String,
    /// `[migration] phase`
    pub phase: String,
    /// Extra lines for the `[migration]` table (`canary_percent = 20`...).
    pub migration: String,
    /// Extra arguments for each memcached.
    pub memcached_args: Vec<String>,
}

impl Default for MigrationOptions {
    fn default() -> Self {
        MigrationOptions {
            redis_shards: 3,
            memcached_servers: 1,
            distribution: "rendezvous".into(),
            phase: "cutover".into(),
            migration: String::new(),
            memcached_args: Vec::new(),
        }
    }
}

/// The config file for memshift over `redis` and `memcached`.
pub fn migration_config(
    port: u16,
    admin_port: u16,
    redis: &[String],
    memcached: &[String],
    opts: &MigrationOptions,
) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [redis]\nshards = [{redis}]\ntimeout_ms = 2000\n\n\
         [memcached]\nservers = [{mc}]\ndistribution = \"{dist}\"\ntimeout_ms = 2000\n\n\
         [migration]\nphase = \"{phase}\"\n{extra}\n",
        redis = toml_list(redis),
        mc = toml_list(memcached),
        dist = opts.distribution,
        phase = opts.phase,
        extra = opts.migration,
    )
}

/// A memshift process with its admin port and config.
pub struct Proxy {
    pub memshift: Memshift,
    pub admin_port: u16,
    pub config: String,
}

impl Proxy {
    /// Starts memshift over the given backends (retrying on a port clash).
    pub fn start(redis: &[String], memcached: &[String], opts: &MigrationOptions) -> Proxy {
        let (memshift, admin_port, config) = start_memshift_on_free_ports(|port, admin_port| {
            migration_config(port, admin_port, redis, memcached, opts)
        });
        Proxy {
            memshift,
            admin_port,
            config,
        }
    }

    pub fn addr(&self) -> &str {
        self.memshift.addr()
    }

    pub fn client(&self) -> McClient {
        self.memshift.client()
    }

    pub fn metrics(&self) -> Metrics {
        scrape(self.admin_port)
    }

    /// Rewrites the `[migration] phase` line (and appends `extra` to the
    /// `[migration]` table), sends SIGHUP and waits until
    /// `memshift_migration_phase{phase}` shows the new phase.
    pub fn reload_phase(&mut self, phase: &str, extra: &str) {
        let mut config = String::new();
        for line in self.config.lines() {
            if line.trim_start().starts_with("phase = ") {
                config.push_str(&format!("phase = \"{phase}\"\n{extra}\n"));
            } else {
                config.push_str(line);
                config.push('\n');
            }
        }
        self.memshift.rewrite_config(&config);
        self.config = config;
        self.memshift.sighup();
        let port = self.admin_port;
        wait_for(
            &format!("memshift_migration_phase{{phase=\"{phase}\"}} = 1 after SIGHUP"),
            Duration::from_secs(15),
            |last| {
                let m = scrape(port);
                *last = m
                    .text
                    .lines()
                    .filter(|l| l.starts_with("memshift_migration_phase"))
                    .collect::<Vec<_>>()
                    .join("; ");
                (m.value("memshift_migration_phase", &[("phase", phase)]) == 1.0).then_some(())
            },
        );
    }
}

/// Real Redis shards, a legacy memcached pool and memshift over them.
pub struct MigrationSetup {
    // Field order = drop order: memshift first.
    pub proxy: Proxy,
    pub redis: Vec<RedisServer>,
    pub memcached: Vec<LegacyMemcached>,
    pub opts: MigrationOptions,
}

impl MigrationSetup {
    pub fn start(opts: MigrationOptions) -> MigrationSetup {
        let redis: Vec<RedisServer> = (0..opts.redis_shards)
            .map(|_| RedisServer::start())
            .collect();
        let args: Vec<&str> = opts.memcached_args.iter().map(String::as_str).collect();
        let memcached: Vec<LegacyMemcached> = (0..opts.memcached_servers)
            .map(|_| LegacyMemcached::start_with_args(&args))
            .collect();
        let proxy = Proxy::start(&Self::addrs_r(&redis), &Self::addrs_m(&memcached), &opts);
        MigrationSetup {
            proxy,
            redis,
            memcached,
            opts,
        }
    }

    fn addrs_r(redis: &[RedisServer]) -> Vec<String> {
        redis.iter().map(RedisServer::addr).collect()
    }

    fn addrs_m(mc: &[LegacyMemcached]) -> Vec<String> {
        mc.iter().map(LegacyMemcached::addr).collect()
    }

    pub fn redis_addrs(&self) -> Vec<String> {
        Self::addrs_r(&self.redis)
    }

    pub fn memcached_addrs(&self) -> Vec<String> {
        Self::addrs_m(&self.memcached)
    }

    /// Another memshift over the same backends with other options.
    pub fn another_proxy(&self, opts: &MigrationOptions) -> Proxy {
        Proxy::start(&self.redis_addrs(), &self.memcached_addrs(), opts)
    }

    pub fn client(&self) -> McClient {
        self.proxy.client()
    }

    pub fn metrics(&self) -> Metrics {
        self.proxy.metrics()
    }

    /// `key` as Redis holds it (any shard).
    pub fn redis_item(&self, key: &str) -> Option<RedisItem> {
        redis_item(&self.redis, key)
    }

    /// `key` as the memcached pool holds it (any server: at most one may).
    pub fn mc_item(&self, key: &str) -> Option<McItem> {
        let mut found: Option<McItem> = None;
        for (i, m) in self.memcached.iter().enumerate() {
            let mut c = m.client();
            if let Some(item) =
                mc_get_item(&mut c, key).unwrap_or_else(|e| panic!("mg on memcached #{i}: {e}"))
            {
                assert!(
                    found.is_none(),
                    "{key} is on more than one memcached server"
                );
                found = Some(item);
            }
        }
        found
    }

    /// Writes `key` straight into every Redis shard (whichever one memshift
    /// reads it from has it).
    pub fn redis_put_everywhere(&self, key: &str, flags: u32, data: &[u8], ttl: u64) {
        for s in &self.redis {
            redis_put(s, key, flags, data, ttl);
        }
    }

    /// Writes `key` straight into every memcached server.
    pub fn mc_put_everywhere(&self, key: &str, flags: u32, exptime: i64, data: &[u8]) {
        for m in &self.memcached {
            mc_put(&mut m.client(), key, flags, exptime, data);
        }
    }

    /// Total items on the memcached servers (`curr_items`).
    pub fn mc_curr_items(&self) -> u64 {
        self.memcached
            .iter()
            .map(|m| {
                let stats = m.client().request_str(b"stats\r\n").expect("stats");
                stats
                    .lines()
                    .find_map(|l| l.strip_prefix("STAT curr_items "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .expect("curr_items in stats")
            })
            .sum()
    }

    /// Total keys on the Redis shards.
    pub fn redis_dbsize(&self) -> i64 {
        self.redis.iter().map(RedisServer::dbsize).sum()
    }
}
