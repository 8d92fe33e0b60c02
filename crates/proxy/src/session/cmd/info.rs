//! version, verbosity, stats, quit: answered by the proxy itself.

use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::{reply, Request, StatsDetail, StatsGroup};

use super::super::pending::Op;
use super::super::Session;
use crate::proxy::Proxy;

/// Requests answered without a backend (they need no command buffer: an
/// idle connection that only sent `version` holds none).
pub(super) fn answered_here(request: &Request<Bytes>) -> bool {
    matches!(
        request,
        Request::Version
            | Request::Verbosity { .. }
            | Request::Stats(_)
            | Request::Admin { .. }
            | Request::Quit
    )
}

const SIZES_DISABLED: &[u8] = b"STAT sizes_status disabled\r\n";

impl Session {
    pub(super) fn dispatch_version(&mut self) {
        let mut out = BytesMut::with_capacity(64);
        reply::version(&mut out, crate::stats::VERSION);
        self.push_ready(Op::ReadyBytes(out.freeze()));
    }

    pub(super) fn dispatch_verbosity(&mut self, noreply: bool) {
        self.push_ready(if noreply {
            Op::Silent
        } else {
            Op::Ready(reply::OK)
        });
    }

    pub(super) fn dispatch_stats(&mut self, group: StatsGroup) {
        let op = stats_group(group, &self.proxy);
        self.push_ready(op);
    }
}

/// `stats <group>`: what makes sense for a proxy, in memcached's format.
fn stats_group(group: StatsGroup, proxy: &Proxy) -> Op {
    let stats = &proxy.stats;
    match group {
        StatsGroup::General => {
            let mut out = BytesMut::with_capacity(2048);
            stats.render(&proxy.facts, &mut out, |out| {
                // Only with the near cache on: `stats` of a proxy without it
                // keeps memcached's exact set of lines.
                if let Some(near) = crate::near_cache::get() {
                    near.metrics.near_cache.render_stats(out);
                }
                crate::redis::sentinel::render_stats(&proxy.router.load().redis().shards, out);
            });
            Op::ReadyBytes(out.freeze())
        }
        StatsGroup::Reset => {
            stats.reset();
            Op::Ready(reply::RESET)
        }
        StatsGroup::Detail(StatsDetail::On) => {
            stats.prefixes.set_enabled(true);
            Op::Ready(reply::OK)
        }
        StatsGroup::Detail(StatsDetail::Off) => {
            stats.prefixes.set_enabled(false);
            Op::Ready(reply::OK)
        }
        StatsGroup::Detail(StatsDetail::Dump) => {
            let mut out = BytesMut::new();
            stats.prefixes.dump(&mut out);
            Op::ReadyBytes(out.freeze())
        }
        // A proxy holds no items or slabs: report the empty groups the way an
        // empty memcached does, so stats scrapers keep working. `cachedump`
        // does not walk the Redis key space.
        StatsGroup::Items
        | StatsGroup::Conns
        | StatsGroup::Extstore
        | StatsGroup::CacheDump { .. } => Op::Ready(reply::END),
        StatsGroup::Slabs => Op::Ready(b"STAT active_slabs 0\r\nSTAT total_malloced 0\r\nEND\r\n"),
        // With tracking on, an empty size histogram.
        StatsGroup::Sizes if stats.sizes_enabled.load(Ordering::Relaxed) => Op::Ready(reply::END),
        StatsGroup::Sizes => Op::Ready(b"STAT sizes_status disabled\r\nEND\r\n"),
        // memcached ends these two with no END line.
        StatsGroup::SizesEnable => {
            stats.sizes_enabled.store(true, Ordering::Relaxed);
            Op::Ready(b"STAT sizes_status enabled\r\n")
        }
        StatsGroup::SizesDisable => {
            stats.sizes_enabled.store(false, Ordering::Relaxed);
            Op::Ready(SIZES_DISABLED)
        }
        StatsGroup::Settings => {
            let mut out = BytesMut::new();
            reply::stat(&mut out, "maxconns", proxy.facts.max_connections);
            let settings = proxy.settings.load();
            reply::stat(&mut out, "item_size_max", settings.limits.max_item_size);
            reply::stat(&mut out, "num_threads", proxy.facts.threads);
            reply::stat(&mut out, "stat_key_prefix", ":");
            let detail = if stats.prefixes.enabled() {
                "yes"
            } else {
                "no"
            };
            reply::stat(&mut out, "detail_enabled", detail);
            reply::stat(&mut out, "evictions", "on");
            reply::stat(&mut out, "cas_enabled", "yes");
            let crawler = !stats.crawler_disabled.load(Ordering::Relaxed);
            reply::stat(&mut out, "lru_crawler", if crawler { "yes" } else { "no" });
            out.extend_from_slice(reply::END);
            Op::ReadyBytes(out.freeze())
        }
    }
}
