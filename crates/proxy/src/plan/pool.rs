//! Reading one memcached server for `memshift plan`: a connection of its
//! own with a short connect and reply deadline (a dead or foreign server
//! fails the plan at once), the `stats` families, and the exact size and
//! TTL of sampled keys (`mg <key> s t f`, pipelined, rate-limited).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use memshift_protocol::memcache::client::{parse_reply, MetaStatus, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::report::ServerReport;
use super::PlanError;

/// Connect and per-reply deadline: `plan` fails fast on a server that is
/// down or does not speak memcached.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// `mg` requests per pipelined batch.
const LOOKUP_BATCH: usize = 100;

/// One server's `stats`, `stats settings`, `stats slabs` and `stats items`
/// (name → value, the families merged; names are distinct across them).
#[derive(Debug, Clone, Default)]
pub struct ServerStats {
    pub addr: String,
    pub stats: BTreeMap<String, String>,
}

impl ServerStats {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.stats.get(name).map(String::as_str)
    }

    pub fn num(&self, name: &str) -> u64 {
        self.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// `curr_items`.
    pub fn items(&self) -> u64 {
        self.num("curr_items")
    }

    /// Bytes of slab chunks in use less the bytes items asked for: what
    /// memcached loses to its slab classes' rounding.
    pub fn slab_waste(&self) -> u64 {
        let mut used = 0u64;
        let mut requested = 0u64;
        for (name, value) in &self.stats {
            let v: u64 = value.parse().unwrap_or(0);
            if let Some(class) = name.strip_suffix(":used_chunks") {
                used += v * self.num(&format!("{class}:chunk_size"));
            } else if name.starts_with("items:") && name.ends_with(":mem_requested") {
                requested += v;
            }
        }
        used.saturating_sub(requested)
    }

    /// This server's lines of the report.
    pub fn report(&self) -> ServerReport {
        ServerReport {
            addr: self.addr.clone(),
            version: self.get("version").unwrap_or("?").to_owned(),
            curr_items: self.items(),
            limit_bytes: self.num("limit_maxbytes"),
            item_bytes: self.num("bytes"),
            malloced_bytes: self.num("total_malloced"),
            slab_waste_bytes: self.slab_waste(),
        }
    }
}

/// A sampled key's exact figures from `mg <key> s t f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyFacts {
    pub data_len: u64,
    pub flags: u32,
    /// Seconds left; `None` when the item never expires.
    pub ttl: Option<i64>,
}

/// A plain connection to one memcached server.
pub struct McConn {
    addr: String,
    stream: TcpStream,
    buf: BytesMut,
    /// Answered `stats` like memcached: later trouble is not a wrong port.
    verified: bool,
}

impl McConn {
    pub async fn connect(addr: &str) -> Result<McConn, PlanError> {
        let unreachable = |reason: String| PlanError::Unreachable {
            addr: addr.to_owned(),
            reason,
        };
        let stream = match tokio::time::timeout(DEADLINE, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => return Err(unreachable(format!("no connection within {DEADLINE:?}"))),
        };
        let _ = stream.set_nodelay(true);
        Ok(McConn {
            addr: addr.to_owned(),
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            verified: false,
        })
    }

    /// An answer that is not what memcached sends: a foreign server before
    /// `stats` succeeded, a broken reply after.
    fn not_memcached(&self, answer: &[u8]) -> PlanError {
        let line = answer.split(|&b| b == b'\n').next().unwrap_or_default();
        let mut shown = String::from_utf8_lossy(line).trim_end().to_owned();
        shown.truncate(80);
        let addr = self.addr.clone();
        if self.verified {
            PlanError::BadReply { addr, reply: shown }
        } else {
            PlanError::NotMemcached {
                addr,
                answer: shown,
            }
        }
    }

    fn unreachable(&self, reason: String) -> PlanError {
        PlanError::Unreachable {
            addr: self.addr.clone(),
            reason,
        }
    }

    /// Reads more bytes, within the deadline.
    async fn fill(&mut self) -> Result<(), PlanError> {
        self.buf.reserve(16 * 1024);
        let read = tokio::time::timeout(DEADLINE, self.stream.read_buf(&mut self.buf)).await;
        match read {
            Ok(Ok(n)) if n > 0 => Ok(()),
            Ok(Err(e)) => Err(self.unreachable(e.to_string())),
            // Closed or silent with part of a reply: that part is the answer.
            _ if !self.buf.is_empty() => Err(self.not_memcached(&self.buf)),
            Ok(_) if self.verified => Err(self.unreachable("closed the connection".into())),
            Ok(_) => Err(self.not_memcached(b"(closed the connection)")),
            Err(_) if self.verified => Err(self.unreachable("no answer within 2s".into())),
            Err(_) => Err(self.not_memcached(b"(no answer to `stats` within 2s)")),
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), PlanError> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| self.unreachable(e.to_string()))
    }

    /// `stats [family]`: the `STAT` lines up to `END`. Anything else (a
    /// Redis `-ERR`, an HTTP reply) means the server is not memcached.
    async fn stats_family(
        &mut self,
        family: &str,
        out: &mut BTreeMap<String, String>,
    ) -> Result<(), PlanError> {
        let cmd = if family.is_empty() {
            "stats\r\n".to_owned()
        } else {
            format!("stats {family}\r\n")
        };
        self.send(cmd.as_bytes()).await?;
        loop {
            let mut used_total = 0;
            loop {
                match parse_reply(&self.buf[used_total..]) {
                    Ok(Some((Response::Stat { name, value }, used))) => {
                        out.insert(
                            String::from_utf8_lossy(name).into_owned(),
                            String::from_utf8_lossy(value).trim().to_owned(),
                        );
                        used_total += used;
                    }
                    Ok(Some((Response::End, used))) => {
                        let _ = self.buf.split_to(used_total + used);
                        return Ok(());
                    }
                    Ok(None) => break,
                    Ok(Some(_)) | Err(_) => return Err(self.not_memcached(&self.buf[used_total..])),
                }
            }
            let _ = self.buf.split_to(used_total);
            self.fill().await?;
        }
    }

    /// Every stats family `plan` reads.
    pub async fn read_stats(&mut self) -> Result<ServerStats, PlanError> {
        let mut stats = BTreeMap::new();
        for family in ["", "settings", "slabs", "items"] {
            self.stats_family(family, &mut stats).await?;
        }
        self.verified = true;
        Ok(ServerStats {
            addr: self.addr.clone(),
            stats,
        })
    }

    /// `mg <key> s t f` for each key, `LOOKUP_BATCH` at a time, at most
    /// `rate` keys per second. `None` for keys gone since the walk.
    pub async fn lookup(
        &mut self,
        keys: &[&[u8]],
        rate: Option<u64>,
    ) -> Result<Vec<Option<KeyFacts>>, PlanError> {
        let started = Instant::now();
        let mut out = Vec::with_capacity(keys.len());
        let mut cmd = Vec::with_capacity(LOOKUP_BATCH * 64);
        for batch in keys.chunks(LOOKUP_BATCH) {
            crate::copy::pace(rate, started, out.len() as u64).await;
            cmd.clear();
            for key in batch {
                encode_meta_size(&mut cmd, key);
            }
            self.send(&cmd).await?;
            for _ in batch {
                out.push(self.read_facts().await?);
            }
        }
        Ok(out)
    }

    async fn read_facts(&mut self) -> Result<Option<KeyFacts>, PlanError> {
        loop {
            match parse_reply(&self.buf) {
                Ok(Some((Response::Meta { status, flags }, used))) => {
                    let facts = match status {
                        MetaStatus::Hit => Some(KeyFacts {
                            data_len: flags
                                .get(b's')
                                .and_then(|s| std::str::from_utf8(s).ok())
                                .and_then(|s| s.parse().ok())
                                .unwrap_or(0),
                            flags: flags.client_flags().unwrap_or(0),
                            ttl: flags.ttl().filter(|t| *t >= 0),
                        }),
                        _ => None,
                    };
                    let _ = self.buf.split_to(used);
                    return Ok(facts);
                }
                Ok(None) => self.fill().await?,
                Ok(Some(_)) | Err(_) => return Err(self.not_memcached(&self.buf)),
            }
        }
    }
}

/// `mg <key> s t f\r\n`, or with the key in base64 (`b`) when it holds bytes
/// the text protocol cannot carry (stored through the binary protocol).
fn encode_meta_size(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"mg ");
    if key.iter().all(|&b| b > b' ' && b != 0x7f) {
        out.extend_from_slice(key);
        out.extend_from_slice(b" s t f\r\n");
    } else {
        memshift_protocol::memcache::base64::encode_into(out, key);
        out.extend_from_slice(b" b s t f\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(pairs: &[(&str, &str)]) -> ServerStats {
        ServerStats {
            addr: "m:1".into(),
            stats: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn slab_waste_is_chunks_used_less_requested() {
        let s = stats(&[
            ("1:chunk_size", "96"),
            ("1:used_chunks", "10"),
            ("items:1:mem_requested", "700"),
            ("4:chunk_size", "192"),
            ("4:used_chunks", "2"),
            ("items:4:mem_requested", "338"),
            ("curr_items", "12"),
        ]);
        assert_eq!(s.slab_waste(), 960 + 384 - 700 - 338);
        assert_eq!(s.items(), 12);
    }

    #[test]
    fn meta_size_request_forms() {
        let mut out = Vec::new();
        encode_meta_size(&mut out, b"user:1");
        encode_meta_size(&mut out, b"a b");
        assert_eq!(out, b"mg user:1 s t f\r\nmg YSBi b s t f\r\n");
    }
}
