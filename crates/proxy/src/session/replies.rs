//! The session's queue of requests waiting for backend replies: room to
//! dispatch more, queueing in client order, completion by (seq, part), and
//! timeouts.

use tokio::time::Instant;

use super::pending::{Op, Pending, Results};
use super::{pool, Session, MAX_IN_FLIGHT_BYTES, MAX_WAITING};
use crate::near_cache::coalesce;
use crate::redis::{BackendError, BackendReply, ReplyTo};

impl Session {
    /// Room for another backend request: few enough in flight, by count
    /// and by expected reply bytes (a slow reader's large replies must not
    /// fill the shared backend connections; it waits for its own instead).
    pub(super) fn room_to_dispatch(&self) -> bool {
        !self.near_through
            && self.waiting < MAX_WAITING
            && self.waiting.saturating_mul(self.reply_estimate) < MAX_IN_FLIGHT_BYTES
    }

    pub(super) fn push_ready(&mut self, op: Op) {
        if matches!(op, Op::Close) {
            self.closing = true;
        }
        self.pending.push_back(Pending {
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
        self.waiting += 1;
        self.pending.push_back(Pending {
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
        self.base_seq + self.pending.len() as u64
    }

    pub(super) fn reply_to(&mut self, seq: u64, part: u32) -> ReplyTo {
        let channel = self.replies.get_or_insert_with(pool::take_channel);
        ReplyTo {
            tx: channel.tx.clone(),
            seq,
            part,
        }
    }

    pub(super) fn complete(&mut self, reply: BackendReply) {
        let Some(index) = reply.seq.checked_sub(self.base_seq) else {
            return; // for a request that already timed out
        };
        let index = index as usize;
        if reply.part == coalesce::REDISPATCH {
            return self.near_redispatch(index);
        }
        let Some(pending) = self.pending.get_mut(index) else {
            return;
        };
        let size = reply.result.as_ref().map_or(0, |r| r.size());
        self.reply_estimate = size.max(self.reply_estimate / 2);
        if let (Op::Retrieval(r), true, 0) = (&mut pending.op, pending.waiting > 0, reply.part) {
            // Other reads of the key may be waiting for this one.
            super::cmd::land(r, &reply.result, &self.near_limits);
        }
        if pending.waiting > 0 && pending.results.set(reply.part, reply.result) {
            pending.bytes += size;
            self.pending_bytes += size;
            pending.waiting -= 1;
            if pending.waiting == 0 && !self.start_backfill(index) {
                self.waiting -= 1;
            }
        }
    }

    /// Answer every overdue request's missing parts with a timeout.
    pub(super) fn expire_overdue(&mut self) {
        let now = Instant::now();
        for pending in self.pending.iter_mut() {
            if pending.waiting == 0 {
                continue;
            }
            if pending.deadline > now {
                break;
            }
            pending.results.fill_missing(BackendError::Timeout);
            pending.waiting = 0;
            self.waiting -= 1;
        }
    }
}
