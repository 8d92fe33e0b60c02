//! Redis as the shadow backend (phases warmup and canary): replicate the
//! resulting state of a memcached write onto the shard that owns the key.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use bytes::BytesMut;
use memshift_protocol::memcache::StorageCommand;
use memshift_protocol::resp::Frame;
use memshift_shadow::op::{unix_now, Expiry as ShadowExpiry, ShadowOp};
use memshift_shadow::queue::{ApplyFuture, ShadowSink};
use memshift_shadow::ShadowError;
use tokio::sync::mpsc;

use super::encoding::CasGenerator;
use super::translate::{self, Expiry};
use super::{BackendError, BackendRequest, Reply, ReplyTo};
use crate::proxy::Backends;

/// Applies shadow operations to the Redis shards currently configured.
pub struct RedisShadowSink {
    backends: Arc<ArcSwap<Backends>>,
    /// Only the shadow worker calls `apply`, so this lock is never contended.
    cas: Mutex<CasGenerator>,
}

impl RedisShadowSink {
    pub fn new(backends: Arc<ArcSwap<Backends>>, seed: u64) -> RedisShadowSink {
        RedisShadowSink {
            backends,
            cas: Mutex::new(CasGenerator::new(seed)),
        }
    }

    fn next_cas(&self) -> u64 {
        self.cas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .next_cas()
    }
}

/// A shadow expiry (absolute) as the Redis side's expiry.
fn redis_expiry(expiry: ShadowExpiry, now: u64) -> Expiry {
    match expiry {
        ShadowExpiry::Never => Expiry::Never,
        ShadowExpiry::At(t) if t <= now => Expiry::Past,
        ShadowExpiry::At(t) => Expiry::At(t as i64),
    }
}

impl ShadowSink for RedisShadowSink {
    fn apply(&self, op: ShadowOp) -> ApplyFuture {
        let backends = self.backends.load_full();
        let now = unix_now();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let send = |buf: BytesMut, shard: usize, part: u32| {
            let reply = ReplyTo {
                tx: tx.clone(),
                seq: 0,
                part,
            };
            backends.shards[shard].send(
                0,
                BackendRequest {
                    cmd: buf.freeze(),
                    reply,
                },
            );
        };
        let mut parts = 1u32;
        match &op {
            ShadowOp::Set {
                key,
                flags,
                expiry,
                data,
            } => {
                let mut buf = BytesMut::new();
                translate::store(
                    &mut buf,
                    StorageCommand::Set,
                    key,
                    *flags,
                    self.next_cas(),
                    data,
                    redis_expiry(*expiry, now),
                );
                send(buf, backends.locate(key), 0);
            }
            ShadowOp::Delete { key } => {
                let mut buf = BytesMut::new();
                translate::delete(&mut buf, key);
                send(buf, backends.locate(key), 0);
            }
            ShadowOp::Touch { key, expiry } => {
                let mut buf = BytesMut::new();
                translate::touch(&mut buf, key, redis_expiry(*expiry, now));
                send(buf, backends.locate(key), 0);
            }
            ShadowOp::FlushAll => {
                parts = backends.shards.len() as u32;
                for shard in 0..backends.shards.len() {
                    let mut buf = BytesMut::new();
                    translate::flush(&mut buf);
                    send(buf, shard, shard as u32);
                }
            }
        }
        drop(tx);
        Box::pin(async move {
            let mut outcome = Ok(());
            for _ in 0..parts {
                let Some(reply) = rx.recv().await else {
                    return Err(ShadowError::Internal);
                };
                let result = match reply.result {
                    Ok(Reply::Redis(Frame::Error(e))) => Err(ShadowError::Rejected(
                        String::from_utf8_lossy(&e).into_owned(),
                    )),
                    Ok(_) => Ok(()),
                    Err(BackendError::Timeout) => Err(ShadowError::Timeout),
                    Err(BackendError::Busy) => Err(ShadowError::Busy),
                    Err(BackendError::ConnectionLost) => Err(ShadowError::ConnectionLost),
                    Err(BackendError::Unavailable) => Err(ShadowError::Unavailable),
                };
                if outcome.is_ok() {
                    outcome = result;
                }
            }
            outcome
        })
    }
}
