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
//!
//! Two races are closed on top (both seen under load, test
//! `ops::faults::faults_eject_rejoins_under_load_never_read_stale`):
//! * a write diverted after the last delete round and acknowledged by the
//!   fallback, then read from the rejoined owner's older copy: the last
//!   round closes the list, and from then on the owner's writes are
//!   refused (a fast `SERVER_ERROR`, for the milliseconds until the ring
//!   takes it back; a session routing on the ring it loaded before the
//!   switch is refused too);
//! * a write diverted before a delete round but reaching its fallback after
//!   it (another connection, or still in its session): its copy outlives
//!   the clean-up. The keys of every round are kept, and deleted once more
//!   on the fallbacks before the owner's next ejection, while its keys
//!   still route to it (they fail meanwhile, as under `"fail"`).
//!
//! Deletes go to the shards that answered the health check: one dead shard
//! does not keep another out. What a silent shard was not swept of, it
//! deletes on itself when it rejoins; and a shard rejoining while another
//! is still out deletes its copies of the other's diverted keys (it served
//! them before it went down, and some route to it again), keeping them for
//! the sweep before its own next ejection (test
//! `ops::health::eject_policy_a_rejoin_while_another_shard_is_out_never_serves_an_older_copy`).
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
use crate::redis::diverted::{Diverted, DivertedKeys};
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

/// Clean-up rounds before a rejoin while writes are still diverted: writes
/// diverted while a round runs are cleaned by the next one. Then one last
/// round during which the owner's writes are refused.
const MAX_ROUNDS: usize = 8;

/// Before `owner` rejoins the ring: delete every value of its diverted keys
/// on every shard that answered the health check (`answering`, by index),
/// so a read after the rejoin is the newest write or a miss. Rounds run
/// while writes are still diverted, until one finds nothing (or
/// `MAX_ROUNDS`); the last round closes the list first: from then until
/// the ring takes the owner back its writes are refused, so none can be
/// diverted after the last delete and read back from the owner's older copy
/// once it rejoins. Then the owner's copies of keys of shards still ejected
/// (written while it served them) are deleted too: some of those keys
/// route to it again. On failure the owner stays ejected and diverts again.
pub async fn prepare_rejoin(
    backends: &Backends,
    owner: usize,
    answering: &[bool],
) -> Result<Cleaned, BackendError> {
    let Some(shard) = backends.shards.get(owner) else {
        return Ok(Cleaned::default());
    };
    let targets: Vec<usize> = (0..backends.shards.len())
        .filter(|&s| s == owner || answering.get(s) == Some(&true))
        .collect();
    let mut total = Cleaned::default();
    for _ in 0..MAX_ROUNDS {
        let taken = shard.diverted.take();
        if taken.is_empty() {
            break;
        }
        total.add(clean_round(backends, owner, &shard.diverted, taken, &targets).await?);
    }
    let last = shard.diverted.close_and_take();
    total.add(clean_round(backends, owner, &shard.diverted, last, &targets).await?);
    if let Err(e) = delete_copies_of_the_ejected(backends, owner, &shard.diverted).await {
        shard.diverted.restore(DivertedKeys::default());
        return Err(e);
    }
    Ok(total)
}

/// The rejoining `owner` may hold copies of keys of shards still ejected
/// (written there while it served them, before it went down); the others
/// have served those keys since. Its copies are deleted (by list; by scan
/// when a list overflowed) and the keys kept for the sweep before its own
/// next ejection: the copies on the shards that serve them now outlive the
/// switch.
async fn delete_copies_of_the_ejected(
    backends: &Backends,
    owner: usize,
    diverted: &Diverted,
) -> Result<(), BackendError> {
    let mut keys = DivertedKeys::default();
    for (_, other) in backends
        .shards
        .iter()
        .enumerate()
        .filter(|&(s, other)| s != owner && !other.is_healthy())
    {
        keys.merge(other.diverted.pending());
    }
    if keys.overflowed {
        delete_unowned_by_scan(backends, owner).await?;
    } else if !keys.keys.is_empty() {
        delete_on(backends, &[owner], &keys.keys, false).await?;
    }
    diverted.cleaned(keys);
    Ok(())
}

/// Before `owner` is ejected: a write routed to a fallback just before its
/// last rejoin may have landed after that rejoin's delete; the keys of its
/// last ejection are deleted once more on every other shard that answered
/// the health check (`answering`, by index; never on a key's own shard),
/// before any read of them goes there. Until this succeeds the owner stays
/// in the ring (its keys fail, as under `on_shard_down = "fail"`). A shard
/// that did not answer is swept when it rejoins: the keys go back to the
/// owner's list, which a rejoining shard deletes on itself while the owner
/// is out.
pub async fn prepare_ejection(
    backends: &Backends,
    owner: usize,
    answering: &[bool],
) -> Result<(), BackendError> {
    let Some(shard) = backends.shards.get(owner) else {
        return Ok(());
    };
    let copies = shard.diverted.take_cleaned();
    if copies.is_empty() {
        shard.diverted.ejecting(None);
        return Ok(());
    }
    let fallbacks: Vec<usize> = (0..backends.shards.len())
        .filter(|&s| s != owner && answering.get(s) == Some(&true))
        .collect();
    let result = if copies.overflowed {
        delete_copies_by_scan(backends, owner, &fallbacks)
            .await
            .map(|_| ())
    } else {
        delete_on(backends, &fallbacks, &copies.keys, true).await
    };
    match result {
        Ok(()) => {
            let missed = fallbacks.len() + 1 < backends.shards.len();
            shard.diverted.ejecting(missed.then_some(copies));
            Ok(())
        }
        Err(e) => {
            shard.diverted.sweep_failed(copies);
            Err(e)
        }
    }
}

impl Cleaned {
    fn add(&mut self, round: Cleaned) {
        self.keys += round.keys;
        self.flushed |= round.flushed;
        self.scanned_copies += round.scanned_copies;
    }
}

/// Delete `taken` (keys of `owner`) on `targets`; on failure they go back
/// to the list and the owner diverts again.
async fn clean_round(
    backends: &Backends,
    owner: usize,
    diverted: &Diverted,
    taken: DivertedKeys,
    targets: &[usize],
) -> Result<Cleaned, BackendError> {
    if taken.is_empty() {
        return Ok(Cleaned::default());
    }
    let result = if taken.overflowed {
        flush_and_scan(backends, owner, targets).await
    } else {
        delete_on(backends, targets, &taken.keys, false)
            .await
            .map(|()| Cleaned {
                keys: taken.keys.len(),
                ..Cleaned::default()
            })
    };
    match result {
        Ok(c) => {
            diverted.cleaned(taken);
            Ok(c)
        }
        Err(e) => {
            diverted.restore(taken);
            Err(e)
        }
    }
}

/// Delete `keys` on each of `shards`; with `spare_owners`, not on the
/// shard a key belongs to (where it may be live).
async fn delete_on(
    backends: &Backends,
    shards: &[usize],
    keys: &HashSet<Bytes>,
    spare_owners: bool,
) -> Result<(), BackendError> {
    for &shard in shards {
        let doomed: Vec<&[u8]> = keys
            .iter()
            .filter(|k| !spare_owners || backends.owner(k) != shard)
            .map(|k| &k[..])
            .collect();
        for batch in doomed.chunks(BATCH) {
            expect_ok(
                backends
                    .call(shard, del_command(batch.iter().copied()))
                    .await,
            )?;
        }
    }
    Ok(())
}

/// Too many keys to list: flush the owner, and delete the copies of its
/// keys the other `targets` hold.
async fn flush_and_scan(
    backends: &Backends,
    owner: usize,
    targets: &[usize],
) -> Result<Cleaned, BackendError> {
    let mut buf = BytesMut::new();
    encode_command(&mut buf, &[b"FLUSHDB"]);
    expect_ok(backends.call(owner, buf.split().freeze()).await)?;
    let others: Vec<usize> = targets.iter().copied().filter(|&s| s != owner).collect();
    let copies = delete_copies_by_scan(backends, owner, &others).await?;
    Ok(Cleaned {
        flushed: true,
        scanned_copies: copies,
        ..Cleaned::default()
    })
}

/// Delete every key on `shard` that another shard owns (while it is out of
/// the ring, none of them is live there).
async fn delete_unowned_by_scan(backends: &Backends, shard: usize) -> Result<(), BackendError> {
    scan_and_delete(backends, shard, |owner| owner != shard)
        .await
        .map(|_| ())
}

/// Delete, on each of `shards`, the keys `owner` holds by the full ring
/// (found by SCAN); the number deleted.
async fn delete_copies_by_scan(
    backends: &Backends,
    owner: usize,
    shards: &[usize],
) -> Result<usize, BackendError> {
    let mut copies = 0;
    for &shard in shards {
        copies += scan_and_delete(backends, shard, |o| o == owner).await?;
    }
    Ok(copies)
}

/// SCAN `shard` and delete the keys whose owner (by the full ring)
/// `doomed` picks; the number deleted.
async fn scan_and_delete(
    backends: &Backends,
    shard: usize,
    doomed: impl Fn(usize) -> bool,
) -> Result<usize, BackendError> {
    let mut buf = BytesMut::new();
    let mut deleted = 0;
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
        let keys: Vec<&[u8]> = found
            .iter()
            .filter_map(|f| match f {
                Frame::Bulk(k) if doomed(backends.owner(k)) => Some(&k[..]),
                _ => None,
            })
            .collect();
        if !keys.is_empty() {
            deleted += keys.len();
            expect_ok(backends.call(shard, del_command(keys.into_iter())).await)?;
        }
        if &next[..] == b"0" {
            return Ok(deleted);
        }
        cursor = next;
    }
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
