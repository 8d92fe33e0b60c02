//! The hot binary responses, written straight from the decoded answer
//! (`cmd::Sink`): a Get/GetK/GAT/GATK (+Q) of a text-safe key (`gets` /
//! `gats` on the classic path, or a near-cache hit) hit or miss, and the
//! outcome of a Set/Add/Replace/Append/Prepend (+Q, with or without CAS)
//! and a Delete (+Q) on Redis. The command's render does its counters,
//! near cache, backfill and shadow writes as for a text client; only the
//! writing differs. Whatever else such a request may answer (a backend
//! error, a reply forwarded from memcached) is rendered as text and
//! re-encoded by `reply`, as every other request is.
//!
//! Why: rendering `VALUE ...`/`HD c<cas>` and parsing it back cost binary
//! clients ~10 % of text's throughput at pipeline 16 (perf: the extra
//! copies, the text renderer, `reply::parse_u64`).

use bytes::BytesMut;
use memshift_protocol::memcache::binary::{response, Status};
use memshift_protocol::resp::Frame as RespFrame;

use super::super::cmd::{forget_written, render_redis, write_outcome, Outcome, Sink};
use super::super::pending::{MetaOp, Op, Pending};
use super::super::Session;
use super::{reply, Answer, Frame};
use crate::conn::pool::{self, Buffer};

/// Whether requests answered `answer` have a direct response.
pub(super) fn answers(answer: Answer) -> bool {
    matches!(
        answer,
        Answer::Value { .. } | Answer::Store { .. } | Answer::Delete
    )
}

impl Session {
    /// Render `pending` (answered `frame.answer`, see `answers`) directly;
    /// gives it back when its op has no direct response.
    pub(super) fn render_direct(&mut self, frame: &Frame, pending: Pending) -> Option<Pending> {
        let direct = matches!(
            (&pending.op, frame.answer),
            (Op::Retrieval(_) | Op::NearHit { .. }, Answer::Value { .. })
                | (Op::Meta(_), Answer::Store { .. } | Answer::Delete)
        );
        if !direct {
            return Some(pending);
        }
        forget_written(&pending);
        let mut sink = Direct::new(frame, std::mem::take(&mut self.binary.text));
        match pending.op {
            Op::Retrieval(r) => self.render_get(r, &pending.results, &mut sink),
            Op::NearHit {
                keys,
                hit,
                with_cas,
            } => self.render_near_hit(&keys, &hit, with_cas, &mut sink),
            Op::Meta(op) => self.render_meta(*op, &pending.results, &mut sink),
            _ => {} // not `direct`
        }
        self.binary.text = sink.into_scratch();
        None
    }
}

/// A binary response written from the decoded answer.
pub(super) struct Direct<'f> {
    frame: &'f Frame,
    /// The text of an answer with no direct form (re-encoded by `reply`).
    scratch: BytesMut,
    /// A get's item was written.
    hit: bool,
}

impl<'f> Direct<'f> {
    pub(super) fn new(frame: &'f Frame, scratch: BytesMut) -> Direct<'f> {
        Direct {
            frame,
            scratch,
            hit: false,
        }
    }

    pub(super) fn into_scratch(self) -> BytesMut {
        self.scratch
    }

    fn with_key(&self) -> bool {
        matches!(self.frame.answer, Answer::Value { with_key: true })
    }
}

impl Sink for Direct<'_> {
    fn text<R>(&mut self, out: &mut BytesMut, render: impl FnOnce(&mut BytesMut) -> R) -> R {
        if self.scratch.capacity() == 0 {
            self.scratch = pool::take_buffer(Buffer::Write, crate::conn::FIRST_WRITE);
        }
        let result = render(&mut self.scratch);
        reply::encode(out, self.frame, &self.scratch);
        self.scratch.clear();
        result
    }

    fn item(&mut self, out: &mut BytesMut, _: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
        let frame = self.frame;
        let key = if self.with_key() { &frame.key[..] } else { b"" };
        // Binary gets are `gets`/`gats`: the CAS is always there.
        let cas = cas.unwrap_or(0);
        response::put_value(out, frame.opcode, frame.opaque, cas, flags, key, data);
        self.hit = true;
    }

    fn end_items(&mut self, out: &mut BytesMut) {
        if !self.hit {
            reply::put_miss(out, self.frame, self.with_key());
        }
    }

    fn meta_reply(&mut self, out: &mut BytesMut, op: &MetaOp, frame: &RespFrame) -> Outcome {
        match write_outcome(op, frame) {
            Some(outcome) => {
                put_written(out, self.frame, outcome, op.new_cas);
                outcome
            }
            None => self.text(out, |text| render_redis(op, frame, text)),
        }
    }
}

/// A store's or delete's outcome; `cas` the new CAS of a stored item
/// (binary stores always ask `c`).
fn put_written(out: &mut BytesMut, frame: &Frame, outcome: Outcome, cas: u64) {
    let (opcode, opaque) = (frame.opcode, frame.opaque);
    let status = match (frame.answer, outcome) {
        (_, Outcome::Done) if frame.quiet => return,
        (Answer::Store { .. }, Outcome::Done) => return response::put_ok(out, opcode, opaque, cas),
        (_, Outcome::Done) => return response::put_ok(out, opcode, opaque, 0),
        (Answer::Store { not_stored }, Outcome::NotStored) => not_stored,
        (_, Outcome::NotStored) => Status::NotStored,
        (_, Outcome::Exists) => Status::KeyExists,
        (_, Outcome::NotFound) => Status::KeyNotFound,
        _ => Status::TemporaryFailure,
    };
    response::put_error(out, opcode, opaque, status);
}
