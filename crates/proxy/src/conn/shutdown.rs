//! The stop signal as a connection waits for it: in every `select!` of its
//! loop, so once or twice per request.
//!
//! `watch::Receiver::changed()` is a `Notify` waiter underneath, and tokio
//! takes the `Notify`'s waiter-list mutex every time a registered waiter is
//! polled. Every connection waits on the same watch, so polling it each turn
//! would take one process-wide lock per request on every worker thread (a
//! cache line bouncing between cores as threads are added). [`Shutdown`]
//! polls it for real once, which registers the task's waker (a tokio task's
//! waker is the task's own, whichever worker polls it), and afterwards only
//! once the watch's version has moved: one atomic load of a line nobody
//! writes until the stop.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::watch;

pub struct Shutdown<'a, F> {
    changed: Pin<&'a mut F>,
    probe: watch::Receiver<bool>,
    registered: bool,
}

impl<'a, F: Future> Shutdown<'a, F> {
    /// `changed` is `receiver.changed()` of a clone of `probe`.
    pub fn new(probe: watch::Receiver<bool>, changed: Pin<&'a mut F>) -> Self {
        Shutdown {
            changed,
            probe,
            registered: false,
        }
    }
}

impl<F: Future> Future for Shutdown<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A closed watch (`Err`) completes the wait as a stop does.
        let moved = !matches!(self.probe.has_changed(), Ok(false));
        if self.registered && !moved {
            return Poll::Pending;
        }
        self.registered = true;
        self.changed.as_mut().poll(cx).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_on_send_after_registering() {
        let (tx, rx) = watch::channel(false);
        let mut waiting = rx.clone();
        let task = tokio::spawn(async move {
            let changed = std::pin::pin!(waiting.changed());
            let mut shutdown = Shutdown::new(rx, changed);
            // Polled many times before the stop, as a busy connection does.
            for _ in 0..10 {
                tokio::select! {
                    biased;
                    () = &mut shutdown => return true,
                    () = tokio::task::yield_now() => {}
                }
            }
            (&mut shutdown).await;
            true
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!task.is_finished());
        tx.send(true).unwrap();
        let done = tokio::time::timeout(Duration::from_secs(5), task).await;
        assert!(matches!(done, Ok(Ok(true))));
    }

    #[tokio::test]
    async fn a_dropped_sender_ends_the_wait() {
        let (tx, rx) = watch::channel(false);
        let mut waiting = rx.clone();
        let task = tokio::spawn(async move {
            Shutdown::new(rx, std::pin::pin!(waiting.changed())).await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(tx);
        let done = tokio::time::timeout(Duration::from_secs(5), task).await;
        assert!(matches!(done, Ok(Ok(()))));
    }
}
