//! Commands on every shard: DBSIZE, FLUSHDB, FLUSHALL, SCRIPT LOAD|EXISTS;
//! and INFO, answered by memshift.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use memshift_protocol::resp::reply as out;

use super::super::pending::{NearAfter, Render};
use super::super::RespSession;
use super::connection::REDIS_VERSION;

impl RespSession {
    pub(super) fn server(&mut self, upper: &[u8]) {
        match upper {
            b"DBSIZE" if self.args.len() == 1 => self.broadcast(Render::Sum),
            b"FLUSHDB" | b"FLUSHALL" if self.args.len() <= 2 => {
                if !self.proxy.settings.load().allow_flush_all {
                    return self.refuse(
                        "server.allow_flush_all = false (one client could wipe every shard)",
                    );
                }
                if let Some(mode) = self.args.get(1) {
                    if !mode.eq_ignore_ascii_case(b"ASYNC") && !mode.eq_ignore_ascii_case(b"SYNC") {
                        return self.push_error(b"ERR syntax error");
                    }
                }
                crate::stats::bump(&self.proxy.stats.cmd_flush);
                // One keyspace: FLUSHALL is FLUSHDB of database 0 everywhere.
                self.args[0] = Bytes::from_static(b"FLUSHDB");
                self.broadcast(Render::AllOk);
                if crate::near_cache::get().is_some() {
                    // Now and again before the reply (read-your-writes).
                    super::near::drop_all(&self.proxy.router.load());
                    if let Some(p) = self.pending.back_mut() {
                        p.near = NearAfter::Flushed;
                    }
                }
            }
            b"SCRIPT" => self.script_admin(),
            b"INFO" => self.info(),
            _ => self.arity_error(),
        }
    }

    /// SCRIPT LOAD goes to every shard (EVALSHA may then run on any);
    /// SCRIPT EXISTS asks one (scripts are loaded everywhere together).
    fn script_admin(&mut self) {
        let sub = self.args.get(1).map(|s| s.to_ascii_uppercase());
        match sub.as_deref() {
            Some(b"LOAD") if self.args.len() == 3 => self.broadcast(Render::First),
            Some(b"EXISTS") if self.args.len() >= 3 => {
                let cmd = self.encode_args();
                let routes = self.proxy.router.load();
                let seq = self.push_waiting(Render::Relay(Default::default()), 1);
                routes
                    .redis()
                    .send(0, self.lane, cmd, self.reply_to(seq, 0));
            }
            Some(b"LOAD" | b"EXISTS") => self.arity_error(),
            _ => self.refuse("only SCRIPT LOAD and SCRIPT EXISTS are proxied"),
        }
    }

    /// Send `self.args` to every shard (every master of a cluster).
    fn broadcast(&mut self, render: Render) {
        let cmd = self.encode_args();
        let routes = self.proxy.router.load();
        let targets = routes.redis().flush_targets();
        if targets.is_empty() {
            return self.push_error(b"ERR memshift: backend unavailable");
        }
        let seq = self.push_waiting(render, targets.len());
        for (part, shard) in targets.into_iter().enumerate() {
            routes.redis().send(
                shard,
                self.lane,
                cmd.clone(),
                self.reply_to(seq, part as u32),
            );
        }
    }

    /// INFO: memshift's own sections, in Redis' format, with the fields
    /// clients probe (`redis_version`, `redis_mode`, `connected_clients`).
    fn info(&mut self) {
        let stats = &self.proxy.stats;
        let facts = &self.proxy.facts;
        let routes = self.proxy.router.load();
        let shards = routes.redis().shards.len();
        let up = routes.redis().shards.iter().filter(|s| s.is_up()).count();
        let mut s = String::with_capacity(512);
        let _ = write!(
            s,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\n\
             memshift_version:{}\r\nprocess_id:{}\r\nuptime_in_seconds:{}\r\n\
             \r\n# Clients\r\nconnected_clients:{}\r\n\
             \r\n# Stats\r\ntotal_connections_received:{}\r\ntotal_net_input_bytes:{}\r\n\
             total_net_output_bytes:{}\r\n\
             \r\n# Replication\r\nrole:master\r\n\
             \r\n# Memshift\r\nmigration_phase:{}\r\nredis_shards:{shards}\r\nredis_shards_up:{up}\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            facts.started.elapsed().as_secs(),
            stats.curr_connections.load(Ordering::Relaxed),
            stats.total_connections.load(Ordering::Relaxed),
            stats.bytes_read.load(Ordering::Relaxed),
            stats.bytes_written.load(Ordering::Relaxed),
            routes.migration().phase.as_str(),
        );
        crate::redis::sentinel::render_info(&routes.redis().shards, &mut s);
        self.push_bytes(|b| out::bulk(b, s.as_bytes()));
    }

    /// EVAL/EVALSHA(_RO) script numkeys key [key ...] arg ...: one key,
    /// run on its shard.
    pub(super) fn script(&mut self, raw: Option<Bytes>) {
        if self.args.len() < 3 {
            return self.arity_error();
        }
        match memshift_protocol::resp::request::string2ll(&self.args[2]) {
            Some(1) if self.args.len() >= 4 => {}
            Some(1) => {
                return self.push_error(b"ERR Number of keys can't be greater than number of args")
            }
            Some(n) if n < 0 => return self.push_error(b"ERR Number of keys can't be negative"),
            Some(_) => {
                return self.refuse(
                    "a script must name exactly one key (numkeys = 1), to run on that key's shard",
                )
            }
            None => return self.push_error(b"ERR value is not an integer or out of range"),
        }
        let key = self.args[3].clone();
        let cmd = match raw {
            Some(raw) => raw,
            None => self.encode_args(),
        };
        self.send_for_key(&key, Some(cmd), Render::Relay(Default::default()));
    }
}
