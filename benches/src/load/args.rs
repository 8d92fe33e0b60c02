//! Command line of `memshift-load` (clap derive). [`Cli`] is what the user
//! types; [`Args`] is the checked settings the generator runs with.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use super::keys::Dist;
use super::proto::Protocol;

/// How the connections are driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shape {
    /// One task per connection on the tokio runtime (`--threads` threads).
    PerConn,
    /// One thread, one epoll loop over every connection: each connection
    /// sends its next batch when its replies are in, so requests reach the
    /// server in bursts, as from event-loop clients (node, Go, async Python).
    EventLoop,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Shape::PerConn => "per-conn",
            Shape::EventLoop => "event-loop",
        })
    }
}

/// memshift-load: memcached text protocol load generator.
///
/// Closed loop by default (each connection writes --pipeline requests, reads
/// their replies, repeats); open loop with --rate. The run always stops by
/// itself (--duration, --requests).
#[derive(Debug, Parser)]
#[command(name = "memshift-load", version, args_override_self = true)]
pub struct Cli {
    /// Server to load (HOST:PORT).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:11211", value_parser = resolve, help_heading = "Target")]
    addr: SocketAddr,
    /// memcache | binary (memcached's binary protocol) | redis (RESP
    /// GET/SET/MGET, to load Redis directly with the same generator).
    #[arg(long, value_name = "P", default_value = "memcache", value_parser = protocol, help_heading = "Target")]
    protocol: Protocol,

    /// Connections.
    #[arg(long, value_name = "N", default_value = "50", value_parser = num::<usize>, help_heading = "Load shape")]
    conns: usize,
    /// per-conn: one task per connection; event-loop: one thread polls
    /// every connection (closed loop only).
    #[arg(long, value_enum, default_value_t = Shape::PerConn, help_heading = "Load shape")]
    shape: Shape,
    /// Closed loop: requests written per batch on each connection before
    /// reading the D replies.
    #[arg(long, value_name = "D", default_value = "1", value_parser = positive, help_heading = "Load shape")]
    pipeline: usize,
    /// get:set mix.
    #[arg(long, value_name = "G:S", default_value = "90:10", value_parser = ratio, help_heading = "Load shape")]
    ratio: (u32, u32),
    /// Key space: keys are PREFIX0 .. PREFIX(N-1).
    #[arg(long, value_name = "N", default_value = "100000", value_parser = positive_u64, help_heading = "Load shape")]
    keys: u64,
    /// Key prefix.
    #[arg(
        long,
        value_name = "S",
        default_value = "key:",
        help_heading = "Load shape"
    )]
    key_prefix: String,
    /// uniform | zipf[:s] (s defaults to 0.99).
    #[arg(long, value_name = "D", default_value = "uniform", value_parser = Dist::parse, help_heading = "Load shape")]
    dist: Dist,
    /// Bytes per value.
    #[arg(long, value_name = "B", default_value = "100", value_parser = num::<usize>, help_heading = "Load shape")]
    value_size: usize,
    /// Keys per get (a K-key get counts as one request).
    #[arg(long, value_name = "K", default_value = "1", value_parser = positive, help_heading = "Load shape")]
    multiget: usize,
    /// Open loop: R requests/s in total, spread evenly over the connections;
    /// latency is measured from each request's intended send time (no
    /// coordinated omission). The schedule runs on a 50-500 us grid driven
    /// by one timerfd: no spinning.
    #[arg(long, value_name = "R", value_parser = rate, help_heading = "Load shape")]
    rate: Option<f64>,

    /// Measured run length [10 unless --requests is given].
    #[arg(long, value_name = "SECS", value_parser = secs, help_heading = "Bounds (the run always stops by itself)")]
    duration: Option<Duration>,
    /// Stop after N requests (with --duration: first wins).
    #[arg(long, value_name = "N", value_parser = num::<u64>, help_heading = "Bounds (the run always stops by itself)")]
    requests: Option<u64>,
    /// A reply not complete after MS counts as a timeout and the connection
    /// is reopened.
    #[arg(long, value_name = "MS", default_value = "2000", value_parser = positive, help_heading = "Bounds (the run always stops by itself)")]
    timeout_ms: usize,
    /// First set every key of the key space (pipelined, not measured).
    #[arg(long, help_heading = "Bounds (the run always stops by itself)")]
    warmup: bool,

    /// Open N extra connections, check each with one request, keep them idle
    /// during the run, check them again at the end (a closed or silent one
    /// is an error).
    #[arg(long, value_name = "N", default_value = "0", value_parser = num::<usize>, help_heading = "Idle connections (memory per connection)")]
    idle: usize,
    /// After opening them, wait this long before the load.
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = secs, help_heading = "Idle connections (memory per connection)")]
    idle_hold: Duration,
    /// Do not send the first request on the idle connections (connect only;
    /// they are still checked at the end).
    #[arg(long, help_heading = "Idle connections (memory per connection)")]
    idle_silent: bool,

    /// Load generator threads (--shape per-conn).
    #[arg(long, value_name = "T", default_value = "1", value_parser = positive, help_heading = "Runtime and output")]
    threads: usize,
    /// RNG seed.
    #[arg(long, value_name = "S", default_value = "1", value_parser = num::<u64>, help_heading = "Runtime and output")]
    seed: u64,
    /// One JSON object on stdout instead of text.
    #[arg(long, help_heading = "Runtime and output")]
    json: bool,
}

/// The checked settings of one run.
#[derive(Debug, Clone)]
pub struct Args {
    pub addr: SocketAddr,
    pub protocol: Protocol,
    pub shape: Shape,
    pub conns: usize,
    pub pipeline: usize,
    pub get_weight: u32,
    pub set_weight: u32,
    pub keys: u64,
    pub key_prefix: String,
    pub dist: Dist,
    pub value_size: usize,
    pub multiget: usize,
    pub rate: Option<f64>,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub timeout: Duration,
    pub warmup: bool,
    pub idle: usize,
    pub idle_hold: Duration,
    pub idle_silent: bool,
    pub threads: usize,
    pub seed: u64,
    pub json: bool,
}

impl Cli {
    /// The settings, or the one-line reason the combination cannot run.
    pub fn into_args(self) -> Result<Args, String> {
        let duration = match (self.duration, self.requests) {
            (None, None) => Some(Duration::from_secs(10)),
            (d, _) => d,
        };
        if self.rate.is_some() && self.conns == 0 {
            return Err("--rate needs --conns >= 1".into());
        }
        if self.shape == Shape::EventLoop && self.rate.is_some() {
            return Err("--shape event-loop is closed loop only (no --rate)".into());
        }
        if self.shape == Shape::EventLoop && self.threads != 1 {
            return Err("--shape event-loop runs on one thread (no --threads)".into());
        }
        Ok(Args {
            addr: self.addr,
            protocol: self.protocol,
            shape: self.shape,
            conns: self.conns,
            pipeline: self.pipeline,
            get_weight: self.ratio.0,
            set_weight: self.ratio.1,
            keys: self.keys,
            key_prefix: self.key_prefix,
            dist: self.dist,
            value_size: self.value_size,
            multiget: self.multiget,
            rate: self.rate,
            duration,
            requests: self.requests,
            timeout: Duration::from_millis(self.timeout_ms as u64),
            warmup: self.warmup,
            idle: self.idle,
            idle_hold: self.idle_hold,
            idle_silent: self.idle_silent,
            threads: self.threads,
            seed: self.seed,
            json: self.json,
        })
    }
}

/// Numbers may carry `_` separators (`1_000_000`).
fn num<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.replace('_', "")
        .parse()
        .map_err(|_| format!("invalid number {v:?}"))
}

fn positive(v: &str) -> Result<usize, String> {
    match num::<usize>(v)? {
        0 => Err("must be at least 1".into()),
        n => Ok(n),
    }
}

fn positive_u64(v: &str) -> Result<u64, String> {
    positive(v).map(|n| n as u64)
}

fn secs(v: &str) -> Result<Duration, String> {
    let s: f64 = num(v)?;
    if !(s.is_finite() && s >= 0.0) {
        return Err(format!("expected seconds >= 0, got {v:?}"));
    }
    Ok(Duration::from_secs_f64(s))
}

fn rate(v: &str) -> Result<f64, String> {
    let r: f64 = num(v)?;
    if !(r.is_finite() && r > 0.0) {
        return Err(format!("expected requests/s > 0, got {v:?}"));
    }
    Ok(r)
}

fn ratio(v: &str) -> Result<(u32, u32), String> {
    let (g, s) = v
        .split_once(':')
        .ok_or_else(|| format!("expected GET:SET, got {v:?}"))?;
    let (g, s) = (num(g)?, num(s)?);
    if g == 0 && s == 0 {
        return Err("0:0 has no operations".into());
    }
    Ok((g, s))
}

fn protocol(v: &str) -> Result<Protocol, String> {
    match v {
        "memcache" | "memcached" => Ok(Protocol::Memcache),
        "binary" => Ok(Protocol::Binary),
        "redis" | "resp" => Ok(Protocol::Redis),
        other => Err(format!("memcache, binary or redis, got {other:?}")),
    }
}

fn resolve(v: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    v.to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| "no address".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn p(args: &[&str]) -> Result<Args, String> {
        let argv = std::iter::once("memshift-load").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .into_args()
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_and_flags() {
        let a = p(&[]).unwrap();
        assert_eq!(a.duration, Some(Duration::from_secs(10)));
        assert_eq!(a.shape, Shape::PerConn);
        assert_eq!(
            (a.conns, a.pipeline, a.keys, a.value_size),
            (50, 1, 100_000, 100)
        );
        assert_eq!(a.timeout, Duration::from_millis(2000));
        let a = p(&[
            "--addr=127.0.0.1:9",
            "--conns",
            "4",
            "--ratio",
            "50:50",
            "--dist",
            "zipf:1.2",
            "--requests",
            "1_000",
            "--shape",
            "event-loop",
        ])
        .unwrap();
        assert_eq!(a.addr.port(), 9);
        assert_eq!((a.get_weight, a.set_weight), (50, 50));
        assert_eq!(a.dist, Dist::Zipf(1.2));
        assert_eq!(a.requests, Some(1000));
        assert_eq!(a.duration, None);
        assert_eq!(a.shape, Shape::EventLoop);
        // As before clap: a repeated flag's last value wins (scripts append overrides).
        assert_eq!(p(&["--conns", "4", "--conns", "5"]).unwrap().conns, 5);
        assert!(p(&["--pipeline", "0"]).is_err());
        assert!(p(&["--bogus"]).is_err());
        assert!(p(&["--ratio", "90"]).is_err());
        assert!(p(&["--ratio", "0:0"]).is_err());
        assert!(p(&["--json=yes"]).is_err());
        assert!(p(&["--rate", "0"]).is_err());
        assert!(p(&["--shape", "event-loop", "--rate", "1000"]).is_err());
        assert!(p(&["--shape", "event-loop", "--threads", "2"]).is_err());
        assert!(p(&["--rate", "100", "--conns", "0"]).is_err());
    }

    /// Every flag of BENCHMARKS.md's memshift-load table exists, and every
    /// flag of the command line is in the table.
    #[test]
    fn the_documented_flags_are_the_real_ones() {
        let page = include_str!("../../../BENCHMARKS.md");
        let section = page
            .split("### `memshift-load`: load generator")
            .nth(1)
            .and_then(|s| s.split("\n### ").next())
            .expect("BENCHMARKS.md has the memshift-load section");
        let mut documented = Vec::new();
        for row in section.lines().filter(|l| l.starts_with("| `--")) {
            let first_cell = row.split(" | ").next().unwrap_or_default();
            for part in first_cell.split("--").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                documented.push(name);
            }
        }
        let real: Vec<String> = Cli::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .filter(|l| l != "help" && l != "version")
            .collect();
        assert!(documented.len() >= 20, "{documented:?}");
        for d in &documented {
            assert!(real.contains(d), "--{d} is documented but not a flag");
        }
        for r in &real {
            assert!(
                documented.contains(r),
                "--{r} is not in BENCHMARKS.md's table"
            );
        }
    }
}
