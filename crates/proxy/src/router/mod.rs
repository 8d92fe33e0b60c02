//! The router: where a request goes, and sending it there.
//!
//! * `phase`: the migration phase picks the primary backend of a key and
//!   the backend that gets its shadow write (canary splits by key).
//! * `redis`: the Redis placement (the ring with ejection) and its shards.
//! * `legacy`: the legacy memcached distribution and pool.
//!
//! Both generations (Redis side, migration) are read-mostly and swapped
//! whole: a request routes on the [`Routes`] it loaded, so a reload never
//! moves a request already routed.

pub mod eject;
pub mod legacy;
pub mod phase;
pub mod redis;
pub mod shadow_sink;

use std::future::Future;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use bytes::Bytes;
use memshift_shadow::op::ShadowOp;
use tokio::sync::mpsc;

pub use legacy::{Legacy, ReplyShape};
pub use memshift_shadow::Backend;
pub use phase::{Migration, Sides};
pub use redis::RedisBackends;

use crate::redis::{BackendError, Reply, ReplyTo};

/// One backend server a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A Redis shard (index into `RedisBackends::shards`).
    Redis { shard: usize },
    /// A legacy memcached server (index into the pool).
    Memcached { server: usize },
}

impl Target {
    #[inline]
    pub fn backend(self) -> Backend {
        match self {
            Target::Redis { .. } => Backend::Redis,
            Target::Memcached { .. } => Backend::Memcached,
        }
    }
}

/// Whether a request only reads its key. Under the eject policy a write
/// routed away from its down shard is remembered (see `crate::eject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Where one key's request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub primary: Target,
    /// The backend that gets the write's resulting state, if any.
    pub shadow: Option<Backend>,
}

impl Route {
    #[inline]
    pub fn sides(self) -> Sides {
        Sides {
            primary: self.primary.backend(),
            shadow: self.shadow,
        }
    }
}

/// The routing state every session shares.
pub struct Router {
    /// Shared with the Redis shadow sink, which writes where it says.
    redis: Arc<ArcSwap<RedisBackends>>,
    migration: ArcSwap<Migration>,
}

impl Router {
    pub fn new(redis: Arc<ArcSwap<RedisBackends>>, migration: Migration) -> Router {
        Router {
            redis,
            migration: ArcSwap::from_pointee(migration),
        }
    }

    /// The current generation, for one request (or one batch of them).
    #[inline]
    pub fn load(&self) -> Routes {
        Routes {
            redis: self.redis.load(),
            migration: self.migration.load(),
        }
    }

    pub fn redis(&self) -> Arc<RedisBackends> {
        self.redis.load_full()
    }

    /// The Redis generations as they are swapped (for the shadow sink).
    pub fn redis_handle(&self) -> &Arc<ArcSwap<RedisBackends>> {
        &self.redis
    }

    pub fn migration(&self) -> Arc<Migration> {
        self.migration.load_full()
    }

    /// Reload: the new Redis side first (so the new migration's shadow
    /// writes find it), then the new migration.
    pub fn install(&self, redis: Arc<RedisBackends>, migration: Migration) {
        self.redis.store(redis);
        self.migration.store(Arc::new(migration));
    }

    /// Automatic rollback: another phase, same backends.
    pub fn set_migration(&self, migration: Migration) {
        self.migration.store(Arc::new(migration));
    }

    /// Queue a shadow write on the current migration's queue for `side`;
    /// never waits (a full queue drops and counts it).
    pub fn shadow(&self, side: Backend, op: ShadowOp) {
        self.migration.load().shadow(side, op);
    }

    /// True when every Redis shard and legacy server is connected.
    pub fn all_up(&self) -> bool {
        let routes = self.load();
        routes.redis.shards.iter().all(|s| s.is_up()) && routes.legacy().is_none_or(|l| l.all_up())
    }
}

/// One loaded generation of the router.
pub struct Routes {
    redis: Guard<Arc<RedisBackends>>,
    migration: Guard<Arc<Migration>>,
}

impl Routes {
    /// Where a request that may change `key` goes in this generation.
    #[inline]
    pub fn route(&self, key: &[u8]) -> Route {
        self.route_as(key, Access::Write)
    }

    /// Where a read of `key` goes in this generation.
    #[inline]
    pub fn route_read(&self, key: &[u8]) -> Route {
        self.route_as(key, Access::Read)
    }

    #[inline]
    fn route_as(&self, key: &[u8], access: Access) -> Route {
        let sides = self.migration.sides(key);
        let primary = match (sides.primary, self.legacy()) {
            (Backend::Memcached, Some(legacy)) => Target::Memcached {
                server: legacy.locate(key),
            },
            _ => Target::Redis {
                shard: self.redis.locate_for(key, access),
            },
        };
        Route {
            primary,
            shadow: sides.shadow,
        }
    }

    /// The server that holds `key` on `backend` (None: no legacy pool).
    #[inline]
    pub fn target_on(&self, backend: Backend, key: &[u8], access: Access) -> Option<Target> {
        match backend {
            Backend::Redis => Some(Target::Redis {
                shard: self.redis.locate_for(key, access),
            }),
            Backend::Memcached => self.legacy().map(|legacy| Target::Memcached {
                server: legacy.locate(key),
            }),
        }
    }

    /// Put `cmd` on `target`'s connection `lane`; the reply (`shape` says
    /// how a memcached one ends) goes to `reply`.
    #[inline]
    pub fn send(&self, target: Target, lane: usize, cmd: Bytes, shape: ReplyShape, reply: ReplyTo) {
        match (target, self.legacy()) {
            (Target::Redis { shard }, _) => self.redis.send(shard, lane, cmd, reply),
            (Target::Memcached { server }, Some(legacy)) => {
                legacy.send(server, lane, cmd, shape, reply)
            }
            (Target::Memcached { .. }, None) => reply.send(Err(BackendError::Unavailable)),
        }
    }

    /// `send` of a plain read that may be served by a replica of a Redis
    /// shard (`redis.read_from`): nothing that returns a CAS, changes the
    /// item, or fills the near cache.
    #[inline]
    pub fn send_read(
        &self,
        target: Target,
        lane: usize,
        cmd: Bytes,
        shape: ReplyShape,
        reply: ReplyTo,
    ) {
        match target {
            Target::Redis { shard } => self.redis.send_read(shard, lane, cmd, reply),
            Target::Memcached { .. } => self.send(target, lane, cmd, shape, reply),
        }
    }

    /// `send` outside any session: the reply, when it comes. The command
    /// is queued before this returns.
    pub fn call(
        &self,
        target: Target,
        cmd: Bytes,
        shape: ReplyShape,
    ) -> impl Future<Output = Result<Reply, BackendError>> + Send + 'static {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let reply = ReplyTo {
            tx: tx.into(),
            seq: 0,
            part: 0,
        };
        self.send(target, 0, cmd, shape, reply);
        async move {
            match rx.recv().await {
                Some(reply) => reply.result,
                None => Err(BackendError::ConnectionLost),
            }
        }
    }

    pub fn redis(&self) -> &RedisBackends {
        &self.redis
    }

    pub fn migration(&self) -> &Migration {
        &self.migration
    }

    /// The legacy pool; present in every phase but `redis`.
    #[inline]
    pub fn legacy(&self) -> Option<&Legacy> {
        self.migration.legacy.as_deref()
    }
}
