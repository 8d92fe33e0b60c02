//! Raises the open-files limit to fit `server.max_connections`.
//!
//! Shells and container runtimes often start processes with a soft limit of
//! 1,024 files; memshift needs one per client connection plus its backend
//! connections, so it raises the soft limit toward the hard one at start
//! (as memcached does for `-c`) and says so when even the hard limit is too
//! low for the configured connection limit.

/// Files kept for listeners, backend connections, logs and the admin server.
const HEADROOM: u64 = 1024;

// `rlim_t` is u64 on Linux but not on every Unix: the casts stay.
#[allow(clippy::unnecessary_cast)]
/// Raise the soft `RLIMIT_NOFILE` to fit `max_connections` (capped by the
/// hard limit). Returns the soft limit now in force, if it could be read.
pub fn raise_for(max_connections: usize) -> Option<u64> {
    #[cfg(unix)]
    {
        let wanted = (max_connections as u64).saturating_add(HEADROOM);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return None;
        }
        let target = wanted.min(lim.rlim_max as u64);
        if (lim.rlim_cur as u64) < target {
            let raised = libc::rlimit {
                rlim_cur: target as libc::rlim_t,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim.rlim_cur = raised.rlim_cur;
            }
        }
        let soft = lim.rlim_cur as u64;
        if soft < wanted {
            tracing::warn!(
                open_files_limit = soft,
                max_connections,
                "the open-files limit is below server.max_connections: connections beyond \
                 about {} will fail; raise the hard limit (ulimit -Hn, LimitNOFILE=, \
                 docker --ulimit nofile=) or lower server.max_connections",
                soft.saturating_sub(HEADROOM)
            );
        }
        Some(soft)
    }
    #[cfg(not(unix))]
    {
        let _ = max_connections;
        None
    }
}
