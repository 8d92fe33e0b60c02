//! The migration: which backend answers a key and which one gets the shadow
//! write, by phase. Swapped whole on reload and on an automatic rollback.
//!
//! | phase     | primary                         | shadow    |
//! |-----------|---------------------------------|-----------|
//! | memcached | memcached                       | —         |
//! | warmup    | memcached                       | Redis     |
//! | canary    | Redis for canary keys, else mc  | the other |
//! | cutover   | Redis                           | memcached |
//! | redis     | Redis                           | —         |

use std::sync::Arc;

use memshift_shadow::canary::CanarySplit;
use memshift_shadow::compare::{CompareSampler, MismatchLogger};
use memshift_shadow::op::ShadowOp;
use memshift_shadow::queue::{PushResult, ShadowQueue, ShadowSink};
use memshift_shadow::{Backend, RollbackDetector};

use super::legacy::Legacy;
use crate::config::{MigrationConfig, Phase};

/// Which backend answers a key and which one gets its shadow write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sides {
    pub primary: Backend,
    pub shadow: Option<Backend>,
}

/// The migration as it is now.
pub struct Migration {
    pub phase: Phase,
    canary: CanarySplit,
    pub compare: CompareSampler,
    pub backfill: bool,
    /// The legacy pool; present in every phase but `redis`.
    pub legacy: Option<Arc<Legacy>>,
    /// Shadow writes to Redis (warmup, canary).
    pub to_redis: Option<ShadowQueue>,
    /// Shadow writes to memcached (canary, cutover).
    pub to_memcached: Option<ShadowQueue>,
    /// Canary only: compares miss rates for the automatic rollback.
    pub rollback: Option<Arc<RollbackDetector>>,
    pub mismatches: Arc<MismatchLogger>,
}

impl Migration {
    pub fn new(
        config: &MigrationConfig,
        legacy: Option<Arc<Legacy>>,
        to_redis: Option<ShadowQueue>,
        to_memcached: Option<ShadowQueue>,
        rollback: Option<Arc<RollbackDetector>>,
        mismatches: Arc<MismatchLogger>,
    ) -> Migration {
        // Without a legacy pool nothing can be routed to memcached.
        let phase = if legacy.is_none() {
            Phase::Redis
        } else {
            config.phase
        };
        Migration {
            phase,
            canary: CanarySplit::new(config.canary_percent),
            compare: CompareSampler::new(config.compare_percent),
            backfill: config.backfill,
            legacy,
            to_redis,
            to_memcached,
            rollback: rollback.filter(|_| phase == Phase::Canary),
            mismatches,
        }
    }

    /// The same migration in another phase (automatic rollback).
    pub fn with_phase(&self, phase: Phase) -> Migration {
        Migration {
            phase,
            canary: self.canary,
            compare: self.compare,
            backfill: self.backfill,
            legacy: self.legacy.clone(),
            to_redis: self.to_redis.clone(),
            to_memcached: self.to_memcached.clone(),
            rollback: None,
            mismatches: self.mismatches.clone(),
        }
    }

    /// The sides of `key` in this phase (canary splits by key).
    #[inline]
    pub fn sides(&self, key: &[u8]) -> Sides {
        let (primary, shadow) = match self.phase {
            Phase::Redis => (Backend::Redis, None),
            Phase::Memcached => (Backend::Memcached, None),
            Phase::Warmup => (Backend::Memcached, Some(Backend::Redis)),
            Phase::Cutover => (Backend::Redis, Some(Backend::Memcached)),
            Phase::Canary => {
                if self.canary.contains(key) {
                    (Backend::Redis, Some(Backend::Memcached))
                } else {
                    (Backend::Memcached, Some(Backend::Redis))
                }
            }
        };
        Sides { primary, shadow }
    }

    /// A Redis miss reads memcached (canary and cutover, when enabled).
    pub fn backfills(&self, sides: Sides) -> bool {
        self.backfill && sides.primary == Backend::Redis && sides.shadow == Some(Backend::Memcached)
    }

    /// Queue a shadow write; never waits (a full queue drops and counts it).
    pub fn shadow(&self, side: Backend, op: ShadowOp) -> PushResult {
        let queue = match side {
            Backend::Redis => &self.to_redis,
            Backend::Memcached => &self.to_memcached,
        };
        match queue {
            Some(q) => q.try_push(op),
            None => PushResult::Dropped,
        }
    }
}

/// Counts shadow outcomes in `memshift_shadow_writes_total` and the breaker
/// state in `memshift_shadow_breaker_open`.
struct ShadowMetrics {
    metrics: Arc<crate::metrics::Metrics>,
    side: Backend,
}

impl memshift_shadow::queue::ShadowObserver for ShadowMetrics {
    fn result(&self, result: memshift_shadow::queue::ShadowResult) {
        self.metrics.shadow_write(self.side, &result);
    }

    fn breaker(&self, open: bool) {
        if open {
            tracing::warn!(backend = ?self.side, "shadow circuit breaker opened: shadow writes are dropped");
        } else {
            tracing::info!(backend = ?self.side, "shadow circuit breaker closed: shadow writes resume");
        }
        self.metrics.set_breaker_open(self.side, open);
    }
}

/// Build the migration for `config`: shadow queues for the sides that get
/// shadow writes in its phase (`redis_sink` writes to Redis), the rollback
/// detector for canary.
pub fn build(
    config: &crate::config::Config,
    redis_sink: Arc<dyn ShadowSink>,
    legacy: Option<Arc<Legacy>>,
    metrics: &Arc<crate::metrics::Metrics>,
) -> Migration {
    use memshift_shadow::breaker::BreakerSettings;
    use memshift_shadow::queue::QueueSettings;
    use std::time::Duration;

    let m = &config.migration;
    let settings = QueueSettings::new(
        m.shadow_queue,
        BreakerSettings {
            failures: m.breaker_failures,
            cooldown: Duration::from_millis(m.breaker_cooldown_ms),
        },
    );
    let phase = if legacy.is_some() {
        m.phase
    } else {
        Phase::Redis
    };
    let redis_is_shadow = matches!(phase, Phase::Warmup | Phase::Canary);
    let memcached_is_shadow = matches!(phase, Phase::Canary | Phase::Cutover);
    let to_redis = redis_is_shadow.then(|| {
        ShadowQueue::start(
            settings,
            redis_sink,
            Arc::new(ShadowMetrics {
                metrics: metrics.clone(),
                side: Backend::Redis,
            }),
        )
    });
    let to_memcached = match (&legacy, memcached_is_shadow) {
        (Some(legacy), true) => Some(ShadowQueue::start(
            settings,
            legacy.shadow_sink(),
            Arc::new(ShadowMetrics {
                metrics: metrics.clone(),
                side: Backend::Memcached,
            }),
        )),
        _ => None,
    };
    let rollback = Arc::new(RollbackDetector::new(memshift_shadow::RollbackSettings {
        window_s: m.rollback_window_s,
        min_samples: m.rollback_min_samples,
        miss_delta_pp: m.rollback_miss_delta_pp,
    }));
    Migration::new(
        m,
        legacy,
        to_redis,
        to_memcached,
        Some(rollback),
        Arc::new(MismatchLogger::new(Duration::from_secs(1))),
    )
}
