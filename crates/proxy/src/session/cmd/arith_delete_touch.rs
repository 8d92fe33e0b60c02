//! incr/decr, delete, touch: one key, no value sent (their replies:
//! `write`).

use bytes::Bytes;
use memshift_protocol::memcache::{client, ArithCommand};

use super::super::pending::{Op, WriteKind};
use super::super::Session;
use super::write::single_key_write;
use super::Tag;
use crate::redis::translate::{self, Expiry};
use crate::router::{ReplyShape, Routes, Target};
use crate::stats::bump;
use memshift_protocol::memcache::unix_now;

impl Session {
    pub(super) fn dispatch_arith(
        &mut self,
        routes: &Routes,
        tag: Tag,
        command: ArithCommand,
        key: Bytes,
        delta: u64,
        noreply: bool,
    ) {
        let route = routes.route(&key);
        match route.primary {
            Target::Memcached { .. } => {
                let _ = client::arith(&mut self.cmd_buf, command, &key, delta, false);
            }
            Target::Redis { .. } => {
                let new_cas = self.cas.next_cas();
                translate::arith(&mut self.cmd_buf, &key, command, delta, new_cas);
            }
        }
        self.send(routes, route.primary, ReplyShape::Line, tag.seq, 0);
        let kind = WriteKind::Arith(command);
        let write = single_key_write(kind, route, noreply, key, 0, 0, Bytes::new());
        self.push_waiting(Op::Write(write), 1, tag.deadline);
    }

    pub(super) fn dispatch_delete(&mut self, routes: &Routes, tag: Tag, key: Bytes, noreply: bool) {
        self.proxy.stats.prefixes.record_delete(&key);
        let route = routes.route(&key);
        self.encode_delete(route.primary, &key);
        self.send(routes, route.primary, ReplyShape::Line, tag.seq, 0);
        let write = single_key_write(WriteKind::Delete, route, noreply, key, 0, 0, Bytes::new());
        self.push_waiting(Op::Write(write), 1, tag.deadline);
    }

    pub(super) fn dispatch_touch(
        &mut self,
        routes: &Routes,
        tag: Tag,
        key: Bytes,
        exptime: i64,
        noreply: bool,
    ) {
        bump(&self.proxy.stats.cmd_touch);
        let route = routes.route(&key);
        match route.primary {
            Target::Memcached { .. } => {
                let _ = client::touch(&mut self.cmd_buf, &key, exptime, false);
            }
            Target::Redis { .. } => {
                let expiry = Expiry::from_exptime(exptime, unix_now());
                translate::touch(&mut self.cmd_buf, &key, expiry);
            }
        }
        self.send(routes, route.primary, ReplyShape::Line, tag.seq, 0);
        let kind = WriteKind::Touch;
        let write = single_key_write(kind, route, noreply, key, 0, exptime, Bytes::new());
        self.push_waiting(Op::Write(write), 1, tag.deadline);
    }

    /// Encode a delete of `key` for `target` into `cmd_buf`; false if the
    /// key cannot be sent to memcached.
    pub(super) fn encode_delete(&mut self, target: Target, key: &[u8]) -> bool {
        match target {
            Target::Memcached { .. } => client::delete(&mut self.cmd_buf, key, false).is_ok(),
            Target::Redis { .. } => {
                translate::delete(&mut self.cmd_buf, key);
                true
            }
        }
    }
}
