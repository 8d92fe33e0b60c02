//! Commands on every shard: DBSIZE, FLUSHDB, FLUSHALL, SCRIPT LOAD|EXISTS;
//! INFO (`info`) and CONFIG GET (`config`) are dispatched from here.

use bytes::Bytes;
use memshift_protocol::resp::reply as out;

use super::super::pending::{NearAfter, Render};
use super::super::RespSession;

impl RespSession {
    pub(super) fn server(&mut self, upper: &[u8]) {
        match upper {
            b"DBSIZE" if self.args.len() == 1 => self.broadcast(Render::Sum),
            b"FLUSHDB" | b"FLUSHALL" if self.args.len() <= 2 => {
                if !self.proxy.settings.load().allow_flush_all {
                    return self.refuse(
                        "it is disabled by server.allow_flush_all = false (one client could wipe every shard)",
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
            b"CONFIG" => self.config(),
            b"TIME" if self.args.len() == 1 => self.time(),
            _ => self.arity_error(),
        }
    }

    /// TIME: memshift's clock (the shards' may differ by their drift).
    fn time(&mut self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let (secs, micros) = (now.as_secs().to_string(), now.subsec_micros().to_string());
        self.push_bytes(|b| {
            out::array(b, 2);
            out::bulk(b, secs.as_bytes());
            out::bulk(b, micros.as_bytes());
        });
    }

    /// SCRIPT LOAD goes to every shard (EVALSHA may then run on any);
    /// SCRIPT EXISTS asks one (scripts are loaded everywhere together).
    fn script_admin(&mut self) {
        let sub = self.args.get(1).map(|s| s.to_ascii_uppercase());
        match sub.as_deref() {
            Some(b"LOAD") if self.args.len() == 3 => self.broadcast(Render::First),
            Some(b"EXISTS") if self.args.len() >= 3 => {
                let cmd = self.encode_args();
                self.send_to_first(cmd, Render::Relay(Default::default()));
            }
            Some(b"LOAD" | b"EXISTS") => self.arity_error(),
            Some(_) => self.refuse_subcommand(
                "only SCRIPT LOAD (sent to every shard) and SCRIPT EXISTS are proxied; the others act on one Redis server's scripts",
            ),
            None => self.arity_error(),
        }
    }

    /// Send `cmd` to the first shard, for a command any shard answers
    /// alike (SCRIPT EXISTS, OBJECT HELP, Redis' own argument errors).
    pub(super) fn send_to_first(&mut self, cmd: Bytes, render: Render) {
        let routes = self.proxy.router.load();
        let seq = self.push_waiting(render, 1);
        // Inside MULTI (`transaction`): queued for EXEC, not sent.
        let Some(cmd) = self.captured(0, || None, cmd) else {
            return;
        };
        routes
            .redis()
            .send(0, self.lane, cmd, self.reply_to(seq, 0));
    }

    /// Send `self.args` to every shard (every master of a cluster).
    fn broadcast(&mut self, render: Render) {
        let cmd = self.encode_args();
        self.broadcast_cmd(cmd, |_| render);
    }

    /// Send `cmd` to every shard (every master of a cluster), part `i`
    /// to `targets[i]`; `render` is made knowing the targets.
    pub(super) fn broadcast_cmd(&mut self, cmd: Bytes, render: impl FnOnce(&[usize]) -> Render) {
        let routes = self.proxy.router.load();
        let targets = routes.redis().flush_targets();
        if targets.is_empty() {
            return self.push_error(b"ERR memshift: backend unavailable");
        }
        let seq = self.push_waiting(render(&targets), targets.len());
        for (part, shard) in targets.into_iter().enumerate() {
            routes.redis().send(
                shard,
                self.lane,
                cmd.clone(),
                self.reply_to(seq, part as u32),
            );
        }
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
                    "a script must name exactly one key (numkeys 1): it runs on that key's shard, and other keys may live on others",
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
