//! `lru_crawler metadump all`: every key of one server, on a connection of
//! its own (bulk copy, `memshift copy --verify`, `memshift plan`).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::client::{self as enc, parse_reply, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use memshift_pipeline::transport::BackendAddr;
use memshift_pipeline::BackendError;

use super::{DumpEntry, LegacyPool, PoolSettings};
use crate::reply::{LegacyError, Tagged};

impl<T> LegacyPool<T>
where
    T: Tagged,
{
    /// Every key of `server` via `lru_crawler metadump all`, on a connection
    /// of its own (memcached refuses the command behind pipelined requests,
    /// and the dump may be long).
    pub async fn metadump_all(&self, server: usize) -> Result<Vec<DumpEntry>, LegacyError> {
        let mut entries = Vec::new();
        self.metadump_each(server, |entry| entries.push(entry))
            .await?;
        Ok(entries)
    }

    /// Like [`LegacyPool::metadump_all`], handing each entry to `each` as
    /// it is parsed (bulk copy of large servers without holding every key).
    pub async fn metadump_each(
        &self,
        server: usize,
        each: impl FnMut(DumpEntry),
    ) -> Result<(), LegacyError> {
        let addr = self
            .servers
            .get(server)
            .map(|s| s.addr.clone())
            .ok_or(LegacyError::NoSuchServer(server))?;
        metadump(&addr, self.settings, None, each).await
    }
}

/// `lru_crawler metadump all` of the server at `addr` on a connection of its
/// own, handing each entry to `each`; with `rate`, read no faster than that
/// many entries per second (the crawler waits while its output is not read,
/// so this paces the server's walk too: `memshift plan`).
pub async fn metadump_paced(
    addr: &str,
    settings: PoolSettings,
    rate: Option<u64>,
    each: impl FnMut(DumpEntry),
) -> Result<(), LegacyError> {
    metadump(addr, settings, rate, each).await
}

/// How long a metadump may go without a byte before it is abandoned (the
/// crawler can pause between slab classes).
const METADUMP_IDLE: Duration = Duration::from_secs(10);
/// `BUSY` (another crawl running): retries before giving up.
const METADUMP_BUSY_RETRIES: u32 = 20;

async fn metadump(
    addr: &str,
    settings: PoolSettings,
    rate: Option<u64>,
    mut each: impl FnMut(DumpEntry),
) -> Result<(), LegacyError> {
    let idle = settings.timeout.max(METADUMP_IDLE);
    let mut attempt = 0;
    loop {
        let started = tokio::time::Instant::now();
        let mut listed = 0u64;
        let mut stream = match tokio::time::timeout(
            settings.connect_timeout,
            BackendAddr::parse(addr).connect(),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => return Err(BackendError::Unavailable.into()),
            Err(_) => return Err(BackendError::Timeout.into()),
        };
        let mut cmd = BytesMut::new();
        enc::lru_crawler_metadump_all(&mut cmd);
        stream
            .write_all(&cmd)
            .await
            .map_err(|_| BackendError::ConnectionLost)?;
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut key = Vec::with_capacity(256);
        loop {
            // Parse every complete line, then read more.
            let mut used_total = 0;
            let mut finished = None;
            while let Some((unit, used)) = parse_reply(&buf[used_total..])? {
                used_total += used;
                match unit {
                    Response::Metadump(entry) => {
                        listed += 1;
                        entry.decoded_key(&mut key)?;
                        each(DumpEntry {
                            key: Bytes::copy_from_slice(&key),
                            exp: entry.exp,
                            size: entry.size,
                            flags: entry.flags,
                            last_access: entry.last_access,
                            cas: entry.cas,
                        });
                    }
                    Response::End => {
                        finished = Some(Ok(()));
                        break;
                    }
                    Response::Busy(_) => {
                        finished = Some(Err(LegacyError::CrawlerBusy));
                        break;
                    }
                    _ => {
                        let line = String::from_utf8_lossy(&buf[..used_total.min(256)]);
                        finished = Some(Err(LegacyError::Server(line.trim_end().to_string())));
                        break;
                    }
                }
            }
            let _ = buf.split_to(used_total);
            match finished {
                Some(Err(LegacyError::CrawlerBusy)) if attempt < METADUMP_BUSY_RETRIES => break,
                Some(result) => return result,
                None => {}
            }
            if let Some(rate) = rate.filter(|r| *r > 0) {
                let due = started + Duration::from_secs_f64(listed as f64 / rate as f64);
                tokio::time::sleep_until(due).await;
            }
            buf.reserve(16 * 1024);
            match tokio::time::timeout(idle, stream.read_buf(&mut buf)).await {
                Ok(Ok(0)) => return Err(BackendError::ConnectionLost.into()),
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(BackendError::ConnectionLost.into()),
                Err(_) => return Err(BackendError::Timeout.into()),
            }
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
