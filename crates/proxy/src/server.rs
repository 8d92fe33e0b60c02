//! Listeners: accept client connections under the connection limit and run a
//! session for each.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::config::Config;
use crate::conn::End as SessionEnd;
use crate::error::ProxyError;
use crate::proxy::Proxy;
use crate::resp::RespSession;
use crate::session::Session;
use crate::stats::bump;
use crate::tls::ServerTls;

/// What a listener's connections speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// memcached's protocols (`server.listen`, `server.tls_listen`).
    Memcached,
    /// RESP2/RESP3 (`server.resp_listen`, `server.resp_tls_listen`).
    Resp,
}

/// How long past the drain deadline the listener waits for its connections
/// before aborting them: at the deadline each one drops what is still
/// unanswered and closes after writing the replies it has rendered, which a
/// client that does not read may hold up.
const DRAIN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What memcached writes before closing a connection over its limit.
const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Listen { addr, source })
}

/// `server.tls_listen`: load `[tls]`, bind, and spawn the TLS accept loop
/// into `listeners`. Returns the certificate state for SIGHUP to reload;
/// `None` when no TLS listener is configured.
pub async fn start_tls(
    config: &Config,
    proxy: &Arc<Proxy>,
    limit: &Arc<Semaphore>,
    shutdown: &watch::Receiver<bool>,
    drain: std::time::Duration,
    listeners: &mut Vec<JoinHandle<()>>,
) -> Result<Option<Arc<ServerTls>>, ProxyError> {
    let Some(tls_config) = &config.tls else {
        return Ok(None);
    };
    let fronts = [
        (config.server.tls_listen, Front::Memcached),
        (config.server.resp_tls_listen, Front::Resp),
    ];
    if fronts.iter().all(|(addr, _)| addr.is_none()) {
        return Ok(None);
    }
    // One certificate state for both TLS listeners: SIGHUP reloads both.
    let tls = Arc::new(ServerTls::load(tls_config)?);
    for (addr, front) in fronts {
        let Some(addr) = addr else { continue };
        let listener = bind(addr).await?;
        tracing::info!(%addr, mtls = tls_config.client_ca.is_some(), ?front, "TLS 1.3 listener ready");
        listeners.push(tokio::spawn(accept_loop(
            listener,
            Some(tls.clone()),
            front,
            proxy.clone(),
            limit.clone(),
            shutdown.clone(),
            drain,
        )));
    }
    Ok(Some(tls))
}

/// Accept until shutdown; then wait for sessions to drain (they answer what
/// their clients send until the client goes quiet or the drain deadline;
/// see `conn`) for at most `drain` (or the live `server.drain_timeout_ms`
/// if longer) and `DRAIN_GRACE`.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    limit: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
    drain: std::time::Duration,
) {
    accept_loop(
        listener,
        None,
        Front::Memcached,
        proxy,
        limit,
        shutdown,
        drain,
    )
    .await
}

/// `server.resp_listen`: Redis clients (see `crate::resp`).
pub async fn serve_resp(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    limit: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
    drain: std::time::Duration,
) {
    accept_loop(listener, None, Front::Resp, proxy, limit, shutdown, drain).await
}

/// Like `serve`, for `server.tls_listen`: each connection's TLS handshake
/// runs in its own task under `tls.handshake_timeout_ms`, so a slow or
/// hostile client never holds up the accept loop or other connections.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    proxy: Arc<Proxy>,
    limit: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
    drain: std::time::Duration,
) {
    accept_loop(
        listener,
        Some(tls),
        Front::Memcached,
        proxy,
        limit,
        shutdown,
        drain,
    )
    .await
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    front: Front,
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
                    // A TLS client cannot read a plaintext error line: just close.
                    if tls.is_none() && front == Front::Memcached {
                        tokio::spawn(reject(stream));
                    }
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let proxy = proxy.clone();
                let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                // Two task types, so that a plaintext connection's task is
                // not sized for the TLS handshake and stream (every idle
                // connection pays for its task's size).
                match tls.clone() {
                    None => {
                        sessions.spawn(async move {
                            run_session(proxy, id, stream, front).await;
                            drop(permit);
                        });
                    }
                    Some(tls) => {
                        sessions.spawn(async move {
                            if let Some(stream) = tls.accept(stream, &proxy.metrics).await {
                                run_session(proxy, id, stream, front).await;
                            }
                            drop(permit);
                        });
                    }
                }
            }
            // Reap finished sessions so the set does not grow.
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let drain = drain.max(proxy.settings.load().drain_timeout) + DRAIN_GRACE;
    let drained = tokio::time::timeout(drain, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        // Aborted sessions write none of their remaining replies.
        let remaining = sessions.len();
        proxy.metrics.drain_aborted(remaining);
        tracing::warn!(remaining, "drain timeout: closing remaining connections");
        sessions.abort_all();
    }
}

async fn run_session<S>(proxy: Arc<Proxy>, id: u64, stream: S, front: Front)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    bump(&proxy.stats.total_connections);
    proxy.stats.curr_connections.fetch_add(1, Ordering::Relaxed);
    proxy.metrics.client_connected();
    let end = match front {
        Front::Memcached => Session::new(proxy.clone(), id).run(stream).await,
        Front::Resp => RespSession::new(proxy.clone(), id).run(stream).await,
    };
    crate::trim::note_release();
    proxy.stats.curr_connections.fetch_sub(1, Ordering::Relaxed);
    proxy.metrics.client_disconnected();
    if let SessionEnd::Io(e) = &end {
        tracing::debug!(error = %e, "client connection error");
    }
    if let SessionEnd::SlowConsumer = &end {
        tracing::info!("closed a client that stopped reading its replies");
    }
}

async fn reject(mut stream: TcpStream) {
    let _ = stream.write_all(TOO_MANY_CONNECTIONS).await;
    let _ = stream.shutdown().await;
}
