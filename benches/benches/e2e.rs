//! End to end: 3 `redis-server` shards and `target/release/memshift` (the
//! bench runs `cargo build --release -p memshift-proxy` first so it never
//! measures a stale binary; `MEMSHIFT_BIN=path` skips that), all on loopback
//! ports, all stopped on exit.
//!
//! - `e2e_memshift/{get,set,mix90_10}`: per-node throughput. One iteration =
//!   every one of CONNS connections writes DEPTH pipelined requests and reads
//!   the DEPTH replies, so criterion's element throughput is ops/s.
//! - `e2e_multiget100`: a 100-key `get` through memshift (keys spread over 3
//!   shards) against a 100-key `MGET` sent directly to one Redis, one
//!   connection, one request at a time. Before criterion runs, a summary
//!   (medians, their ratio, Redis commands per multi-get) is printed and
//!   written to `target/criterion/e2e-summary.json`.
//!
//! `MEMSHIFT_BENCH_THREADS` sets memshift's `server.threads` (default 1: the
//! bench client, memshift and the shards share the machine).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use memshift_benches::harness::{redis_data_calls, Cluster};
use memshift_benches::load::keys::{Dist, KeyGen};
use memshift_benches::load::proto::{Encoder, Kind, Parsed, Protocol, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

const CONNS: usize = 16;
const DEPTH: usize = 16;
const KEYS: u64 = 10_000;
const VALUE_SIZE: usize = 100;
const MULTIGET: usize = 100;

#[derive(Clone, Copy)]
enum Op {
    Get,
    Set,
    Mix,
}

/// A pipelining client with reply validation (errors fail the bench: a
/// throughput number over failing requests would be meaningless).
struct Client {
    s: TcpStream,
    enc: Arc<Encoder>,
    gens: [KeyGen; 3],
    wbuf: Vec<u8>,
    rbuf: BytesMut,
    pend: VecDeque<(Kind, usize)>,
    keys: VecDeque<u64>,
    ids: Vec<u64>,
}

impl Client {
    async fn connect(addr: SocketAddr, enc: Arc<Encoder>, seed: u64) -> Client {
        let s = TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_nodelay(true).expect("nodelay");
        let g = |w: (u32, u32)| KeyGen::new(seed, KEYS, Dist::Uniform, w.0, w.1);
        Client {
            s,
            enc,
            gens: [g((100, 0)), g((0, 100)), g((90, 10))],
            wbuf: Vec::new(),
            rbuf: BytesMut::with_capacity(64 * 1024),
            pend: VecDeque::new(),
            keys: VecDeque::new(),
            ids: Vec::new(),
        }
    }

    /// `depth` pipelined requests, then their replies.
    async fn batch(&mut self, op: Op, depth: usize, multiget: usize) {
        let gen = &mut self.gens[op as usize];
        for _ in 0..depth {
            if gen.is_get() {
                self.ids.clear();
                while self.ids.len() < multiget {
                    let k = gen.key();
                    if !self.ids.contains(&k) {
                        self.ids.push(k);
                    }
                }
                self.enc.get(&mut self.wbuf, &self.ids);
                self.keys.extend(self.ids.iter().copied());
                self.pend.push_back((Kind::Get, multiget));
            } else {
                self.enc.set(&mut self.wbuf, gen.key());
                self.pend.push_back((Kind::Set, 0));
            }
        }
        self.s.write_all(&self.wbuf).await.expect("write");
        self.wbuf.clear();
        while let Some(&(kind, n)) = self.pend.front() {
            match self
                .enc
                .parse(&self.rbuf, kind, n, self.keys.iter().take(n))
            {
                Parsed::Done(used, reply) => {
                    assert!(
                        matches!(reply, Reply::Values { misses: 0, .. } | Reply::Stored),
                        "bad reply {reply:?}"
                    );
                    self.rbuf.advance(used);
                    self.keys.drain(..n);
                    self.pend.pop_front();
                }
                Parsed::Incomplete => {
                    let n = self.s.read_buf(&mut self.rbuf).await.expect("read");
                    assert!(n > 0, "server closed the connection");
                }
                Parsed::Bad(e) => panic!("bad reply: {e}"),
            }
        }
    }
}

struct Setup {
    rt: Runtime,
    cluster: Cluster,
    clients: Vec<Client>,
}

fn setup() -> Setup {
    let threads = std::env::var("MEMSHIFT_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let cluster = Cluster::start(3, threads).unwrap_or_else(|e| panic!("e2e setup: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let enc = Arc::new(Encoder::new(Protocol::Memcache, "key:", VALUE_SIZE));
    let addr = cluster.memshift.addr;
    let clients = rt.block_on(async {
        let mut v = Vec::new();
        for i in 0..CONNS {
            v.push(Client::connect(addr, enc.clone(), i as u64 + 1).await);
        }
        // Every key exists, so gets are hits (and validated as such).
        let mut c = Client::connect(addr, enc.clone(), 0).await;
        let mut direct = Client::connect(
            cluster.shards[0].addr,
            Arc::new(Encoder::new(Protocol::Redis, "direct:", VALUE_SIZE)),
            0,
        )
        .await;
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(500) {
            for &id in chunk {
                c.enc.set(&mut c.wbuf, id);
                c.pend.push_back((Kind::Set, 0));
                direct.enc.set(&mut direct.wbuf, id);
                direct.pend.push_back((Kind::Set, 0));
            }
            c.batch(Op::Set, 0, 0).await;
            direct.batch(Op::Set, 0, 0).await;
        }
        v
    });
    Setup {
        rt,
        cluster,
        clients,
    }
}

/// Runs `iters` batches on every connection concurrently.
fn run_batches(s: &mut Setup, op: Op, iters: u64) -> Duration {
    let clients = std::mem::take(&mut s.clients);
    let (elapsed, clients) = s.rt.block_on(async move {
        let start = Instant::now();
        let tasks: Vec<_> = clients
            .into_iter()
            .map(|mut c| {
                tokio::spawn(async move {
                    for _ in 0..iters {
                        c.batch(op, DEPTH, 1).await;
                    }
                    c
                })
            })
            .collect();
        let mut back = Vec::new();
        for t in tasks {
            back.push(t.await.expect("bench connection panicked"));
        }
        (start.elapsed(), back)
    });
    s.clients = clients;
    elapsed
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The multi-get goal: medians of memshift's 100-key get over 3 shards and
/// of a direct 100-key MGET on one shard, and the shard commands per get.
fn multiget_summary(s: &mut Setup) -> serde_json::Value {
    const N: usize = 2000;
    let cl = &s.cluster;
    let (mut via, mut direct) = s.rt.block_on(async {
        let via = Client::connect(
            cl.memshift.addr,
            Arc::new(Encoder::new(Protocol::Memcache, "key:", VALUE_SIZE)),
            99,
        )
        .await;
        let direct = Client::connect(
            cl.shards[0].addr,
            Arc::new(Encoder::new(Protocol::Redis, "direct:", VALUE_SIZE)),
            99,
        )
        .await;
        (via, direct)
    });
    let shard_addrs: Vec<SocketAddr> = cl.shards.iter().map(|p| p.addr).collect();
    let calls = || -> u64 {
        shard_addrs
            .iter()
            .map(|a| redis_data_calls(*a).unwrap_or(0))
            .sum()
    };
    let before = calls();
    let (t_via, t_direct) = s.rt.block_on(async {
        let (mut a, mut b) = (Vec::with_capacity(N), Vec::with_capacity(N));
        for _ in 0..N {
            let t = Instant::now();
            via.batch(Op::Get, 1, MULTIGET).await;
            a.push(t.elapsed());
            let t = Instant::now();
            direct.batch(Op::Get, 1, MULTIGET).await;
            b.push(t.elapsed());
        }
        (median(a), median(b))
    });
    // Includes the N direct MGETs on shard 0: subtract them.
    let per_get = (calls().saturating_sub(before) as f64 - N as f64) / N as f64;
    let ratio = t_via.as_secs_f64() / t_direct.as_secs_f64();
    let summary = serde_json::json!({
        "multiget_keys": MULTIGET,
        "memshift_3_shards_median_us": t_via.as_secs_f64() * 1e6,
        "redis_mget_1_shard_median_us": t_direct.as_secs_f64() * 1e6,
        "ratio": ratio,
        "goal_ratio_max": 1.5,
        "redis_commands_per_multiget": per_get,
        "goal_commands_max": 3,
    });
    println!(
        "e2e multi-get {MULTIGET} keys: memshift over 3 shards {:.1} us, direct MGET on one shard {:.1} us \
         (ratio {ratio:.2}, goal <= 1.5); {per_get:.2} Redis commands per multi-get (goal <= 3)",
        t_via.as_secs_f64() * 1e6,
        t_direct.as_secs_f64() * 1e6,
    );
    summary
}

fn write_summary(v: &serde_json::Value) {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("criterion");
    let path = dir.join("e2e-summary.json");
    let res = std::fs::create_dir_all(&dir).and_then(|_| {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(v).unwrap_or_default() + "\n",
        )
    });
    if let Err(e) = res {
        eprintln!("e2e: cannot write {}: {e}", path.display());
    }
}

fn e2e(c: &mut Criterion) {
    let mut s = setup();
    let summary = multiget_summary(&mut s);
    write_summary(&summary);

    let mut g = c.benchmark_group("e2e_memshift");
    g.throughput(Throughput::Elements((CONNS * DEPTH) as u64));
    for (name, op) in [("get", Op::Get), ("set", Op::Set), ("mix90_10", Op::Mix)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| run_batches(&mut s, op, iters))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("e2e_multiget100");
    g.throughput(Throughput::Elements(MULTIGET as u64));
    let cl = &s.cluster;
    let (mut via, mut direct) = s.rt.block_on(async {
        (
            Client::connect(
                cl.memshift.addr,
                Arc::new(Encoder::new(Protocol::Memcache, "key:", VALUE_SIZE)),
                7,
            )
            .await,
            Client::connect(
                cl.shards[0].addr,
                Arc::new(Encoder::new(Protocol::Redis, "direct:", VALUE_SIZE)),
                7,
            )
            .await,
        )
    });
    g.bench_function("memshift_get100_3shards", |b| {
        b.iter(|| s.rt.block_on(via.batch(Op::Get, 1, MULTIGET)))
    });
    g.bench_function("redis_mget100_1shard", |b| {
        b.iter(|| s.rt.block_on(direct.batch(Op::Get, 1, MULTIGET)))
    });
    g.finish();
    // `s` drops here: memshift and the shards are killed and reaped.
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = e2e
}
criterion_main!(benches);
