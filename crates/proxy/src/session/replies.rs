//! The session's side of its request queue (`conn::Queue`): room to
//! dispatch more, queueing in client order, and completion by (seq, part).

use tokio::time::Instant;

use super::pending::{Op, Pending, Results};
use super::Session;
use crate::conn::pool;
use crate::near_cache::coalesce;
use crate::redis::{BackendReply, ReplyTo};

impl Session {
    /// Room for another backend request: few enough in flight, by count
    /// and by expected reply bytes (a slow reader's large replies must not
    /// fill the shared backend connections; it waits for its own instead).
    pub(super) fn room_to_dispatch(&self) -> bool {
        !self.near_through && self.pending.room()
    }

    pub(super) fn push_ready(&mut self, op: Op) {
        if matches!(op, Op::Close) {
            self.conn.closing = true;
        }
        self.pending.push_ready(Pending {
            op,
            command: self.current_command,
            started: self.current_start,
            deadline: self.current_start,
            waiting: 0,
            bytes: 0,
            results: Results::None,
            near_written: self.near_written.take(),
        });
    }

    pub(super) fn push_waiting(&mut self, op: Op, parts: u32, deadline: Instant) {
        if parts == 0 {
            self.push_ready(op);
            return;
        }
        self.pending.push_waiting(Pending {
            op,
            command: self.current_command,
            started: self.current_start,
            deadline,
            waiting: parts,
            bytes: 0,
            results: Results::with_parts(parts),
            near_written: self.near_written.take(),
        });
    }

    pub(super) fn next_seq(&self) -> u64 {
        self.pending.next_seq()
    }

    pub(super) fn reply_to(&mut self, seq: u64, part: u32) -> ReplyTo {
        let channel = self.replies.get_or_insert_with(pool::take_mailbox);
        ReplyTo {
            tx: channel.sender(),
            seq,
            part,
        }
    }

    pub(super) fn complete(&mut self, reply: BackendReply) {
        let Some(index) = self.pending.index_of(reply.seq) else {
            return; // for a request that already timed out
        };
        if reply.part == coalesce::REDISPATCH {
            return self.near_redispatch(index);
        }
        let size = reply.result.as_ref().map_or(0, |r| r.size());
        self.pending.note_reply(size);
        let Some(pending) = self.pending.get_mut(index) else {
            return;
        };
        if let (Op::Retrieval(r), true, 0) = (&mut pending.op, pending.waiting > 0, reply.part) {
            // Other reads of the key may be waiting for this one.
            super::cmd::land(r, &reply.result, &self.near_limits);
        }
        if pending.waiting > 0 && pending.results.set(reply.part, reply.result) {
            pending.bytes += size;
            pending.waiting -= 1;
            let settled = pending.waiting == 0;
            self.pending.hold(size);
            if settled && !self.start_backfill(index) {
                self.pending.settled();
            }
        }
    }
}
