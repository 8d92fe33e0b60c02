//! Listeners: accept client connections under the connection limit and run a
//! session for each, on the next worker thread's runtime (`crate::workers`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memshift_pipeline::transport::Detached;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::conn::End as SessionEnd;
use crate::driver::{self, Entered, Sessions};
use crate::error::ProxyError;
use crate::listener::Listener;
use crate::metrics::Transport;
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

/// A TCP listener (the admin endpoint; client listeners are [`Listener`]s).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Listen {
            addr: addr.to_string(),
            source,
        })
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
        (config.server.tls_listen.as_ref(), Front::Memcached),
        (config.server.resp_tls_listen.as_ref(), Front::Resp),
    ];
    if fronts.iter().all(|(addr, _)| addr.is_none()) {
        return Ok(None);
    }
    // One certificate state for both TLS listeners: SIGHUP reloads both.
    let tls = Arc::new(ServerTls::load(tls_config)?);
    for (addr, front) in fronts {
        let Some(addr) = addr else { continue };
        let listener = Listener::bind(addr, config.server.socket_mode()).await?;
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
    listener: Listener,
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
    listener: Listener,
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
    listener: Listener,
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
    listener: Listener,
    tls: Option<Arc<ServerTls>>,
    front: Front,
    proxy: Arc<Proxy>,
    limit: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
    drain: std::time::Duration,
) {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    let transport = listener.transport();
    let sessions = Sessions::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok(s) => s,
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
                let proxy = proxy.clone();
                let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                let conn = Conn { proxy, id, front, transport, permit };
                start_session(sessions.enter(), crate::workers::next(), tls.clone(), stream, conn);
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let drain = drain.max(proxy.settings.load().drain_timeout) + DRAIN_GRACE;
    let drained = tokio::time::timeout(drain, sessions.all_ended()).await;
    if drained.is_err() {
        // Aborted sessions write none of their remaining replies.
        let remaining = sessions.len();
        proxy.metrics.drain_aborted(remaining);
        tracing::warn!(remaining, "drain timeout: closing remaining connections");
        crate::workers::on_each(move || driver::abort(&sessions)).await;
    }
}

/// Run the session on `worker` (`crate::workers`; `None`: on this thread,
/// with one worker), in its session driver (`crate::driver`), where the
/// socket joins the I/O driver, so the session, its TLS handshake and its
/// shard connections run on one thread. One future type per stream type,
/// each boxed at its own size, so that a plaintext connection is not sized
/// for the TLS handshake and stream (every idle connection pays for its
/// size), and a TCP session pays no dispatch on each read and write.
fn start_session(
    entered: Entered,
    worker: Option<&tokio::runtime::Handle>,
    tls: Option<Arc<ServerTls>>,
    stream: Detached,
    conn: Conn,
) {
    match (tls, stream) {
        (None, Detached::Tcp(s)) => spawn_on(
            entered,
            worker,
            conn.run(s, tokio::net::TcpStream::from_std),
        ),
        (None, Detached::Unix(s)) => spawn_on(
            entered,
            worker,
            conn.run(s, tokio::net::UnixStream::from_std),
        ),
        (Some(tls), stream) => spawn_on(entered, worker, conn.run_tls(tls, stream)),
    }
}

/// Register an accepted socket with this runtime's I/O driver (`attach`);
/// `None`, logged, if it cannot be (the connection is dropped).
fn register<D, S>(stream: D, attach: fn(D) -> std::io::Result<S>) -> Option<S> {
    attach(stream)
        .inspect_err(|e| tracing::warn!(error = %e, "could not register a client connection"))
        .ok()
}

/// Hand the session to `worker`'s driver (a task of its own carries it
/// there), or to this thread's. It is boxed here, on the accepting thread,
/// as a task would have been: its memory comes from this thread's heap,
/// which `crate::trim` can hand back to the OS after a burst of
/// connections closes; a worker thread's arena keeps the free space at its
/// top (a burst of 3,000 connections boxed on the workers kept ≈ 5 MiB
/// after they closed).
fn spawn_on<F>(entered: Entered, worker: Option<&tokio::runtime::Handle>, session: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let session = Box::pin(session);
    match worker {
        Some(worker) => {
            worker.spawn(async move { driver::spawn(entered, session) });
        }
        None => driver::spawn(entered, session),
    }
}

/// An accepted connection under the limit: what its session needs.
struct Conn {
    proxy: Arc<Proxy>,
    id: u64,
    front: Front,
    transport: Transport,
    /// Held for the session's life: the connection counts against
    /// `max_connections` until it ends.
    permit: OwnedSemaphorePermit,
}

impl Conn {
    /// Register the socket, the TLS handshake (under its timeout), then the
    /// session.
    async fn run_tls(self, tls: Arc<ServerTls>, stream: Detached) {
        let Some(stream) = register(stream, Detached::attach) else {
            return;
        };
        if let Some(stream) = tls.accept(stream, &self.proxy.metrics).await {
            self.run(stream, Ok).await;
        }
    }

    /// Register the socket with this runtime's I/O driver (`adopt`), then
    /// serve. One `async fn`, not a wrapper around one: a debug build lays
    /// out a nested future's state beside its caller's (measured 0.1 KiB
    /// more per idle connection).
    async fn run<D, S>(self, stream: D, adopt: fn(D) -> std::io::Result<S>)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let Some(stream) = register(stream, adopt) else {
            return;
        };
        let Conn {
            proxy,
            id,
            front,
            transport,
            permit,
        } = self;
        bump(&proxy.stats.total_connections);
        proxy.stats.curr_connections.fetch_add(1, Ordering::Relaxed);
        proxy.metrics.client_connected(transport);
        let end = match front {
            Front::Memcached => Session::new(proxy.clone(), id).run(stream).await,
            Front::Resp => RespSession::new(proxy.clone(), id).run(stream).await,
        };
        // The slot first: once the gauge shows the connection gone, a new
        // one must be admitted (the limit test counts on it; on a busy box
        // the other order refused the 5th of 5 connections).
        drop(permit);
        crate::trim::note_release();
        proxy.stats.curr_connections.fetch_sub(1, Ordering::Relaxed);
        proxy.metrics.client_disconnected(transport);
        if let SessionEnd::Io(e) = &end {
            tracing::debug!(error = %e, transport = transport.as_str(), "client connection error");
        }
        if let SessionEnd::SlowConsumer = &end {
            tracing::info!(
                transport = transport.as_str(),
                "closed a client that stopped reading its replies"
            );
        }
    }
}

async fn reject(stream: Detached) {
    if let Ok(mut stream) = stream.attach() {
        let _ = stream.write_all(TOO_MANY_CONNECTIONS).await;
        let _ = stream.shutdown().await;
    }
}
