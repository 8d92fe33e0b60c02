//! `memshift --config FILE`: start the runtime, the shards, the listeners;
//! stop cleanly on SIGTERM/SIGINT.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{watch, Semaphore};

use crate::admin::{self, AdminState};
use crate::config::{Config, LogFormat};
use crate::error::ProxyError;
use crate::listener::Listener;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::router::{Migration, RedisBackends, Router};
use crate::server;
use crate::tls::ServerTls;

/// Load the config, then serve until a stop signal. Errors are one line.
pub fn run(config_path: &Path) -> Result<(), ProxyError> {
    let config = Config::load(config_path)?;
    init_logging(&config);
    crate::fd_limit::raise_for(config.server.max_connections);
    let threads = config.server.worker_threads();
    let workers = match threads {
        1 => None,
        _ => Some(crate::workers::start(threads)?),
    };
    // With one worker the main thread's runtime is the worker.
    tracing::info!(
        threads,
        worker_pool = workers.is_some(),
        "one current-thread runtime per worker thread"
    );
    let runtime = crate::workers::runtime()?;
    let served = runtime.block_on(async {
        if workers.is_none() {
            // The worker's sessions' reply mailboxes live on this thread.
            tokio::spawn(crate::backend::mailbox::install());
        }
        serve(config_path.to_path_buf(), config, threads).await
    });
    drop(runtime);
    if let Some(workers) = workers {
        workers.stop();
    }
    served
}

fn init_logging(config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: log shippers get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = match config.log.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn serve(path: PathBuf, config: Config, threads: usize) -> Result<(), ProxyError> {
    let stop = StopSignals::install()?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Arc::new(
        if std::env::var("MEMSHIFT_METRICS").is_ok_and(|v| v == "off") {
            tracing::warn!(
                "MEMSHIFT_METRICS=off: per-request metrics disabled (benchmarking only)"
            );
            Metrics::without_request_metrics()
        } else {
            Metrics::new()
        },
    );
    metrics.set_phase(config.migration.phase.as_str());
    let cas_seed = crate::proxy::random_seed();
    if config.near_cache.enabled {
        crate::near_cache::init(metrics.clone(), threads);
    }
    let generation = Generation::build(&config, None, &metrics, cas_seed)?;
    metrics.set_phase(generation.migration.phase.as_str());
    let mut proxy = Proxy::new(
        &config,
        Router::new(generation.shared, generation.migration),
        cas_seed,
        metrics.clone(),
        threads,
        shutdown_rx.clone(),
    );
    if let (true, Some(path)) = (config.server.sasl, &config.server.sasl_credentials_file) {
        proxy.sasl = Some(Arc::new(crate::sasl::Credentials::load(path)?));
        tracing::info!("SASL on: binary connections must authenticate");
    }
    let proxy = Arc::new(proxy);
    proxy.start_flush_schedule();
    if let Some(addr) = config.admin.listen {
        let listener = server::bind(addr).await?;
        tracing::info!(%addr, "admin listener ready (/metrics, /health, /ready)");
        let ready_proxy = proxy.clone();
        let state = AdminState {
            metrics: metrics.clone(),
            ready: Arc::new(move || ready_proxy.router.all_up()),
        };
        tokio::spawn(admin::serve(listener, state, shutdown_rx.clone()));
    }
    let limit = Arc::new(Semaphore::new(config.server.max_connections));
    let drain = Duration::from_millis(config.server.drain_timeout_ms);

    let mut listeners = Vec::new();
    let mode = config.server.socket_mode();
    for addr in &config.server.listen {
        let listener = Listener::bind(addr, mode).await?;
        tracing::info!(%addr, "memcached protocol listener ready");
        listeners.push(tokio::spawn(server::serve(
            listener,
            proxy.clone(),
            limit.clone(),
            shutdown_rx.clone(),
            drain,
        )));
    }
    if let Some(addr) = &config.server.resp_listen {
        let listener = Listener::bind(addr, mode).await?;
        tracing::info!(%addr, "RESP listener ready");
        listeners.push(tokio::spawn(server::serve_resp(
            listener,
            proxy.clone(),
            limit.clone(),
            shutdown_rx.clone(),
            drain,
        )));
    }
    let server_tls =
        server::start_tls(&config, &proxy, &limit, &shutdown_rx, drain, &mut listeners).await?;
    if listeners.is_empty() {
        return Err(ProxyError::Other(
            "no listener: set server.listen or server.tls_listen".into(),
        ));
    }

    let reloader = tokio::spawn(reload_on_hangup(path, config, proxy.clone(), server_tls));
    tokio::spawn(watch_for_rollback(proxy.clone()));
    crate::trim::spawn_trimmer();
    stop.wait().await;
    reloader.abort();
    tracing::info!("stop signal: draining connections");
    let _ = shutdown_tx.send(true);
    for l in listeners {
        let _ = l.await;
    }
    let dropped = proxy
        .stats
        .drain_dropped
        .load(std::sync::atomic::Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(dropped, "drain timeout: requests read but left unanswered");
    }
    // Shadow writes still queued keep the other backend warm for a
    // rollback: give them the same bound as the drain.
    let migration = proxy.router.migration();
    let deadline = tokio::time::Instant::now() + drain;
    for queue in [&migration.to_redis, &migration.to_memcached]
        .into_iter()
        .flatten()
    {
        if !queue.flush(deadline).await {
            tracing::warn!(
                pending = queue.pending(),
                "drain timeout: shadow writes left unflushed"
            );
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// One generation of backends: what start builds and every reload
/// rebuilds.
struct Generation {
    /// The Redis generations as they are swapped (shared by the router and
    /// the Redis shadow sink).
    shared: Arc<ArcSwap<RedisBackends>>,
    redis: Arc<RedisBackends>,
    migration: Migration,
}

impl Generation {
    /// Start the legacy pool (every phase but `redis`) and the Redis shards
    /// (reusing the live connections of `running`'s unchanged shards), with
    /// a health monitor, and build the migration on them.
    fn build(
        config: &Config,
        running: Option<&Router>,
        metrics: &Arc<Metrics>,
        cas_seed: u64,
    ) -> Result<Generation, ProxyError> {
        let legacy = match &config.memcached {
            Some(mc) if config.migration.phase.needs_memcached() => {
                Some(Arc::new(crate::router::Legacy::start(mc)?))
            }
            _ => None,
        };
        let previous = running.map(Router::redis);
        let redis = Arc::new(RedisBackends::start(config, previous.as_deref(), metrics)?);
        start_health_monitor(&redis, config);
        let shared = match running {
            Some(router) => router.redis_handle().clone(),
            None => Arc::new(ArcSwap::new(redis.clone())),
        };
        let redis_sink = Arc::new(crate::router::shadow_sink::RedisShadowSink::new(
            shared.clone(),
            cas_seed ^ 0x5348_4144_4f57,
        ));
        let migration = crate::router::phase::build(config, redis_sink, legacy, metrics);
        Ok(Generation {
            shared,
            redis,
            migration,
        })
    }
}

/// Canary: once a second, compare the miss rates; if Redis misses too much
/// more than memcached, fall back to warmup and stay there until the
/// operator reloads.
async fn watch_for_rollback(proxy: Arc<Proxy>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let migration = proxy.router.migration();
        let Some(detector) = &migration.rollback else {
            continue;
        };
        let snapshot = detector.snapshot();
        if snapshot.roll_back {
            tracing::warn!(
                ?snapshot,
                "automatic rollback: Redis misses more than memcached beyond rollback_miss_delta_pp; back to warmup until the next reload"
            );
            let rolled_back = migration.with_phase(crate::config::Phase::Warmup);
            proxy.router.set_migration(rolled_back);
            proxy.metrics.rollback();
            proxy.metrics.set_phase("warmup");
        }
    }
}

/// One health monitor per generation of backends; it ends with it.
fn start_health_monitor(backends: &Arc<RedisBackends>, config: &Config) {
    tokio::spawn(crate::health::monitor(
        Arc::downgrade(backends),
        Duration::from_millis(config.redis.health_check_interval_ms),
        config.redis.eject_after_failures,
    ));
}

/// SIGHUP: re-read the config file and apply what can change live. An
/// invalid file is refused with a log line; the running config stays.
#[cfg(unix)]
async fn reload_on_hangup(
    path: PathBuf,
    // Settings that need a restart keep these values for the whole run, so
    // every reload compares against them (not against the last file read).
    running: Config,
    proxy: Arc<Proxy>,
    server_tls: Option<Arc<ServerTls>>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::error!("cannot install the SIGHUP handler: reload disabled");
        return;
    };
    while hup.recv().await.is_some() {
        let new = match Config::load(&path) {
            Ok(c) => c,
            Err(e) => {
                proxy.metrics.config_reload(false);
                tracing::error!(path = %path.display(), error = %e, "reload refused: keeping the running config");
                continue;
            }
        };
        let restart = running.restart_required_changes(&new);
        if !restart.is_empty() {
            tracing::warn!(settings = ?restart, "reload: these settings need a restart and keep their running values");
        }
        match Generation::build(&new, Some(&proxy.router), &proxy.metrics, proxy.cas_seed) {
            Ok(generation) => {
                let migration = generation.migration;
                proxy.metrics.set_phase(migration.phase.as_str());
                tracing::info!(phase = migration.phase.as_str(), "migration phase");
                proxy.router.install(generation.redis, migration);
                proxy
                    .settings
                    .store(Arc::new(crate::proxy::Settings::from_config(&new)));
                proxy.metrics.config_reload(true);
                crate::tls::reload_server(server_tls.as_deref(), &new);
                tracing::info!(
                    mode = new.redis.mode.as_str(),
                    shards = new.redis.shards.len(),
                    cluster_nodes = new.redis.cluster_nodes.len(),
                    "config reloaded"
                );
            }
            Err(e) => {
                proxy.metrics.config_reload(false);
                tracing::error!(error = %e, "reload refused: keeping the running config");
            }
        }
    }
}

#[cfg(not(unix))]
async fn reload_on_hangup(
    _path: PathBuf,
    _current: Config,
    _proxy: Arc<Proxy>,
    _server_tls: Option<Arc<ServerTls>>,
) {
}

/// SIGTERM and SIGINT, caught from before the listeners bind: a stop
/// signal during start still ends in a clean exit (drain, unix socket
/// files removed), not the default action's kill.
#[cfg(unix)]
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl StopSignals {
    fn install() -> Result<StopSignals, ProxyError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

#[cfg(not(unix))]
struct StopSignals;

#[cfg(not(unix))]
impl StopSignals {
    fn install() -> Result<StopSignals, ProxyError> {
        Ok(StopSignals)
    }

    async fn wait(self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
