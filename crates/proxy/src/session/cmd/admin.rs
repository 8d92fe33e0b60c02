//! cache_memlimit, slabs, lru, lru_crawler, watch: memcached tuning commands
//! that client libraries, monitoring agents and runbooks send. memshift keeps
//! items in Redis, so it has no slabs, LRU or crawler to tune: valid
//! commands get memcached's reply as a no-op (logged at debug), and the
//! answers that depend on state memshift can keep (`lru_crawler
//! enable|disable`) follow it. The argument errors were answered by the
//! parser.

use std::sync::atomic::Ordering;

use memshift_protocol::memcache::{reply, AdminCommand, CrawlClasses, LruCrawler};

use super::super::pending::Op;
use super::super::Session;
use crate::stats::Stats;

/// Largest slab class of a memcached 1.6.18 with `-I 1m` and the default
/// growth factor: `slabs reassign` names classes 0..=39.
const LARGEST_SLAB_CLASS: i32 = 39;

impl Session {
    pub(super) fn dispatch_admin(&mut self, command: AdminCommand, noreply: bool) {
        // memcached's `resp_has_stack`: replies of earlier commands of this
        // connection not yet written.
        let stacked = !self.pending.is_empty() || !self.wbuf.is_empty();
        let line = admin_reply(command, &self.proxy.stats, stacked);
        // memcached reads noreply only where a command takes it, and then
        // silences every answer.
        self.push_ready(if noreply { Op::Silent } else { Op::Ready(line) });
    }
}

// `watch` and `lru_crawler metadump` hand the connection over to a stream
// in memcached, which refuses them behind other pipelined commands.
const WATCH_PIPELINED: &[u8] = b"ERROR cannot pipeline other commands before watch\r\n";
const METADUMP_PIPELINED: &[u8] = b"ERROR cannot pipeline other commands before metadump\r\n";

fn admin_reply(command: AdminCommand, stats: &Stats, stacked: bool) -> &'static [u8] {
    match command {
        AdminCommand::CacheMemlimit { megabytes } => {
            tracing::debug!(
                megabytes,
                "cache_memlimit: no item memory to limit, accepted as a no-op"
            );
            reply::OK
        }
        AdminCommand::SlabsAutomove => {
            tracing::debug!("slabs automove: no slabs, accepted as a no-op");
            reply::OK
        }
        // The answers of a memcached with no spare slab pages.
        AdminCommand::SlabsReassign { src, dst } if src == dst => {
            b"SAME src and dst class are identical\r\n"
        }
        AdminCommand::SlabsReassign { src, dst }
            if !(0..=LARGEST_SLAB_CLASS).contains(&src)
                || !(0..=LARGEST_SLAB_CLASS).contains(&dst) =>
        {
            b"BADCLASS invalid src or dst class id\r\n"
        }
        AdminCommand::SlabsReassign { .. } => b"NOSPARE source class has no spare pages\r\n",
        AdminCommand::Lru => {
            tracing::debug!("lru: no LRU to tune, accepted as a no-op");
            reply::OK
        }
        AdminCommand::LruCrawler(crawler) => crawler_reply(crawler, stats, stacked),
        AdminCommand::Watch { .. } if stacked => WATCH_PIPELINED,
        AdminCommand::Watch {
            streams_known: false,
        } => reply::ERROR,
        AdminCommand::Watch {
            streams_known: true,
        } => {
            // memcached would stream log lines from here on; memshift has no
            // such stream, and the connection keeps serving commands.
            tracing::debug!("watch: no log stream, accepted as a no-op");
            reply::OK
        }
    }
}

fn crawler_reply(crawler: LruCrawler, stats: &Stats, stacked: bool) -> &'static [u8] {
    const BADCLASS: &[u8] = b"BADCLASS invalid class id\r\n";
    const NOTSTARTED: &[u8] = b"NOTSTARTED no items to crawl\r\n";
    let disabled = stats.crawler_disabled.load(Ordering::Relaxed);
    match crawler {
        LruCrawler::Crawl(_) | LruCrawler::Metadump(_) if disabled => {
            b"CLIENT_ERROR lru crawler disabled\r\n"
        }
        LruCrawler::Metadump(_) if stacked => METADUMP_PIPELINED,
        LruCrawler::Crawl(CrawlClasses::All | CrawlClasses::Listed) => {
            tracing::debug!("lru_crawler crawl: Redis expires items itself, accepted as a no-op");
            reply::OK
        }
        // memcached 1.6.18's answer: hash mode is for metadump only.
        LruCrawler::Crawl(CrawlClasses::Hash) => b"ERROR an unknown error happened\r\n",
        // An empty dump: memshift does not walk the Redis key space.
        LruCrawler::Metadump(CrawlClasses::All | CrawlClasses::Listed | CrawlClasses::Hash) => {
            reply::END
        }
        LruCrawler::Crawl(CrawlClasses::Bad) | LruCrawler::Metadump(CrawlClasses::Bad) => BADCLASS,
        LruCrawler::Crawl(CrawlClasses::Empty) | LruCrawler::Metadump(CrawlClasses::Empty) => {
            NOTSTARTED
        }
        LruCrawler::Tune => reply::OK,
        // memcached refuses to start a crawler thread that already runs.
        LruCrawler::Enable => {
            if stats.crawler_disabled.swap(false, Ordering::Relaxed) {
                reply::OK
            } else {
                b"ERROR failed to start lru crawler thread\r\n"
            }
        }
        LruCrawler::Disable => {
            stats.crawler_disabled.store(true, Ordering::Relaxed);
            reply::OK
        }
    }
}
