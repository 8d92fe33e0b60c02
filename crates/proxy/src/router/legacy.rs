//! The legacy memcached pool as the router sees it: where a key lives (the
//! legacy clients' own distribution, so apps still talking to memcached
//! directly find what memshift writes) and a pipelined send whose raw reply
//! comes back on the session's reply channel.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use memshift_ring::legacy::{Distribution, LegacyPlacement, LegacyServer};
use memshift_shadow::pool::{LegacyPool, PoolSettings};
use memshift_shadow::reply::{
    LegacyError, LegacyRequest, ReplyTo as PoolReplyTo, Tagged, TaggedReply,
};

use crate::backend::ReplySender;
use crate::config::MemcachedConfig;
use crate::error::ProxyError;
use crate::redis::{BackendError, BackendReply, Reply, ReplyTo};

/// What kind of reply a legacy request gets, so its end can be found: the
/// pool's own type (`Line`, `Meta`, `Values` are its names for the sessions).
pub use memshift_shadow::ReplyShape;

/// Legacy replies go into a session's mailbox like Redis ones.
impl Tagged for BackendReply {
    type Sender = ReplySender;

    fn deliver(to: &ReplySender, reply: BackendReply) {
        to.send(reply);
    }
}

impl From<TaggedReply> for BackendReply {
    fn from(t: TaggedReply) -> BackendReply {
        BackendReply {
            seq: t.seq,
            part: t.part,
            result: match t.result {
                Ok(reply) => Ok(Reply::Memcached(reply.raw().clone())),
                Err(LegacyError::Backend(e)) => Err(e),
                Err(_) => Err(BackendError::Unavailable),
            },
        }
    }
}

pub struct Legacy {
    pool: Arc<LegacyPool<BackendReply>>,
    placement: Arc<LegacyPlacement>,
}

impl Legacy {
    /// Start the pool's connections (they come up in the background).
    pub fn start(config: &MemcachedConfig) -> Result<Legacy, ProxyError> {
        let distribution: Distribution = config.distribution.as_str().parse()?;
        let servers: Vec<LegacyServer> = config
            .servers
            .iter()
            .map(|s| LegacyServer::new(s.addr.clone(), s.weight))
            .collect();
        let placement = Arc::new(LegacyPlacement::new(distribution, &servers)?);
        let mut settings = PoolSettings::new(Duration::from_millis(config.timeout_ms));
        settings.connections_per_server = config.connections_per_server.max(1);
        let locate = placement.clone();
        let pool = LegacyPool::start_placed(
            config.servers.iter().map(|s| s.addr.clone()).collect(),
            Box::new(move |key: &[u8]| locate.locate(key)),
            settings,
            crate::workers::enter_for_connection,
        );
        Ok(Legacy {
            pool: Arc::new(pool),
            placement,
        })
    }

    /// Index of the server that owns `key`.
    #[inline]
    pub fn locate(&self, key: &[u8]) -> usize {
        self.placement.locate(key)
    }

    pub fn server_count(&self) -> usize {
        self.pool.server_count()
    }

    /// True when every server of the pool is connected.
    pub fn all_up(&self) -> bool {
        self.pool.all_up()
    }

    pub fn pool(&self) -> &Arc<LegacyPool<BackendReply>> {
        &self.pool
    }

    /// The shadow sink that writes to this pool.
    pub fn shadow_sink(&self) -> Arc<dyn memshift_shadow::queue::ShadowSink> {
        self.pool.clone()
    }

    /// Send one request (never with `noreply`) to `server`; the raw reply
    /// goes to `reply` via the session's channel.
    pub fn send(&self, server: usize, lane: usize, cmd: Bytes, shape: ReplyShape, reply: ReplyTo) {
        self.pool.send(
            server,
            lane,
            LegacyRequest {
                bytes: cmd,
                shape,
                reply: PoolReplyTo::Tagged {
                    tx: reply.tx,
                    seq: reply.seq,
                    part: reply.part,
                },
            },
        );
    }
}
