//! Admin HTTP listener: `/metrics` (Prometheus text), `/health`, `/ready`.
//!
//! A deliberately tiny HTTP/1.1 server: one request per connection
//! (`Connection: close`), a bounded request head, a deadline per connection
//! and a cap on concurrent connections, so a bad client can hold neither
//! memory nor tasks. Request bodies are never read.
//!
//! `http` reads the request head and writes the response, `routes` answers
//! each path.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::metrics::Metrics;

mod http;
mod routes;

#[cfg(test)]
mod tests;

use http::{read_head, HeadError, Response};
use routes::route;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// True when every backend the current phase needs answers.
    pub ready: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// Bounds on what one admin client may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest request line plus headers accepted.
    pub max_head: usize,
    /// Time allowed to send the request head.
    pub read_timeout: Duration,
    /// Time allowed to take the response.
    pub write_timeout: Duration,
    /// Connections served at once; more are closed on accept.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head: 8 * 1024,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_connections: 64,
        }
    }
}

/// Serve admin requests on `listener` until `shutdown` turns true.
/// Connections already accepted finish on their own (each is bounded by the
/// timeouts). If the shutdown sender is dropped the listener keeps serving:
/// metrics stay available for as long as the process lives.
pub async fn serve(listener: TcpListener, state: AdminState, shutdown: watch::Receiver<bool>) {
    serve_with(listener, state, shutdown, Limits::default()).await
}

/// [`serve`] with explicit limits.
pub async fn serve_with(
    listener: TcpListener,
    state: AdminState,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut watching = true;
    loop {
        if watching && *shutdown.borrow_and_update() {
            return;
        }
        tokio::select! {
            changed = shutdown.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Over the cap: dropping the stream closes it at once.
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        continue;
                    };
                    let state = state.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        let _ = handle(stream, &state, limits).await;
                    });
                }
                Err(e) => {
                    // Typically EMFILE; back off instead of spinning.
                    tracing::warn!("admin accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// One connection: read the head, answer, close.
async fn handle(mut stream: TcpStream, state: &AdminState, limits: Limits) -> io::Result<()> {
    let response =
        match tokio::time::timeout(limits.read_timeout, read_head(&mut stream, limits.max_head))
            .await
        {
            Err(_) => Response::text(408, "Request Timeout", "request timeout\n"),
            Ok(Err(HeadError::Io)) => return Ok(()),
            Ok(Err(HeadError::TooLarge)) => Response::text(
                431,
                "Request Header Fields Too Large",
                "request head too large\n",
            ),
            Ok(Ok(head)) => route(&head, state),
        };
    let bytes = response.encode();
    tokio::time::timeout(limits.write_timeout, async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}
