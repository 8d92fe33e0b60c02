//! set, add, replace, append, prepend, cas (their replies: `write`), and
//! the quiet delete that follows a refused oversize `set`.

use bytes::Bytes;
use memshift_protocol::memcache::{client, StorageCommand};

use super::super::pending::{Op, WriteKind};
use super::super::Session;
use super::shadow::Change;
use super::write::single_key_write;
use super::Tag;
use crate::near_cache::store::Hit;
use crate::redis::translate::{self, Expiry};
use crate::router::{ReplyShape, Routes, Target};
use crate::stats::bump;
use memshift_protocol::memcache::unix_now;

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch_storage(
        &mut self,
        routes: &Routes,
        tag: Tag,
        command: StorageCommand,
        key: Bytes,
        flags: u32,
        exptime: i64,
        cas: u64,
        data: Bytes,
        noreply: bool,
    ) {
        bump(&self.proxy.stats.cmd_set);
        self.proxy.stats.prefixes.record_set(&key);
        let route = routes.route(&key);
        // Taken for a write-through attempt: the same one if it falls back.
        let mut taken_cas = None;
        if let (StorageCommand::Set, Target::Redis { shard }) = (command, route.primary) {
            // Near cache on, alone in flight (see `Session::near_through`),
            // and the last input so far: a pipelining client's sets would
            // otherwise go one round trip at a time (each waits for the
            // write-through before the next is dispatched).
            let alone = crate::near_cache::get().is_some()
                && self.pending.is_empty()
                && self.rbuf.is_empty()
                && !self.near_unordered;
            if alone && routes.route_read(&key).primary == route.primary {
                let expiry = Expiry::from_exptime(exptime, unix_now());
                let new_cas = self.cas.next_cas();
                taken_cas = Some(new_cas);
                let item = Hit {
                    flags,
                    cas: new_cas,
                    data: data.clone(),
                };
                if let Some((tracking, through)) =
                    self.near_write_through(routes, shard, &key, item, expiry)
                {
                    let buf = &mut self.cmd_buf;
                    translate::store(buf, command, &key, flags, new_cas, &data, expiry);
                    self.send_through(&tracking, tag.seq);
                    let kind = WriteKind::Storage(command);
                    let mut write =
                        single_key_write(kind, route, noreply, key, flags, exptime, data);
                    write.near_through = Some(through);
                    self.near_through = true;
                    self.push_waiting(Op::Write(write), 1, tag.deadline);
                    return;
                }
            }
        }
        self.near_write(&key);
        match route.primary {
            Target::Memcached { .. } => {
                let encoded = if command == StorageCommand::Cas {
                    client::cas(&mut self.cmd_buf, &key, flags, exptime, &data, cas, false)
                } else {
                    client::storage(
                        &mut self.cmd_buf,
                        command,
                        &key,
                        flags,
                        exptime,
                        &data,
                        false,
                    )
                };
                if encoded.is_err() {
                    self.push_ready(Op::Ready(b"CLIENT_ERROR bad command line format\r\n"));
                    return;
                }
            }
            Target::Redis { .. } => {
                let expiry = Expiry::from_exptime(exptime, unix_now());
                let new_cas = taken_cas.unwrap_or_else(|| self.cas.next_cas());
                let buf = &mut self.cmd_buf;
                match command {
                    StorageCommand::Set | StorageCommand::Add | StorageCommand::Replace => {
                        translate::store(buf, command, &key, flags, new_cas, &data, expiry)
                    }
                    StorageCommand::Cas => {
                        translate::compare_and_swap(buf, &key, cas, flags, new_cas, &data, expiry)
                    }
                    StorageCommand::Append | StorageCommand::Prepend => translate::concat(
                        buf,
                        &key,
                        command == StorageCommand::Append,
                        new_cas,
                        &data,
                        // memcached's limit for the combined item (the
                        // script takes 4 more off for non-zero flags).
                        self.proxy.settings.load().limits.max_data_len(key.len(), 0),
                        None,
                    ),
                }
            }
        }
        self.send(routes, route.primary, ReplyShape::Line, tag.seq, 0);
        let kind = WriteKind::Storage(command);
        let write = single_key_write(kind, route, noreply, key, flags, exptime, data);
        self.push_waiting(Op::Write(write), 1, tag.deadline);
    }

    /// Delete `key` on its primary (and shadow) without a reply to the
    /// client: the side effect of a refused oversize `set` or `ms`.
    pub(in crate::session) fn delete_quietly(&mut self, key: Bytes) {
        let routes = self.proxy.router.load();
        let route = routes.route(&key);
        self.near_unordered = true;
        // Before anything else is dispatched: a read right after the refused
        // set must not be answered with the item it deleted.
        self.near_write(&key);
        if self.encode_delete(route.primary, &key) {
            // A sequence number no request has: the reply is dropped.
            self.send(&routes, route.primary, ReplyShape::Line, u64::MAX, 0);
        }
        if let Some(side) = route.shadow {
            self.shadow(side, key, Change::Unknown);
        }
    }
}
