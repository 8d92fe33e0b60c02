//! `[redis] read_errors_as_misses`: a memcached read (get, gets, gat, gats,
//! mg, binary get) of a key whose Redis shard failed is answered as a miss
//! (as mcrouter does, and client-sharded memcached fleets), so one down
//! shard fails none of the other shards' keys of a multi-get. Each such
//! miss is counted per shard (`memshift_read_errors_as_misses_total`, the
//! `stats` line `read_errors_as_misses`) and logged at most once per shard
//! every [`LOG_EVERY_SECS`]. Where the switch applies and where it does not
//! (writes, `mg` with `N`, RESP, the legacy memcached pool): docs/config.md.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memshift_protocol::resp::Frame;

use crate::metrics::Metrics;
use crate::redis::shard::Shard;
use crate::redis::{BackendError, Reply};
use crate::stats::{bump, Stats};

/// At most one log line per shard this often.
pub const LOG_EVERY_SECS: u64 = 10;

/// Why a read has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFailure {
    /// Down, timed out, connection lost, queue full.
    Backend(BackendError),
    /// Redis answered the read with an error (LOADING, MASTERDOWN, ...).
    ErrorReply,
}

impl ReadFailure {
    /// The failure in one backend result, if it is one. `WRONGTYPE` is not:
    /// the key holds a RESP hash, list, ... (no memcached item: a miss, as
    /// an `MGET` says for it).
    pub fn of(result: Option<&Result<Reply, BackendError>>) -> Option<ReadFailure> {
        match result {
            None => Some(ReadFailure::Backend(BackendError::Timeout)),
            Some(Err(e)) => Some(ReadFailure::Backend(*e)),
            Some(Ok(Reply::Redis(Frame::Error(e)))) if !e.starts_with(b"WRONGTYPE") => {
                Some(ReadFailure::ErrorReply)
            }
            Some(Ok(_)) => None,
        }
    }

    /// The line a client gets when the read is not answered as a miss.
    pub fn reply_line(self) -> &'static [u8] {
        match self {
            ReadFailure::Backend(e) => e.reply_line(),
            ReadFailure::ErrorReply => b"SERVER_ERROR backend error\r\n",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            ReadFailure::Backend(BackendError::Unavailable) => "shard unavailable",
            ReadFailure::Backend(BackendError::Timeout) => "timeout",
            ReadFailure::Backend(BackendError::ConnectionLost) => "connection lost",
            ReadFailure::Backend(BackendError::Busy) => "shard busy",
            ReadFailure::ErrorReply => "error reply",
        }
    }
}

/// The switch and its per-shard tallies, for one generation of shards
/// (rebuilt on reload, which is how the switch is live).
#[derive(Debug)]
pub struct ReadErrors {
    pub as_misses: bool,
    shards: Vec<ShardTally>,
    /// For a shard index not in `shards` (a cluster node found later).
    other: ShardTally,
}

#[derive(Debug)]
struct ShardTally {
    name: String,
    counter: metrics::Counter,
    /// Unix second of the last log line (0: never).
    logged_at: AtomicU64,
}

impl ShardTally {
    fn new(name: &str, metrics: &Metrics) -> ShardTally {
        ShardTally {
            name: name.to_string(),
            counter: metrics.read_errors_as_misses(name),
            logged_at: AtomicU64::new(0),
        }
    }
}

impl ReadErrors {
    pub fn new(as_misses: bool, shards: &[Arc<Shard>], metrics: &Metrics) -> ReadErrors {
        ReadErrors {
            as_misses,
            shards: shards
                .iter()
                .map(|s| ShardTally::new(&s.id, metrics))
                .collect(),
            other: ShardTally::new("other", metrics),
        }
    }

    /// A read of shard `shard` that failed with `why` was answered as a miss.
    pub fn answered_as_miss(&self, shard: usize, why: ReadFailure, stats: &Stats) {
        let tally = self.shards.get(shard).unwrap_or(&self.other);
        tally.counter.increment(1);
        bump(&stats.read_errors_as_misses);
        let now = memshift_protocol::memcache::unix_now();
        let last = tally.logged_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= LOG_EVERY_SECS
            && tally
                .logged_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                shard = %tally.name,
                error = why.describe(),
                "reads of this shard fail and are answered as misses (redis.read_errors_as_misses); \
                 counted in memshift_read_errors_as_misses_total, logged at most every {LOG_EVERY_SECS} s"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn of(result: Result<Frame, BackendError>) -> Option<ReadFailure> {
        ReadFailure::of(Some(&result.map(Reply::Redis)))
    }

    #[test]
    fn which_results_are_failures() {
        let error = |e: &'static [u8]| Ok(Frame::Error(Bytes::from_static(e)));
        assert_eq!(
            ReadFailure::of(None),
            Some(ReadFailure::Backend(BackendError::Timeout))
        );
        assert_eq!(
            of(Err(BackendError::Unavailable)),
            Some(ReadFailure::Backend(BackendError::Unavailable))
        );
        assert_eq!(
            of(error(b"LOADING Redis is loading")),
            Some(ReadFailure::ErrorReply)
        );
        // A key of another type: no memcached item, a plain miss.
        assert_eq!(of(error(b"WRONGTYPE Operation against a key")), None);
        assert_eq!(of(Ok(Frame::Null)), None);
        assert_eq!(of(Ok(Frame::Bulk(Bytes::from_static(b"v")))), None);
        assert_eq!(
            ReadFailure::ErrorReply.reply_line(),
            b"SERVER_ERROR backend error\r\n"
        );
    }
}
