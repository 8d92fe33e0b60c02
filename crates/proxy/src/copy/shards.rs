//! `memshift copy --from-shards OLD.toml --config NEW.toml`: copy the items
//! of standalone Redis shards (OLD's `[redis] shards`) into NEW's Redis,
//! typically a Redis Cluster, before NEW is put live.
//!
//! Each source shard is walked with `SCAN`; each key is read with one
//! script (`TYPE`, `GET`, `PTTL`: atomic, one round trip) and written with
//! `SET key value [PX remaining-ms]` on the node that serves it. The value is
//! memshift's own stored item (header with flags and CAS, then the data), so
//! copying its bytes carries flags, CAS and meta state unchanged; the TTL is
//! carried relative (`PTTL` → `PX`), so clock skew between the hosts does not
//! shift it (`PEXPIRETIME` → `PXAT` would), and plain strings restore on any
//! Redis version or fork (`RESTORE` refuses a `DUMP` from a newer RDB
//! version).
//!
//! Writes overwrite: the target is not live yet, so the shards hold the
//! truth, and a second pass refreshes what changed since the first. Do not
//! run it after the target is live (see docs/cluster.md).
//!
//! Only keys a shard owns on the source ring are copied: a copy left on
//! another shard (by a ring change or the eject policy) is not what memshift
//! reads. Values that are not memshift items are skipped.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::{encode_command, Frame};
use tokio::sync::Semaphore;

use super::{
    mismatch, pace, print_progress, wait_until, CopyOptions, CopySummary, Counters, CONCURRENCY,
    PROGRESS_EVERY,
};
use crate::config::{Config, RedisMode};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::redis::encoding;
use crate::router::RedisBackends;

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: &[u8] = b"500";
/// `--verify`: how far the two remaining TTLs may differ (the two reads are
/// not at the same instant).
const TTL_SLACK_MS: i64 = 5_000;
/// One key, atomically: `{type}` when it is not a string (or is gone),
/// else `{value, pttl}`.
const READ_SCRIPT: &[u8] = b"local t = redis.call('TYPE', KEYS[1])['ok'] \
if t ~= 'string' then return {t} end \
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}";

/// Run the copy from `shards_path`'s shards into `config_path`'s Redis.
pub fn run_from_shards(
    config_path: &Path,
    shards_path: &Path,
    options: CopyOptions,
) -> Result<CopySummary, ProxyError> {
    let target = Config::load(config_path)?;
    let source = Config::load(shards_path)?;
    if source.redis.mode != RedisMode::Standalone {
        return Err(ProxyError::Other(format!(
            "--from-shards {}: its [redis] must list standalone shards (mode = \"standalone\"), not a cluster",
            shards_path.display()
        )));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(copy(&source, &target, options))
}

/// One source key as read.
#[derive(Debug, PartialEq, Eq)]
enum Read {
    /// A memshift item: its stored bytes, and the remaining TTL (ms).
    Item { raw: Bytes, pttl: Option<i64> },
    /// Expired or deleted since it was listed.
    Gone,
    /// Not a memshift item (another type, or a string in another format).
    Foreign,
}

fn parse_read(frame: Frame) -> Result<Read, String> {
    match frame {
        Frame::Array(items) => match <[Frame; 2]>::try_from(items) {
            Ok([Frame::Bulk(raw), Frame::Integer(pttl)]) => Ok(match pttl {
                -2 | 0 => Read::Gone,
                _ if encoding::decode(&raw).is_none() => Read::Foreign,
                -1 => Read::Item { raw, pttl: None },
                ms if ms > 0 => Read::Item {
                    raw,
                    pttl: Some(ms),
                },
                other => return Err(format!("unexpected PTTL {other}")),
            }),
            Ok([Frame::Null, _]) => Ok(Read::Gone),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(items) => match items.as_slice() {
                [Frame::Bulk(t)] | [Frame::Simple(t)] if &t[..] == b"none" => Ok(Read::Gone),
                [_] => Ok(Read::Foreign),
                _ => Err(format!("unexpected reply {items:?}")),
            },
        },
        Frame::Error(e) => Err(String::from_utf8_lossy(&e).into_owned()),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

fn read_cmd(key: &[u8]) -> Bytes {
    let mut buf = BytesMut::new();
    encode_command(&mut buf, &[b"EVAL", READ_SCRIPT, b"1", key]);
    buf.freeze()
}

async fn read_on(
    backends: &RedisBackends,
    shard: Option<usize>,
    key: &[u8],
) -> Result<Read, String> {
    let reply = match shard {
        Some(shard) => backends.call(shard, read_cmd(key)).await,
        None => backends.call_for_key(key, read_cmd(key)).await,
    };
    parse_read(reply.map_err(|e| format!("{e:?}"))?)
}

async fn copy(
    source: &Config,
    target: &Config,
    options: CopyOptions,
) -> Result<CopySummary, ProxyError> {
    let metrics = Metrics::new();
    let from = Arc::new(RedisBackends::start(source, None, &metrics)?);
    let to = Arc::new(RedisBackends::start(target, None, &metrics)?);
    // Connections come up in the background; give them a moment.
    wait_until(Duration::from_secs(5), || {
        from.shards.iter().chain(&to.shards).all(|s| s.is_up())
    })
    .await;
    let mode = if options.verify {
        "verify"
    } else if options.dry_run {
        "dry run"
    } else {
        "copy"
    };
    // DBSIZE of every shard: the total the progress lines count towards.
    let mut total = 0u64;
    for shard in 0..from.shards.len() {
        let mut buf = BytesMut::new();
        encode_command(&mut buf, &[b"DBSIZE"]);
        match from.call(shard, buf.freeze()).await {
            Ok(Frame::Integer(n)) => total += u64::try_from(n).unwrap_or(0),
            other => {
                return Err(ProxyError::Other(format!(
                    "DBSIZE of shard {}: {other:?}",
                    from.shards[shard].id
                )))
            }
        }
    }
    println!(
        "{mode}: {total} keys on {} redis shard(s) to walk",
        from.shards.len()
    );

    let started = Instant::now();
    let counters = Arc::new(Counters::default());
    let mut listed = 0u64;
    // Keys started (the owner's): what `--rate` paces.
    let mut paced = 0u64;
    let limit = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    let mut last_progress = Instant::now();
    for shard in 0..from.shards.len() {
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let (next, keys) = scan(&from, shard, &cursor).await.map_err(|e| {
                ProxyError::Other(format!("SCAN of shard {}: {e}", from.shards[shard].id))
            })?;
            for key in keys {
                listed += 1;
                // Only the owner's copy is what memshift reads.
                if from.owner(&key) != shard {
                    counters.not_owner.fetch_add(1, Ordering::Relaxed);
                    counters.done.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                pace(options.rate, started, paced).await;
                paced += 1;
                let Ok(permit) = limit.clone().acquire_owned().await else {
                    break;
                };
                let (from, to, c) = (from.clone(), to.clone(), counters.clone());
                tasks.spawn(async move {
                    copy_key(&from, &to, shard, &key, options, &c).await;
                    c.done.fetch_add(1, Ordering::Relaxed);
                    drop(permit);
                });
                while tasks.try_join_next().is_some() {}
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    print_progress(&counters, total, started);
                    last_progress = Instant::now();
                }
            }
            if &next[..] == b"0" {
                break;
            }
            cursor = next;
        }
    }
    while tasks.join_next().await.is_some() {
        if last_progress.elapsed() >= PROGRESS_EVERY {
            print_progress(&counters, total, started);
            last_progress = Instant::now();
        }
    }

    let c = &counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let summary = CopySummary {
        listed,
        copied: get(&c.copied),
        already_present: 0,
        skipped_expired: get(&c.skipped_expired),
        failed: get(&c.failed),
        bytes: get(&c.bytes),
        matched: get(&c.matched),
        mismatched: get(&c.mismatched),
    };
    let (not_owner, foreign) = (get(&c.not_owner), get(&c.foreign));
    let secs = started.elapsed().as_secs_f64();
    if options.verify {
        println!(
            "verify done in {secs:.1}s: {} keys, {} match, {} mismatches, {} expired, \
             {not_owner} not on their owner shard, {foreign} not memshift items, {} failed",
            summary.listed,
            summary.matched,
            summary.mismatched,
            summary.skipped_expired,
            summary.failed
        );
    } else {
        println!(
            "{mode} done in {secs:.1}s: {} copied ({} bytes), {} skipped as expired, \
             {not_owner} not on their owner shard, {foreign} not memshift items, {} failed",
            summary.copied, summary.bytes, summary.skipped_expired, summary.failed
        );
    }
    Ok(summary)
}

/// One `SCAN` step on `shard`: the next cursor and the keys.
async fn scan(
    from: &RedisBackends,
    shard: usize,
    cursor: &[u8],
) -> Result<(Bytes, Vec<Bytes>), String> {
    let mut buf = BytesMut::new();
    encode_command(&mut buf, &[b"SCAN", cursor, b"COUNT", SCAN_COUNT]);
    match from.call(shard, buf.freeze()).await {
        Ok(Frame::Array(reply)) => match <[Frame; 2]>::try_from(reply) {
            Ok([Frame::Bulk(next), Frame::Array(keys)]) => Ok((
                next,
                keys.into_iter()
                    .filter_map(|k| match k {
                        Frame::Bulk(k) => Some(k),
                        _ => None,
                    })
                    .collect(),
            )),
            other => Err(format!("unexpected reply {other:?}")),
        },
        other => Err(format!("{other:?}")),
    }
}

async fn copy_key(
    from: &RedisBackends,
    to: &RedisBackends,
    shard: usize,
    key: &[u8],
    options: CopyOptions,
    c: &Counters,
) {
    let name = || String::from_utf8_lossy(key).into_owned();
    let (raw, pttl) = match read_on(from, Some(shard), key).await {
        Ok(Read::Item { raw, pttl }) => (raw, pttl),
        Ok(Read::Gone) => {
            c.skipped_expired.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Ok(Read::Foreign) => {
            c.foreign.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(e) => {
            c.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = %name(), error = %e, "copy: read from the shard failed");
            return;
        }
    };
    if options.verify {
        match read_on(to, None, key).await {
            Ok(Read::Item {
                raw: there,
                pttl: there_ttl,
            }) => {
                if there != raw {
                    mismatch(c, key, "value, flags or CAS differ");
                } else if !ttl_close(pttl, there_ttl) {
                    mismatch(c, key, "TTL differs");
                } else {
                    c.matched.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(_) => mismatch(c, key, "missing in the target"),
            Err(e) => {
                c.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(key = %name(), error = %e, "verify: read from the target failed");
            }
        }
        return;
    }
    if options.dry_run {
        c.copied.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(raw.len() as u64, Ordering::Relaxed);
        return;
    }
    let mut buf = BytesMut::new();
    let ms;
    match pttl {
        Some(t) => {
            ms = t.to_string();
            encode_command(&mut buf, &[b"SET", key, &raw, b"PX", ms.as_bytes()]);
        }
        None => encode_command(&mut buf, &[b"SET", key, &raw]),
    }
    match to.call_for_key(key, buf.freeze()).await {
        Ok(Frame::Simple(_)) => {
            c.copied.fetch_add(1, Ordering::Relaxed);
            c.bytes.fetch_add(raw.len() as u64, Ordering::Relaxed);
        }
        other => {
            c.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = %name(), reply = ?other, "copy: write to the target failed");
        }
    }
}

fn ttl_close(a: Option<i64>, b: Option<i64>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() <= TTL_SLACK_MS,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item() -> Bytes {
        let mut v = encoding::header(7, 42).to_vec();
        v.extend_from_slice(b"data");
        Bytes::from(v)
    }

    #[test]
    fn reads_parse() {
        let bulk = |b: &'static [u8]| Frame::Bulk(Bytes::from_static(b));
        assert_eq!(
            parse_read(Frame::Array(vec![Frame::Bulk(item()), Frame::Integer(-1)])),
            Ok(Read::Item {
                raw: item(),
                pttl: None
            })
        );
        assert_eq!(
            parse_read(Frame::Array(vec![
                Frame::Bulk(item()),
                Frame::Integer(1500)
            ])),
            Ok(Read::Item {
                raw: item(),
                pttl: Some(1500)
            })
        );
        assert_eq!(
            parse_read(Frame::Array(vec![Frame::Bulk(item()), Frame::Integer(-2)])),
            Ok(Read::Gone)
        );
        assert_eq!(
            parse_read(Frame::Array(vec![bulk(b"none")])),
            Ok(Read::Gone)
        );
        assert_eq!(
            parse_read(Frame::Array(vec![bulk(b"hash")])),
            Ok(Read::Foreign)
        );
        assert_eq!(
            parse_read(Frame::Array(vec![bulk(b"plain"), Frame::Integer(-1)])),
            Ok(Read::Foreign)
        );
        assert!(parse_read(Frame::Error(Bytes::from_static(b"ERR x"))).is_err());
        assert!(parse_read(Frame::Integer(3)).is_err());
    }

    #[test]
    fn ttls_compare_within_the_slack() {
        assert!(ttl_close(None, None));
        assert!(ttl_close(Some(60_000), Some(59_000)));
        assert!(!ttl_close(Some(60_000), Some(50_000)));
        assert!(!ttl_close(Some(60_000), None));
        assert!(!ttl_close(None, Some(1)));
    }
}
