//! Microsecond-precise waits for the open-loop schedule.
//!
//! tokio's timer has 1 ms granularity: a request due at t would leave up to
//! 1 ms late, and since open-loop latency is measured from t, that lateness
//! would be reported as server latency. Spinning until t instead keeps the
//! load generator's core busy, and a busy task is what the kernel scheduler
//! preempts first for whole time slices (milliseconds), which shows up as
//! latency too. So each open-loop connection sleeps on its own timerfd (an
//! hrtimer, registered with the runtime's epoll): the thread blocks in
//! epoll_wait and wakes within microseconds of t.

use std::io;
use std::time::Instant;

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Instant;

    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    pub struct Pacer {
        fd: AsyncFd<OwnedFd>,
    }

    impl Pacer {
        pub fn new() -> io::Result<Pacer> {
            // SAFETY: plain syscall; the fd is owned right away.
            let raw = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a fresh fd nobody else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: the OwnedFd keeps this fd open, unchanged, for as long
            // as the AsyncFd that owns it lives.
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
            Ok(Pacer { fd })
        }

        /// Returns at `t` (or at once if it has passed). Cancel-safe: an
        /// abandoned wait leaves at most a stale expiry, which the next wait
        /// reads and ignores.
        pub async fn wait_until(&self, t: Instant) -> io::Result<()> {
            loop {
                let now = Instant::now();
                if now >= t {
                    return Ok(());
                }
                let d = t - now;
                let spec = libc::itimerspec {
                    it_interval: libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    },
                    it_value: libc::timespec {
                        tv_sec: d.as_secs() as libc::time_t,
                        tv_nsec: d.subsec_nanos() as libc::c_long,
                    },
                };
                // SAFETY: valid fd and itimerspec; relative one-shot timer.
                let rc = unsafe {
                    libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut())
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
                let mut guard = self.fd.readable().await?;
                let mut expirations = 0u64;
                let _ = guard.try_io(|fd| {
                    // SAFETY: reads 8 bytes into a u64 (the timerfd's count).
                    let n = unsafe {
                        libc::read(
                            fd.as_raw_fd(),
                            (&mut expirations as *mut u64).cast(),
                            std::mem::size_of::<u64>(),
                        )
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                });
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::time::Instant;

    /// Elsewhere: tokio's timer (1 ms granularity).
    pub struct Pacer;

    impl Pacer {
        pub fn new() -> io::Result<Pacer> {
            Ok(Pacer)
        }

        pub async fn wait_until(&self, t: Instant) -> io::Result<()> {
            tokio::time::sleep_until(t.into()).await;
            Ok(())
        }
    }
}

pub struct Pacer(imp::Pacer);

impl Pacer {
    pub fn new() -> io::Result<Pacer> {
        imp::Pacer::new().map(Pacer)
    }

    pub async fn wait_until(&self, t: Instant) -> io::Result<()> {
        self.0.wait_until(t).await
    }
}
