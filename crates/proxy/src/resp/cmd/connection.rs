//! Connection commands, answered by memshift itself: HELLO, AUTH, PING,
//! ECHO, QUIT, SELECT, CLIENT, COMMAND, RESET.

use bytes::Bytes;
use memshift_protocol::resp::reply::{self as out, RespVersion};
use memshift_protocol::resp::request::string2ll;
use memshift_protocol::resp::CommandWriter;

use super::super::pending::Render;
use super::super::RespSession;
use super::refused;

/// The Redis version memshift reports (HELLO, INFO): the command set it
/// serves is Redis 7.0's.
pub(super) const REDIS_VERSION: &str = "7.0.0";

const WRONGPASS: &[u8] = b"WRONGPASS invalid username-password pair or user is disabled.";

impl RespSession {
    pub(super) fn connection(&mut self, upper: &[u8]) {
        match upper {
            b"PING" => match self.args.len() {
                1 => self.push_bytes(|b| out::simple(b, b"PONG")),
                2 => {
                    let msg = self.args[1].clone();
                    self.push_bytes(|b| out::bulk(b, &msg))
                }
                _ => self.arity_error(),
            },
            b"ECHO" => match self.args.len() {
                2 => {
                    let msg = self.args[1].clone();
                    self.push_bytes(|b| out::bulk(b, &msg))
                }
                _ => self.arity_error(),
            },
            b"QUIT" => {
                self.push_bytes(|b| out::simple(b, b"OK"));
                self.push_ready(Render::Close);
            }
            b"RESET" => {
                self.txn.reset(); // out of MULTI, nothing WATCHed (`transaction`)
                self.version = RespVersion::Resp2;
                self.name = None;
                self.authenticated = self.proxy.settings.load().resp_password.is_none();
                self.push_bytes(|b| out::simple(b, b"RESET"));
            }
            b"SELECT" => self.select(),
            b"AUTH" => self.auth(),
            b"HELLO" => self.hello(),
            b"CLIENT" => self.client(),
            b"COMMAND" => self.command(),
            _ => self.unknown_command(),
        }
    }

    /// Only database 0: the items are shared with the memcached side,
    /// which has one keyspace.
    fn select(&mut self) {
        if self.args.len() != 2 {
            return self.arity_error();
        }
        match string2ll(&self.args[1]) {
            Some(0) => self.push_bytes(|b| out::simple(b, b"OK")),
            // What a client library passing `db` shows its user at connect.
            Some(_) => self.push_error(
                b"ERR SELECT is not supported by memshift: it serves database 0 only (one keyspace, shared with memcached clients); connect without a database number",
            ),
            None => self.push_error(b"ERR value is not an integer or out of range"),
        }
    }

    /// Check `user`/`password` against `server.resp_password` (the only
    /// user is `default`, as in a Redis with `requirepass`).
    fn check_password(&self, user: &[u8], password: &[u8]) -> Result<(), &'static [u8]> {
        match &self.proxy.settings.load().resp_password {
            None => Err(b"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
            Some(expected) => {
                if user.eq_ignore_ascii_case(b"default")
                    && constant_time_eq(expected.as_bytes(), password)
                {
                    Ok(())
                } else {
                    Err(WRONGPASS)
                }
            }
        }
    }

    fn auth(&mut self) {
        let (user, password) = match self.args.len() {
            2 => (Bytes::from_static(b"default"), self.args[1].clone()),
            3 => (self.args[1].clone(), self.args[2].clone()),
            _ => return self.arity_error(),
        };
        match self.check_password(&user, &password) {
            Ok(()) => {
                self.authenticated = true;
                self.push_bytes(|b| out::simple(b, b"OK"))
            }
            Err(e) => self.push_error(e),
        }
    }

    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`.
    fn hello(&mut self) {
        let mut version = self.version;
        if let Some(v) = self.args.get(1) {
            version = match string2ll(v) {
                Some(2) => RespVersion::Resp2,
                Some(3) => RespVersion::Resp3,
                Some(_) => return self.push_error(b"NOPROTO unsupported protocol version"),
                None => {
                    return self
                        .push_error(b"ERR Protocol version is not an integer or out of range")
                }
            };
        }
        let mut i = 2;
        let mut name = None;
        while i < self.args.len() {
            let opt = self.args[i].to_ascii_uppercase();
            match (opt.as_slice(), self.args.len() - i - 1) {
                (b"AUTH", rest) if rest >= 2 => {
                    let (user, pass) = (self.args[i + 1].clone(), self.args[i + 2].clone());
                    if let Err(e) = self.check_password(&user, &pass) {
                        return self.push_error(e);
                    }
                    self.authenticated = true;
                    i += 3;
                }
                (b"SETNAME", rest) if rest >= 1 => {
                    name = Some(self.args[i + 1].clone());
                    i += 2;
                }
                _ => {
                    let mut text = b"ERR Syntax error in HELLO option '".to_vec();
                    super::push_printable(&mut text, &self.args[i], 64);
                    text.push(b'\'');
                    return self.push_error(&text);
                }
            }
        }
        if !self.authenticated {
            return self.push_error(
                b"NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            );
        }
        if let Some(n) = name {
            if !valid_client_name(&n) {
                return self.push_error(
                    b"ERR Client names cannot contain spaces, newlines or special characters.",
                );
            }
            self.name = (!n.is_empty()).then_some(n);
        }
        self.version = version;
        let id = self.id as i64;
        self.push_bytes(|b| {
            out::map(b, version, 7);
            out::bulk(b, b"server");
            out::bulk(b, b"redis");
            out::bulk(b, b"version");
            out::bulk(b, REDIS_VERSION.as_bytes());
            out::bulk(b, b"proto");
            out::integer(b, if version == RespVersion::Resp3 { 3 } else { 2 });
            out::bulk(b, b"id");
            out::integer(b, id);
            out::bulk(b, b"mode");
            out::bulk(b, b"standalone");
            out::bulk(b, b"role");
            out::bulk(b, b"master");
            out::bulk(b, b"modules");
            out::array(b, 0);
        });
    }

    fn client(&mut self) {
        let Some(sub) = self.args.get(1).map(|s| s.to_ascii_uppercase()) else {
            return self.arity_error();
        };
        match sub.as_slice() {
            b"SETNAME" if self.args.len() == 3 => {
                let n = self.args[2].clone();
                if !valid_client_name(&n) {
                    return self.push_error(
                        b"ERR Client names cannot contain spaces, newlines or special characters.",
                    );
                }
                self.name = (!n.is_empty()).then_some(n);
                self.push_bytes(|b| out::simple(b, b"OK"))
            }
            b"GETNAME" if self.args.len() == 2 => {
                let (name, v) = (self.name.clone(), self.version);
                self.push_bytes(|b| match name {
                    Some(n) => out::bulk(b, &n),
                    None => out::null(b, v),
                })
            }
            b"ID" if self.args.len() == 2 => {
                let id = self.id as i64;
                self.push_bytes(|b| out::integer(b, id))
            }
            // Client libraries announce themselves (redis-py, go-redis);
            // accepted, not kept.
            b"SETINFO" if self.args.len() == 4 => {
                let attr = self.args[2].to_ascii_uppercase();
                if attr == b"LIB-NAME" || attr == b"LIB-VER" {
                    self.push_bytes(|b| out::simple(b, b"OK"))
                } else {
                    let mut text = b"ERR Unrecognized option '".to_vec();
                    super::push_printable(&mut text, &self.args[2], 64);
                    text.push(b'\'');
                    self.push_error(&text)
                }
            }
            b"SETNAME" | b"GETNAME" | b"ID" | b"SETINFO" => self.subcommand_arity_error(),
            b"TRACKING" | b"CACHING" | b"TRACKINGINFO" | b"GETREDIR" => {
                self.refuse_subcommand(refused::CLIENT_TRACKING)
            }
            _ => self.refuse_subcommand(refused::CLIENT_OTHER),
        }
    }

    /// COMMAND, COMMAND COUNT, COMMAND DOCS, COMMAND INFO: what memshift
    /// serves. The command table comes from a shard (Redis' own entries),
    /// narrowed to the commands memshift serves.
    fn command(&mut self) {
        let sub = self.args.get(1).map(|s| s.to_ascii_uppercase());
        match sub.as_deref() {
            None => self.command_from_shard(b"COMMAND", false),
            Some(b"COUNT") => {
                let n = super::table::COMMANDS.len() as i64;
                self.push_bytes(|b| out::integer(b, n))
            }
            // Docs are optional for clients (redis-cli uses them for
            // hints): none.
            Some(b"DOCS") => {
                let v = self.version;
                self.push_bytes(|b| out::map(b, v, 0))
            }
            Some(b"INFO") => self.command_from_shard(b"INFO", true),
            Some(b"LIST") => {
                self.push_bytes(|b| {
                    out::array(b, super::table::COMMANDS.len());
                    for c in super::table::COMMANDS {
                        out::bulk(b, c.name.as_bytes());
                    }
                })
            }
            Some(_) => self.refuse_subcommand(
                "only COMMAND, COMMAND COUNT, COMMAND DOCS, COMMAND INFO and COMMAND LIST are answered (from memshift's own command table)",
            ),
        }
    }

    fn command_from_shard(&mut self, sub: &[u8], info: bool) {
        self.cmd_buf.clear();
        let extra = if info { self.args.len() - 2 } else { 0 };
        let mut w = CommandWriter::new(&mut self.cmd_buf, 1 + usize::from(info) + extra);
        w.arg(b"COMMAND");
        if info {
            w.arg(sub);
            for a in &self.args[2..] {
                w.arg(a);
            }
        }
        drop(w);
        let cmd = self.cmd_buf.split().freeze();
        let routes = self.proxy.router.load();
        let seq = self.push_waiting(super::Render::CommandTable { info }, 1);
        routes
            .redis()
            .send(0, self.lane, cmd, self.reply_to(seq, 0));
    }
}

/// Redis: names are printable ASCII without spaces.
fn valid_client_name(n: &[u8]) -> bool {
    n.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
