//! A connection's one timer (`serve`: its front request's deadline, the
//! idle timeout, drain's quiet spell and deadline), kept for the
//! connection's life instead of a new `Sleep` per wait: each new one is
//! inserted into (and on drop removed from) the runtime's timer wheel.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::time::{Instant, Sleep};

/// Deadlines move later as the queue advances, so the timer stays armed at
/// the earliest one it was given and is re-armed (to the new earliest) only
/// after it fires: at worst one early wake-up per timeout period, instead
/// of a timer registration per request.
pub struct Deadline<'a> {
    sleep: Pin<&'a mut Sleep>,
    armed: Option<Instant>,
}

impl<'a> Deadline<'a> {
    /// `sleep` is any `Sleep` not yet polled: it is reset before it is.
    pub fn new(sleep: Pin<&'a mut Sleep>) -> Deadline<'a> {
        Deadline { sleep, armed: None }
    }

    /// Make sure the timer fires no later than `at` (`None`: nothing waits).
    pub fn arm(&mut self, at: Option<Instant>) {
        let Some(at) = at else { return };
        // A reload can shorten the timeout: a later request may then be
        // due before the one the timer was armed for.
        if self.armed.is_none_or(|armed| at < armed) {
            self.sleep.as_mut().reset(at);
            self.armed = Some(at);
        }
    }

    #[cfg(test)]
    fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// `Ready(now)` once the instant it was armed at has passed (it is
    /// then disarmed); pending while not armed.
    pub fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        if self.armed.is_none() {
            return Poll::Pending;
        }
        ready!(self.sleep.as_mut().poll(cx));
        self.armed = None;
        Poll::Ready(Instant::now())
    }

    #[cfg(test)]
    async fn fired(&mut self) -> Instant {
        std::future::poll_fn(|cx| self.poll_fired(cx)).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn fires_at_the_earliest_deadline_given_then_rearms() {
        let t0 = Instant::now();
        let mut sleep = std::pin::pin!(tokio::time::sleep_until(t0));
        let mut deadline = Deadline::new(sleep.as_mut());
        deadline.arm(None);
        assert!(!deadline.is_armed());

        // A later front does not move an armed timer.
        deadline.arm(Some(t0 + 100 * MS));
        deadline.arm(Some(t0 + 200 * MS));
        deadline.fired().await;
        assert_eq!(Instant::now(), t0 + 100 * MS);
        assert!(!deadline.is_armed());

        // Fired: the next front arms it again.
        deadline.arm(Some(t0 + 200 * MS));
        deadline.fired().await;
        assert_eq!(Instant::now(), t0 + 200 * MS);

        // An earlier deadline (a shorter timeout after a reload) wins.
        deadline.arm(Some(t0 + 400 * MS));
        deadline.arm(Some(t0 + 300 * MS));
        deadline.fired().await;
        assert_eq!(Instant::now(), t0 + 300 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_already_past_fires_at_once() {
        let t0 = Instant::now();
        let mut sleep = std::pin::pin!(tokio::time::sleep_until(t0));
        let mut deadline = Deadline::new(sleep.as_mut());
        tokio::time::advance(50 * MS).await;
        deadline.arm(Some(t0 + 10 * MS));
        deadline.fired().await;
        assert_eq!(Instant::now(), t0 + 50 * MS);
    }
}
