//! Where the reply of a get or a meta command goes once its backend reply
//! is decoded: memcached's text (`Text`), or a binary connection's
//! response written straight from the decoded answer
//! (`session::binary::direct`), with no text rendered and parsed back.
//! Counters, near cache, backfill and shadow writes happen in the command's
//! render either way; only the writing differs.

use bytes::BytesMut;
use memshift_protocol::memcache::reply;
use memshift_protocol::resp::Frame;

use super::super::pending::MetaOp;
use super::meta::{render_redis, Outcome};

pub(in crate::session) trait Sink {
    /// A whole reply that is text here (errors, forwarded replies, the
    /// meta replies with no direct form): `render` writes it.
    fn text<R>(&mut self, out: &mut BytesMut, render: impl FnOnce(&mut BytesMut) -> R) -> R;

    /// One item of a get (`cas` for gets/gats).
    fn item(&mut self, out: &mut BytesMut, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>);

    /// After the last item of a get (the end of its reply).
    fn end_items(&mut self, out: &mut BytesMut);

    /// A meta command's Redis reply (whatever it says).
    fn meta_reply(&mut self, out: &mut BytesMut, op: &MetaOp, frame: &Frame) -> Outcome;
}

/// memcached's text protocol.
pub(in crate::session) struct Text;

impl Sink for Text {
    #[inline]
    fn text<R>(&mut self, out: &mut BytesMut, render: impl FnOnce(&mut BytesMut) -> R) -> R {
        render(out)
    }

    #[inline]
    fn item(&mut self, out: &mut BytesMut, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
        reply::value(out, key, flags, data, cas);
    }

    #[inline]
    fn end_items(&mut self, out: &mut BytesMut) {
        out.extend_from_slice(reply::END);
    }

    #[inline]
    fn meta_reply(&mut self, out: &mut BytesMut, op: &MetaOp, frame: &Frame) -> Outcome {
        render_redis(op, frame, out)
    }
}
