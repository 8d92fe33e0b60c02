//! `memshift-load`: a memcached text protocol (or RESP) load generator.
//!
//! Phases: open the idle connections (`--idle`), prefill (`--warmup`), the
//! measured run (closed loop, or open loop with `--rate`), then check the idle
//! connections again. Every phase is bounded in time.
//!
//! Two load shapes (`--shape`): a tokio task per connection ([`conn`]), or
//! one epoll loop driving them all ([`event_loop`]), whose requests reach
//! the server in bursts as an event-loop client's do.

pub mod args;
pub mod conn;
pub mod event_loop;
pub mod keys;
pub mod pacer;
pub mod proto;
pub mod stats;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::JoinSet;

pub use args::{Args, Cli, Shape};
use conn::{Mode, Shared};
use proto::Encoder;
use stats::Stats;

/// Connections opened concurrently for `--idle` (stays under the listen
/// backlog, so no SYN is dropped and retried a second later).
const IDLE_OPEN_CONCURRENCY: usize = 256;
/// Connections per loopback source IP beyond which the next IP is used.
const CONNS_PER_SOURCE_IP: usize = 25_000;

pub struct Report {
    pub args: Arc<Args>,
    pub mode: &'static str,
    pub elapsed: Duration,
    /// CPU time (user + system) this process spent during the run.
    pub cpu: Duration,
    pub run: Stats,
    pub warmup: Option<(Duration, Stats)>,
    pub idle: Option<IdleReport>,
}

pub struct IdleReport {
    pub requested: usize,
    pub opened: usize,
    pub open_errors: u64,
    pub open_secs: f64,
    pub alive_at_end: usize,
    pub errors_at_end: u64,
    pub samples: Vec<String>,
}

/// Runs the whole thing on a runtime with `args.threads` threads.
pub fn run(args: Args) -> Result<Report, String> {
    raise_nofile_limit();
    let rt = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(run_async(Arc::new(args)))
}

async fn run_async(args: Arc<Args>) -> Result<Report, String> {
    let enc = Encoder::new(args.protocol, &args.key_prefix, args.value_size);

    let mut idle_conns = Vec::new();
    let mut idle = None;
    if args.idle > 0 {
        let t = Instant::now();
        let (conns, errors, samples) = open_idle(&args, &enc).await;
        let rep = IdleReport {
            requested: args.idle,
            opened: conns.len(),
            open_errors: errors,
            open_secs: t.elapsed().as_secs_f64(),
            alive_at_end: 0,
            errors_at_end: 0,
            samples,
        };
        // Scripts wait for this line before measuring the server's memory.
        eprintln!(
            "memshift-load: idle connections open: {} of {} ({} errors) in {:.1} s",
            rep.opened, rep.requested, rep.open_errors, rep.open_secs
        );
        idle_conns = conns;
        idle = Some(rep);
        tokio::time::sleep(args.idle_hold).await;
    }

    let mut warmup = None;
    if args.warmup && args.keys > 0 {
        let t = Instant::now();
        let shared = Arc::new(Shared::new(args.clone(), None, None));
        let n = args.conns.clamp(1, 16);
        let st = join(&shared, n, |_| Mode::Prefill, |_| None, None).await;
        warmup = Some((t.elapsed(), st));
    }

    let cpu_before = cpu_time();
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + d);
    let run_args = args.clone();
    let shared = Arc::new(Shared::new(run_args, deadline, args.requests));
    let mode = match args.rate {
        None if args.shape == Shape::EventLoop => {
            let (sh, n) = (shared.clone(), args.conns);
            match tokio::task::spawn_blocking(move || event_loop::run(sh, n, deadline)).await {
                Ok(st) => st,
                Err(e) => {
                    let mut st = Stats::default();
                    st.errors.unexpected += 1;
                    st.note(format!("event loop thread failed: {e}"));
                    st
                }
            }
        }
        Some(rate) => {
            let interval = Duration::from_secs_f64(args.conns as f64 / rate);
            let per_conn = args.requests.map(|r| r / args.conns as u64);
            let extra = args.requests.map_or(0, |r| r % args.conns as u64);
            let conns = args.conns as u64;
            // Stagger the connections evenly over one interval.
            let first = |i: usize| start + interval.mul_f64(i as f64 / conns as f64);
            let clock = Arc::new(pacer::Clock::new(start, rate));
            let notifies: Vec<_> = (0..args.conns).map(|_| Arc::new(Notify::new())).collect();
            let slots = notifies
                .iter()
                .enumerate()
                .map(|(i, n)| pacer::Slot {
                    notify: n.clone(),
                    first: first(i),
                    interval,
                })
                .collect();
            let ticker = tokio::spawn(pacer::ticker(clock.clone(), slots));
            let pacing = |i: usize| {
                Some(conn::Pacing {
                    clock: clock.clone(),
                    notify: notifies[i].clone(),
                })
            };
            let mut st = join(
                &shared,
                args.conns,
                move |i| Mode::Open {
                    start: first(i),
                    interval,
                    budget: per_conn.map(|b| b + u64::from((i as u64) < extra)),
                },
                pacing,
                deadline,
            )
            .await;
            // The ticker only ends on its own if its timer failed.
            if ticker.is_finished() {
                if let Ok(Err(e)) = ticker.await {
                    st.errors.unexpected += 1;
                    st.note(format!("open-loop timer: {e}"));
                }
            } else {
                ticker.abort();
            }
            st
        }
        None => join(&shared, args.conns, |_| Mode::Closed, |_| None, deadline).await,
    };
    let elapsed = start.elapsed();
    let cpu = cpu_time() - cpu_before;

    if let Some(rep) = &mut idle {
        let (alive, errors, samples) = check_idle(&args, &enc, idle_conns).await;
        rep.alive_at_end = alive;
        rep.errors_at_end = errors;
        rep.samples.extend(samples);
    }
    Ok(Report {
        mode: if args.rate.is_some() {
            "open"
        } else {
            "closed"
        },
        args,
        elapsed,
        cpu,
        run: mode,
        warmup,
        idle,
    })
}

/// Runs `n` connections to completion and merges their stats. A safety net
/// aborts connections still running well after the deadline.
async fn join(
    shared: &Arc<Shared>,
    n: usize,
    mode: impl Fn(usize) -> Mode,
    pacing: impl Fn(usize) -> Option<conn::Pacing>,
    deadline: Option<Instant>,
) -> Stats {
    let mut set = JoinSet::new();
    for i in 0..n {
        let seed = shared
            .args
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(i as u64);
        set.spawn(conn::run(shared.clone(), mode(i), seed, pacing(i)));
    }
    let mut total = Stats::default();
    let hard = deadline.map(|d| d + shared.args.timeout * 2 + Duration::from_secs(5));
    loop {
        let next = match hard {
            Some(h) => match tokio::time::timeout_at(h.into(), set.join_next()).await {
                Ok(r) => r,
                Err(_) => {
                    let stuck = set.len() as u64;
                    set.abort_all();
                    total.errors.timeout += stuck;
                    total.note(format!("{stuck} connections did not stop in time"));
                    break;
                }
            },
            None => set.join_next().await,
        };
        match next {
            Some(Ok(st)) => total.merge(&st),
            Some(Err(e)) => {
                total.errors.unexpected += 1;
                total.note(format!("connection task failed: {e}"));
            }
            None => break,
        }
    }
    total
}

fn source_ip(args: &Args, i: usize) -> Option<SocketAddr> {
    // Loopback is a /8: beyond one IP's ephemeral ports, use 127.0.0.2, ...
    match args.addr.ip() {
        IpAddr::V4(ip) if ip.is_loopback() && args.idle > CONNS_PER_SOURCE_IP => {
            let k = (i / CONNS_PER_SOURCE_IP) as u8;
            Some(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 1 + k), 0)))
        }
        _ => None,
    }
}

async fn open_idle(args: &Arc<Args>, enc: &Encoder) -> (Vec<TcpStream>, u64, Vec<String>) {
    let enc = Arc::new(Encoder::new(
        enc.protocol,
        &args.key_prefix,
        args.value_size,
    ));
    let mut conns = Vec::with_capacity(args.idle);
    let mut errors = 0;
    let mut samples = Vec::new();
    let mut set = JoinSet::new();
    let mut next = 0;
    while next < args.idle || !set.is_empty() {
        while next < args.idle && set.len() < IDLE_OPEN_CONCURRENCY {
            let (a, e, local) = (args.clone(), enc.clone(), source_ip(args, next));
            set.spawn(async move {
                let s = conn::connect(a.addr, local, a.timeout)
                    .await
                    .map_err(|e| format!("connect: {e}"))?;
                if !a.idle_silent {
                    conn::probe(&s, &e, a.timeout).await?;
                }
                Ok::<_, String>(s)
            });
            next += 1;
        }
        match set.join_next().await {
            Some(Ok(Ok(s))) => conns.push(s),
            Some(Ok(Err(e))) => {
                errors += 1;
                if samples.len() < 3 && !samples.contains(&e) {
                    samples.push(e);
                }
            }
            Some(Err(e)) => {
                errors += 1;
                samples.push(format!("task: {e}"));
            }
            None => {}
        }
    }
    (conns, errors, samples)
}

async fn check_idle(
    args: &Arc<Args>,
    enc: &Encoder,
    conns: Vec<TcpStream>,
) -> (usize, u64, Vec<String>) {
    let enc = Arc::new(Encoder::new(
        enc.protocol,
        &args.key_prefix,
        args.value_size,
    ));
    let (mut alive, mut errors, mut samples) = (0, 0, Vec::new());
    let mut set = JoinSet::new();
    let mut it = conns.into_iter();
    loop {
        while set.len() < IDLE_OPEN_CONCURRENCY {
            let Some(s) = it.next() else { break };
            let (e, t) = (enc.clone(), args.timeout);
            set.spawn(async move { conn::probe(&s, &e, t).await });
        }
        match set.join_next().await {
            Some(Ok(Ok(()))) => alive += 1,
            Some(Ok(Err(e))) => {
                errors += 1;
                if samples.len() < 3 && !samples.contains(&e) {
                    samples.push(e);
                }
            }
            Some(Err(e)) => {
                errors += 1;
                samples.push(format!("task: {e}"));
            }
            None => break,
        }
    }
    (alive, errors, samples)
}

/// User + system CPU time of this process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Raises the soft open-files limit to the hard one (idle connections).
fn raise_nofile_limit() {
    #[cfg(unix)]
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

impl Report {
    pub fn ops_per_sec(&self) -> f64 {
        self.run.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn to_json(&self) -> serde_json::Value {
        let a = &self.args;
        let r = &self.run;
        let e = &r.errors;
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let keys_requested = r.hits + r.misses;
        json!({
            "addr": a.addr.to_string(),
            "protocol": a.protocol.to_string(),
            "mode": self.mode,
            "shape": a.shape.to_string(),
            "conns": a.conns,
            "pipeline": a.pipeline,
            "ratio": format!("{}:{}", a.get_weight, a.set_weight),
            "keys": a.keys,
            "dist": a.dist.to_string(),
            "value_size": a.value_size,
            "multiget": a.multiget,
            "rate": a.rate,
            "threads": a.threads,
            "elapsed_s": secs,
            // Load generator CPU during the run, in cores (1.0 = one busy core).
            "cpu_cores": self.cpu.as_secs_f64() / secs,
            "requests": r.ok,
            "ops_per_sec": self.ops_per_sec(),
            "gets": r.gets,
            "sets": r.sets,
            "hits": r.hits,
            "misses": r.misses,
            "keys_per_sec": keys_requested as f64 / secs,
            "reconnects": r.reconnects,
            "errors": {
                "total": e.total(),
                "server_error": e.server_error,
                "client_error": e.client_error,
                "error": e.error,
                "timeout": e.timeout,
                "unexpected": e.unexpected,
                "connection": e.connection,
                "connect_failures": e.connect_failures,
                "samples": r.samples,
            },
            "latency_us": {
                "p50": r.quantile_us(0.5),
                "p90": r.quantile_us(0.9),
                "p99": r.quantile_us(0.99),
                "p99_9": r.quantile_us(0.999),
                "max": r.max_us(),
                "mean": r.mean_us(),
            },
            // Open loop: how late requests left versus their schedule.
            "send_lag_us": (self.mode == "open").then(|| json!({
                "p50": r.lag_us(0.5),
                "p99": r.lag_us(0.99),
                "max": r.lag.max() as f64 / 1000.0,
            })),
            "warmup": self.warmup.as_ref().map(|(d, s)| json!({
                "secs": d.as_secs_f64(),
                "sets": s.sets,
                "errors": s.errors.total(),
                "samples": s.samples,
            })),
            "idle": self.idle.as_ref().map(|i| json!({
                "requested": i.requested,
                "opened": i.opened,
                "open_errors": i.open_errors,
                "open_secs": i.open_secs,
                "alive_at_end": i.alive_at_end,
                "errors_at_end": i.errors_at_end,
                "samples": i.samples,
            })),
        })
    }

    pub fn to_text(&self) -> String {
        let a = &self.args;
        let r = &self.run;
        let e = &r.errors;
        let mut out = String::new();
        let shape = match a.rate {
            Some(rate) => format!("open loop at {rate:.0} req/s"),
            None => format!("closed loop, pipeline {}, {}", a.pipeline, a.shape),
        };
        out += &format!(
            "memshift-load {} ({}): {} conns, {shape}, get:set {}:{}, {} keys {}, {} B values{}\n",
            a.addr,
            a.protocol,
            a.conns,
            a.get_weight,
            a.set_weight,
            a.keys,
            a.dist,
            a.value_size,
            if a.multiget > 1 {
                format!(", {}-key gets", a.multiget)
            } else {
                String::new()
            },
        );
        if let Some((d, s)) = &self.warmup {
            out += &format!(
                "warmup:   {} keys set in {:.2} s, {} errors\n",
                s.sets,
                d.as_secs_f64(),
                s.errors.total()
            );
        }
        if let Some(i) = &self.idle {
            out += &format!(
                "idle:     {} of {} connections opened ({} errors) in {:.1} s; {} alive at the end ({} errors)\n",
                i.opened, i.requested, i.open_errors, i.open_secs, i.alive_at_end, i.errors_at_end
            );
        }
        let lookups = r.hits + r.misses;
        out += &format!(
            "run:      {:.2} s, {} requests, {:.0} ops/s (gets {}, hit rate {:.1}%, sets {})\n",
            self.elapsed.as_secs_f64(),
            r.ok,
            self.ops_per_sec(),
            r.gets,
            if lookups > 0 {
                100.0 * r.hits as f64 / lookups as f64
            } else {
                0.0
            },
            r.sets
        );
        out += &format!(
            "cpu:      {:.2} cores used by the load generator\n",
            self.cpu.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9)
        );
        out += &format!(
            "errors:   {} (server_error {}, client_error {}, error {}, timeout {}, unexpected {}, connection {}, connect failures {}; reconnects {})\n",
            e.total(), e.server_error, e.client_error, e.error, e.timeout, e.unexpected, e.connection, e.connect_failures, r.reconnects
        );
        let samples: Vec<&String> = r
            .samples
            .iter()
            .chain(self.idle.iter().flat_map(|i| i.samples.iter()))
            .collect();
        for s in samples {
            out += &format!("          {s}\n");
        }
        if self.mode == "open" {
            out += &format!(
                "send lag: p50 {:.1} us, p99 {:.1} us, max {:.1} us (requests leaving late versus their schedule)\n",
                r.lag_us(0.5),
                r.lag_us(0.99),
                r.lag.max() as f64 / 1000.0
            );
        }
        out += &format!(
            "latency:  p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us, mean {:.1} us\n",
            r.quantile_us(0.5),
            r.quantile_us(0.9),
            r.quantile_us(0.99),
            r.quantile_us(0.999),
            r.max_us(),
            r.mean_us()
        );
        out
    }
}
