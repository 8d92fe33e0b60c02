//! CONFIG GET: a read-only subset of the shards' settings, so tools that
//! probe them (`redis-benchmark` asks for `save` and `appendonly`) get
//! their answer. The patterns go to every shard (every master of a
//! cluster) as sent, so glob matching, case and order are Redis' own;
//! the reply keeps the settings in [`READABLE`], `maxmemory` summed over
//! the shards and `databases` memshift's one. CONFIG RESETSTAT runs on
//! every shard and, when every one answered OK, resets memshift's own
//! counters (those `stats reset` resets, which both protocols show, and
//! the RESP command, error and latency stats). CONFIG SET and the other
//! subcommands are refused: one client would reconfigure every shard.

use bytes::BytesMut;
use memshift_protocol::resp::reply::{self as out, RespVersion};
use memshift_protocol::resp::Frame;

use super::super::pending::{backend_error, Gather, Part, Render};
use super::super::RespSession;
use crate::redis::BackendError;

/// The settings CONFIG GET answers.
const READABLE: &[&str] = &[
    "save",
    "appendonly",
    "appendfsync",
    "maxmemory",
    "maxmemory-policy",
    "databases",
];

impl RespSession {
    pub(super) fn config(&mut self) {
        let Some(sub) = self.args.get(1) else {
            return self.arity_error();
        };
        if sub.eq_ignore_ascii_case(b"RESETSTAT") {
            return self.reset_stats();
        }
        if !sub.eq_ignore_ascii_case(b"GET") {
            return self.refuse_subcommand(
                "only CONFIG GET and RESETSTAT are answered: memshift fronts several Redis servers and does not change their settings (run it on each Redis server)",
            );
        }
        if self.args.len() < 3 {
            return self.subcommand_arity_error();
        }
        let cmd = self.encode_args();
        self.broadcast_cmd(cmd, |_| Render::Gather(Box::new(ConfigGet)));
    }
}

impl RespSession {
    fn reset_stats(&mut self) {
        if self.args.len() != 2 {
            return self.subcommand_arity_error();
        }
        let cmd = self.encode_args();
        let proxy = self.proxy.clone();
        self.broadcast_cmd(cmd, |_| Render::Gather(Box::new(ResetStat(proxy))));
    }
}

/// `CONFIG RESETSTAT` on every shard: OK when each answered OK, and only
/// then are memshift's own counters reset (just before the reply, which
/// then counts in the new `cmdstat_config|resetstat`, as on Redis).
struct ResetStat(std::sync::Arc<crate::proxy::Proxy>);

impl std::fmt::Debug for ResetStat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResetStat")
    }
}

impl Gather for ResetStat {
    fn render(&self, parts: &[Part], buf: &mut BytesMut, v: RespVersion) {
        for p in parts {
            match p {
                Some(Ok(Frame::Simple(_))) => {}
                Some(Ok(other)) => return out::frame(buf, other, v, Default::default()),
                Some(Err(e)) => return backend_error(buf, *e),
                None => return backend_error(buf, BackendError::Timeout),
            }
        }
        self.0.stats.reset();
        out::simple(buf, b"OK");
    }
}

/// Every shard's `CONFIG GET` reply, narrowed and combined.
#[derive(Debug)]
struct ConfigGet;

impl Gather for ConfigGet {
    fn render(&self, parts: &[Part], buf: &mut BytesMut, v: RespVersion) {
        let mut replies = Vec::with_capacity(parts.len());
        for p in parts {
            match p {
                Some(Ok(Frame::Array(pairs))) => replies.push(pairs.as_slice()),
                Some(Ok(other)) => return out::frame(buf, other, v, Default::default()),
                Some(Err(e)) => return backend_error(buf, *e),
                None => return backend_error(buf, BackendError::Timeout),
            }
        }
        let Some(first) = replies.first() else {
            return backend_error(buf, BackendError::Unavailable);
        };
        let kept: Vec<(&[u8], String)> = pairs(first)
            .filter_map(|(name, value)| {
                let setting = READABLE
                    .iter()
                    .find(|r| name.eq_ignore_ascii_case(r.as_bytes()))?;
                let value = match *setting {
                    "maxmemory" => total_maxmemory(&replies).to_string(),
                    // One keyspace: SELECT answers database 0 only.
                    "databases" => "1".to_string(),
                    _ => String::from_utf8_lossy(value).into_owned(),
                };
                Some((name, value))
            })
            .collect();
        out::map(buf, v, kept.len());
        for (name, value) in kept {
            out::bulk(buf, name);
            out::bulk(buf, value.as_bytes());
        }
    }
}

/// A `CONFIG GET` reply's (name, value) pairs.
fn pairs(reply: &[Frame]) -> impl Iterator<Item = (&[u8], &[u8])> {
    reply.chunks_exact(2).filter_map(|pair| match pair {
        [Frame::Bulk(name), Frame::Bulk(value)] => Some((&name[..], &value[..])),
        _ => None,
    })
}

/// The fleet's memory limit: the shards' summed, or 0 (none) when one
/// of them has none.
fn total_maxmemory(replies: &[&[Frame]]) -> u64 {
    let mut total = 0u64;
    for reply in replies {
        let limit = pairs(reply)
            .find(|(name, _)| name.eq_ignore_ascii_case(b"maxmemory"))
            .and_then(|(_, value)| std::str::from_utf8(value).ok()?.parse::<u64>().ok());
        match limit {
            Some(0) | None => return 0,
            Some(n) => total = total.saturating_add(n),
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn reply(pairs: &[(&str, &str)]) -> Part {
        let frames = pairs
            .iter()
            .flat_map(|(k, v)| [k, v])
            .map(|s| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes())))
            .collect();
        Some(Ok(Frame::Array(frames)))
    }

    fn render(parts: &[Part]) -> String {
        let mut buf = BytesMut::new();
        ConfigGet.render(parts, &mut buf, RespVersion::Resp2);
        String::from_utf8_lossy(&buf).into_owned()
    }

    #[test]
    fn the_subset_with_limits_summed() {
        let shard = |max: &str| {
            reply(&[
                ("maxmemory", max),
                ("maxmemory-samples", "5"),
                ("databases", "16"),
                ("SAVE", ""),
            ])
        };
        assert_eq!(
            render(&[shard("100"), shard("200")]),
            "*6\r\n$9\r\nmaxmemory\r\n$3\r\n300\r\n$9\r\ndatabases\r\n$1\r\n1\r\n$4\r\nSAVE\r\n$0\r\n\r\n"
        );
        // One shard without a limit: the fleet has none.
        assert!(
            render(&[shard("100"), shard("0")]).starts_with("*6\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n")
        );
        // A shard's error or silence answers the request.
        let err = Some(Ok(Frame::Error(Bytes::from_static(
            b"ERR unknown command 'CONFIG'",
        ))));
        assert_eq!(
            render(&[shard("1"), err]),
            "-ERR unknown command 'CONFIG'\r\n"
        );
        assert_eq!(
            render(&[shard("1"), None]),
            "-ERR memshift: backend timeout\r\n"
        );
    }
}
