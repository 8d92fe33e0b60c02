//! Single-key commands on hashes, lists, sets, sorted sets and expiry:
//! sent to the shard of the key in `args[1]` as they came, the reply
//! relayed (RESP3-shaped when the client speaks RESP3).

use bytes::Bytes;
use memshift_protocol::resp::reply::Shape;

use super::super::pending::Render;
use super::super::RespSession;

impl RespSession {
    pub(super) fn relay(&mut self, _upper: &[u8], shape: Shape, raw: Option<Bytes>, key: usize) {
        // Without its key a command is Redis' to refuse (arity): any shard.
        let Some(k) = self.args.get(key).cloned() else {
            return self.arity_error();
        };
        let shape = match shape {
            // ZRANGE & co. only pair scores with WITHSCORES.
            Shape::ScorePairs
                if !self
                    .args
                    .iter()
                    .skip(2)
                    .any(|a| a.eq_ignore_ascii_case(b"WITHSCORES")) =>
            {
                Shape::Plain
            }
            s => s,
        };
        let cmd = match raw {
            Some(raw) => raw,
            None => self.encode_args(),
        };
        self.send_for_key(&k, Some(cmd), Render::Relay(shape));
    }
}
