//! Listeners: accept client connections under the connection limit and run a
//! session for each.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::error::ProxyError;
use crate::proxy::Proxy;
use crate::session::{Session, SessionEnd};
use crate::stats::bump;

/// What memcached writes before closing a connection over its limit.
const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Listen { addr, source })
}

/// Accept until shutdown; then wait for sessions to drain (they stop reading
/// and finish what is in flight) for at most `drain`.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    limit: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
    drain: std::time::Duration,
) {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    let mut sessions = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Usually EMFILE: back off briefly instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    bump(&proxy.stats.rejected_connections);
                    proxy.metrics.connection_rejected();
                    tokio::spawn(reject(stream));
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let proxy = proxy.clone();
                let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                sessions.spawn(async move {
                    bump(&proxy.stats.total_connections);
                    proxy.stats.curr_connections.fetch_add(1, Ordering::Relaxed);
                    proxy.metrics.client_connected();
                    let end = Session::new(proxy.clone(), id).run(stream).await;
                    proxy.stats.curr_connections.fetch_sub(1, Ordering::Relaxed);
                    proxy.metrics.client_disconnected();
                    if let SessionEnd::Io(e) = &end {
                        tracing::debug!(error = %e, "client connection error");
                    }
                    if let SessionEnd::SlowConsumer = &end {
                        tracing::info!("closed a client that stopped reading its replies");
                    }
                    drop(permit);
                });
            }
            // Reap finished sessions so the set does not grow.
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(drain, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            remaining = sessions.len(),
            "drain timeout: closing remaining connections"
        );
        sessions.abort_all();
    }
}

async fn reject(mut stream: TcpStream) {
    let _ = stream.write_all(TOO_MANY_CONNECTIONS).await;
    let _ = stream.shutdown().await;
}
