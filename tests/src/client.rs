//! A small blocking memcached text-protocol client for tests: raw bytes out,
//! replies parsed just enough to frame them (a `VALUE` header announces its
//! data length, so data can never be mistaken for a reply line).

use std::io::{self, Read, Write};

use crate::socket::Socket;
use std::time::{Duration, Instant};

/// Default per-read timeout.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest data block the client accepts in a `VALUE` line.
const MAX_BLOCK: usize = 64 << 20;

/// One framed piece of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// A reply line, terminator included (`STORED\r\n`, `END\r\n`, ...).
    Line(Vec<u8>),
    /// `VALUE <key> <flags> <bytes>[ <cas>]\r\n` and its data block.
    Value {
        /// The header line, terminator included.
        header: Vec<u8>,
        key: Vec<u8>,
        flags: Vec<u8>,
        cas: Option<u64>,
        /// The data block as received: `<bytes>` bytes plus the two trailer
        /// bytes (normally `\r\n`).
        block: Vec<u8>,
    },
}

impl Unit {
    /// The bytes this unit was made of.
    pub fn raw(&self) -> Vec<u8> {
        match self {
            Unit::Line(l) => l.clone(),
            Unit::Value { header, block, .. } => {
                let mut v = header.clone();
                v.extend_from_slice(block);
                v
            }
        }
    }

    pub fn is_line(&self, line: &[u8]) -> bool {
        matches!(self, Unit::Line(l) if l == line)
    }

    pub fn line_starts_with(&self, prefix: &[u8]) -> bool {
        matches!(self, Unit::Line(l) if l.starts_with(prefix))
    }

    /// The item data of a `VALUE` unit (without the trailer).
    pub fn data(&self) -> Option<&[u8]> {
        match self {
            Unit::Value { block, .. } => Some(&block[..block.len().saturating_sub(2)]),
            Unit::Line(_) => None,
        }
    }
}

/// A blocking connection speaking the memcached text protocol.
pub struct McClient {
    stream: Socket,
    buf: Vec<u8>,
    pos: usize,
}

impl McClient {
    /// Connects with the default timeouts (5 s per read/write).
    pub fn connect(addr: &str) -> io::Result<Self> {
        Self::connect_with_timeout(addr, READ_TIMEOUT)
    }

    /// `addr`: `"ip:port"` or `"unix:/path"`.
    pub fn connect_with_timeout(addr: &str, timeout: Duration) -> io::Result<Self> {
        let stream = Socket::connect(addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout.max(Duration::from_secs(10))))?;
        Ok(McClient {
            stream,
            buf: Vec::with_capacity(64 * 1024),
            pos: 0,
        })
    }

    /// Changes the per-read timeout.
    pub fn set_read_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))
    }

    /// A second handle on the socket (e.g. for a writer thread).
    pub fn try_clone_stream(&self) -> io::Result<Socket> {
        self.stream.try_clone()
    }

    /// Whether bytes of a reply not yet returned are buffered.
    pub fn has_buffered(&self) -> bool {
        self.pos < self.buf.len()
    }

    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Reads more bytes into the buffer; `Ok(0)` at end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 1 << 20 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let mut chunk = [0u8; 64 * 1024];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    fn eof() -> io::Error {
        io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection")
    }

    /// Reads one line, `\n` included.
    pub fn read_line(&mut self) -> io::Result<Vec<u8>> {
        let mut searched = self.pos;
        loop {
            if let Some(i) = self.buf[searched..].iter().position(|&b| b == b'\n') {
                let end = searched + i + 1;
                let line = self.buf[self.pos..end].to_vec();
                self.pos = end;
                return Ok(line);
            }
            searched = self.buf.len();
            if self.buf.len() - self.pos > MAX_BLOCK {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "reply line longer than 64 MiB",
                ));
            }
            let before = self.pos;
            if self.fill()? == 0 {
                return Err(Self::eof());
            }
            // `fill` may have compacted the buffer.
            searched -= before - self.pos;
        }
    }

    /// Reads exactly `n` bytes.
    pub fn read_exact_n(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() - self.pos < n {
            if self.fill()? == 0 {
                return Err(Self::eof());
            }
        }
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.pos += n;
        Ok(out)
    }

    /// Reads one framed unit: a line, or a `VALUE` header and its block.
    pub fn read_unit(&mut self) -> io::Result<Unit> {
        let line = self.read_line()?;
        match parse_value_header(&line) {
            Some((key, flags, len, cas)) => {
                let block = self.read_exact_n(len + 2)?;
                Ok(Unit::Value {
                    header: line,
                    key,
                    flags,
                    cas,
                    block,
                })
            }
            None => Ok(Unit::Line(line)),
        }
    }

    /// Reads one complete reply: a single line, or `VALUE`/`STAT` units up
    /// to and including `END`.
    pub fn read_reply(&mut self) -> io::Result<Vec<Unit>> {
        let mut units = Vec::new();
        loop {
            let unit = self.read_unit()?;
            let more = match &unit {
                Unit::Value { .. } => true,
                Unit::Line(l) => l.starts_with(b"STAT "),
            };
            units.push(unit);
            if !more {
                return Ok(units);
            }
            if units.len() > 1_000_000 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "reply has more than a million units",
                ));
            }
        }
    }

    /// Sends a request and returns its reply's raw bytes.
    pub fn request(&mut self, req: &[u8]) -> io::Result<Vec<u8>> {
        self.send(req)?;
        Ok(self
            .read_reply()?
            .iter()
            .flat_map(|u| u.raw())
            .collect::<Vec<u8>>())
    }

    /// Like [`McClient::request`], as a lossy string (for assertions).
    pub fn request_str(&mut self, req: &[u8]) -> io::Result<String> {
        self.request(req)
            .map(|r| String::from_utf8_lossy(&r).into_owned())
    }

    /// `set` and expect `STORED`.
    pub fn set(&mut self, key: &str, value: &[u8]) -> io::Result<()> {
        let mut req = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        let reply = self.request(&req)?;
        if reply != b"STORED\r\n" {
            return Err(io::Error::other(format!(
                "set {key}: unexpected reply {}",
                escape(&reply, 200)
            )));
        }
        Ok(())
    }

    /// `get` one key: `Some(data)` on a hit.
    pub fn get(&mut self, key: &str) -> io::Result<Option<Vec<u8>>> {
        self.send(format!("get {key}\r\n").as_bytes())?;
        let units = self.read_reply()?;
        match units.as_slice() {
            [Unit::Line(l)] if l == b"END\r\n" => Ok(None),
            [v @ Unit::Value { .. }, end] if end.is_line(b"END\r\n") => {
                Ok(v.data().map(<[u8]>::to_vec))
            }
            other => Err(io::Error::other(format!(
                "get {key}: unexpected reply {}",
                escape(&other.iter().flat_map(Unit::raw).collect::<Vec<u8>>(), 200)
            ))),
        }
    }

    /// Reads whatever arrives until the peer closes the connection or is
    /// silent for `idle`, or `overall` has passed. Returns the bytes and
    /// whether the connection was closed (EOF or reset).
    pub fn read_until_closed_or_idle(
        &mut self,
        idle: Duration,
        overall: Duration,
    ) -> (Vec<u8>, bool) {
        let deadline = Instant::now() + overall;
        let _ = self.stream.set_read_timeout(Some(idle));
        let mut out = self.buf[self.pos..].to_vec();
        self.pos = self.buf.len();
        let mut chunk = [0u8; 16 * 1024];
        let closed = loop {
            if Instant::now() >= deadline {
                break false;
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => break true,
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    break false
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break true,
            }
        };
        let _ = self.stream.set_read_timeout(Some(READ_TIMEOUT));
        (out, closed)
    }
}

/// `(key, flags, bytes, cas)` of a `VALUE` line.
type ValueHeader = (Vec<u8>, Vec<u8>, usize, Option<u64>);

/// Parses `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, or a meta `VA <bytes>
/// <flags>*\r\n` (framed as a value with an empty key and flags).
fn parse_value_header(line: &[u8]) -> Option<ValueHeader> {
    if let Some(body) = line.strip_prefix(b"VA ") {
        let body = body.strip_suffix(b"\r\n")?;
        let len = body.split(|&b| b == b' ').next()?;
        let len: usize = std::str::from_utf8(len).ok()?.parse().ok()?;
        if len > MAX_BLOCK {
            return None;
        }
        return Some((Vec::new(), Vec::new(), len, None));
    }
    let body = line.strip_prefix(b"VALUE ")?.strip_suffix(b"\r\n")?;
    let parts: Vec<&[u8]> = body.split(|&b| b == b' ').collect();
    if parts.len() != 3 && parts.len() != 4 {
        return None;
    }
    let len: usize = std::str::from_utf8(parts[2]).ok()?.parse().ok()?;
    if len > MAX_BLOCK {
        return None;
    }
    let cas = match parts.get(3) {
        Some(c) => Some(std::str::from_utf8(c).ok()?.parse::<u64>().ok()?),
        None => None,
    };
    Some((parts[0].to_vec(), parts[1].to_vec(), len, cas))
}

/// Printable rendering of protocol bytes: `\r`, `\n`, `\t` and non-ASCII
/// escaped; at most `max` input bytes shown, with the total length after.
pub fn escape(bytes: &[u8], max: usize) -> String {
    let mut s = String::new();
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > max {
        s.push_str(&format!("…({} bytes in all)", bytes.len()));
    }
    s
}
