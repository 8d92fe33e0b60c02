//! The shadow crate's types as the metrics registry takes them. Every
//! conversion lives here so that it becomes the identity in one place once
//! metrics use the shadow types directly.

use memshift_shadow::compare::CompareResult;
use memshift_shadow::queue::ShadowResult;
use memshift_shadow::Backend;

pub fn backend(b: Backend) -> crate::metrics::Backend {
    match b {
        Backend::Redis => crate::metrics::Backend::Redis,
        Backend::Memcached => crate::metrics::Backend::Memcached,
    }
}

pub fn compare(result: CompareResult) -> crate::metrics::CompareResult {
    use crate::metrics::CompareResult as M;
    match result {
        CompareResult::Match => M::Match,
        CompareResult::ValueMismatch => M::ValueMismatch,
        CompareResult::PrimaryMiss => M::PrimaryMiss,
        CompareResult::ShadowMiss => M::ShadowMiss,
    }
}

pub fn shadow_result(result: ShadowResult) -> crate::metrics::ShadowResult {
    use crate::metrics::ShadowResult as M;
    match result {
        ShadowResult::Ok => M::Ok,
        ShadowResult::Error(_) => M::Error,
        ShadowResult::Dropped(_) => M::Dropped,
    }
}
