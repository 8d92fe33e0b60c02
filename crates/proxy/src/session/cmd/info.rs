//! version, verbosity, stats, quit: answered by the proxy itself.

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::{reply, Request};

use super::super::pending::Op;
use super::super::Session;
use crate::proxy::Proxy;

/// Requests answered without a backend (they need no command buffer: an
/// idle connection that only sent `version` holds none).
pub(super) fn answered_here(request: &Request<Bytes>) -> bool {
    matches!(
        request,
        Request::Version | Request::Verbosity { .. } | Request::Stats { .. } | Request::Quit
    )
}

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

    pub(super) fn dispatch_stats(&mut self, group: Option<&[u8]>) {
        let op = match group {
            None => {
                let mut out = BytesMut::with_capacity(2048);
                self.proxy.stats.render(&self.proxy.facts, &mut out);
                Op::ReadyBytes(out.freeze())
            }
            Some(group) => stats_group(group, &self.proxy),
        };
        self.push_ready(op);
    }
}

/// `stats <group>`: what makes sense for a proxy, in memcached's format.
fn stats_group(group: &[u8], proxy: &Proxy) -> Op {
    match group {
        // A proxy holds no items or slabs: report the empty groups the way an
        // empty memcached does, so stats scrapers keep working.
        b"items" | b"sizes" | b"conns" => Op::Ready(reply::END),
        b"slabs" => Op::Ready(b"STAT active_slabs 0\r\nSTAT total_malloced 0\r\nEND\r\n"),
        b"settings" => {
            let mut out = BytesMut::new();
            reply::stat(&mut out, "maxconns", proxy.facts.max_connections);
            let settings = proxy.settings.load();
            reply::stat(&mut out, "item_size_max", settings.limits.max_item_size);
            reply::stat(&mut out, "num_threads", proxy.facts.threads);
            reply::stat(&mut out, "evictions", "on");
            reply::stat(&mut out, "cas_enabled", "yes");
            out.extend_from_slice(reply::END);
            Op::ReadyBytes(out.freeze())
        }
        b"reset" => Op::Ready(reply::RESET),
        _ => Op::Ready(reply::ERROR),
    }
}
