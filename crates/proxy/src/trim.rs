//! Gives memory that connections freed back to the OS.
//!
//! glibc keeps freed memory in its arenas: after a burst of connections
//! closes, the process keeps its peak RSS, fragmented, indefinitely (busy
//! sessions' buffers are pooled, see `conn::pool`, but each connection's
//! task and stream are freed). A background thread calls `malloc_trim(0)`
//! (which also returns free pages in the middle of the heap) a few seconds
//! after sessions end, and never while none do, so a proxy with steady
//! connections is not trimmed at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Sessions that ended since the process started.
static RELEASES: AtomicU64 = AtomicU64::new(0);

/// How often the trimmer looks at the release count.
const CHECK_EVERY: Duration = Duration::from_secs(2);
/// Releases since the last trim that make another one worth its cost.
const MIN_RELEASES: u64 = 256;

/// A session ended (its memory was freed).
pub fn note_release() {
    RELEASES.fetch_add(1, Ordering::Relaxed);
}

/// Start the trimming thread (glibc only; elsewhere a no-op).
pub fn spawn_trimmer() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new()
            .name("memshift-trim".into())
            .spawn(|| {
                let mut trimmed_at = RELEASES.load(Ordering::Relaxed);
                loop {
                    std::thread::sleep(CHECK_EVERY);
                    let now = RELEASES.load(Ordering::Relaxed);
                    if now.saturating_sub(trimmed_at) < MIN_RELEASES {
                        continue;
                    }
                    trimmed_at = now;
                    let started = Instant::now();
                    // SAFETY: malloc_trim only walks glibc's own arenas under
                    // their locks; it is safe to call from any thread.
                    let released = unsafe { libc::malloc_trim(0) };
                    tracing::debug!(
                        took_us = started.elapsed().as_micros() as u64,
                        released,
                        "returned freed memory to the OS"
                    );
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start the memory trimming thread");
        }
    }
}
