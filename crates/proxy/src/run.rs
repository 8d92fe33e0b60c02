//! `memshift --config FILE`: start the runtime, the shards, the listeners;
//! stop cleanly on SIGTERM/SIGINT.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};

use crate::config::{Config, LogFormat};
use crate::error::ProxyError;
use crate::proxy::{Backends, Proxy};
use crate::server;

/// Load the config, then serve until a stop signal. Errors are one line.
pub fn run(config_path: &Path) -> Result<(), ProxyError> {
    let config = Config::load(config_path)?;
    init_logging(&config);
    let threads = if config.server.threads == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    } else {
        config.server.threads
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(serve(config, threads))
}

fn init_logging(config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = match config.log.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn serve(config: Config, threads: usize) -> Result<(), ProxyError> {
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let backends = Backends::start(&config, &shutdown_rx)?;
    let proxy = Arc::new(Proxy::new(&config, backends, threads, shutdown_rx.clone()));
    let limit = Arc::new(Semaphore::new(config.server.max_connections));
    let drain = Duration::from_millis(config.server.drain_timeout_ms);

    let mut listeners = Vec::new();
    if let Some(addr) = config.server.listen {
        let listener = server::bind(addr).await?;
        tracing::info!(%addr, "memcached protocol listener ready");
        listeners.push(tokio::spawn(server::serve(
            listener,
            proxy.clone(),
            limit.clone(),
            shutdown_rx.clone(),
            drain,
        )));
    }
    if listeners.is_empty() {
        return Err(ProxyError::Other(
            "no listener: set server.listen (TLS listeners arrive with TLS support)".into(),
        ));
    }

    wait_for_stop_signal().await?;
    tracing::info!("stop signal: draining connections");
    let _ = shutdown_tx.send(true);
    for l in listeners {
        let _ = l.await;
    }
    tracing::info!("stopped");
    Ok(())
}

#[cfg(unix)]
async fn wait_for_stop_signal() -> Result<(), ProxyError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

#[cfg(not(unix))]
async fn wait_for_stop_signal() -> Result<(), ProxyError> {
    tokio::signal::ctrl_c().await?;
    Ok(())
}
