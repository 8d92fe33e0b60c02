//! Circuit breaker for shadow writes: stop hammering a shadow backend that
//! keeps failing, probe it now and then, resume when it answers.
//!
//! A pure state machine: the caller passes the time in, so tests drive it
//! with a fake clock. The shadow queue's worker owns one per queue (no
//! sharing, no lock).
//!
//! ```text
//!            failures >= N                cooldown elapsed
//!  Closed ─────────────────► Open ─────────────────────────► HalfOpen
//!    ▲                        ▲                                │ (one probe in flight)
//!    │        probe ok        │         probe failed           │
//!    └────────────────────────┼────────────────────────────────┤
//!                             └────────────────────────────────┘
//! ```
//!
//! While open (and while the half-open probe is in flight) every other
//! operation is refused without touching the backend; the queue reports them
//! as `dropped` with reason `BreakerOpen`.

use std::time::{Duration, Instant};

/// `[migration] breaker_failures` and `breaker_cooldown_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive failures that open the breaker (0 is treated as 1).
    pub failures: u32,
    pub cooldown: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed {
        consecutive_failures: u32,
    },
    Open {
        until: Instant,
    },
    /// The cooldown is over and one probe is in flight.
    HalfOpen,
}

/// What to do with the next operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Send it.
    Yes,
    /// Send it: it is the half-open probe. Report its outcome with
    /// [`Breaker::record`].
    Probe,
    /// Drop it: the breaker is open.
    No,
}

/// A change of state worth telling the metrics about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Opened,
    Closed,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    settings: BreakerSettings,
    state: BreakerState,
}

impl Breaker {
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            settings,
            state: BreakerState::Closed {
                consecutive_failures: 0,
            },
        }
    }

    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Open or half-open (what `memshift_shadow_breaker_open` shows).
    pub fn is_open(&self) -> bool {
        !matches!(self.state, BreakerState::Closed { .. })
    }

    /// May an operation go to the backend at `now`?
    pub fn admit(&mut self, now: Instant) -> Admit {
        match self.state {
            BreakerState::Closed { .. } => Admit::Yes,
            BreakerState::Open { until } if now >= until => {
                self.state = BreakerState::HalfOpen;
                Admit::Probe
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen => Admit::No,
        }
    }

    /// Report the outcome of an admitted operation. Outcomes of operations
    /// admitted before the breaker opened may still arrive while it is open;
    /// they do not move it (only the probe decides).
    pub fn record(&mut self, success: bool, now: Instant) -> Option<Transition> {
        match (self.state, success) {
            (BreakerState::Closed { .. }, true) => {
                self.state = BreakerState::Closed {
                    consecutive_failures: 0,
                };
                None
            }
            (
                BreakerState::Closed {
                    consecutive_failures,
                },
                false,
            ) => {
                let failures = consecutive_failures.saturating_add(1);
                if failures >= self.settings.failures.max(1) {
                    self.open(now);
                    Some(Transition::Opened)
                } else {
                    self.state = BreakerState::Closed {
                        consecutive_failures: failures,
                    };
                    None
                }
            }
            (BreakerState::HalfOpen, true) => {
                self.state = BreakerState::Closed {
                    consecutive_failures: 0,
                };
                Some(Transition::Closed)
            }
            (BreakerState::HalfOpen, false) => {
                self.open(now);
                None
            }
            (BreakerState::Open { .. }, _) => None,
        }
    }

    /// Report the outcome of the probe specifically. Same as
    /// [`Breaker::record`], but a stale success from before the breaker
    /// opened cannot be mistaken for it: call this for the operation that got
    /// [`Admit::Probe`], and [`Breaker::record`] for the others.
    pub fn record_probe(&mut self, success: bool, now: Instant) -> Option<Transition> {
        if self.state == BreakerState::HalfOpen {
            self.record(success, now)
        } else {
            None
        }
    }

    /// Report a non-probe outcome: ignored unless the breaker is closed.
    pub fn record_regular(&mut self, success: bool, now: Instant) -> Option<Transition> {
        if let BreakerState::Closed { .. } = self.state {
            self.record(success, now)
        } else {
            None
        }
    }

    fn open(&mut self, now: Instant) {
        self.state = BreakerState::Open {
            until: now + self.settings.cooldown,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(failures: u32, cooldown_ms: u64) -> Breaker {
        Breaker::new(BreakerSettings {
            failures,
            cooldown: Duration::from_millis(cooldown_ms),
        })
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let t = Instant::now();
        let mut b = breaker(3, 1000);
        assert_eq!(b.admit(t), Admit::Yes);
        assert_eq!(b.record(false, t), None);
        assert_eq!(b.record(false, t), None);
        // A success in between resets the count.
        assert_eq!(b.record(true, t), None);
        assert_eq!(b.record(false, t), None);
        assert_eq!(b.record(false, t), None);
        assert!(!b.is_open());
        assert_eq!(b.record(false, t), Some(Transition::Opened));
        assert!(b.is_open());
        assert_eq!(b.admit(t), Admit::No);
    }

    #[test]
    fn cooldown_then_one_probe() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut b = breaker(1, 1000);
        assert_eq!(b.record(false, t), Some(Transition::Opened));
        assert_eq!(b.admit(ms(999)), Admit::No);
        assert_eq!(b.admit(ms(1000)), Admit::Probe);
        // Only one probe at a time.
        assert_eq!(b.admit(ms(1001)), Admit::No);
        assert_eq!(b.admit(ms(5000)), Admit::No);
        assert!(b.is_open());
        assert_eq!(b.record_probe(true, ms(1002)), Some(Transition::Closed));
        assert!(!b.is_open());
        assert_eq!(b.admit(ms(1003)), Admit::Yes);
    }

    #[test]
    fn failed_probe_reopens_for_another_cooldown() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut b = breaker(2, 500);
        b.record(false, t);
        assert_eq!(b.record(false, t), Some(Transition::Opened));
        assert_eq!(b.admit(ms(600)), Admit::Probe);
        // Still open: no transition to report.
        assert_eq!(b.record_probe(false, ms(700)), None);
        assert_eq!(b.state(), BreakerState::Open { until: ms(1200) });
        assert_eq!(b.admit(ms(1199)), Admit::No);
        assert_eq!(b.admit(ms(1200)), Admit::Probe);
        assert_eq!(b.record_probe(true, ms(1201)), Some(Transition::Closed));
        // Closed again with a fresh failure count.
        assert_eq!(b.record(false, ms(1202)), None);
        assert!(!b.is_open());
    }

    #[test]
    fn stale_outcomes_do_not_move_an_open_breaker() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut b = breaker(1, 1000);
        b.record(false, t);
        // Late results of writes admitted before it opened.
        assert_eq!(b.record_regular(true, ms(10)), None);
        assert_eq!(b.record_regular(false, ms(10)), None);
        assert!(b.is_open());
        assert_eq!(b.admit(ms(1000)), Admit::Probe);
        // A late regular success while the probe is out is not the probe.
        assert_eq!(b.record_regular(true, ms(1001)), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // A probe outcome while closed is ignored.
        let mut c = breaker(1, 1000);
        assert_eq!(c.record_probe(false, t), None);
        assert!(!c.is_open());
    }

    #[test]
    fn zero_failures_means_one() {
        let t = Instant::now();
        let mut b = breaker(0, 10);
        assert_eq!(b.record(false, t), Some(Transition::Opened));
    }
}
