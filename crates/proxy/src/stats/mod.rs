//! Counters behind the memcached `stats` command (memcached's names), and
//! the switches of the admin commands that have state (`stats detail`,
//! `stats sizes_enable`, `lru_crawler enable|disable`).

mod commands;
mod latency;
mod prefix;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bytes::BytesMut;
use memshift_protocol::memcache::reply;

pub use commands::{error_code, CommandStats, Outcome, MAX_ROWS as COMMAND_ROWS};
pub use latency::PERCENTILES;
pub use prefix::{PrefixStats, MAX_PREFIXES};

use crate::per_thread::PerThreadCounter;

/// The counters memcached clients and dashboards read: each an independent
/// tally, sharded by worker thread ([`PerThreadCounter`]: the request path
/// writes no cache line another core writes). `curr_connections` moves both
/// ways, once per connection, and stays one atomic.
#[derive(Debug, Default)]
pub struct Stats {
    pub curr_connections: AtomicU64,
    pub total_connections: PerThreadCounter,
    pub rejected_connections: PerThreadCounter,
    pub cmd_get: PerThreadCounter,
    pub cmd_set: PerThreadCounter,
    pub cmd_flush: PerThreadCounter,
    pub cmd_touch: PerThreadCounter,
    pub get_hits: PerThreadCounter,
    pub get_misses: PerThreadCounter,
    pub get_expired: PerThreadCounter,
    pub delete_hits: PerThreadCounter,
    pub delete_misses: PerThreadCounter,
    pub incr_hits: PerThreadCounter,
    pub incr_misses: PerThreadCounter,
    pub decr_hits: PerThreadCounter,
    pub decr_misses: PerThreadCounter,
    pub cas_hits: PerThreadCounter,
    pub cas_misses: PerThreadCounter,
    pub cas_badval: PerThreadCounter,
    pub touch_hits: PerThreadCounter,
    pub touch_misses: PerThreadCounter,
    pub slow_consumers_closed: PerThreadCounter,
    /// Keys of reads answered as misses because their shard failed
    /// (`redis.read_errors_as_misses`).
    pub read_errors_as_misses: PerThreadCounter,
    pub bytes_read: PerThreadCounter,
    pub bytes_written: PerThreadCounter,
    /// Requests read but left unanswered at the drain deadline (not a
    /// `stats` line: for the drain's closing log line; the metric is
    /// `memshift_drain_dropped_total`).
    pub drain_dropped: AtomicU64,
    /// RESP clients waiting in a blocking call sent to a shard (RESP INFO's
    /// `blocked_clients`; `resp::cmd::hold`).
    pub blocked_clients: AtomicU64,
    /// `stats detail`: per-prefix counts.
    pub prefixes: PrefixStats,
    /// RESP INFO `commandstats`, `errorstats`, `total_error_replies`.
    pub commands: CommandStats,
    /// `stats sizes_enable|sizes_disable` (memcached: off by default).
    pub sizes_enabled: AtomicBool,
    /// `lru_crawler disable|enable` (memcached: enabled by default).
    pub crawler_disabled: AtomicBool,
}

/// Add one.
#[inline]
pub fn bump(counter: &PerThreadCounter) {
    counter.add(1);
}

/// Static facts that `stats` reports next to the counters.
#[derive(Debug, Clone)]
pub struct ServerFacts {
    pub started: Instant,
    /// Unix time of the start (memcached's `flush_all <Unix time>` rule).
    pub started_unix: u64,
    pub threads: usize,
    pub max_connections: usize,
    pub version: &'static str,
    /// The RESP listener's port (`server.resp_listen`, else
    /// `resp_tls_listen`; 0: none), RESP INFO's `tcp_port`.
    pub resp_port: u16,
}

/// The version line memshift reports: memcached's protocol version first, so
/// client libraries that parse `major.minor.patch` accept it.
pub const VERSION: &str = concat!("1.6.18-memshift-", env!("CARGO_PKG_VERSION"));

impl Stats {
    /// `stats reset`: what memcached's `stats_reset` zeroes. Gauges
    /// (`curr_connections`) and facts (`uptime`, `pid`) are kept; the
    /// per-prefix counts are dropped.
    pub fn reset(&self) {
        for counter in [
            &self.total_connections,
            &self.rejected_connections,
            &self.cmd_get,
            &self.cmd_set,
            &self.cmd_flush,
            &self.cmd_touch,
            &self.get_hits,
            &self.get_misses,
            &self.get_expired,
            &self.delete_hits,
            &self.delete_misses,
            &self.incr_hits,
            &self.incr_misses,
            &self.decr_hits,
            &self.decr_misses,
            &self.cas_hits,
            &self.cas_misses,
            &self.cas_badval,
            &self.touch_hits,
            &self.touch_misses,
            &self.slow_consumers_closed,
            &self.read_errors_as_misses,
            &self.bytes_read,
            &self.bytes_written,
        ] {
            counter.reset();
        }
        self.prefixes.clear();
        self.commands.reset();
    }

    /// Encode the `stats` reply (STAT lines and END); `extra` appends
    /// memshift's own lines after memcached's.
    pub fn render(
        &self,
        facts: &ServerFacts,
        out: &mut BytesMut,
        extra: impl FnOnce(&mut BytesMut),
    ) {
        let now = memshift_protocol::memcache::unix_now();
        let get = PerThreadCounter::get;
        reply::stat(out, "pid", std::process::id());
        reply::stat(out, "uptime", facts.started.elapsed().as_secs());
        reply::stat(out, "time", now);
        reply::stat(out, "version", facts.version);
        reply::stat(out, "pointer_size", usize::BITS);
        reply::stat(
            out,
            "curr_connections",
            self.curr_connections.load(Ordering::Relaxed),
        );
        reply::stat(out, "total_connections", get(&self.total_connections));
        reply::stat(out, "rejected_connections", get(&self.rejected_connections));
        reply::stat(out, "max_connections", facts.max_connections);
        reply::stat(out, "cmd_get", get(&self.cmd_get));
        reply::stat(out, "cmd_set", get(&self.cmd_set));
        reply::stat(out, "cmd_flush", get(&self.cmd_flush));
        reply::stat(out, "cmd_touch", get(&self.cmd_touch));
        reply::stat(out, "get_hits", get(&self.get_hits));
        reply::stat(out, "get_misses", get(&self.get_misses));
        reply::stat(out, "get_expired", get(&self.get_expired));
        reply::stat(out, "delete_misses", get(&self.delete_misses));
        reply::stat(out, "delete_hits", get(&self.delete_hits));
        reply::stat(out, "incr_misses", get(&self.incr_misses));
        reply::stat(out, "incr_hits", get(&self.incr_hits));
        reply::stat(out, "decr_misses", get(&self.decr_misses));
        reply::stat(out, "decr_hits", get(&self.decr_hits));
        reply::stat(out, "cas_misses", get(&self.cas_misses));
        reply::stat(out, "cas_hits", get(&self.cas_hits));
        reply::stat(out, "cas_badval", get(&self.cas_badval));
        reply::stat(out, "touch_hits", get(&self.touch_hits));
        reply::stat(out, "touch_misses", get(&self.touch_misses));
        reply::stat(out, "bytes_read", get(&self.bytes_read));
        reply::stat(out, "bytes_written", get(&self.bytes_written));
        reply::stat(out, "threads", facts.threads);
        reply::stat(
            out,
            "slow_consumers_closed",
            get(&self.slow_consumers_closed),
        );
        reply::stat(
            out,
            "read_errors_as_misses",
            get(&self.read_errors_as_misses),
        );
        extra(out);
        out.extend_from_slice(reply::END);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_zeroes_counters_but_not_curr_connections() {
        let stats = Stats::default();
        stats.curr_connections.store(3, Ordering::Relaxed);
        bump(&stats.total_connections);
        bump(&stats.cmd_get);
        bump(&stats.get_hits);
        stats.bytes_read.add(100);
        stats.prefixes.set_enabled(true);
        stats.prefixes.record_set(b"a:1");
        stats.reset();
        assert_eq!(stats.curr_connections.load(Ordering::Relaxed), 3);
        assert_eq!(stats.total_connections.get(), 0);
        assert_eq!(stats.cmd_get.get(), 0);
        assert_eq!(stats.get_hits.get(), 0);
        assert_eq!(stats.bytes_read.get(), 0);
        let mut out = BytesMut::new();
        stats.prefixes.dump(&mut out);
        assert_eq!(&out[..], b"END\r\n");
        // Detail stays on after a reset, as in memcached.
        assert!(stats.prefixes.enabled());
    }
}
