//! Command line of `memshift-load` (hand-written: a dozen flags do not need clap).

use std::net::SocketAddr;
use std::time::Duration;

use super::keys::Dist;
use super::proto::Protocol;

pub const USAGE: &str = "\
memshift-load: memcached text protocol load generator

USAGE: memshift-load [OPTIONS]

Target
  --addr HOST:PORT       server to load [127.0.0.1:11211]; unix:/path for a unix socket
  --protocol P           memcache | binary (memcached's binary protocol) |
                         redis (RESP GET/SET/MGET, to load Redis directly
                         with the same generator) [memcache]
Load shape
  --conns N              connections [50]
  --pipeline D           closed loop: requests written per batch on each
                         connection before reading the D replies [1]
  --ratio G:S            get:set mix [90:10]
  --keys N               key space, keys are key:0 .. key:N-1 [100000]
  --key-prefix S         [key:]
  --dist D               uniform | zipf[:s] (s defaults to 0.99) [uniform]
  --value-size B         bytes per value [100]
  --multiget K           keys per get (a K-key get counts as one request) [1]
  --rate R               open loop: R requests/s in total, spread evenly over
                         the connections; latency is measured from each
                         request's intended send time (no coordinated
                         omission). The schedule runs on a 50-500 us grid
                         (one tick per request on average) driven by one
                         timerfd: no spinning.
Bounds (the run always stops by itself)
  --duration SECS        measured run length [10 unless --requests is given]
  --requests N           stop after N requests (with --duration: first wins)
  --timeout-ms MS        a reply not complete after MS counts as a timeout and
                         the connection is reopened [2000]
  --warmup               first set every key of the key space (pipelined, not
                         measured)
Idle connections (memory per connection)
  --idle N               open N extra connections, check each with one request,
                         keep them idle during the run, check them again at
                         the end (a closed or silent one is an error)
  --idle-hold SECS       after opening them, wait this long before the load [0]
  --idle-silent          do not send the first request on the idle connections
                         (connect only; they are still checked at the end)
Runtime and output
  --threads T            load generator threads [1]
  --seed S               RNG seed [1]
  --json                 one JSON object on stdout instead of text
  -h, --help
";

#[derive(Debug, Clone)]
pub struct Args {
    pub addr: SocketAddr,
    /// `--addr unix:/path`: load a unix-domain socket instead of `addr`.
    pub unix: Option<std::path::PathBuf>,
    pub protocol: Protocol,
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

impl Default for Args {
    fn default() -> Self {
        Args {
            addr: SocketAddr::from(([127, 0, 0, 1], 11211)),
            unix: None,
            protocol: Protocol::Memcache,
            conns: 50,
            pipeline: 1,
            get_weight: 90,
            set_weight: 10,
            keys: 100_000,
            key_prefix: "key:".into(),
            dist: Dist::Uniform,
            value_size: 100,
            multiget: 1,
            rate: None,
            duration: None,
            requests: None,
            timeout: Duration::from_millis(2000),
            warmup: false,
            idle: 0,
            idle_hold: Duration::ZERO,
            idle_silent: false,
            threads: 1,
            seed: 1,
            json: false,
        }
    }
}

/// What the command line asks for.
pub enum Parsed {
    Run(Box<Args>),
    Help,
}

fn secs(flag: &str, v: &str) -> Result<Duration, String> {
    let s: f64 = num(flag, v)?;
    if !(s.is_finite() && s >= 0.0) {
        return Err(format!("{flag}: expected seconds >= 0, got {v:?}"));
    }
    Ok(Duration::from_secs_f64(s))
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.replace('_', "")
        .parse()
        .map_err(|_| format!("{flag}: invalid number {v:?}"))
}

fn positive(flag: &str, v: &str) -> Result<usize, String> {
    match num::<usize>(flag, v)? {
        0 => Err(format!("{flag}: must be at least 1")),
        n => Ok(n),
    }
}

pub fn parse<I: IntoIterator<Item = String>>(argv: I) -> Result<Parsed, String> {
    let mut a = Args::default();
    let mut it = argv.into_iter();
    while let Some(flag) = it.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (flag, None),
        };
        let mut value = || -> Result<String, String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it.next().ok_or_else(|| format!("{flag}: missing value")),
            }
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--addr" => {
                let v = value()?;
                match v.strip_prefix("unix:") {
                    Some(path) => a.unix = Some(path.into()),
                    None => a.addr = resolve(&v).map_err(|e| format!("--addr {v:?}: {e}"))?,
                }
            }
            "--protocol" => {
                a.protocol = match value()?.as_str() {
                    "memcache" | "memcached" => Protocol::Memcache,
                    "binary" => Protocol::Binary,
                    "redis" | "resp" => Protocol::Redis,
                    other => {
                        return Err(format!(
                            "--protocol: memcache, binary or redis, got {other:?}"
                        ))
                    }
                }
            }
            "--conns" => a.conns = num("--conns", &value()?)?,
            "--pipeline" => a.pipeline = positive("--pipeline", &value()?)?,
            "--ratio" => {
                let v = value()?;
                let (g, s) = v
                    .split_once(':')
                    .ok_or_else(|| format!("--ratio: expected GET:SET, got {v:?}"))?;
                a.get_weight = num("--ratio", g)?;
                a.set_weight = num("--ratio", s)?;
                if a.get_weight == 0 && a.set_weight == 0 {
                    return Err("--ratio: 0:0 has no operations".into());
                }
            }
            "--keys" => {
                a.keys = num("--keys", &value()?)?;
                if a.keys == 0 {
                    return Err("--keys: must be at least 1".into());
                }
            }
            "--key-prefix" => a.key_prefix = value()?,
            "--dist" => a.dist = Dist::parse(&value()?)?,
            "--value-size" => a.value_size = num("--value-size", &value()?)?,
            "--multiget" => a.multiget = positive("--multiget", &value()?)?,
            "--rate" => {
                let v = value()?;
                let r: f64 = num("--rate", &v)?;
                if !(r.is_finite() && r > 0.0) {
                    return Err(format!("--rate: expected requests/s > 0, got {v:?}"));
                }
                a.rate = Some(r);
            }
            "--duration" => a.duration = Some(secs("--duration", &value()?)?),
            "--requests" => a.requests = Some(num("--requests", &value()?)?),
            "--timeout-ms" => {
                a.timeout = Duration::from_millis(positive("--timeout-ms", &value()?)? as u64)
            }
            "--warmup" => a.warmup = true,
            "--idle" => a.idle = num("--idle", &value()?)?,
            "--idle-hold" => a.idle_hold = secs("--idle-hold", &value()?)?,
            "--idle-silent" => a.idle_silent = true,
            "--threads" => a.threads = positive("--threads", &value()?)?,
            "--seed" => a.seed = num("--seed", &value()?)?,
            "--json" => a.json = true,
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
        if inline.is_some() && matches!(flag.as_str(), "--warmup" | "--json" | "--idle-silent") {
            return Err(format!("{flag} takes no value"));
        }
    }
    if a.duration.is_none() && a.requests.is_none() {
        a.duration = Some(Duration::from_secs(10));
    }
    if a.rate.is_some() && a.conns == 0 {
        return Err("--rate needs --conns >= 1".into());
    }
    Ok(Parsed::Run(Box::new(a)))
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

    fn p(args: &[&str]) -> Result<Args, String> {
        match parse(args.iter().map(|s| s.to_string()))? {
            Parsed::Run(a) => Ok(*a),
            Parsed::Help => Err("help".into()),
        }
    }

    #[test]
    fn defaults_and_flags() {
        let a = p(&[]).unwrap();
        assert_eq!(a.duration, Some(Duration::from_secs(10)));
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
        ])
        .unwrap();
        assert_eq!(a.addr.port(), 9);
        assert_eq!((a.get_weight, a.set_weight), (50, 50));
        assert_eq!(a.dist, Dist::Zipf(1.2));
        assert_eq!(a.requests, Some(1000));
        assert_eq!(a.duration, None);
        assert!(p(&["--pipeline", "0"]).is_err());
        assert!(p(&["--bogus"]).is_err());
        assert!(p(&["--ratio", "90"]).is_err());
    }
}
