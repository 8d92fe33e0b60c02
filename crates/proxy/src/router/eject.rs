//! `on_shard_down = "eject"` without stale reads (twemproxy #604).
//!
//! While a shard is ejected its keys are served by the others (the ring
//! without it). Two things could then serve a value older than an
//! acknowledged write:
//! * when the shard rejoins, it still holds the values it had before it was
//!   ejected, while newer ones were written to a fallback shard;
//! * at the shard's next ejection, the fallback shards still hold the copies
//!   written during the first one, older than what the shard got since.
//!
//! So every key this process routes away from its owner is remembered (per
//! owner, bounded), and before the owner rejoins the ring those keys are
//! deleted on every shard: a read after the rejoin is then the newest write
//! or a miss. When more keys were diverted than remembered, the owner is
//! flushed and the other shards are scanned for copies of its keys instead.
//! The list is cleaned once more right after the ring switches (writes that
//! were being routed at that instant).
//!
//! The guarantee holds within one memshift process. Several processes each
//! decide alone when a shard is down: a key diverted by another process is
//! deleted when that process sees the rejoin, so for one health-check
//! cycle (`health_check_interval_ms`) a process that already routes to the
//! rejoined shard can read a value another process overwrote elsewhere.
//! docs/config.md states this next to `on_shard_down`.

use std::collections::HashSet;

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::{encode_command, Frame};

use super::RedisBackends as Backends;
use crate::redis::BackendError;

/// Keys per `DEL` and per `SCAN` page.
const BATCH: usize = 500;

/// What a clean-up did (for the log line).
#[derive(Debug, Default, Clone, Copy)]
pub struct Cleaned {
    /// Keys deleted everywhere from the list.
    pub keys: usize,
    /// The list had overflowed: the owner was flushed.
    pub flushed: bool,
    /// Copies found by scanning the other shards.
    pub scanned_copies: usize,
}

/// Clean-up rounds before a rejoin: writes diverted while a round runs are
/// cleaned by the next one, so the ring switches only once a round found
/// nothing (or after this many, under a constant stream of writes).
const MAX_ROUNDS: usize = 8;

/// [`clean`] until a round finds nothing left to remove: a key deleted or
/// written on a fallback while a long clean-up ran must not read its older
/// value from the owner once it rejoins (what remains after the last round
/// is cleaned right after the switch).
pub async fn clean_until_settled(
    backends: &Backends,
    owner: usize,
) -> Result<Cleaned, BackendError> {
    let mut total = Cleaned::default();
    for _ in 0..MAX_ROUNDS {
        let round = clean(backends, owner).await?;
        if round.keys == 0 && !round.flushed {
            break;
        }
        total.keys += round.keys;
        total.flushed |= round.flushed;
        total.scanned_copies += round.scanned_copies;
    }
    Ok(total)
}

/// Remove every value of `owner`'s diverted keys, on every shard, before it
/// rejoins. On failure the list is kept for the next attempt.
pub async fn clean(backends: &Backends, owner: usize) -> Result<Cleaned, BackendError> {
    let Some(shard) = backends.shards.get(owner) else {
        return Ok(Cleaned::default());
    };
    let taken = shard.diverted.take();
    if taken.is_empty() {
        return Ok(Cleaned::default());
    }
    let result = if taken.overflowed {
        flush_and_scan(backends, owner).await
    } else {
        delete_everywhere(backends, &taken.keys).await
    };
    if result.is_err() {
        shard.diverted.restore(taken);
    }
    result
}

async fn delete_everywhere(
    backends: &Backends,
    keys: &HashSet<Bytes>,
) -> Result<Cleaned, BackendError> {
    let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    for batch in keys.chunks(BATCH) {
        let cmd = del_command(batch.iter().copied());
        for shard in 0..backends.shards.len() {
            expect_ok(backends.call(shard, cmd.clone()).await)?;
        }
    }
    Ok(Cleaned {
        keys: keys.len(),
        ..Cleaned::default()
    })
}

/// Too many keys to list: flush the owner, and delete the copies of its
/// keys the other shards hold (found by SCAN, placed by the full ring).
async fn flush_and_scan(backends: &Backends, owner: usize) -> Result<Cleaned, BackendError> {
    let mut buf = BytesMut::new();
    encode_command(&mut buf, &[b"FLUSHDB"]);
    expect_ok(backends.call(owner, buf.split().freeze()).await)?;
    let mut copies = 0;
    for shard in (0..backends.shards.len()).filter(|&s| s != owner) {
        let mut cursor = Bytes::from_static(b"0");
        loop {
            encode_command(
                &mut buf,
                &[b"SCAN", &cursor[..], b"COUNT", BATCH.to_string().as_bytes()],
            );
            let reply = expect_ok(backends.call(shard, buf.split().freeze()).await)?;
            let Frame::Array(parts) = reply else {
                return Err(BackendError::Unavailable);
            };
            let (next, found) = match parts.as_slice() {
                [Frame::Bulk(next), Frame::Array(found)] => (next.clone(), found),
                _ => return Err(BackendError::Unavailable),
            };
            let theirs: Vec<&[u8]> = found
                .iter()
                .filter_map(|f| match f {
                    Frame::Bulk(k) if backends.owner(k) == owner => Some(&k[..]),
                    _ => None,
                })
                .collect();
            if !theirs.is_empty() {
                copies += theirs.len();
                expect_ok(backends.call(shard, del_command(theirs.into_iter())).await)?;
            }
            if &next[..] == b"0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(Cleaned {
        flushed: true,
        scanned_copies: copies,
        ..Cleaned::default()
    })
}

fn del_command<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Bytes {
    let mut args: Vec<&[u8]> = vec![b"DEL"];
    args.extend(keys);
    let mut buf = BytesMut::new();
    encode_command(&mut buf, &args);
    buf.freeze()
}

fn expect_ok(reply: Result<Frame, BackendError>) -> Result<Frame, BackendError> {
    match reply? {
        // The shard answered but refused: not clean, try again later.
        Frame::Error(_) => Err(BackendError::Unavailable),
        frame => Ok(frame),
    }
}
