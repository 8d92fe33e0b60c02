//! Sentinel-managed shards: where each master's primary is, and following
//! it through a failover without a reload.
//!
//! * At start (and for shards a reload adds) each master's address is asked
//!   with `SENTINEL get-master-addr-by-name`, trying the sentinels in order;
//!   the first answer wins ([`discover`], blocking like the cluster's first
//!   slot map).
//! * Then one task per Redis generation ([`spawn`]) follows one sentinel at
//!   a time: `SUBSCRIBE +switch-master` on one connection, and every
//!   [`REASK_EVERY`] the address of every master again on a second one (a
//!   message lost while we were disconnected, or a switch published before
//!   we subscribed, is caught there). A sentinel that fails, times out or
//!   refuses passes the watch to the next one in the list.
//! * A new address goes through [`Shard::follow_primary`]: the shard's
//!   near-cache entries are dropped before the address is published; every
//!   connection to the old address then closes (its requests in flight
//!   fail as on any lost connection, none is re-sent) and the next connect
//!   goes to the new primary and checks its `ROLE` (see `connection`).
//!
//! A reload builds a new generation and so a new task with the new sentinel
//! list; shards kept across it keep their [`super::primary::Primary`].

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use memshift_protocol::resp::{encode_command, Frame, ReplyParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::connection::{open_stream, ConnectionSettings, ShardReader, ShardWriter};
use super::shard::{AbortOnDrop, Shard};
use crate::metrics::PrimaryMetrics;

/// Every master's address is asked again this often, whatever the
/// `+switch-master` messages say.
pub const REASK_EVERY: Duration = Duration::from_secs(1);
/// Pause after a sentinel failed before the next one is tried.
const NEXT_SENTINEL_AFTER: Duration = Duration::from_millis(200);
const SWITCH_CHANNEL: &[u8] = b"+switch-master";

/// A shard the watcher keeps on its master's primary.
#[derive(Debug)]
pub struct Followed {
    pub shard: Arc<Shard>,
    pub metrics: PrimaryMetrics,
}

/// Ask the sentinels, in order, for `master`'s primary; the first answer wins.
pub fn discover(
    master: &str,
    sentinels: &[String],
    settings: &ConnectionSettings,
) -> Result<String, String> {
    let cmd: [&[u8]; 3] = [b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()];
    let mut why = Vec::new();
    for sentinel in sentinels {
        let answer = super::topology::query(sentinel, &for_sentinel(settings, sentinel), &cmd)
            .and_then(|frame| master_addr(&frame));
        match answer {
            Ok(addr) => return Ok(addr),
            Err(e) => why.push(format!("{sentinel}: {e}")),
        }
    }
    Err(format!(
        "redis.sentinels: no sentinel gave the primary of master {master:?} ({})",
        why.join("; ")
    ))
}

/// Start following `shards` through `sentinels`; the task ends when the
/// handle is dropped (with its generation).
pub fn spawn(
    sentinels: Vec<String>,
    settings: ConnectionSettings,
    shards: Vec<Followed>,
) -> AbortOnDrop {
    for f in &shards {
        if let Some(p) = f.shard.primary() {
            f.metrics.primary_is(&p.current(), None);
        }
    }
    let watcher = Watcher {
        sentinels,
        settings,
        shards,
    };
    AbortOnDrop(tokio::spawn(async move { watcher.run().await }))
}

/// `stats` lines of Sentinel-managed shards (none for address shards, so
/// their `stats` keeps memcached's set): `redis_primary:<shard>` and
/// `redis_primary_changes:<shard>`.
pub fn render_stats(shards: &[Arc<Shard>], out: &mut BytesMut) {
    for (shard, primary) in shards.iter().filter_map(|s| Some((s, s.primary()?))) {
        let name = &shard.id;
        memshift_protocol::memcache::reply::stat(out, &format!("redis_primary:{name}"), primary.current());
        memshift_protocol::memcache::reply::stat(
            out,
            &format!("redis_primary_changes:{name}"),
            primary.changes(),
        );
    }
}

/// The same for RESP `INFO`'s `# Memshift` section, as Redis-style fields
/// `redis_primary_<shard>:<addr>` and `redis_primary_changes_<shard>:<n>`.
pub fn render_info(shards: &[Arc<Shard>], out: &mut String) {
    use std::fmt::Write;
    for (shard, primary) in shards.iter().filter_map(|s| Some((s, s.primary()?))) {
        let name = &shard.id;
        let _ = write!(
            out,
            "redis_primary_{name}:{}\r\nredis_primary_changes_{name}:{}\r\n",
            primary.current(),
            primary.changes()
        );
    }
}

/// The connection settings for one sentinel: the shards' timeouts and TLS,
/// `redis.sentinel_username`/`sentinel_password` (already in `template`).
fn for_sentinel(template: &ConnectionSettings, sentinel: &str) -> ConnectionSettings {
    ConnectionSettings {
        addr: sentinel.to_string(),
        primary: None,
        ..template.clone()
    }
}

/// `SENTINEL get-master-addr-by-name`'s `[ip, port]` as `host:port`.
fn master_addr(frame: &Frame) -> Result<String, String> {
    match frame {
        Frame::Array(items) => match &items[..] {
            [Frame::Bulk(ip), Frame::Bulk(port)] => join_addr(ip, port),
            _ => Err("unexpected reply".into()),
        },
        Frame::Error(e) => Err(String::from_utf8_lossy(e).into_owned()),
        _ => Err("master unknown to this sentinel".into()),
    }
}

fn join_addr(ip: &[u8], port: &[u8]) -> Result<String, String> {
    let (Ok(ip), Ok(port)) = (std::str::from_utf8(ip), std::str::from_utf8(port)) else {
        return Err("address not UTF-8".into());
    };
    port.parse::<u16>().map_err(|_| format!("bad port {port:?}"))?;
    Ok(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

/// `+switch-master`'s payload: `<master> <old ip> <old port> <new ip> <new port>`.
fn parse_switch(payload: &[u8]) -> Option<(&[u8], String)> {
    let mut words = payload.split(|&b| b == b' ');
    let master = words.next()?;
    let (_, _) = (words.next()?, words.next()?);
    let addr = join_addr(words.next()?, words.next()?).ok()?;
    Some((master, addr))
}

struct Watcher {
    sentinels: Vec<String>,
    settings: ConnectionSettings,
    shards: Vec<Followed>,
}

impl Watcher {
    async fn run(self) {
        let mut next = 0usize;
        loop {
            let sentinel = &self.sentinels[next % self.sentinels.len()];
            let why = self.follow(sentinel).await;
            tracing::warn!(sentinel = %sentinel, reason = %why, "sentinel lost; following the next one");
            next = next.wrapping_add(1);
            tokio::time::sleep(NEXT_SENTINEL_AFTER).await;
        }
    }

    /// Follow the masters through one sentinel until it fails.
    async fn follow(&self, sentinel: &str) -> String {
        let settings = for_sentinel(&self.settings, sentinel);
        let limit = settings.connect_timeout + settings.timeout;
        let opened = tokio::time::timeout(limit, async {
            let mut sub = SentinelConn::open(&settings).await?;
            sub.send(&[b"SUBSCRIBE", SWITCH_CHANNEL]).await?;
            sub.next().await?;
            // Subscribed first: a switch after this ask is a message.
            let ask = SentinelConn::open(&settings).await?;
            Ok::<_, String>((sub, ask))
        })
        .await;
        let (mut sub, mut ask) = match opened {
            Ok(Ok(conns)) => conns,
            Ok(Err(e)) => return e,
            Err(_) => return "connect timeout".into(),
        };
        let mut reask = tokio::time::interval(REASK_EVERY);
        reask.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                frame = sub.next() => match frame {
                    Ok(frame) => self.on_message(&frame, sentinel),
                    Err(e) => return e,
                },
                _ = reask.tick() => {
                    let asked = tokio::time::timeout(limit, self.ask_all(&mut ask, sentinel)).await;
                    match asked {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return e,
                        Err(_) => return "no answer within the timeout".into(),
                    }
                }
            }
        }
    }

    async fn ask_all(&self, conn: &mut SentinelConn, sentinel: &str) -> Result<(), String> {
        for f in &self.shards {
            let Some(primary) = f.shard.primary() else {
                continue;
            };
            let cmd: [&[u8]; 3] = [
                b"SENTINEL",
                b"get-master-addr-by-name",
                primary.master().as_bytes(),
            ];
            conn.send(&cmd).await?;
            match conn.next().await? {
                Frame::Error(e) => return Err(String::from_utf8_lossy(&e).into_owned()),
                frame => {
                    if let Ok(addr) = master_addr(&frame) {
                        self.switch(f, &addr, sentinel);
                    }
                }
            }
        }
        Ok(())
    }

    fn on_message(&self, frame: &Frame, sentinel: &str) {
        let Frame::Array(items) = frame else {
            return;
        };
        let [Frame::Bulk(kind), Frame::Bulk(channel), Frame::Bulk(payload)] = &items[..] else {
            return;
        };
        if &kind[..] != b"message" || &channel[..] != SWITCH_CHANNEL {
            return;
        }
        let Some((master, addr)) = parse_switch(payload) else {
            return;
        };
        let followed = self
            .shards
            .iter()
            .find(|f| f.shard.primary().is_some_and(|p| p.master().as_bytes() == master));
        if let Some(f) = followed {
            self.switch(f, &addr, sentinel);
        }
    }

    fn switch(&self, f: &Followed, addr: &str, sentinel: &str) {
        if let Some(old) = f.shard.follow_primary(addr) {
            f.metrics.primary_is(addr, Some(&old));
            tracing::warn!(shard = %f.shard.id, from = %old, to = %addr, sentinel = %sentinel, "redis primary switched (Sentinel); the shard's near-cache entries dropped");
        }
    }
}

/// A request/reply (or subscribed) connection to one sentinel.
struct SentinelConn {
    rd: ShardReader,
    wr: ShardWriter,
    parser: ReplyParser,
    buf: BytesMut,
}

impl SentinelConn {
    async fn open(settings: &ConnectionSettings) -> Result<SentinelConn, String> {
        let stream = open_stream(settings, &settings.addr)
            .await
            .map_err(|e| e.to_string())?;
        let (rd, wr) = stream.into_split();
        let mut conn = SentinelConn {
            rd,
            wr,
            parser: ReplyParser::new(),
            buf: BytesMut::with_capacity(1024),
        };
        if let Some(password) = &settings.password {
            match &settings.username {
                Some(u) => {
                    conn.send(&[b"AUTH", u.as_bytes(), password.as_bytes()])
                        .await?
                }
                None => conn.send(&[b"AUTH", password.as_bytes()]).await?,
            }
            if let Frame::Error(e) = conn.next().await? {
                return Err(format!("AUTH: {}", String::from_utf8_lossy(&e)));
            }
        }
        Ok(conn)
    }

    async fn send(&mut self, cmd: &[&[u8]]) -> Result<(), String> {
        let mut out = BytesMut::new();
        encode_command(&mut out, cmd);
        self.wr.write_all(&out).await.map_err(|e| e.to_string())
    }

    /// The next frame. Cancel-safe: only the read is awaited, and what was
    /// read stays in `buf`.
    async fn next(&mut self) -> Result<Frame, String> {
        loop {
            if let Some(frame) = self.parser.parse(&mut self.buf).map_err(|e| e.to_string())? {
                return Ok(frame);
            }
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) => return Err("closed by the sentinel".into()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn addresses_and_switch_messages_parse() {
        let reply = Frame::Array(vec![
            Frame::Bulk(Bytes::from_static(b"127.0.0.1")),
            Frame::Bulk(Bytes::from_static(b"6380")),
        ]);
        assert_eq!(master_addr(&reply).unwrap(), "127.0.0.1:6380");
        assert!(master_addr(&Frame::Null).is_err());
        assert_eq!(join_addr(b"::1", b"7").unwrap(), "[::1]:7");
        assert!(join_addr(b"h", b"x").is_err());
        assert_eq!(
            parse_switch(b"s1 127.0.0.1 6379 127.0.0.1 6380"),
            Some((&b"s1"[..], "127.0.0.1:6380".to_string()))
        );
        assert_eq!(parse_switch(b"s1 127.0.0.1 6379"), None);
    }
}
