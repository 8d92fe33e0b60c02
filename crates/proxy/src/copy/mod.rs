//! `memshift copy`: walk the legacy pool's keys (`lru_crawler metadump all`)
//! and copy every live item into Redis with its flags and remaining TTL.
//! `--verify` compares instead of copying; `--dry-run` only counts.
//!
//! Items are written with `SET … NX`: a key Redis already has (a live write
//! through memshift, or an earlier copy) is newer than or equal to what the
//! dump read, and is left alone.
//!
//! `--from-shards` copies from standalone Redis shards instead ([`shards`]).

mod shards;

pub use shards::run_from_shards;

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::client::{self, MetaStatus, Response};
use memshift_protocol::memcache::StorageCommand;
use memshift_protocol::resp::Frame;
use memshift_shadow::pool::{DumpEntry, Route};
use memshift_shadow::reply::ReplyShape;
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::redis::encoding::{self, CasGenerator};
use crate::redis::translate::{self, Expiry};
use crate::router::{Legacy, RedisBackends};

/// Items copied at once.
const CONCURRENCY: usize = 128;
/// Metadump passes at most (each lists only keys not seen before).
const MAX_PASSES: u32 = 20;
/// Consecutive passes that list nothing new before the copy gives up on
/// reaching the servers' own item count (expired items that are still
/// counted, or writes racing the copy).
const QUIET_PASSES: u32 = 3;
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
pub struct CopyOptions {
    pub dry_run: bool,
    /// Items per second at most.
    pub rate: Option<u64>,
    pub verify: bool,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct CopySummary {
    pub listed: u64,
    pub copied: u64,
    pub already_present: u64,
    pub skipped_expired: u64,
    pub failed: u64,
    pub bytes: u64,
    pub matched: u64,
    pub mismatched: u64,
}

#[derive(Default)]
struct Counters {
    done: AtomicU64,
    copied: AtomicU64,
    already_present: AtomicU64,
    skipped_expired: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    matched: AtomicU64,
    mismatched: AtomicU64,
    /// `--from-shards`: keys found on a shard that does not own them.
    not_owner: AtomicU64,
    /// `--from-shards`: keys that are not memshift items.
    foreign: AtomicU64,
}

/// Run the copy described by the config file; prints progress and a summary.
pub fn run(config_path: &Path, options: CopyOptions) -> Result<CopySummary, ProxyError> {
    let config = Config::load(config_path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(copy(&config, options))
}

async fn copy(config: &Config, options: CopyOptions) -> Result<CopySummary, ProxyError> {
    let mc = config
        .memcached
        .as_ref()
        .ok_or_else(|| ProxyError::Other("copy needs a [memcached] section".into()))?;
    let legacy = Arc::new(Legacy::start(mc)?);
    let metrics = Metrics::new();
    let backends = Arc::new(RedisBackends::start(config, None, &metrics)?);
    // Connections come up in the background; give them a moment.
    wait_until(Duration::from_secs(5), || {
        legacy.all_up() && backends.shards.iter().all(|s| s.is_up())
    })
    .await;

    let started = Instant::now();
    let mode = if options.verify {
        "verify"
    } else if options.dry_run {
        "dry run"
    } else {
        "copy"
    };
    let counters = Arc::new(Counters::default());
    let limit = Arc::new(Semaphore::new(CONCURRENCY));
    let cas_seed = crate::proxy::random_seed();
    // memcached's crawler skips items that move between its LRU queues while
    // it walks them (recently written or read items): under live reads each
    // pass still misses a few. Dump again until the crawler has listed as
    // many items as the servers hold, or passes stop finding anything new.
    // Copying twice is harmless (SET NX).
    let mut seen: HashSet<Bytes> = HashSet::new();
    let mut total = 0u64;
    let mut started_items = 0u64;
    let mut quiet = 0u32;
    for pass in 1..=MAX_PASSES {
        if pass > 1 && servers_item_count(&legacy).await <= total {
            break;
        }
        let mut fresh: Vec<(usize, DumpEntry)> = Vec::new();
        for server in 0..legacy.server_count() {
            let dumped = legacy
                .pool()
                .metadump_all(server)
                .await
                .map_err(|e| ProxyError::Other(format!("metadump of server #{server}: {e}")))?;
            for entry in dumped {
                if seen.insert(entry.key.clone()) {
                    fresh.push((server, entry));
                }
            }
        }
        if fresh.is_empty() {
            quiet += 1;
            if quiet >= QUIET_PASSES {
                break;
            }
            continue;
        }
        quiet = 0;
        total += fresh.len() as u64;
        println!(
            "{mode}: pass {pass}: {} new items listed on {} memcached server(s)",
            fresh.len(),
            legacy.server_count()
        );
        let mut tasks = tokio::task::JoinSet::new();
        let mut last_progress = Instant::now();
        for (server, entry) in fresh {
            pace(options.rate, started, started_items).await;
            started_items += 1;
            let Ok(permit) = limit.clone().acquire_owned().await else {
                break;
            };
            let (legacy, backends, task_counters) =
                (legacy.clone(), backends.clone(), counters.clone());
            let cas = CasGenerator::new(cas_seed ^ started_items).next_cas();
            tasks.spawn(async move {
                let c = &task_counters;
                copy_one(&legacy, &backends, server, entry, options, cas, c).await;
                c.done.fetch_add(1, Ordering::Relaxed);
                drop(permit);
            });
            while tasks.try_join_next().is_some() {}
            if last_progress.elapsed() >= PROGRESS_EVERY {
                print_progress(&counters, total, started);
                last_progress = Instant::now();
            }
        }
        while tasks.join_next().await.is_some() {
            if last_progress.elapsed() >= PROGRESS_EVERY {
                print_progress(&counters, total, started);
                last_progress = Instant::now();
            }
        }
    }
    // The crawler's count against the servers' own: a gap is reported.
    let current_items = servers_item_count(&legacy).await;
    if current_items > total {
        println!(
            "warning: the servers hold {current_items} items, the crawler listed {total}: \
             {} were not seen (written during the copy, or still moving between LRU queues); \
             run the copy again to pick them up",
            current_items - total
        );
    }
    let c = &counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let summary = CopySummary {
        listed: total,
        copied: get(&c.copied),
        already_present: get(&c.already_present),
        skipped_expired: get(&c.skipped_expired),
        failed: get(&c.failed),
        bytes: get(&c.bytes),
        matched: get(&c.matched),
        mismatched: get(&c.mismatched),
    };
    let secs = started.elapsed().as_secs_f64();
    if options.verify {
        println!(
            "verify done in {secs:.1}s: {} items, {} match, {} mismatches, {} expired, {} failed",
            summary.listed,
            summary.matched,
            summary.mismatched,
            summary.skipped_expired,
            summary.failed
        );
    } else {
        println!(
            "{mode} done in {secs:.1}s: {} copied ({} bytes), {} already in Redis, {} skipped as expired, {} failed",
            summary.copied,
            summary.bytes,
            summary.already_present,
            summary.skipped_expired,
            summary.failed
        );
    }
    Ok(summary)
}

/// `--rate`: wait until item `n` (from 0) may start, no earlier than
/// `n / rate` seconds after `started`; no wait without a rate.
pub(crate) async fn pace(rate: Option<u64>, started: Instant, n: u64) {
    if let Some(rate) = rate.filter(|r| *r > 0) {
        let due = started + Duration::from_secs_f64(n as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
    }
}

fn print_progress(c: &Counters, total: u64, started: Instant) {
    let done = c.done.load(Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64().max(0.001);
    let rate = done as f64 / secs;
    let eta = if rate > 0.0 {
        (total.saturating_sub(done)) as f64 / rate
    } else {
        0.0
    };
    println!(
        "progress: {done}/{total} items, {} bytes, {rate:.0} items/s, ETA {eta:.0}s",
        c.bytes.load(Ordering::Relaxed)
    );
}

async fn wait_until(limit: Duration, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Read one item (value, flags, TTL) from the server it was listed on.
async fn read_item(
    legacy: &Legacy,
    server: usize,
    key: &[u8],
) -> Result<Option<(Bytes, u32, Option<i64>)>, String> {
    let mut buf = BytesMut::new();
    client::meta_get(&mut buf, key).map_err(|e| e.to_string())?;
    let reply = legacy
        .pool()
        .call(Route::Server(server), buf.freeze(), ReplyShape::Single)
        .await
        .map_err(|e| e.to_string())?;
    let raw = reply.raw();
    match client::parse_reply(raw) {
        Ok(Some((Response::MetaValue { flags, data }, _))) => Ok(Some((
            raw.slice_ref(data),
            flags.client_flags().unwrap_or(0),
            flags.ttl().filter(|t| *t >= 0),
        ))),
        Ok(Some((
            Response::Meta {
                status: MetaStatus::Miss,
                ..
            },
            _,
        ))) => Ok(None),
        _ => Err(format!(
            "unexpected reply {:?}",
            String::from_utf8_lossy(raw)
        )),
    }
}

/// `stats` → `curr_items` of one server.
/// `curr_items` summed over the pool (a server that does not answer counts 0).
async fn servers_item_count(legacy: &Legacy) -> u64 {
    let mut sum = 0u64;
    for server in 0..legacy.server_count() {
        sum += curr_items(legacy, server).await.unwrap_or(0);
    }
    sum
}

async fn curr_items(legacy: &Legacy, server: usize) -> Option<u64> {
    let reply = legacy
        .pool()
        .call(
            Route::Server(server),
            Bytes::from_static(b"stats\r\n"),
            ReplyShape::UntilEnd,
        )
        .await
        .ok()?;
    let raw = reply.raw();
    let mut rest = &raw[..];
    while let Ok(Some((unit, used))) = client::parse_reply(rest) {
        if let Response::Stat { name, value } = unit {
            if name == b"curr_items" {
                return std::str::from_utf8(value).ok()?.trim().parse().ok();
            }
        }
        rest = rest.get(used..)?;
    }
    None
}

async fn redis_call(backends: &RedisBackends, key: &[u8], cmd: Bytes) -> Result<Frame, String> {
    match backends.call_for_key(key, cmd).await {
        Ok(Frame::Error(e)) => Err(String::from_utf8_lossy(&e).into_owned()),
        Ok(frame) => Ok(frame),
        Err(e) => Err(format!("{e:?}")),
    }
}

async fn copy_one(
    legacy: &Legacy,
    backends: &RedisBackends,
    server: usize,
    entry: DumpEntry,
    options: CopyOptions,
    cas: u64,
    c: &Counters,
) {
    let key = &entry.key[..];
    let item = match read_item(legacy, server, key).await {
        Ok(Some(item)) => item,
        // Gone since the dump (expired or deleted).
        Ok(None) => {
            c.skipped_expired.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(e) => {
            c.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = %String::from_utf8_lossy(key), error = %e, "copy: read failed");
            return;
        }
    };
    let (data, flags, ttl) = item;
    if options.verify {
        let mut buf = BytesMut::new();
        translate::get(&mut buf, key);
        match redis_call(backends, key, buf.freeze()).await {
            Ok(Frame::Bulk(v)) => match encoding::decode(&v) {
                Some(stored) if stored.flags == flags && stored.data == data => {
                    c.matched.fetch_add(1, Ordering::Relaxed);
                }
                _ => mismatch(c, key, "value or flags differ"),
            },
            Ok(_) => mismatch(c, key, "missing in Redis"),
            Err(e) => {
                c.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(key = %String::from_utf8_lossy(key), error = %e, "verify: read failed");
            }
        }
        return;
    }
    if options.dry_run {
        c.copied.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        return;
    }
    let expiry = match ttl {
        None => Expiry::Never,
        Some(0) => {
            c.skipped_expired.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Some(t) => Expiry::In(t),
    };
    let mut buf = BytesMut::new();
    translate::store(
        &mut buf,
        StorageCommand::Add,
        key,
        flags,
        cas,
        &data,
        expiry,
    );
    match redis_call(backends, key, buf.freeze()).await {
        Ok(Frame::Simple(_)) => {
            c.copied.fetch_add(1, Ordering::Relaxed);
            c.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        Ok(Frame::Null) => {
            c.already_present.fetch_add(1, Ordering::Relaxed);
        }
        Ok(_) | Err(_) => {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn mismatch(c: &Counters, key: &[u8], why: &str) {
    let n = c.mismatched.fetch_add(1, Ordering::Relaxed);
    // Name the first mismatches; count the rest.
    if n < 20 {
        println!("mismatch: {} ({why})", String::from_utf8_lossy(key));
    }
}
