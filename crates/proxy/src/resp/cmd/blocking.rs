//! Blocking pops: `BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX
//! BZMPOP` with every key on one shard (one slot on a cluster), each on a
//! connection the session holds for the call (`redis::dedicated`, bounded
//! by `redis.max_dedicated_connections`): a shared pipelined connection
//! would stall every session behind it.
//!
//! The timeout is Redis' own (0 waits forever): `redis.timeout_ms` does
//! not cut the call short; it is the margin the shard gets beyond the
//! call's timeout before the call fails. A client that disconnects
//! mid-call closes the connection, which unblocks the shard.

use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;
use memshift_protocol::resp::reply::Shape;
use memshift_protocol::resp::request::string2ll;

use super::super::pending::Render;
use super::super::RespSession;
use crate::redis::dedicated::Job;

/// The connection broke (or the shard stopped answering) mid-call: a pop
/// may have taken an element whose reply never came.
const POP_LOST: &[u8] = b"ERR memshift: the shard's connection was lost during the blocking call; an element may have been popped";

impl RespSession {
    pub(super) fn blocking(&mut self, upper: &[u8], raw: Option<Bytes>) {
        let n = self.args.len();
        let (keys, timeout_at) = match upper {
            b"BLPOP" | b"BRPOP" | b"BZPOPMIN" | b"BZPOPMAX" if n >= 3 => (1..n - 1, n - 1),
            b"BLMOVE" if n == 6 => (1..3, 5),
            b"BRPOPLPUSH" if n == 4 => (1..3, 3),
            b"BLMPOP" | b"BZMPOP" if n >= 5 => match string2ll(&self.args[2]) {
                Some(k) if k > 0 && (k as usize) <= n - 4 => (3..3 + k as usize, 1),
                Some(k) if k > 0 => return self.push_error(b"ERR syntax error"),
                _ => return self.push_error(b"ERR numkeys should be greater than 0"),
            },
            _ => return self.arity_error(),
        };
        let shape = match upper {
            b"BZPOPMIN" | b"BZPOPMAX" => Shape::KeyMemberScore,
            _ => Shape::Plain,
        };
        self.block_on_keys(keys, timeout_at, raw, shape);
    }

    fn block_on_keys(
        &mut self,
        keys: Range<usize>,
        timeout_at: usize,
        raw: Option<Bytes>,
        shape: Shape,
    ) {
        let Some(target) = self.keys_target(keys) else {
            return;
        };
        let Some(target) = target else {
            let mut text = b"ERR memshift: ".to_vec();
            super::push_printable(&mut text, &self.args[0], 32);
            text[14..].make_ascii_uppercase();
            text.extend_from_slice(b"'s keys live on different shards and a blocking call waits on one; put them under one {hash tag}");
            return self.push_error(&text);
        };
        let cmd = raw.unwrap_or_else(|| self.encode_args());
        // Inside MULTI: queued; the shard runs it without blocking (nil
        // when empty), as Redis does.
        let seq = self.push_waiting(Render::Relay(shape), 1);
        let Some(cmd) = self.captured(target.shard, || target.slot, cmd) else {
            return;
        };
        let routes = self.proxy.router.load();
        let redis = routes.redis();
        let opened = redis
            .shard_at(target.shard)
            .map(|shard| (redis.dedicated.open(&shard), shard));
        let (conn, shard) = match opened {
            Some((Ok(conn), shard)) => (conn, shard),
            Some((Err(_), _)) => return self.replace_last(super::transaction::LIMIT),
            None => return self.replace_last(b"ERR memshift: backend unavailable"),
        };
        let job = Job {
            bytes: cmd,
            replies: 1,
            timeout: call_timeout(&self.args[timeout_at]).map(|t| t + redis.request_timeout),
            if_lost: POP_LOST,
            if_gone: None,
            leaves_clean: true,
            reply: self.reply_to(seq, 0),
        };
        self.hold_send(Some(conn), job, shard.settings().connect_timeout, true);
    }

    /// The request just queued is answered with `error` instead.
    fn replace_last(&mut self, error: &[u8]) {
        self.pending.pop_back();
        self.push_error(error);
    }
}

/// How long a blocking call may wait (`None`: forever). A timeout Redis
/// refuses (negative, not a number) is answered at once by the shard: the
/// call gets no extra time.
fn call_timeout(arg: &[u8]) -> Option<Duration> {
    let secs = std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<f64>().ok());
    match secs {
        Some(0.0) => None,
        // Beyond what a Duration holds: as good as forever.
        Some(s) if s.is_finite() && s > 0.0 => Duration::try_from_secs_f64(s).ok(),
        _ => Some(Duration::ZERO),
    }
}

#[cfg(test)]
mod tests {
    use super::call_timeout;
    use std::time::Duration;

    #[test]
    fn timeouts_follow_redis() {
        assert_eq!(call_timeout(b"0"), None);
        assert_eq!(call_timeout(b"0.0"), None);
        assert_eq!(call_timeout(b"1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(call_timeout(b"2"), Some(Duration::from_secs(2)));
        // Refused by Redis at once: no time beyond the reply's.
        assert_eq!(call_timeout(b"-1"), Some(Duration::ZERO));
        assert_eq!(call_timeout(b"abc"), Some(Duration::ZERO));
        assert_eq!(call_timeout(b"inf"), Some(Duration::ZERO));
        // Beyond a Duration: forever.
        assert_eq!(call_timeout(b"1e300"), None);
    }
}
