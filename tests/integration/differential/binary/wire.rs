//! Binary requests and responses on a raw socket, and the comparison of
//! two sides' responses (CAS uniques as a consistent bijection).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The CAS a request carries, resolved per side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CasRef {
    Zero,
    /// A unique neither side ever hands out.
    Bogus,
    /// The unique this side last showed for the key (bogus if none).
    LastSeen,
}

/// A request, before its CAS is resolved for a side.
#[derive(Debug, Clone)]
pub(super) struct Req {
    pub magic: u8,
    pub opcode: u8,
    pub key: Vec<u8>,
    pub extras: Vec<u8>,
    pub value: Vec<u8>,
    pub cas: CasRef,
    pub opaque: u32,
    /// Body length to claim instead of the real one.
    pub body_len: Option<u32>,
}

pub(super) const BOGUS_CAS: u64 = 0x0777_7777_7777;

impl Req {
    pub fn new(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Req {
        Req {
            magic: 0x80,
            opcode,
            key: key.to_vec(),
            extras: extras.to_vec(),
            value: value.to_vec(),
            cas: CasRef::Zero,
            opaque: 0,
            body_len: None,
        }
    }

    pub fn encode(&self, last_cas: &HashMap<Vec<u8>, u64>) -> Vec<u8> {
        let cas = match self.cas {
            CasRef::Zero => 0,
            CasRef::Bogus => BOGUS_CAS,
            CasRef::LastSeen => last_cas.get(&self.key).copied().unwrap_or(BOGUS_CAS),
        };
        let body = self
            .body_len
            .unwrap_or((self.key.len() + self.extras.len() + self.value.len()) as u32);
        let mut out = Vec::with_capacity(24 + body as usize);
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&(self.key.len() as u16).to_be_bytes());
        out.push(self.extras.len() as u8);
        out.push(0);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&body.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&cas.to_be_bytes());
        out.extend_from_slice(&self.extras);
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.value);
        out
    }

    pub fn describe(&self) -> String {
        format!(
            "op={:#04x} key={} extras={} value_len={} cas={:?} opaque={:#x}{}",
            self.opcode,
            memshift_tests::escape(&self.key, 40),
            memshift_tests::escape(&self.extras, 40),
            self.value.len(),
            self.cas,
            self.opaque,
            self.body_len
                .map(|b| format!(" body_len={b}"))
                .unwrap_or_default()
        )
    }
}

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resp {
    pub magic: u8,
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub data_type: u8,
    pub status: u16,
    pub opaque: u32,
    pub cas: u64,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn describe(&self) -> String {
        format!(
            "op={:#04x} status={:#x} key_len={} extras_len={} opaque={:#x} cas={} body={}",
            self.opcode,
            self.status,
            self.key_len,
            self.extras_len,
            self.opaque,
            self.cas,
            memshift_tests::escape(&self.body, 120)
        )
    }
}

pub(super) struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    closed: bool,
}

impl Conn {
    pub fn connect(addr: &str) -> Conn {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_nodelay(true).ok();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .ok();
        Conn {
            stream,
            buf: Vec::new(),
            closed: false,
        }
    }

    /// Write `bytes` in pieces (cut at `cuts`), pausing between them so
    /// that the server reads a request in parts.
    pub fn send_in_pieces(&mut self, bytes: &[u8], cuts: &[usize]) -> std::io::Result<()> {
        let mut at = 0;
        for &cut in cuts.iter().filter(|&&c| c > 0 && c < bytes.len()) {
            if cut <= at {
                continue;
            }
            self.stream.write_all(&bytes[at..cut])?;
            std::thread::sleep(Duration::from_millis(3));
            at = cut;
        }
        self.stream.write_all(&bytes[at..])
    }

    /// Read more bytes; false at end of stream.
    fn fill(&mut self, deadline: Instant) -> Result<bool, String> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Instant::now() > deadline {
                        return Err("timed out".into());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    self.closed = true;
                    return Ok(false);
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// The next complete response in the buffer.
    fn take(&mut self) -> Option<Resp> {
        let h = self.buf.get(..24)?;
        let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if self.buf.len() < 24 + body_len {
            return None;
        }
        let resp = Resp {
            magic: h[0],
            opcode: h[1],
            key_len: u16::from_be_bytes([h[2], h[3]]),
            extras_len: h[4],
            data_type: h[5],
            status: u16::from_be_bytes([h[6], h[7]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
            body: self.buf[24..24 + body_len].to_vec(),
        };
        self.buf.drain(..24 + body_len);
        Some(resp)
    }

    /// Responses up to the one with `opaque` (included).
    pub fn read_until(&mut self, opaque: u32) -> Result<Vec<Resp>, (Vec<Resp>, String)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut out = Vec::new();
        loop {
            while let Some(r) = self.take() {
                let done = r.opaque == opaque;
                out.push(r);
                if done {
                    return Ok(out);
                }
            }
            match self.fill(deadline) {
                Ok(true) => {}
                Ok(false) => return Err((out, "connection closed".into())),
                Err(e) => return Err((out, e)),
            }
        }
    }

    /// Everything until the server closes (or `limit` passes): the
    /// responses, any trailing bytes, and whether it closed.
    pub fn read_to_end(&mut self, limit: Duration) -> (Vec<Resp>, Vec<u8>, bool) {
        let deadline = Instant::now() + limit;
        while let Ok(true) = self.fill(deadline) {}
        let mut out = Vec::new();
        while let Some(r) = self.take() {
            out.push(r);
        }
        (out, std::mem::take(&mut self.buf), self.closed)
    }
}

/// A bijection between the reference's CAS uniques and the target's.
#[derive(Default)]
pub(super) struct CasMap {
    forward: HashMap<u64, u64>,
    backward: HashMap<u64, u64>,
}

impl CasMap {
    fn check(&mut self, r: u64, t: u64) -> Result<(), String> {
        if (r == 0) != (t == 0) {
            return Err(format!("cas {r} vs {t}"));
        }
        match (self.forward.get(&r), self.backward.get(&t)) {
            (None, None) => {
                self.forward.insert(r, t);
                self.backward.insert(t, r);
                Ok(())
            }
            (Some(&t2), _) if t2 == t => Ok(()),
            _ => Err(format!(
                "cas {r} (reference) vs {t} (target) breaks the mapping"
            )),
        }
    }
}

/// Compare two response lists; the index of the first difference and why.
pub(super) fn compare(cas: &mut CasMap, r: &[Resp], t: &[Resp]) -> Result<(), (usize, String)> {
    for (i, (a, b)) in r.iter().zip(t).enumerate() {
        let same_shape = a.magic == b.magic
            && a.opcode == b.opcode
            && a.status == b.status
            && a.key_len == b.key_len
            && a.extras_len == b.extras_len
            && a.data_type == b.data_type
            && a.opaque == b.opaque;
        if !same_shape {
            return Err((i, "header differs".into()));
        }
        // Version: memshift says which version it is.
        let version = a.opcode == 0x0b && a.status == 0;
        if !version && a.body != b.body {
            return Err((i, "body differs".into()));
        }
        cas.check(a.cas, b.cas).map_err(|e| (i, e))?;
    }
    if r.len() != t.len() {
        return Err((
            r.len().min(t.len()),
            format!("{} responses vs {}", r.len(), t.len()),
        ));
    }
    Ok(())
}

pub(super) fn render(resps: &[Resp]) -> String {
    let mut s = String::new();
    for (i, r) in resps.iter().enumerate() {
        s.push_str(&format!("      [{i}] {}\n", r.describe()));
    }
    if resps.is_empty() {
        s.push_str("      (nothing)\n");
    }
    s
}
