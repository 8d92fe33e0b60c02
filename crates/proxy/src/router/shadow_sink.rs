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

use crate::redis::encoding::CasGenerator;
use crate::redis::translate::{self, Expiry};
use std::future::Future;
use std::pin::Pin;

use super::RedisBackends;
use crate::redis::{BackendError, BackendReply, Reply};

/// Applies shadow operations to the Redis shards currently configured.
pub struct RedisShadowSink {
    backends: Arc<ArcSwap<RedisBackends>>,
    /// Only the shadow worker calls `apply`, so this lock is never contended.
    cas: Mutex<CasGenerator>,
}

impl RedisShadowSink {
    pub fn new(backends: Arc<ArcSwap<RedisBackends>>, seed: u64) -> RedisShadowSink {
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
        let mut buf = BytesMut::new();
        // Queued here, in queue order, before the future is returned.
        let answer = match &op {
            ShadowOp::Set {
                key,
                flags,
                expiry,
                data,
            } => {
                translate::store(
                    &mut buf,
                    StorageCommand::Set,
                    key,
                    *flags,
                    self.next_cas(),
                    data,
                    redis_expiry(*expiry, now),
                );
                Answer::One(Box::pin(backends.call_for_key(key, buf.freeze())))
            }
            ShadowOp::Delete { key } => {
                translate::delete(&mut buf, key);
                Answer::One(Box::pin(backends.call_for_key(key, buf.freeze())))
            }
            ShadowOp::Touch { key, expiry } => {
                translate::touch(&mut buf, key, redis_expiry(*expiry, now));
                Answer::One(Box::pin(backends.call_for_key(key, buf.freeze())))
            }
            ShadowOp::FlushAll => {
                translate::flush(&mut buf);
                Answer::All(backends.broadcast(buf.freeze()), backends.shards.len())
            }
        };
        Box::pin(async move {
            match answer {
                Answer::One(reply) => outcome(reply.await),
                Answer::All(mut replies, shards) => {
                    let mut result = Ok(());
                    for _ in 0..shards {
                        let Some(reply) = replies.recv().await else {
                            return Err(ShadowError::Internal);
                        };
                        let this = match reply.result {
                            Ok(Reply::Redis(frame)) => outcome(Ok(frame)),
                            Ok(Reply::Memcached(_)) => Err(ShadowError::Internal),
                            Err(e) => outcome(Err(e)),
                        };
                        result = result.and(this);
                    }
                    result
                }
            }
        })
    }
}

/// The reply (or replies, for a flush) a shadow operation waits for.
enum Answer {
    One(Pin<Box<dyn Future<Output = Result<Frame, BackendError>> + Send>>),
    All(mpsc::UnboundedReceiver<BackendReply>, usize),
}

fn outcome(reply: Result<Frame, BackendError>) -> Result<(), ShadowError> {
    match reply {
        Ok(Frame::Error(e)) => Err(ShadowError::Rejected(
            String::from_utf8_lossy(&e).into_owned(),
        )),
        Ok(_) => Ok(()),
        Err(BackendError::Timeout) => Err(ShadowError::Timeout),
        Err(BackendError::Busy) => Err(ShadowError::Busy),
        Err(BackendError::ConnectionLost) => Err(ShadowError::ConnectionLost),
        Err(BackendError::Unavailable) => Err(ShadowError::Unavailable),
    }
}
