//! The open-loop clock: one ticker for all connections.
//!
//! Open-loop latency is measured from each request's intended send time, so
//! how late the generator sends is reported as server latency. tokio's timer
//! has 1 ms granularity (far too coarse), spinning makes the generator a CPU
//! hog that the kernel preempts for whole time slices, and a timer per
//! connection costs several syscalls and a wake-up per request, which
//! saturated the generator's core at ~36,000 requests/s on the 2-vCPU test
//! machine. So: the schedule lives on a grid (50-500 us), one periodic timerfd
//! (an hrtimer registered with the runtime's epoll) fires every tick, and the
//! ticker wakes only the connections with a request due; each request's
//! intended time is the grid point at which it became due.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Finest grid of the open-loop schedule; coarser at low rates (one tick
/// per request on average, at most `MAX_TICK`), where a tick with nothing
/// due would only cost a wake-up.
pub const MIN_TICK: Duration = Duration::from_micros(50);
pub const MAX_TICK: Duration = Duration::from_micros(500);

/// The latest tick released by the ticker, shared with the connections.
pub struct Clock {
    pub start: Instant,
    tick_ns: u64,
    released: AtomicU64,
}

impl Clock {
    /// A grid of one tick per request at `rate` requests/s, within bounds.
    pub fn new(start: Instant, rate: f64) -> Clock {
        let tick = Duration::from_secs_f64(1.0 / rate.max(1.0)).clamp(MIN_TICK, MAX_TICK);
        Clock {
            start,
            tick_ns: tick.as_nanos() as u64,
            released: AtomicU64::new(0),
        }
    }

    pub fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_ns)
    }

    /// The latest grid point the ticker has reached.
    pub fn now(&self) -> Instant {
        self.start + Duration::from_nanos(self.released.load(Ordering::Acquire) * self.tick_ns)
    }

    /// The first grid point at or after `t`: a request's intended time.
    pub fn grid(&self, t: Instant) -> Instant {
        let ns = t.saturating_duration_since(self.start).as_nanos() as u64;
        let n = ns.div_ceil(self.tick_ns);
        self.start + Duration::from_nanos(n * self.tick_ns)
    }

    fn release(&self, n: u64) {
        self.released.store(n, Ordering::Release);
    }
}

/// One connection's schedule as the ticker tracks it.
pub struct Slot {
    pub notify: Arc<Notify>,
    pub first: Instant,
    pub interval: Duration,
}

/// Runs until aborted: every tick, publishes the tick and wakes the
/// connections that have a request due at or before it.
pub async fn ticker(clock: Arc<Clock>, slots: Vec<Slot>) -> io::Result<()> {
    let timer = imp::Periodic::new(clock.start, clock.tick())?;
    let mut due: Vec<Instant> = slots.iter().map(|s| s.first).collect();
    loop {
        timer.wait().await?;
        let n = (Instant::now()
            .saturating_duration_since(clock.start)
            .as_nanos()
            / u128::from(clock.tick_ns)) as u64;
        clock.release(n);
        let t = clock.now();
        for (slot, d) in slots.iter().zip(due.iter_mut()) {
            if *d <= t {
                slot.notify.notify_one();
                while *d <= t {
                    *d += slot.interval;
                }
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::{Duration, Instant};

    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    /// A periodic timerfd.
    pub struct Periodic {
        fd: AsyncFd<OwnedFd>,
    }

    fn timespec(d: Duration) -> libc::timespec {
        libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        }
    }

    impl Periodic {
        /// First expiry at `first` (or right away), then every `every`.
        pub fn new(first: Instant, every: Duration) -> io::Result<Periodic> {
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
            // A zero it_value would disarm the timer: at least 1 ns.
            let delay = first
                .saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1));
            let spec = libc::itimerspec {
                it_interval: timespec(every),
                it_value: timespec(delay),
            };
            // SAFETY: valid fd and itimerspec; relative timer.
            if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } != 0
            {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: the OwnedFd keeps this fd open, unchanged, for as long
            // as the AsyncFd that owns it lives.
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
            Ok(Periodic { fd })
        }

        /// Waits for the next expiry (returns at once if some are pending).
        pub async fn wait(&self) -> io::Result<()> {
            loop {
                let mut guard = self.fd.readable().await?;
                let mut expirations = 0u64;
                // SAFETY: reads 8 bytes into a u64 (the expiration count).
                let n = unsafe {
                    libc::read(
                        self.fd.as_raw_fd(),
                        (&mut expirations as *mut u64).cast(),
                        std::mem::size_of::<u64>(),
                    )
                };
                if n == std::mem::size_of::<u64>() as isize {
                    // Consumed: the next expiry raises a new edge.
                    guard.clear_ready();
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock {
                    return Err(e);
                }
                guard.clear_ready();
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::time::{Duration, Instant};

    /// Elsewhere: tokio's interval (1 ms granularity).
    pub struct Periodic {
        interval: tokio::sync::Mutex<tokio::time::Interval>,
    }

    impl Periodic {
        pub fn new(first: Instant, every: Duration) -> io::Result<Periodic> {
            Ok(Periodic {
                interval: tokio::sync::Mutex::new(tokio::time::interval_at(first.into(), every)),
            })
        }

        pub async fn wait(&self) -> io::Result<()> {
            self.interval.lock().await.tick().await;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_and_tick() {
        let start = Instant::now();
        let c = Clock::new(start, 20_000.0);
        assert_eq!(c.tick(), MIN_TICK);
        assert_eq!(c.grid(start), start);
        assert_eq!(c.grid(start + Duration::from_nanos(1)), start + MIN_TICK);
        assert_eq!(c.grid(start + MIN_TICK), start + MIN_TICK);
        assert_eq!(c.now(), start);
        c.release(3);
        assert_eq!(c.now(), start + MIN_TICK * 3);
        assert_eq!(Clock::new(start, 10.0).tick(), MAX_TICK);
        assert_eq!(
            Clock::new(start, 5_000.0).tick(),
            Duration::from_micros(200)
        );
    }
}
