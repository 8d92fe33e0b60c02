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

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[allow(clippy::unnecessary_cast)]
    fn limits() -> (u64, u64) {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a valid pointer to a local struct.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        (lim.rlim_cur as u64, lim.rlim_max as u64)
    }

    #[test]
    fn soft_limit_is_raised_to_fit_max_connections_within_the_hard_limit() {
        let (_, hard) = limits();
        if hard < 2048 {
            eprintln!("skipping: hard open-files limit {hard}");
            return;
        }
        // Start from the common default soft limit.
        let lowered = libc::rlimit {
            rlim_cur: 256,
            rlim_max: hard as libc::rlim_t,
        };
        // SAFETY: a valid pointer to a local struct.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) }, 0);
        let want = (hard - HEADROOM).min(5_000) as usize;
        let soft = raise_for(want).expect("limit readable");
        assert_eq!(soft, want as u64 + HEADROOM);
        assert_eq!(limits(), (soft, hard));
        // More than the hard limit allows: raised as far as it goes.
        assert_eq!(raise_for(usize::MAX / 2), Some(hard));
        assert_eq!(limits().0, hard);
    }
}
