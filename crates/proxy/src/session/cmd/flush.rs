//! flush_all: every Redis shard, and the legacy pool when memcached is the
//! primary or the shadow of anything.

use memshift_protocol::memcache::{client, reply};
use memshift_protocol::resp::Frame;

use super::super::pending::{Op, Results};
use super::super::Session;
use super::Tag;
use crate::flush::FlushAt;
use crate::redis::translate::{self, WriteOutcome};
use crate::redis::Reply;
use crate::router::{ReplyShape, Routes, Target};
use crate::stats::bump;

impl Session {
    /// With a delay, memcached's own servers take the delay; Redis gets the
    /// proxy's one deadline (`crate::flush`), replaced by every flush_all.
    pub(super) fn dispatch_flush(&mut self, routes: &Routes, tag: Tag, delay: i64, noreply: bool) {
        if !self.proxy.settings.load().allow_flush_all {
            self.push_ready(Op::Ready(b"CLIENT_ERROR flush_all not allowed\r\n"));
            return;
        }
        bump(&self.proxy.stats.cmd_flush);
        let mut parts = 0;
        for server in 0..routes.legacy().map_or(0, |l| l.server_count()) {
            client::flush_all(&mut self.cmd_buf, (delay > 0).then_some(delay), false);
            let target = Target::Memcached { server };
            self.send(routes, target, ReplyShape::Line, tag.seq, parts);
            parts += 1;
        }
        let now = crate::flush::unix_now();
        let flush_now = match FlushAt::from_delay(delay, now, self.proxy.facts.started_unix) {
            FlushAt::Now => {
                self.proxy.flush.replace(None);
                true
            }
            FlushAt::Cancel => {
                self.proxy.flush.replace(None);
                false
            }
            FlushAt::At(at) => {
                self.proxy.flush.replace(Some(at));
                at <= now
            }
        };
        if flush_now {
            for shard in routes.redis().flush_targets() {
                translate::flush(&mut self.cmd_buf);
                self.send(
                    routes,
                    Target::Redis { shard },
                    ReplyShape::Line,
                    tag.seq,
                    parts,
                );
                parts += 1;
            }
        }
        self.push_waiting(Op::FlushAll { noreply }, parts, tag.deadline);
    }

    pub(super) fn render_flush(&mut self, noreply: bool, results: &Results) {
        let mut failed = None;
        for part in 0..results.len() as u32 {
            let line: Option<&'static [u8]> = match results.get(part) {
                Some(Ok(Reply::Redis(Frame::Simple(_)))) => None,
                Some(Ok(Reply::Memcached(r))) if r.starts_with(b"OK") => None,
                Some(Err(e)) => Some(e.reply_line()),
                _ => Some(WriteOutcome::Failed.line()),
            };
            failed = failed.or(line);
        }
        // Both backends were flushed directly: nothing to shadow.
        if !noreply {
            self.wbuf.extend_from_slice(failed.unwrap_or(reply::OK));
        }
    }
}
