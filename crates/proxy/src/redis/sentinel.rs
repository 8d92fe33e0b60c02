//! Sentinel-managed shards: where each master's primary is, and following
//! it through a failover without a reload.
//!
//! * At start (and for shards a reload adds) each master's address is asked
//!   with `SENTINEL get-master-addr-by-name`, trying the sentinels in order;
//!   the first answer wins ([`discover`], blocking like the cluster's first
//!   slot map; no sentinel knowing a master refuses the start or reload).
//! * Then one task per Redis generation ([`spawn`]) follows every sentinel
//!   at once (a follower each): `SUBSCRIBE +switch-master +promoted-slave`
//!   on one connection, `SENTINEL MASTER <name>` on a second, for the
//!   master a `+switch-master` names and, every [`REASK_EVERY`], for every
//!   master (a message lost while a connection was down, or a switch before
//!   we subscribed, is caught there). An answer is followed only if its
//!   `config-epoch` is not older than the last one applied: a sentinel that
//!   has not heard of a failover yet cannot send us back to the demoted
//!   primary, and an answer from a sentinel with a failover of that master
//!   in progress is not followed at all (see [`master_state`]).
//!   `+promoted-slave` (the leader saw the chosen replica answer as
//!   a primary; `get-master-addr-by-name` names it from then on, while
//!   `+switch-master` can come seconds later) is followed at once, one
//!   epoch above the applied one. Listening to all sentinels means the
//!   first to announce a switch moves us, and a dead or paused sentinel
//!   costs nothing but a log line.
//! * A new address goes through [`Shard::follow_primary`]: the shard's
//!   near-cache entries are dropped before the address is published; every
//!   connection to the old address then closes (its requests in flight
//!   fail as on any lost connection, none is re-sent) and the next connect
//!   goes to the new primary and checks its `ROLE` (see `connection`).
//!
//! A reload builds a new generation and so a new task with the new sentinel
//! list; shards kept across it keep their [`super::primary::Primary`].

use std::sync::{Arc, PoisonError};
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
/// Pause before a failed sentinel is connected again.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);
const SWITCH_CHANNEL: &[u8] = b"+switch-master";
/// Published by the failover's leader once the chosen replica answers
/// `ROLE` as a master: from then on `get-master-addr-by-name` names it,
/// and it takes writes, although `+switch-master` may come seconds later.
const PROMOTED_CHANNEL: &[u8] = b"+promoted-slave";

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

/// Start following `shards` through every sentinel; the tasks end when
/// the handle is dropped (with its generation).
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
    let watch = Arc::new(Watch { settings, shards });
    AbortOnDrop(tokio::spawn(async move {
        // Dropped (aborting every follower) when this task is aborted.
        let mut followers = tokio::task::JoinSet::new();
        for sentinel in sentinels {
            followers.spawn(watch.clone().follow_forever(sentinel));
        }
        while followers.join_next().await.is_some() {}
    }))
}

/// `stats` lines of Sentinel-managed shards (none for address shards, so
/// their `stats` keeps memcached's set): `redis_primary:<shard>` and
/// `redis_primary_changes:<shard>`.
pub fn render_stats(shards: &[Arc<Shard>], out: &mut BytesMut) {
    for (shard, primary) in shards.iter().filter_map(|s| Some((s, s.primary()?))) {
        let name = &shard.id;
        memshift_protocol::memcache::reply::stat(
            out,
            &format!("redis_primary:{name}"),
            primary.current(),
        );
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

pub(super) fn join_addr(ip: &[u8], port: &[u8]) -> Result<String, String> {
    let (Ok(ip), Ok(port)) = (std::str::from_utf8(ip), std::str::from_utf8(port)) else {
        return Err("address not UTF-8".into());
    };
    port.parse::<u16>()
        .map_err(|_| format!("bad port {port:?}"))?;
    Ok(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

/// `+promoted-slave`'s payload: `slave <ip:port> <ip> <port> @ <master> <ip> <port>`.
fn parse_promoted(payload: &[u8]) -> Option<(&[u8], String)> {
    let words: Vec<&[u8]> = payload.split(|&b| b == b' ').collect();
    match &words[..] {
        [b"slave", _, ip, port, b"@", master, _, _] => Some((master, join_addr(ip, port).ok()?)),
        _ => None,
    }
}

/// `+switch-master`'s payload: `<master> <old ip> <old port> <new ip> <new port>`.
fn parse_switch(payload: &[u8]) -> Option<(&[u8], String)> {
    let mut words = payload.split(|&b| b == b' ');
    let master = words.next()?;
    let (_, _) = (words.next()?, words.next()?);
    let addr = join_addr(words.next()?, words.next()?).ok()?;
    Some((master, addr))
}

/// What every sentinel's follower shares: the shards (each [`Primary`]
/// keeps the highest Sentinel `config-epoch` applied, across reloads: a
/// sentinel that has not heard of a failover yet answers the old primary
/// with an older epoch, which is ignored).
///
/// [`Primary`]: super::primary::Primary
struct Watch {
    settings: ConnectionSettings,
    shards: Vec<Followed>,
}

/// The epoch of an answer.
enum Epoch {
    /// `config-epoch` of `SENTINEL MASTER`.
    Config(u64),
    /// `+promoted-slave`: the failover's new epoch is not published before
    /// `+switch-master`, but is newer than any applied, so answers naming
    /// the old primary in the applied epoch are refused from now on.
    Promoted,
}

impl Watch {
    /// Follow through one sentinel, reconnecting while the generation lives.
    async fn follow_forever(self: Arc<Self>, sentinel: String) {
        let mut logged = false;
        loop {
            let (why, served) = self.follow(&sentinel).await;
            if served {
                logged = false;
            }
            if !logged {
                tracing::warn!(sentinel = %sentinel, reason = %why, "sentinel connection lost; following through the others until it is back");
                logged = true;
            }
            tokio::time::sleep(RECONNECT_AFTER).await;
        }
    }

    /// Follow the masters through one sentinel until it fails; returns why,
    /// and whether it got as far as answering.
    async fn follow(&self, sentinel: &str) -> (String, bool) {
        let settings = for_sentinel(&self.settings, sentinel);
        let limit = settings.connect_timeout + settings.timeout;
        let opened = tokio::time::timeout(limit, async {
            let mut sub = SentinelConn::open(&settings).await?;
            sub.send(&[b"SUBSCRIBE", SWITCH_CHANNEL, PROMOTED_CHANNEL])
                .await?;
            sub.next().await?;
            sub.next().await?;
            // Subscribed first: a switch after this ask is a message.
            let ask = SentinelConn::open(&settings).await?;
            Ok::<_, String>((sub, ask))
        })
        .await;
        let (mut sub, mut ask) = match opened {
            Ok(Ok(conns)) => conns,
            Ok(Err(e)) => return (e, false),
            Err(_) => return ("connect timeout".into(), false),
        };
        let mut reask = tokio::time::interval(REASK_EVERY);
        reask.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let which = tokio::select! {
                frame = sub.next() => match frame {
                    Ok(frame) => match self.message(&frame, sentinel) {
                        Some(i) => Some(i),
                        None => continue,
                    },
                    Err(e) => return (e, true),
                },
                _ = reask.tick() => None,
            };
            let asked = tokio::time::timeout(limit, self.ask(&mut ask, which, sentinel)).await;
            match asked {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return (e, true),
                Err(_) => return ("no answer within the timeout".into(), true),
            }
        }
    }

    /// Ask for master `which` (every master: `None`) with `SENTINEL MASTER`.
    async fn ask(
        &self,
        conn: &mut SentinelConn,
        which: Option<usize>,
        sentinel: &str,
    ) -> Result<(), String> {
        for (i, f) in self.shards.iter().enumerate() {
            let Some(primary) = f.shard.primary().filter(|_| which.is_none_or(|w| w == i)) else {
                continue;
            };
            conn.send(&[b"SENTINEL", b"MASTER", primary.master().as_bytes()])
                .await?;
            match conn.next().await? {
                // Not monitored by this sentinel (yet): the others answer.
                Frame::Error(_) => {}
                frame => {
                    if let Some((addr, epoch)) = master_state(&frame) {
                        self.offer(i, &addr, Epoch::Config(epoch), sentinel);
                    }
                }
            }
            if which.is_none() {
                self.ask_replicas(conn, &f.shard, sentinel).await?;
            }
        }
        Ok(())
    }

    /// `redis.read_from = "replica_preferred"`: which replica of `shard`
    /// its reads go to (`SENTINEL REPLICAS`, with the periodic re-ask).
    async fn ask_replicas(
        &self,
        conn: &mut SentinelConn,
        shard: &Shard,
        sentinel: &str,
    ) -> Result<(), String> {
        let (Some(replica), Some(primary)) = (&shard.replica, shard.primary()) else {
            return Ok(());
        };
        conn.send(&[b"SENTINEL", b"REPLICAS", primary.master().as_bytes()])
            .await?;
        let frame = conn.next().await?;
        if let Frame::Error(_) = frame {
            return Ok(());
        }
        if let Some(old) = replica.follow(&healthy_replicas(&frame)) {
            tracing::info!(shard = %shard.id, from = %old, to = %replica.current(), sentinel = %sentinel, "replica reads: replica chosen");
        }
        Ok(())
    }

    /// A message: `+promoted-slave` is followed at once; for a
    /// `+switch-master`, returns which master to ask about.
    fn message(&self, frame: &Frame, sentinel: &str) -> Option<usize> {
        let Frame::Array(items) = frame else {
            return None;
        };
        let [Frame::Bulk(kind), Frame::Bulk(channel), Frame::Bulk(payload)] = &items[..] else {
            return None;
        };
        if &kind[..] != b"message" {
            return None;
        }
        let index = |master: &[u8]| {
            self.shards.iter().position(|f| {
                f.shard
                    .primary()
                    .is_some_and(|p| p.master().as_bytes() == master)
            })
        };
        match &channel[..] {
            SWITCH_CHANNEL => index(parse_switch(payload)?.0),
            PROMOTED_CHANNEL => {
                let (master, addr) = parse_promoted(payload)?;
                self.offer(index(master)?, &addr, Epoch::Promoted, sentinel);
                None
            }
            _ => None,
        }
    }

    /// A sentinel says master `i` is at `addr` in `epoch`: follow it unless
    /// an answer of a newer epoch was applied.
    fn offer(&self, i: usize, addr: &str, epoch: Epoch, sentinel: &str) {
        let Some(f) = self.shards.get(i) else {
            return;
        };
        let Some(primary) = f.shard.primary() else {
            return;
        };
        // Held while switching: two followers never interleave a switch.
        let mut applied = primary.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = match epoch {
            Epoch::Config(e) if applied.is_some_and(|a| e < a) => return,
            Epoch::Config(e) => e,
            Epoch::Promoted => applied.map_or(0, |a| a + 1),
        };
        *applied = Some(epoch);
        if let Some(old) = f.shard.follow_primary(addr) {
            f.metrics.primary_is(addr, Some(&old));
            tracing::warn!(shard = %f.shard.id, from = %old, to = %addr, sentinel = %sentinel, config_epoch = epoch, "redis primary switched (Sentinel); the shard's near-cache entries dropped");
        }
    }
}

/// `SENTINEL REPLICAS`' reply (one flat field/value array per replica):
/// the `host:port` of each one whose `flags` say neither down nor
/// disconnected.
pub fn healthy_replicas(frame: &Frame) -> Vec<String> {
    let Frame::Array(replicas) = frame else {
        return Vec::new();
    };
    replicas
        .iter()
        .filter_map(|r| {
            let field = |name: &[u8]| field(r, name);
            if has_flag(&field(b"flags")?, &[b"s_down", b"o_down", b"disconnected"]) {
                return None;
            }
            join_addr(&field(b"ip")?, &field(b"port")?).ok()
        })
        .collect()
}

/// Whether a Sentinel `flags` field (`s_down,master,...`) holds any of `names`.
fn has_flag(flags: &[u8], names: &[&[u8]]) -> bool {
    flags.split(|&b| b == b',').any(|f| names.contains(&f))
}

/// The value of `name` in a Sentinel reply's flat field/value array.
pub(super) fn field(frame: &Frame, name: &[u8]) -> Option<bytes::Bytes> {
    let Frame::Array(items) = frame else {
        return None;
    };
    items.chunks(2).find_map(|kv| match kv {
        [Frame::Bulk(k), Frame::Bulk(v)] if &k[..] == name => Some(v.clone()),
        _ => None,
    })
}

/// `SENTINEL MASTER`'s reply (a flat field/value array): the primary's
/// `host:port` and the `config-epoch`; `None` while that sentinel has a
/// failover of the master in progress. Its leader raises the master's
/// `config-epoch` to the failover's epoch when the chosen replica is
/// promoted (`+promoted-slave`) but keeps naming the old primary until
/// `+switch-master`, so such an answer would send us back to the dead
/// primary with an epoch no older than the promotion's.
fn master_state(frame: &Frame) -> Option<(String, u64)> {
    let field = |name: &[u8]| field(frame, name);
    if has_flag(&field(b"flags")?, &[b"failover_in_progress"]) {
        return None;
    }
    let addr = join_addr(&field(b"ip")?, &field(b"port")?).ok()?;
    let epoch = std::str::from_utf8(&field(b"config-epoch")?)
        .ok()?
        .parse()
        .ok()?;
    Some((addr, epoch))
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
            if let Some(frame) = self
                .parser
                .parse(&mut self.buf)
                .map_err(|e| e.to_string())?
            {
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
        assert_eq!(
            parse_promoted(b"slave 127.0.0.1:6380 127.0.0.1 6380 @ s1 127.0.0.1 6379"),
            Some((&b"s1"[..], "127.0.0.1:6380".to_string()))
        );
        assert_eq!(parse_promoted(b"slave x 1 2"), None);
        let bulk = |s: &'static str| Frame::Bulk(Bytes::from_static(s.as_bytes()));
        let master = Frame::Array(vec![
            bulk("name"),
            bulk("s1"),
            bulk("ip"),
            bulk("10.0.0.2"),
            bulk("port"),
            bulk("6380"),
            bulk("flags"),
            bulk("master"),
            bulk("config-epoch"),
            bulk("3"),
        ]);
        assert_eq!(master_state(&master), Some(("10.0.0.2:6380".into(), 3)));
        // The failover's leader between +promoted-slave and +switch-master:
        // the old address in the new epoch, not to be followed.
        let failing_over = Frame::Array(vec![
            bulk("ip"),
            bulk("10.0.0.1"),
            bulk("port"),
            bulk("6379"),
            bulk("flags"),
            bulk("s_down,o_down,master,failover_in_progress"),
            bulk("config-epoch"),
            bulk("4"),
        ]);
        assert_eq!(master_state(&failing_over), None);
        let replica = |port: &'static str, flags: &'static str| {
            Frame::Array(vec![
                bulk("ip"),
                bulk("127.0.0.1"),
                bulk("port"),
                bulk(port),
                bulk("flags"),
                bulk(flags),
            ])
        };
        let replicas = Frame::Array(vec![
            replica("1", "slave,s_down"),
            replica("2", "slave"),
            replica("3", "slave,disconnected"),
            replica("4", "slave"),
        ]);
        assert_eq!(healthy_replicas(&replicas), ["127.0.0.1:2", "127.0.0.1:4"]);
        assert!(healthy_replicas(&Frame::Null).is_empty());
    }
}
