//! String commands on the values memcached clients share (docs/storage.md,
//! "One item, two protocols"): reads take memshift's item header off,
//! writes put one on (flags 0, a fresh CAS), read-modify-writes run Redis'
//! own command on the data inside a script that keeps the flags and
//! changes the CAS.

use bytes::Bytes;
use memshift_protocol::resp::request::string2ll;
use memshift_protocol::resp::CommandWriter;

use super::super::pending::Render;
use super::super::RespSession;
use crate::redis::encoding;
use crate::redis::scripts;

impl RespSession {
    pub(super) fn strings(&mut self, upper: &[u8], raw: Option<Bytes>) {
        let n = self.args.len();
        match upper {
            // Inside MULTI, or WATCHing, reads skip the near cache (`transaction`).
            b"GET"
                if n == 2
                    && crate::near_cache::get().is_some()
                    && !self.txn.bypass_near_cache() =>
            {
                self.get_near(raw)
            }
            b"GET" | b"GETDEL" if n == 2 => self.send_as_is(raw, Render::Value),
            b"GETEX" if n >= 2 => self.send_as_is(raw, Render::Value),
            // OK, nil, or (with GET) the old value: `Value` renders all three.
            b"SET" if n >= 3 => self.set_with_header(b"SET", &[], Render::Value),
            b"SETNX" if n == 3 => self.set_with_header(b"SET", b"NX", Render::SetNx),
            b"GETSET" if n == 3 => self.set_with_header(b"SET", b"GET", Render::Value),
            b"SETEX" | b"PSETEX" if n == 4 => self.setex(),
            b"INCR" | b"DECR" if n == 2 => self.wrapped(b"s", Render::IntegerFromBulk),
            b"INCRBY" | b"DECRBY" if n == 3 => self.wrapped(b"s", Render::IntegerFromBulk),
            b"INCRBYFLOAT" if n == 3 => self.wrapped(b"s", Render::Relay(Default::default())),
            b"APPEND" if n == 3 => self.wrapped(b"r", Render::Relay(Default::default())),
            b"SETRANGE" if n == 4 => self.wrapped(b"r", Render::Relay(Default::default())),
            b"STRLEN" if n == 2 => self.strlen(),
            b"GETRANGE" | b"SUBSTR" if n == 4 => self.getrange(),
            _ => self.arity_error(),
        }
    }

    /// The request as it came; the reply rendered by `render`.
    fn send_as_is(&mut self, raw: Option<Bytes>, render: Render) {
        let key = self.args[1].clone();
        let cmd = raw.unwrap_or_else(|| self.encode_args());
        self.send_for_key(&key, Some(cmd), render);
    }

    /// `<verb> key <header+value> [args[3..]] [extra]`: the value gets
    /// memshift's header with flags 0 and a new CAS.
    fn set_with_header(&mut self, verb: &[u8], extra: &[u8], render: Render) {
        let header = encoding::header(0, self.cas.next_cas());
        let key = self.args[1].clone();
        let rest = self.args.len() - 3;
        self.cmd_buf.clear();
        let mut w =
            CommandWriter::new(&mut self.cmd_buf, 3 + rest + usize::from(!extra.is_empty()));
        w.arg(verb).arg(&key).arg_parts(&[&header, &self.args[2]]);
        for a in &self.args[3..] {
            w.arg(a);
        }
        if !extra.is_empty() {
            w.arg(extra);
        }
        drop(w);
        self.send_for_key(&key, None, render);
    }

    /// SETEX/PSETEX key ttl value: the value with its header.
    fn setex(&mut self) {
        let header = encoding::header(0, self.cas.next_cas());
        let key = self.args[1].clone();
        self.cmd_buf.clear();
        CommandWriter::new(&mut self.cmd_buf, 4)
            .arg(&self.args[0])
            .arg(&key)
            .arg(&self.args[2])
            .arg_parts(&[&header, &self.args[3]]);
        self.send_for_key(&key, None, Render::Relay(Default::default()));
    }

    /// The command in `self.args` run on the item's data by
    /// [`scripts::RESP_WRAPPED`] (`mode`: "s" replies the stored data).
    fn wrapped(&mut self, mode: &[u8], render: Render) {
        let cas = self.cas.next_cas().to_be_bytes();
        let key = self.args[1].clone();
        let extra = self.args.len() - 2;
        self.cmd_buf.clear();
        let mut w = CommandWriter::new(&mut self.cmd_buf, 7 + extra);
        w.arg(b"EVALSHA")
            .arg(scripts::sha(scripts::RESP_WRAPPED_SCRIPT))
            .arg(b"1")
            .arg(&key)
            .arg(&cas)
            .arg(mode)
            .arg(&self.args[0]);
        for a in &self.args[2..] {
            w.arg(a);
        }
        drop(w);
        self.send_for_key(&key, None, render);
    }

    fn strlen(&mut self) {
        let key = self.args[1].clone();
        self.cmd_buf.clear();
        CommandWriter::new(&mut self.cmd_buf, 4)
            .arg(b"EVALSHA")
            .arg(scripts::sha(scripts::RESP_STRLEN_SCRIPT))
            .arg(b"1")
            .arg(&key);
        self.send_for_key(&key, None, Render::Relay(Default::default()));
    }

    /// GETRANGE reads the value and cuts the data here (Redis' rules, on
    /// the data without its header).
    fn getrange(&mut self) {
        let (Some(start), Some(end)) = (string2ll(&self.args[2]), string2ll(&self.args[3])) else {
            return self.push_error(b"ERR value is not an integer or out of range");
        };
        let key: Bytes = self.args[1].clone();
        self.cmd_buf.clear();
        CommandWriter::new(&mut self.cmd_buf, 2)
            .arg(b"GET")
            .arg(&key);
        self.send_for_key(&key, None, Render::Range { start, end });
    }
}
