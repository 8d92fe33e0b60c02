//! `memshift plan`: size the Redis fleet from the live memcached pool.
//!
//! 1. [`pool`]: `stats`, `stats settings`, `stats slabs`, `stats items` of
//!    every server (a dead or foreign server fails the plan within 2 s);
//! 2. [`walk`]: `lru_crawler metadump all`, rate-limited, into a uniform
//!    sample of `--sample` keys, then `mg <key> s t f` for their exact size,
//!    TTL and flags;
//! 3. [`estimate`]: the formula for each sampled item, extrapolated with a
//!    95% confidence interval; [`calibrate`]: scaled by what a live Redis
//!    measures for items of the same shapes, when one is reachable;
//! 4. [`recommend`]: node count, maxmemory, ring spread, prefixes;
//!    [`report`]: the text report or one JSON object.
//!
//! See docs/migration.md.

mod calibrate;
mod estimate;
mod pool;
mod recommend;
mod report;
mod walk;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memshift_protocol::memcache::ParseLimits;

use crate::config::{Config, RedisMode};
use crate::metrics::Metrics;
use crate::router::RedisBackends;
use estimate::{ItemShape, Moments, Topology};
use recommend::Weighted;
pub use recommend::{parse_percent, parse_size};
use report::{Bucket, PlanReport, PrefixReport};

pub const DEFAULT_NODE_MEMORY: u64 = 16 << 30;
pub const DEFAULT_HEADROOM_PERCENT: u8 = 25;
pub const DEFAULT_SAMPLE: usize = 20_000;
/// Keys per second per server, walk and lookups, unless `--rate`.
pub const DEFAULT_RATE: u64 = 100_000;
/// Prefixes listed in the report.
const TOP_PREFIXES: usize = 10;
/// How long calibration waits for the shards' connections.
const REDIS_WAIT: Duration = Duration::from_secs(2);

/// `memshift plan`'s options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOptions {
    /// `--node-memory`: bytes per Redis node.
    pub node_memory: u64,
    /// `--headroom`: the percentage of a node kept free (0 ..= 90).
    pub headroom_percent: u8,
    /// `--sample`: keys measured.
    pub sample: usize,
    /// `--rate`: keys per second per server, for the walk and the lookups.
    pub rate: u64,
    /// `--json`: one JSON object instead of the report.
    pub json: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            node_memory: DEFAULT_NODE_MEMORY,
            headroom_percent: DEFAULT_HEADROOM_PERCENT,
            sample: DEFAULT_SAMPLE,
            rate: DEFAULT_RATE,
            json: false,
        }
    }
}

/// Why the pool could not be planned. `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the config has no [memcached] servers: nothing to plan")]
    NoPool,
    #[error("memcached {addr} unreachable: {reason}")]
    Unreachable { addr: String, reason: String },
    #[error("{addr} is not a memcached server (it answered {answer:?})")]
    NotMemcached { addr: String, answer: String },
    #[error("memcached {addr} sent an unexpected reply: {reply:?}")]
    BadReply { addr: String, reply: String },
    #[error("lru_crawler metadump on {addr} failed: {reason}")]
    Walk { addr: String, reason: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs `memshift plan`: the report on stdout (progress on stderr), exit 0;
/// or one `memshift: ...` line on stderr, exit 1.
pub fn run(config_path: &Path, options: PlanOptions) -> ExitCode {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("memshift: {}: {}", config_path.display(), e.reason());
            return ExitCode::FAILURE;
        }
    };
    let planned = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(PlanError::from)
        .and_then(|rt| rt.block_on(plan(&config, options)));
    match planned {
        Ok(report) if options.json => match serde_json::to_string(&report) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("memshift: plan: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memshift: plan: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One sampled item with its exact figures.
struct Measured {
    key: bytes::Bytes,
    shape: ItemShape,
    flags: u32,
    /// The formula's bytes for it.
    bytes: f64,
}

/// The figures computed from the sample.
struct Figures {
    items: u64,
    mean: f64,
    tables: u64,
    estimated: f64,
    ci95: f64,
    calibration: Result<calibrate::Calibration, String>,
    calibrated: Option<f64>,
    sizing: f64,
    fleet: recommend::Fleet,
}

/// Reads the pool, estimates, calibrates and recommends.
pub async fn plan(config: &Config, options: PlanOptions) -> Result<PlanReport, PlanError> {
    let servers: Vec<String> = config
        .memcached
        .as_ref()
        .map(|m| m.servers.iter().map(|s| s.addr.clone()).collect())
        .unwrap_or_default();
    if servers.is_empty() {
        return Err(PlanError::NoPool);
    }
    let mut conns = Vec::with_capacity(servers.len());
    let mut stats = Vec::with_capacity(servers.len());
    for addr in &servers {
        let mut conn = pool::McConn::connect(addr).await?;
        stats.push(conn.read_stats().await?);
        conns.push(conn);
    }
    let seed = crate::proxy::random_seed();
    let rate = Some(options.rate);
    let walked = walk::walk(&servers, options.sample, rate, seed).await?;
    let topology = match config.redis.mode {
        RedisMode::Cluster => Topology::Cluster,
        _ => Topology::Standalone,
    };
    let measured = measure_sample(&mut conns, &walked.sample, rate, topology).await?;
    let figures = figures(config, options, &walked, &measured, topology, seed).await;
    Ok(report(config, options, &stats, &walked, &measured, figures))
}

/// Extrapolation, calibration and the fleet.
async fn figures(
    config: &Config,
    options: PlanOptions,
    walked: &walk::Walk,
    measured: &[Measured],
    topology: Topology,
    seed: u64,
) -> Figures {
    let mut moments = Moments::default();
    for m in measured {
        moments.add(m.bytes);
    }
    // The population is what the walk listed. `curr_items` is no better:
    // it still counts flushed items, which the crawler skips; the crawler in
    // turn passes over a few items moving between LRU queues while it walks
    // (0.3% of a pool under reads, see docs/migration.md).
    let items = walked.items;
    let ttl_fraction = walked.with_ttl as f64 / items.max(1) as f64;
    let tables = table_bytes(config, items, ttl_fraction, &weighted(measured, 1.0));
    let per_items = moments.mean() * items as f64;
    let ci95 = moments.total_ci95(items);

    let shapes = calibration_shapes(measured);
    let calibration = if shapes.is_empty() {
        Err("no sampled items".to_owned())
    } else {
        calibrate_on_redis(config, &shapes, topology, seed).await
    };
    let ratio = calibration.as_ref().map_or(1.0, |c| c.ratio);
    let calibrated = calibration
        .as_ref()
        .ok()
        .map(|c| per_items * c.ratio + tables as f64);
    let estimated = per_items + tables as f64;
    let sizing = calibrated.unwrap_or(estimated) + ci95 * ratio;
    let fleet = recommend::fleet(
        sizing,
        options.node_memory,
        f64::from(options.headroom_percent) / 100.0,
        config.ring_config(),
        &weighted(measured, ratio),
    );
    Figures {
        items,
        mean: moments.mean(),
        tables,
        estimated,
        ci95,
        calibration,
        calibrated,
        sizing,
        fleet,
    }
}

/// The sampled items with their bytes times `ratio`, for placement.
fn weighted(measured: &[Measured], ratio: f64) -> Vec<Weighted<'_>> {
    measured
        .iter()
        .map(|m| Weighted {
            key: &m.key,
            bytes: m.bytes * ratio,
        })
        .collect()
}

fn report(
    config: &Config,
    options: PlanOptions,
    stats: &[pool::ServerStats],
    walked: &walk::Walk,
    measured: &[Measured],
    f: Figures,
) -> PlanReport {
    let ratio = f.calibration.as_ref().map_or(1.0, |c| c.ratio);
    let scale = f.items as f64 / measured.len().max(1) as f64;
    let delimiter = stats
        .first()
        .and_then(|s| s.get("stat_key_prefix"))
        .and_then(|p| p.bytes().next())
        .unwrap_or(b':');
    let top_prefixes = recommend::top_prefixes(&weighted(measured, ratio), delimiter, TOP_PREFIXES)
        .into_iter()
        .map(|(prefix, n, bytes)| PrefixReport {
            prefix,
            items: (n as f64 * scale).round() as u64,
            redis_bytes: (bytes * scale).round() as u64,
        })
        .collect();
    let limits = ParseLimits {
        max_item_size: config.server.max_item_size,
        ..ParseLimits::default()
    };
    let unstorable: Vec<&Measured> = measured
        .iter()
        .filter(|m| {
            m.shape.data_len as usize > limits.max_data_len(m.shape.key_len as usize, m.flags)
        })
        .collect();
    let sum = |f: fn(&pool::ServerStats) -> u64| stats.iter().map(f).sum::<u64>();
    PlanReport {
        servers: stats.iter().map(pool::ServerStats::report).collect(),
        items: f.items,
        items_with_ttl: walked.with_ttl,
        expired_listed: walked.expired,
        walk_seconds: walked.seconds,
        sampled: measured.len() as u64,
        memcached_item_bytes: sum(|s| s.num("bytes")),
        memcached_malloced_bytes: sum(|s| s.num("total_malloced")),
        memcached_limit_bytes: sum(|s| s.num("limit_maxbytes")),
        memcached_slab_waste_bytes: sum(pool::ServerStats::slab_waste),
        estimated_redis_bytes: f.estimated.round() as u64,
        estimated_ci95_bytes: f.ci95.round() as u64,
        mean_item_bytes: f.mean,
        table_bytes: f.tables,
        calibrated_redis_bytes: f.calibrated.map(|c| c.round() as u64),
        calibration_ratio: f.calibration.as_ref().ok().map(|c| c.ratio),
        calibration_items: f.calibration.as_ref().map_or(0, |c| c.items as u64),
        calibration_skipped: f.calibration.err(),
        sizing_bytes: f.sizing.round() as u64,
        node_memory_bytes: options.node_memory,
        headroom_percent: f64::from(options.headroom_percent),
        recommended_nodes: f.fleet.nodes,
        maxmemory_bytes: f.fleet.maxmemory,
        most_loaded_shard_share: f.fleet.max_share,
        most_loaded_shard_key_share: f.fleet.max_key_share,
        ttl_histogram: buckets(&walk::TTL_BOUNDS, &walked.ttl_histogram),
        items_without_ttl: f.items - walked.with_ttl,
        last_access_histogram: buckets(&walk::IDLE_BOUNDS, &walked.idle_histogram),
        prefix_delimiter: char::from(delimiter).to_string(),
        top_prefixes,
        unstorable_items: (unstorable.len() as f64 * scale).round() as u64,
        unstorable_examples: unstorable
            .iter()
            .take(5)
            .map(|m| String::from_utf8_lossy(&m.key).into_owned())
            .collect(),
    }
}

fn buckets(bounds: &[(u64, &'static str)], counts: &[u64]) -> Vec<Bucket> {
    bounds
        .iter()
        .zip(counts)
        .map(|((_, label), &items)| Bucket {
            bucket: label,
            items,
        })
        .collect()
}

/// `mg <key> s t f` for every sampled key on the server it was listed on.
/// Keys gone since the walk drop out of the sample.
async fn measure_sample(
    conns: &mut [pool::McConn],
    sample: &[walk::Sampled],
    rate: Option<u64>,
    topology: Topology,
) -> Result<Vec<Measured>, PlanError> {
    let mut measured = Vec::with_capacity(sample.len());
    for (server, conn) in conns.iter_mut().enumerate() {
        let on_server: Vec<&walk::Sampled> = sample.iter().filter(|s| s.server == server).collect();
        let keys: Vec<&[u8]> = on_server.iter().map(|s| &s.key[..]).collect();
        let facts = conn.lookup(&keys, rate).await?;
        for (sampled, facts) in on_server.into_iter().zip(facts) {
            let Some(facts) = facts else { continue };
            let shape = ItemShape {
                key_len: sampled.key.len() as u64,
                data_len: facts.data_len,
                has_ttl: facts.ttl.is_some(),
            };
            measured.push(Measured {
                key: sampled.key.clone(),
                shape,
                flags: facts.flags,
                bytes: estimate::item_bytes(&shape, topology) as f64,
            });
        }
    }
    Ok(measured)
}

/// The dicts' bucket arrays over the configured standalone shards (keys
/// spread as the ring spreads the sample), or one table without them.
fn table_bytes(config: &Config, items: u64, ttl_fraction: f64, sample: &[Weighted<'_>]) -> u64 {
    let per_shard = |keys: f64| {
        let keys = keys.round() as u64;
        estimate::shard_table_bytes(keys, (keys as f64 * ttl_fraction).round() as u64)
    };
    let ring = (config.redis.mode != RedisMode::Cluster && !config.redis.shards.is_empty())
        .then(|| memshift_ring::Ring::new(&config.ring_shards(), config.ring_config()).ok())
        .flatten();
    match ring {
        Some(ring) if !sample.is_empty() => recommend::spread(&ring, sample)
            .iter()
            .map(|(_, key_share)| per_shard(key_share * items as f64))
            .sum(),
        _ => per_shard(items as f64),
    }
}

/// Up to [`calibrate::CALIBRATION_ITEMS`] shapes spread evenly over the sample.
fn calibration_shapes(measured: &[Measured]) -> Vec<ItemShape> {
    let step = measured.len().div_ceil(calibrate::CALIBRATION_ITEMS).max(1);
    measured.iter().step_by(step).map(|m| m.shape).collect()
}

/// Calibration on the configured Redis, when it answers.
async fn calibrate_on_redis(
    config: &Config,
    shapes: &[ItemShape],
    topology: Topology,
    nonce: u64,
) -> Result<calibrate::Calibration, String> {
    if config.redis.mode != RedisMode::Cluster && config.redis.shards.is_empty() {
        return Err("no Redis shard configured".into());
    }
    let metrics = Metrics::new();
    let backends =
        Arc::new(RedisBackends::start(config, None, &metrics).map_err(|e| e.to_string())?);
    let deadline = Instant::now() + REDIS_WAIT;
    while !backends.shards.iter().all(|s| s.is_up()) {
        if Instant::now() >= deadline {
            return Err("Redis not reachable".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    calibrate::calibrate(&backends, shapes, topology, nonce).await
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::cli::{parse_args, Command};

    fn parse(args: &[&str]) -> Result<Command, clap::error::ErrorKind> {
        parse_args(args.iter().copied()).map_err(|e| e.kind())
    }

    #[test]
    fn command_line() {
        assert_eq!(
            parse(&["plan", "--config", "a.toml"]),
            Ok(Command::Plan {
                config: PathBuf::from("a.toml"),
                options: PlanOptions::default()
            })
        );
        assert_eq!(
            parse(&[
                "plan",
                "-c",
                "a.toml",
                "--node-memory=8GiB",
                "--headroom",
                "30%",
                "--sample",
                "500",
                "--rate",
                "1000",
                "--json"
            ]),
            Ok(Command::Plan {
                config: PathBuf::from("a.toml"),
                options: PlanOptions {
                    node_memory: 8 << 30,
                    headroom_percent: 30,
                    sample: 500,
                    rate: 1000,
                    json: true,
                }
            })
        );
        for args in [
            &["plan", "-c", "a", "--node-memory", "lots"][..],
            &["plan", "-c", "a", "--headroom", "99%"][..],
            &["plan", "-c", "a", "--sample", "0"][..],
            &["plan", "-c", "a", "--rate", "0"][..],
        ] {
            assert_eq!(
                parse(args),
                Err(clap::error::ErrorKind::ValueValidation),
                "{args:?}"
            );
        }
        assert_eq!(
            parse(&["copy", "-c", "a", "--json"]),
            Err(clap::error::ErrorKind::UnknownArgument)
        );
    }
}
