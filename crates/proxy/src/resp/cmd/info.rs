//! INFO as Redis 7.0 answers it: the sections asked for (`INFO`, `INFO
//! default`, `all`, `everything`, one or several names, in Redis' order
//! whatever order they were asked in; an unknown name adds nothing).
//!
//! Fields describe what the client talks to: memshift's own where a
//! client sees memshift (`tcp_port`, `connected_clients`, connections and
//! bytes), the shards' (every shard, every master of a cluster) summed
//! where they add up (memory, persistence, keyspace, command and key
//! counters), memshift's own per-command and per-error counts in
//! Commandstats and Errorstats (`crate::stats::CommandStats`, counted as
//! replies are written: `resp::pending::Tally`). The shards' INFO is read
//! only when a section needs it, with
//! the request timeout; a shard that does not answer adds
//! `memshift_shards_missing:<n>` to those sections instead of a hang.
//! docs/resp.md lists every field.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::BytesMut;
use memshift_protocol::resp::reply::{self as out, RespVersion};
use memshift_protocol::resp::{CommandWriter, Frame};

use super::super::pending::{Gather, Part, Render};
use super::super::RespSession;
use super::connection::REDIS_VERSION;
use crate::stats::{CommandStats, PERCENTILES};

/// INFO's sections in Redis 7.0's order: the name INFO takes, the title,
/// whether `INFO` alone includes it, whether the shards' INFO feeds it.
const SECTIONS: [(&str, &str, bool, bool); 14] = [
    ("server", "Server", true, false),
    ("clients", "Clients", true, false),
    ("memory", "Memory", true, true),
    ("persistence", "Persistence", true, true),
    ("stats", "Stats", true, true),
    ("replication", "Replication", true, false),
    ("cpu", "CPU", true, false),
    ("modules", "Modules", true, false),
    ("commandstats", "Commandstats", false, false),
    ("errorstats", "Errorstats", true, false),
    ("latencystats", "Latencystats", false, false),
    ("cluster", "Cluster", true, false),
    ("keyspace", "Keyspace", true, true),
    ("memshift", "Memshift", true, false),
];

/// `cmdstat_<name>:calls=..,usec=..,usec_per_call=..,rejected_calls=..,
/// failed_calls=..` for every command (and subcommand) counted so far.
fn command_stats(stats: &CommandStats, text: &mut String) {
    for row in 0..super::table::stats_rows() {
        let r = stats.row(row);
        let Some(name) = super::table::stats_name(row) else {
            continue;
        };
        if r.calls == 0 && r.rejected == 0 && r.failed == 0 {
            continue;
        }
        let per_call = if r.calls == 0 {
            0.0
        } else {
            r.usec as f64 / r.calls as f64
        };
        let _ = write!(
            text,
            "cmdstat_{name}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
            r.calls, r.usec, r.rejected, r.failed
        );
    }
}

/// `latency_percentiles_usec_<name>:p50=..,p99=..,p99.9=..` for every
/// command (and subcommand) timed so far.
fn latency_stats(stats: &CommandStats, text: &mut String) {
    for row in 0..super::table::stats_rows() {
        let (Some(values), Some(name)) = (stats.percentiles(row), super::table::stats_name(row))
        else {
            continue;
        };
        let _ = write!(text, "latency_percentiles_usec_{name}:");
        for (i, ((label, _), value)) in PERCENTILES.iter().zip(values).enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(text, "{sep}{label}={value:.3}");
        }
        text.push_str("\r\n");
    }
}

/// `errorstat_<CODE>:count=..` for every error code answered so far.
fn error_stats(stats: &CommandStats, text: &mut String) {
    for (code, count) in stats.errors() {
        let _ = write!(
            text,
            "errorstat_{}:count={count}\r\n",
            String::from_utf8_lossy(&code)
        );
    }
}

/// How the shards' values of a field become the fleet's.
#[derive(Debug, Clone, Copy)]
enum Fold {
    Sum,
    Max,
    Min,
    /// The value every shard has (left out when they differ).
    Same,
    /// `ok` when every shard's is, else the first other.
    Status,
    /// A limit where 0 is none: 0 when one shard has none, else the sum.
    Limit,
    /// Redis' human form of the field named (folded above it).
    Human(&'static str),
    /// memshift's own counter.
    Own(fn(&OwnStats) -> u64),
}

use Fold::*;

const MEMORY: &[(&str, Fold)] = &[
    ("used_memory", Sum),
    ("used_memory_human", Human("used_memory")),
    ("used_memory_rss", Sum),
    ("used_memory_rss_human", Human("used_memory_rss")),
    ("used_memory_peak", Sum),
    ("used_memory_peak_human", Human("used_memory_peak")),
    ("used_memory_dataset", Sum),
    ("maxmemory", Limit),
    ("maxmemory_human", Human("maxmemory")),
    ("maxmemory_policy", Same),
    ("mem_allocator", Same),
];

const PERSISTENCE: &[(&str, Fold)] = &[
    ("loading", Max),
    ("async_loading", Max),
    ("rdb_changes_since_last_save", Sum),
    ("rdb_bgsave_in_progress", Max),
    ("rdb_last_save_time", Min),
    ("rdb_last_bgsave_status", Status),
    ("rdb_saves", Sum),
    ("aof_enabled", Same),
    ("aof_rewrite_in_progress", Max),
    ("aof_last_bgrewrite_status", Status),
    ("aof_last_write_status", Status),
];

const STATS: &[(&str, Fold)] = &[
    ("total_connections_received", Own(|s| s.connections)),
    ("total_commands_processed", Sum),
    ("instantaneous_ops_per_sec", Sum),
    ("total_net_input_bytes", Own(|s| s.net_input)),
    ("total_net_output_bytes", Own(|s| s.net_output)),
    ("rejected_connections", Own(|s| s.rejected)),
    ("expired_keys", Sum),
    ("evicted_keys", Sum),
    ("keyspace_hits", Sum),
    ("keyspace_misses", Sum),
    // Subscriptions live on one node per channel space (`resp::cmd::pubsub`).
    ("pubsub_channels", Sum),
    ("pubsub_patterns", Sum),
    ("pubsubshard_channels", Sum),
    ("unexpected_error_replies", Sum),
    ("total_error_replies", Own(|s| s.error_replies)),
];

/// memshift's counters in the Stats section, read when INFO came.
#[derive(Debug, Default)]
struct OwnStats {
    connections: u64,
    net_input: u64,
    net_output: u64,
    rejected: u64,
    /// Error replies memshift sent its RESP clients.
    error_replies: u64,
}

impl RespSession {
    pub(super) fn info(&mut self) {
        let selected = selected(&self.args[1..]);
        let reply = self.info_reply(selected);
        let from_shards: Vec<&str> = SECTIONS
            .iter()
            .enumerate()
            .filter(|&(i, s)| selected & 1 << i != 0 && s.3)
            .map(|(_, s)| s.0)
            .collect();
        if from_shards.is_empty() {
            let (text, v) = (reply.text(&[]), self.version);
            return self.push_bytes(|b| verbatim(b, v, &text));
        }
        self.cmd_buf.clear();
        let mut w = CommandWriter::new(&mut self.cmd_buf, 1 + from_shards.len());
        w.arg(b"INFO");
        for s in from_shards {
            w.arg(s.as_bytes());
        }
        drop(w);
        let cmd = self.cmd_buf.split().freeze();
        self.broadcast_cmd(cmd, |_| Render::Gather(Box::new(reply)));
    }

    /// The reply with memshift's own fields filled in now.
    fn info_reply(&self, selected: u16) -> InfoReply {
        let stats = &self.proxy.stats;
        let routes = self.proxy.router.load();
        let mut sections = Vec::new();
        for (i, s) in SECTIONS.iter().enumerate() {
            if selected & 1 << i == 0 {
                continue;
            }
            let mut text = String::new();
            let _ = match s.0 {
                "server" => self.server_fields(&mut text),
                "clients" => write!(
                    text,
                    "connected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n",
                    stats.curr_connections.load(Ordering::Relaxed),
                    self.proxy.facts.max_connections,
                    stats.blocked_clients.load(Ordering::Relaxed),
                ),
                "replication" => write!(text, "role:master\r\nconnected_slaves:0\r\n"),
                "cpu" => cpu_fields(&mut text),
                "cluster" => write!(text, "cluster_enabled:0\r\n"),
                "memshift" => {
                    let shards = &routes.redis().shards;
                    let written = write!(
                        text,
                        "migration_phase:{}\r\nredis_shards:{}\r\nredis_shards_up:{}\r\n",
                        routes.migration().phase.as_str(),
                        shards.len(),
                        shards.iter().filter(|s| s.is_up()).count(),
                    );
                    // Sentinel-managed shards: each one's current primary.
                    crate::redis::sentinel::render_info(shards, &mut text);
                    written
                }
                "commandstats" => {
                    command_stats(&stats.commands, &mut text);
                    Ok(())
                }
                "errorstats" => {
                    error_stats(&stats.commands, &mut text);
                    Ok(())
                }
                "latencystats" => {
                    latency_stats(&stats.commands, &mut text);
                    Ok(())
                }
                // Modules: none.
                _ => Ok(()),
            };
            sections.push((i, text));
        }
        InfoReply {
            sections,
            own: OwnStats {
                connections: stats.total_connections.get(),
                net_input: stats.bytes_read.get(),
                net_output: stats.bytes_written.get(),
                rejected: stats.rejected_connections.get(),
                error_replies: stats.commands.error_replies(),
            },
        }
    }

    fn server_fields(&self, text: &mut String) -> std::fmt::Result {
        let facts = &self.proxy.facts;
        let uptime = facts.started.elapsed().as_secs();
        write!(
            text,
            "redis_version:{REDIS_VERSION}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
             redis_mode:standalone\r\narch_bits:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\n\
             uptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nmemshift_version:{}\r\n",
            usize::BITS,
            std::process::id(),
            facts.resp_port,
            uptime / 86400,
            env!("CARGO_PKG_VERSION"),
        )
    }
}

/// The sections `args` ask for, one bit per [`SECTIONS`] entry.
fn selected(args: &[bytes::Bytes]) -> u16 {
    let default = SECTIONS
        .iter()
        .enumerate()
        .filter(|(_, s)| s.2)
        .fold(0, |m, (i, _)| m | 1 << i);
    if args.is_empty() {
        return default;
    }
    let bit = |name: &[u8]| {
        SECTIONS
            .iter()
            .position(|s| s.0.as_bytes() == name)
            .map_or(0, |i| 1 << i)
    };
    let mut mask = 0u16;
    for a in args {
        mask |= match a.to_ascii_lowercase().as_slice() {
            b"default" => default,
            b"all" | b"everything" => u16::MAX >> (16 - SECTIONS.len()),
            b"module_list" => bit(b"modules"),
            name => bit(name),
        };
    }
    mask
}

/// Redis 7 sends INFO as a verbatim string in RESP3.
fn verbatim(buf: &mut BytesMut, v: RespVersion, text: &str) {
    match v {
        RespVersion::Resp2 => out::bulk(buf, text.as_bytes()),
        RespVersion::Resp3 => {
            let _ = write!(BytesWriter(buf), "={}\r\ntxt:{text}\r\n", text.len() + 4);
        }
    }
}

struct BytesWriter<'a>(&'a mut BytesMut);

impl Write for BytesWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// `used_cpu_sys`/`used_cpu_user` of the memshift process.
fn cpu_fields(text: &mut String) -> std::fmt::Result {
    // SAFETY: getrusage fills the struct we own; all-zero is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Ok(());
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    write!(
        text,
        "used_cpu_sys:{:.6}\r\nused_cpu_user:{:.6}\r\n",
        secs(usage.ru_stime),
        secs(usage.ru_utime),
    )
}

/// The INFO text, waiting for the shards' part.
#[derive(Debug)]
struct InfoReply {
    /// Each selected section (index into [`SECTIONS`]) with memshift's
    /// own fields.
    sections: Vec<(usize, String)>,
    own: OwnStats,
}

impl Gather for InfoReply {
    fn render(&self, parts: &[Part], buf: &mut BytesMut, v: RespVersion) {
        verbatim(buf, v, &self.text(parts));
    }
}

impl InfoReply {
    fn text(&self, parts: &[Part]) -> String {
        let shards: Vec<HashMap<&str, &str>> = parts.iter().filter_map(shard_fields).collect();
        let missing = parts.len() - shards.len();
        let mut text = String::with_capacity(1024);
        for (n, (i, own)) in self.sections.iter().enumerate() {
            let (name, title, _, from_shards) = SECTIONS[*i];
            if n > 0 {
                text.push_str("\r\n");
            }
            let _ = write!(text, "# {title}\r\n");
            match name {
                "memory" => fold_fields(&mut text, MEMORY, &shards, &self.own),
                "persistence" => fold_fields(&mut text, PERSISTENCE, &shards, &self.own),
                "stats" => fold_fields(&mut text, STATS, &shards, &self.own),
                "keyspace" => keyspace(&mut text, &shards),
                _ => text.push_str(own),
            }
            if from_shards && missing > 0 {
                let _ = write!(text, "memshift_shards_missing:{missing}\r\n");
            }
        }
        text
    }
}

/// A shard's INFO reply as `field → value` (`None`: it did not answer).
fn shard_fields(part: &Part) -> Option<HashMap<&str, &str>> {
    let Some(Ok(Frame::Bulk(text))) = part else {
        return None;
    };
    let text = std::str::from_utf8(text).ok()?;
    Some(
        text.split("\r\n")
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(':'))
            .collect(),
    )
}

fn fold_fields(
    text: &mut String,
    fields: &[(&'static str, Fold)],
    shards: &[HashMap<&str, &str>],
    own: &OwnStats,
) {
    let mut numbers: Vec<(&str, i64)> = Vec::new();
    for &(name, fold) in fields {
        let values = || shards.iter().filter_map(|s| s.get(name).copied());
        let integers = || values().filter_map(|v| v.parse::<i64>().ok());
        let value = match fold {
            Own(read) => Some(read(own).to_string()),
            Human(of) => numbers
                .iter()
                .find(|(n, _)| *n == of)
                .map(|&(_, n)| human(n)),
            Same => values()
                .next()
                .filter(|first| values().all(|v| v == *first))
                .map(str::to_string),
            Status => values()
                .find(|v| *v != "ok")
                .or_else(|| values().next())
                .map(str::to_string),
            Sum | Max | Min | Limit => {
                let folded = match fold {
                    Max => integers().max(),
                    Min => integers().min(),
                    Limit if integers().any(|n| n == 0) => Some(0),
                    _ => integers().reduce(i64::saturating_add),
                };
                if let Some(n) = folded {
                    numbers.push((name, n));
                }
                folded.map(|n| n.to_string())
            }
        };
        if let Some(value) = value {
            let _ = write!(text, "{name}:{value}\r\n");
        }
    }
}

/// `db0:keys=…,expires=…,avg_ttl=…` summed (avg_ttl weighted by each
/// shard's keys with a TTL); no line when there are no keys, as Redis.
fn keyspace(text: &mut String, shards: &[HashMap<&str, &str>]) {
    let (mut keys, mut expires, mut ttl_weighted) = (0u64, 0u64, 0u128);
    for db0 in shards.iter().filter_map(|s| s.get("db0")) {
        let field = |name: &str| -> u64 {
            db0.split(',')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == name)
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0)
        };
        let shard_expires = field("expires");
        keys += field("keys");
        expires += shard_expires;
        ttl_weighted += u128::from(field("avg_ttl")) * u128::from(shard_expires);
    }
    if keys > 0 {
        let avg_ttl = ttl_weighted.checked_div(u128::from(expires)).unwrap_or(0);
        let _ = write!(
            text,
            "db0:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n"
        );
    }
}

/// Redis' `bytesToHuman`: `919.24K`, `6.95M`, `0B`.
fn human(n: i64) -> String {
    const UNITS: [(&str, f64); 5] = [
        ("K", 1024.0),
        ("M", 1024.0 * 1024.0),
        ("G", 1024.0 * 1024.0 * 1024.0),
        ("T", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("P", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
    ];
    let f = n as f64;
    match UNITS.iter().rev().find(|(_, size)| f >= *size) {
        Some((unit, size)) => format!("{:.2}{unit}", f / size),
        None => format!("{n}B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn sections_follow_redis_7() {
        let ask = |args: &[&str]| {
            let args: Vec<Bytes> = args
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect();
            let mask = selected(&args);
            SECTIONS
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & 1 << i != 0)
                .map(|(_, s)| s.0)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let default = "server clients memory persistence stats replication cpu modules \
                       errorstats cluster keyspace memshift";
        assert_eq!(ask(&[]), default);
        assert_eq!(ask(&["default"]), default);
        assert_eq!(ask(&["KEYSPACE", "memory"]), "memory keyspace");
        assert_eq!(ask(&["nosuch"]), "");
        assert_eq!(ask(&["module_list"]), "modules");
        assert!(ask(&["all"]).contains("commandstats errorstats latencystats"));
        assert_eq!(ask(&["everything"]), ask(&["all"]));
    }

    #[test]
    fn shards_fields_are_summed_where_they_add_up() {
        let shard = |mem: i64, max: i64, policy: &str, db0: &str| {
            Some(Ok(Frame::Bulk(Bytes::from(format!(
                "# Memory\r\nused_memory:{mem}\r\nused_memory_human:x\r\nmaxmemory:{max}\r\n\
                 maxmemory_policy:{policy}\r\n\r\n# Keyspace\r\n{db0}\r\n"
            )))))
        };
        let reply = InfoReply {
            sections: vec![(2, String::new()), (12, String::new())],
            own: OwnStats::default(),
        };
        let parts = [
            shard(
                1024,
                100,
                "noeviction",
                "db0:keys=10,expires=2,avg_ttl=1000",
            ),
            shard(2048, 200, "noeviction", "db0:keys=5,expires=6,avg_ttl=3000"),
            None,
        ];
        let text = reply.text(&parts);
        assert_eq!(
            text,
            "# Memory\r\nused_memory:3072\r\nused_memory_human:3.00K\r\nmaxmemory:300\r\n\
             maxmemory_human:300B\r\nmaxmemory_policy:noeviction\r\nmemshift_shards_missing:1\r\n\
             \r\n# Keyspace\r\ndb0:keys=15,expires=8,avg_ttl=2500\r\nmemshift_shards_missing:1\r\n"
        );
        // One shard without a limit: the fleet has none; policies differ: left out.
        let parts = [
            shard(1, 0, "allkeys-lru", ""),
            shard(1, 5, "noeviction", ""),
        ];
        let text = reply.text(&parts);
        assert!(
            text.contains("maxmemory:0\r\nmaxmemory_human:0B\r\n"),
            "{text}"
        );
        assert!(!text.contains("policy"), "{text}");
        assert!(text.ends_with("# Keyspace\r\n"), "{text}");
    }

    #[test]
    fn human_sizes_match_redis() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(941_304), "919.24K");
        assert_eq!(human(7_290_880), "6.95M");
        assert_eq!(human(25_276_502_016), "23.54G");
    }
}
