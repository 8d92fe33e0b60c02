//! Request encoding and incremental reply parsing, memcached text protocol,
//! memcached's binary protocol (`--protocol binary`: Get, or GetKQ per key
//! and a Noop for multi-gets; Set; Version) and (to load Redis directly with
//! the same generator) RESP.
//!
//! Replies are validated, not just framed: a get's `VALUE` lines must name
//! requested keys in request order, data blocks must end in `\r\n`, a set must
//! answer `STORED`. Anything else is an error of some kind, never a panic.

use memchr::memmem;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Memcache,
    /// memcached's binary protocol.
    Binary,
    Redis,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Memcache => "memcache",
            Protocol::Binary => "binary",
            Protocol::Redis => "redis",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `get k1 .. kn` / `GET k` / `MGET k1 .. kn`.
    Get,
    Set,
    /// `version` / `PING`: checks an idle connection is still served.
    Probe,
}

/// A complete, well-framed reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Values {
        hits: u32,
        misses: u32,
    },
    Stored,
    Probed,
    ServerError,
    ClientError,
    /// memcached's bare `ERROR` (unknown command).
    Error,
    /// Well framed but not what this request should get (e.g. `NOT_STORED`).
    Other,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    Incomplete,
    /// Bytes consumed and the reply.
    Done(usize, Reply),
    /// The stream cannot be trusted any more (the connection is reopened).
    Bad(String),
}

/// Encodes requests into a write buffer.
pub struct Encoder {
    pub protocol: Protocol,
    prefix: Vec<u8>,
    value: Vec<u8>,
}

impl Encoder {
    pub fn new(protocol: Protocol, prefix: &str, value_size: usize) -> Encoder {
        // A recognisable, non-constant pattern (and no "\r\n" inside).
        let value = (0..value_size).map(|i| b'a' + (i % 26) as u8).collect();
        Encoder {
            protocol,
            prefix: prefix.as_bytes().to_vec(),
            value,
        }
    }

    fn key_len(&self, id: u64) -> usize {
        self.prefix.len() + digits(id)
    }

    fn put_key(&self, out: &mut Vec<u8>, id: u64) {
        out.extend_from_slice(&self.prefix);
        put_u64(out, id);
    }

    fn put_bulk_key(&self, out: &mut Vec<u8>, id: u64) {
        out.push(b'$');
        put_u64(out, self.key_len(id) as u64);
        out.extend_from_slice(b"\r\n");
        self.put_key(out, id);
        out.extend_from_slice(b"\r\n");
    }

    /// A binary request header (opaque 0, CAS 0).
    fn put_binary_header(
        &self,
        out: &mut Vec<u8>,
        opcode: u8,
        key: usize,
        extras: u8,
        value: usize,
    ) {
        out.extend_from_slice(&[0x80, opcode]);
        out.extend_from_slice(&(key as u16).to_be_bytes());
        out.extend_from_slice(&[extras, 0, 0, 0]);
        out.extend_from_slice(&((key + usize::from(extras) + value) as u32).to_be_bytes());
        out.extend_from_slice(&[0; 12]);
    }

    pub fn get(&self, out: &mut Vec<u8>, ids: &[u64]) {
        match self.protocol {
            Protocol::Binary if ids.len() == 1 => {
                self.put_binary_header(out, 0x00, self.key_len(ids[0]), 0, 0);
                self.put_key(out, ids[0]);
            }
            Protocol::Binary => {
                // GetKQ per key (misses say nothing), then a Noop.
                for &id in ids {
                    self.put_binary_header(out, 0x0d, self.key_len(id), 0, 0);
                    self.put_key(out, id);
                }
                self.put_binary_header(out, 0x0a, 0, 0, 0);
            }
            Protocol::Memcache => {
                out.extend_from_slice(b"get");
                for &id in ids {
                    out.push(b' ');
                    self.put_key(out, id);
                }
                out.extend_from_slice(b"\r\n");
            }
            Protocol::Redis => {
                out.push(b'*');
                put_u64(out, ids.len() as u64 + 1);
                if ids.len() == 1 {
                    out.extend_from_slice(b"\r\n$3\r\nGET\r\n");
                } else {
                    out.extend_from_slice(b"\r\n$4\r\nMGET\r\n");
                }
                for &id in ids {
                    self.put_bulk_key(out, id);
                }
            }
        }
    }

    pub fn set(&self, out: &mut Vec<u8>, id: u64) {
        match self.protocol {
            Protocol::Binary => {
                self.put_binary_header(out, 0x01, self.key_len(id), 8, self.value.len());
                out.extend_from_slice(&[0; 8]);
                self.put_key(out, id);
                out.extend_from_slice(&self.value);
                return;
            }
            Protocol::Memcache => {
                out.extend_from_slice(b"set ");
                self.put_key(out, id);
                out.extend_from_slice(b" 0 0 ");
                put_u64(out, self.value.len() as u64);
                out.extend_from_slice(b"\r\n");
            }
            Protocol::Redis => {
                out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
                self.put_bulk_key(out, id);
                out.push(b'$');
                put_u64(out, self.value.len() as u64);
                out.extend_from_slice(b"\r\n");
            }
        }
        out.extend_from_slice(&self.value);
        out.extend_from_slice(b"\r\n");
    }

    pub fn probe(&self, out: &mut Vec<u8>) {
        match self.protocol {
            Protocol::Memcache => out.extend_from_slice(b"version\r\n"),
            Protocol::Binary => self.put_binary_header(out, 0x0b, 0, 0, 0),
            Protocol::Redis => out.extend_from_slice(b"*1\r\n$4\r\nPING\r\n"),
        }
    }

    /// Parses the reply to the oldest outstanding request. `keys` are that
    /// request's key ids (gets only), in request order.
    pub fn parse<'k>(
        &self,
        buf: &[u8],
        kind: Kind,
        nkeys: usize,
        keys: impl Iterator<Item = &'k u64>,
    ) -> Parsed {
        match self.protocol {
            Protocol::Memcache => self.parse_memcache(buf, kind, nkeys, keys),
            Protocol::Binary => parse_binary(buf, kind, nkeys),
            Protocol::Redis => parse_redis(buf, kind, nkeys),
        }
    }

    fn parse_memcache<'k>(
        &self,
        buf: &[u8],
        kind: Kind,
        nkeys: usize,
        mut keys: impl Iterator<Item = &'k u64>,
    ) -> Parsed {
        let mut pos = 0;
        let mut hits = 0u32;
        loop {
            let Some(eol) = find_crlf(&buf[pos..]) else {
                return if buf.len() - pos > 64 * 1024 {
                    Parsed::Bad("reply line longer than 64 KiB".into())
                } else {
                    Parsed::Incomplete
                };
            };
            let line = &buf[pos..pos + eol];
            let next = pos + eol + 2;
            if let Some(r) = error_line(line) {
                return Parsed::Done(next, r);
            }
            match kind {
                Kind::Set => {
                    let r = if line == b"STORED" {
                        Reply::Stored
                    } else if matches!(line, b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND") {
                        Reply::Other
                    } else {
                        return bad("set", line);
                    };
                    return Parsed::Done(next, r);
                }
                Kind::Probe => {
                    if line.starts_with(b"VERSION ") {
                        return Parsed::Done(next, Reply::Probed);
                    }
                    return bad("version", line);
                }
                Kind::Get => {}
            }
            if line == b"END" {
                let misses = (nkeys as u32).saturating_sub(hits);
                return Parsed::Done(next, Reply::Values { hits, misses });
            }
            let Some(rest) = line.strip_prefix(b"VALUE ") else {
                return bad("get", line);
            };
            // VALUE <key> <flags> <bytes> [<cas>]
            let mut f = rest.split(|&b| b == b' ');
            let (Some(key), Some(flags), Some(len)) = (f.next(), f.next(), f.next()) else {
                return bad("get", line);
            };
            let (Some(_), Some(len)) = (parse_u64(flags), parse_u64(len)) else {
                return bad("get", line);
            };
            let Some(id) = key.strip_prefix(self.prefix.as_slice()).and_then(parse_u64) else {
                return bad("get (foreign key)", line);
            };
            // Hits come back in request order; skip the misses before this one.
            if !keys.by_ref().any(|&k| k == id) {
                return bad("get (key not requested, or out of order)", line);
            }
            let Some(end) = (len as usize).checked_add(next + 2) else {
                return bad("get", line);
            };
            if buf.len() < end {
                return Parsed::Incomplete;
            }
            if &buf[end - 2..end] != b"\r\n" {
                return Parsed::Bad("data block not terminated by \\r\\n".into());
            }
            hits += 1;
            pos = end;
        }
    }
}

/// The binary responses to one request: Get (hit or `Not found`), the
/// GetKQ hits up to the Noop of a multi-get, Set, Version.
fn parse_binary(buf: &[u8], kind: Kind, nkeys: usize) -> Parsed {
    let mut pos = 0;
    let mut hits = 0u32;
    loop {
        let Some(h) = buf.get(pos..pos + 24) else {
            return Parsed::Incomplete;
        };
        if h[0] != 0x81 {
            return Parsed::Bad(format!("binary response magic {:#04x}", h[0]));
        }
        let (opcode, status) = (h[1], u16::from_be_bytes([h[6], h[7]]));
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let end = pos + 24 + body;
        if buf.len() < end {
            return Parsed::Incomplete;
        }
        let failed = match status {
            0 => None,
            0x86 | 0x82 => Some(Reply::ServerError),
            0x04 | 0x81 => Some(Reply::ClientError),
            _ => None,
        };
        match (kind, opcode) {
            (_, _) if failed.is_some() && !(kind == Kind::Get && status == 1) => {
                return Parsed::Done(end, failed.unwrap_or(Reply::Other));
            }
            (Kind::Set, 0x01) if status == 0 => return Parsed::Done(end, Reply::Stored),
            (Kind::Set, 0x01) => return Parsed::Done(end, Reply::Other),
            (Kind::Probe, 0x0b) => return Parsed::Done(end, Reply::Probed),
            (Kind::Get, 0x00) => {
                let hit = u32::from(status == 0);
                let reply = Reply::Values {
                    hits: hit,
                    misses: 1 - hit,
                };
                return Parsed::Done(end, reply);
            }
            (Kind::Get, 0x0d) if status == 0 => hits += 1,
            (Kind::Get, 0x0a) => {
                let misses = (nkeys as u32).saturating_sub(hits);
                return Parsed::Done(end, Reply::Values { hits, misses });
            }
            _ => return Parsed::Bad(format!("unexpected binary response opcode {opcode:#04x}")),
        }
        pos = end;
    }
}

fn parse_redis(buf: &[u8], kind: Kind, nkeys: usize) -> Parsed {
    let Some(eol) = find_crlf(buf) else {
        return if buf.len() > 64 * 1024 {
            Parsed::Bad("reply line longer than 64 KiB".into())
        } else {
            Parsed::Incomplete
        };
    };
    let line = &buf[..eol];
    let next = eol + 2;
    if line.first() == Some(&b'-') {
        return Parsed::Done(next, Reply::ServerError);
    }
    match kind {
        Kind::Set => match line {
            b"+OK" => Parsed::Done(next, Reply::Stored),
            _ => bad("SET", line),
        },
        Kind::Probe => match line {
            b"+PONG" => Parsed::Done(next, Reply::Probed),
            _ => bad("PING", line),
        },
        Kind::Get if nkeys == 1 => match bulk(buf, 0) {
            Ok(Some((end, hit))) => Parsed::Done(
                end,
                Reply::Values {
                    hits: hit as u32,
                    misses: !hit as u32,
                },
            ),
            Ok(None) => Parsed::Incomplete,
            Err(e) => Parsed::Bad(e),
        },
        Kind::Get => {
            let n = line.strip_prefix(b"*").and_then(parse_u64);
            if n != Some(nkeys as u64) {
                return bad("MGET", line);
            }
            let (mut pos, mut hits) = (next, 0u32);
            for _ in 0..nkeys {
                match bulk(buf, pos) {
                    Ok(Some((end, hit))) => {
                        hits += hit as u32;
                        pos = end;
                    }
                    Ok(None) => return Parsed::Incomplete,
                    Err(e) => return Parsed::Bad(e),
                }
            }
            let misses = nkeys as u32 - hits;
            Parsed::Done(pos, Reply::Values { hits, misses })
        }
    }
}

/// A RESP bulk string at `pos`: `Some((end, hit))`, `None` if incomplete.
fn bulk(buf: &[u8], pos: usize) -> Result<Option<(usize, bool)>, String> {
    let Some(eol) = find_crlf(&buf[pos..]) else {
        return Ok(None);
    };
    let line = &buf[pos..pos + eol];
    let next = pos + eol + 2;
    if line == b"$-1" {
        return Ok(Some((next, false)));
    }
    let len = line
        .strip_prefix(b"$")
        .and_then(parse_u64)
        .ok_or_else(|| format!("expected a bulk string, got {:?}", lossy(line)))?;
    let end = (len as usize)
        .checked_add(next + 2)
        .ok_or("bulk length overflow")?;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err("bulk string not terminated by \\r\\n".into());
    }
    Ok(Some((end, true)))
}

fn error_line(line: &[u8]) -> Option<Reply> {
    if line.starts_with(b"SERVER_ERROR") {
        Some(Reply::ServerError)
    } else if line.starts_with(b"CLIENT_ERROR") {
        Some(Reply::ClientError)
    } else if line == b"ERROR" {
        Some(Reply::Error)
    } else {
        None
    }
}

fn bad(what: &str, line: &[u8]) -> Parsed {
    Parsed::Bad(format!("unexpected reply to {what}: {:?}", lossy(line)))
}

fn lossy(line: &[u8]) -> String {
    String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned()
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    memmem::find(b, b"\r\n")
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    b.iter().try_fold(0u64, |acc, &c| {
        c.is_ascii_digit()
            .then_some(())
            .and_then(|_| acc.checked_mul(10))
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
    })
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

fn put_u64(out: &mut Vec<u8>, n: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut n = n;
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mc() -> Encoder {
        Encoder::new(Protocol::Memcache, "key:", 3)
    }

    #[test]
    fn encodes() {
        let (m, r) = (mc(), Encoder::new(Protocol::Redis, "k", 2));
        let mut out = Vec::new();
        m.get(&mut out, &[1, 22]);
        m.set(&mut out, 7);
        assert_eq!(out, b"get key:1 key:22\r\nset key:7 0 0 3\r\nabc\r\n");
        out.clear();
        r.get(&mut out, &[10]);
        r.get(&mut out, &[1, 2]);
        r.set(&mut out, 3);
        assert_eq!(
            out,
            &b"*2\r\n$3\r\nGET\r\n$3\r\nk10\r\n*3\r\n$4\r\nMGET\r\n$2\r\nk1\r\n$2\r\nk2\r\n\
               *3\r\n$3\r\nSET\r\n$2\r\nk3\r\n$2\r\nab\r\n"[..]
        );
    }

    #[test]
    fn memcache_get_replies() {
        let m = mc();
        let keys = [1u64, 2, 3];
        let full = b"VALUE key:1 0 3\r\nabc\r\nVALUE key:3 5 2 99\r\nxy\r\nEND\r\nrest";
        let p = |b: &[u8]| m.parse(b, Kind::Get, 3, keys.iter());
        assert_eq!(
            p(full),
            Parsed::Done(full.len() - 4, Reply::Values { hits: 2, misses: 1 })
        );
        for cut in 0..full.len() - 4 {
            assert_eq!(p(&full[..cut]), Parsed::Incomplete, "cut {cut}");
        }
        assert!(matches!(
            p(b"VALUE key:3 0 1\r\na\r\nVALUE key:1 0 1\r\nb\r\n"),
            Parsed::Bad(_)
        ));
        assert!(matches!(p(b"VALUE key:9 0 1\r\na\r\n"), Parsed::Bad(_)));
        assert!(matches!(p(b"VALUE key:1 0 1\r\nabc\r\n"), Parsed::Bad(_)));
        assert!(matches!(p(b"STORED\r\n"), Parsed::Bad(_)));
        assert_eq!(
            p(b"SERVER_ERROR down\r\n"),
            Parsed::Done(19, Reply::ServerError)
        );
        assert_eq!(p(b"ERROR\r\n"), Parsed::Done(7, Reply::Error));
        assert_eq!(
            m.parse(b"STORED\r\n", Kind::Set, 0, [].iter()),
            Parsed::Done(8, Reply::Stored)
        );
        assert_eq!(
            m.parse(b"CLIENT_ERROR x\r\n", Kind::Set, 0, [].iter()),
            Parsed::Done(16, Reply::ClientError)
        );
        assert_eq!(
            m.parse(b"VERSION 1.6\r\n", Kind::Probe, 0, [].iter()),
            Parsed::Done(13, Reply::Probed)
        );
    }

    #[test]
    fn redis_replies() {
        let r = Encoder::new(Protocol::Redis, "k", 2);
        let p = |b: &[u8], k, n| r.parse(b, k, n, [].iter());
        assert_eq!(p(b"+OK\r\n", Kind::Set, 0), Parsed::Done(5, Reply::Stored));
        assert_eq!(
            p(b"$-1\r\n", Kind::Get, 1),
            Parsed::Done(5, Reply::Values { hits: 0, misses: 1 })
        );
        assert_eq!(p(b"$2\r\nab", Kind::Get, 1), Parsed::Incomplete);
        let m = b"*2\r\n$2\r\nab\r\n$-1\r\n";
        assert_eq!(
            p(m, Kind::Get, 2),
            Parsed::Done(m.len(), Reply::Values { hits: 1, misses: 1 })
        );
        assert_eq!(p(&m[..10], Kind::Get, 2), Parsed::Incomplete);
        assert!(matches!(p(b"*3\r\n", Kind::Get, 2), Parsed::Bad(_)));
        assert_eq!(
            p(b"-ERR x\r\n", Kind::Get, 2),
            Parsed::Done(8, Reply::ServerError)
        );
        assert_eq!(
            p(b"+PONG\r\n", Kind::Probe, 0),
            Parsed::Done(7, Reply::Probed)
        );
    }
}
