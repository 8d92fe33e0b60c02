//! memshift's migration machinery, apart from the client's session:
//!
//! * [`pool`]: a client for the legacy memcached pool, with long-lived
//!   pipelined connections per server ([`LegacyPool`]).
//! * [`queue`]: the bounded shadow queue and its worker ([`ShadowQueue`]),
//!   with the [`breaker`] that stops hammering a failing shadow backend.
//! * [`mod@compare`]: compare sampling and classification of primary vs shadow
//!   reads.
//! * [`rollback`]: the canary's sliding-window miss-rate comparison.
//! * [`canary`]: which keys are canary keys.
//!
//! I/O happens only in [`pool`] and [`queue`]; the rest is pure and takes the
//! clock as a parameter where time matters.
//!
//! # Decisions worth knowing
//!
//! * Shadow operations carry an [`Expiry`] as an **absolute unix time**, so
//!   time spent queued does not stretch a TTL; sinks convert at send time.
//! * Every shadow operation ends in exactly one [`ShadowResult`] given to the
//!   [`ShadowObserver`], including drops by a full queue (reported from
//!   `try_push` itself) and by an open breaker
//!   (`Dropped(DropReason::BreakerOpen)`): count metrics there only.
//! * Only backend failures (unavailable, timeout, connection lost, busy,
//!   protocol) move the breaker; a refusal (`SERVER_ERROR object too
//!   large`) is an `error` result but proves the backend alive.
//! * Compare sampling is random per read (thread-local generator), the
//!   canary split is deterministic per key (pinned hash).
//! * The pool never sends `noreply`/quiet requests (refused with
//!   [`LegacyError::BadRequest`]): replies are matched to requests by order.

pub mod breaker;
pub mod canary;
pub mod compare;
mod connection;
pub mod op;
pub mod pool;
pub mod queue;
pub mod reply;
pub mod rollback;

pub use breaker::{Breaker, BreakerSettings};
pub use canary::{is_canary, CanarySplit};
pub use compare::{compare, CompareResult, CompareSampler, MismatchLogger};
pub use memshift_pipeline::BackendError;
pub use op::{unix_now, Expiry, ShadowOp};
pub use pool::{DumpEntry, Item, LegacyPool, MetaItem, Placement, PoolSettings, Route};
pub use queue::{
    ApplyFuture, DropReason, PushResult, QueueSettings, ShadowObserver, ShadowQueue, ShadowResult,
    ShadowSink,
};
pub use reply::{
    LegacyError, LegacyReply, LegacyRequest, ReplyShape, ReplyTo, Tagged, TaggedReply, ValueItem,
};
pub use rollback::{RollbackDetector, RollbackSettings};

/// A storage backend, as metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Redis,
    Memcached,
}

impl Backend {
    /// Every backend, in declaration order (`b as usize` indexes it).
    pub const ALL: [Backend; 2] = [Backend::Redis, Backend::Memcached];

    /// The `backend` label value.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Memcached => "memcached",
        }
    }

    /// The backend that is not this one.
    pub fn other(self) -> Backend {
        match self {
            Backend::Redis => Backend::Memcached,
            Backend::Memcached => Backend::Redis,
        }
    }
}

/// Why a shadow operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShadowError {
    #[error("shadow backend unavailable")]
    Unavailable,
    #[error("shadow backend timed out")]
    Timeout,
    #[error("shadow backend connection lost")]
    ConnectionLost,
    #[error("shadow backend busy")]
    Busy,
    /// The backend answered, but not with success (e.g. `SERVER_ERROR out of
    /// memory`). Proves the backend is alive: does not count towards the
    /// breaker.
    #[error("shadow backend refused: {0}")]
    Rejected(String),
    #[error("shadow backend protocol error: {0}")]
    Protocol(String),
    #[error("shadow worker internal error")]
    Internal,
}

impl ShadowError {
    /// True for failures that say the backend is unhealthy (they count
    /// towards opening the breaker).
    pub fn is_backend_failure(&self) -> bool {
        !matches!(self, ShadowError::Rejected(_))
    }
}
