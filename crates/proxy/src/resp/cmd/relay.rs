//! Single-key commands on hashes, lists, sets, sorted sets and expiry:
//! sent to the shard of the key in `args[1]` as they came, the reply
//! relayed (RESP3-shaped when the client speaks RESP3).

use bytes::Bytes;
use memshift_protocol::resp::reply::Shape;

use super::super::pending::Render;
use super::super::RespSession;

impl RespSession {
    pub(super) fn relay(&mut self, upper: &[u8], shape: Shape, raw: Option<Bytes>, key: usize) {
        let Some(k) = self.args.get(key).cloned() else {
            return self.arity_error();
        };
        let shape = self.resp3_shape(upper, shape);
        let cmd = match raw {
            Some(raw) => raw,
            None => self.encode_args(),
        };
        self.send_for_key(&k, Some(cmd), Render::Relay(shape));
    }

    /// Where options change the RESP3 reply (as Redis 7 sends it).
    fn resp3_shape(&self, upper: &[u8], shape: Shape) -> Shape {
        let has = |opt: &[u8]| {
            self.args
                .iter()
                .skip(2)
                .any(|a| a.eq_ignore_ascii_case(opt))
        };
        match upper {
            // ZRANGE & co. only pair scores with WITHSCORES.
            _ if shape == Shape::ScorePairs && !has(b"WITHSCORES") => Shape::Plain,
            b"ZPOPMIN" | b"ZPOPMAX" if self.args.len() == 2 => Shape::FlatScores,
            b"ZPOPMIN" | b"ZPOPMAX" => Shape::ScorePairs,
            b"ZRANDMEMBER" if has(b"WITHSCORES") => Shape::ScorePairs,
            b"HRANDFIELD" if has(b"WITHVALUES") => Shape::Pairs,
            b"ZADD" if has(b"INCR") => Shape::Double,
            _ => shape,
        }
    }
}
