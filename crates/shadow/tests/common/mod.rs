//! Real memcached processes for the integration tests: started on a free
//! loopback port, killed (and reaped) on drop, even when a test fails.
#![allow(dead_code)]

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memshift_shadow::{LegacyPool, PoolSettings};

pub struct Memcached {
    child: Option<Child>,
    pub port: u16,
    stopped: bool,
}

impl Memcached {
    /// Start `memcached` (or `$MEMCACHED_BIN`) on a free port. Panics (test
    /// setup) if it cannot be started.
    pub fn start() -> Memcached {
        for _ in 0..20 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free loopback port");
            let mut m = Memcached {
                child: None,
                port,
                stopped: false,
            };
            if m.spawn() {
                return m;
            }
        }
        panic!("could not start memcached");
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Spawn on `self.port` and wait until it accepts connections.
    fn spawn(&mut self) -> bool {
        let bin = std::env::var("MEMCACHED_BIN").unwrap_or_else(|_| "memcached".to_string());
        // `-u root` only matters (and is only read) when running as root.
        let child = Command::new(bin)
            .args(["-u", "root", "-l", "127.0.0.1", "-U", "0", "-m", "64", "-p"])
            .arg(self.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("memcached is installed");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    // Exited: most likely the port was taken meanwhile.
                    self.child = None;
                    return false;
                }
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        false
    }

    fn pid(&self) -> Option<String> {
        self.child.as_ref().map(|c| c.id().to_string())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        self.cont();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same port (empty cache).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..50 {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart memcached on port {}", self.port);
    }

    /// SIGSTOP: the kernel still accepts connections, nothing answers.
    pub fn stop(&mut self) {
        if let Some(pid) = self.pid() {
            let ok = Command::new("kill")
                .args(["-STOP", &pid])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill -STOP {pid}");
            self.stopped = true;
            // kill returns before every thread has stopped: a request sent
            // now could still be answered. Wait until each thread is in
            // state T (stopped).
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !all_threads_stopped(&pid) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "memcached {pid} did not stop"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    pub fn cont(&mut self) {
        if !self.stopped {
            return;
        }
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").args(["-CONT", &pid]).status();
        }
        self.stopped = false;
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn settings(timeout_ms: u64) -> PoolSettings {
    PoolSettings {
        connections_per_server: 2,
        timeout: Duration::from_millis(timeout_ms),
        connect_timeout: Duration::from_millis(timeout_ms),
        queue_depth: 10_000,
    }
}

/// A pool of one server.
pub fn single(addr: String, timeout_ms: u64) -> LegacyPool {
    LegacyPool::start(vec![addr], Box::new(|_| 0), settings(timeout_ms))
}

/// Wait (bounded) until every server of the pool is connected.
pub async fn wait_up<T>(pool: &LegacyPool<T>)
where
    T: memshift_shadow::reply::Tagged,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pool.all_up() {
        assert!(Instant::now() < deadline, "pool did not connect");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Fail the test instead of hanging.
pub async fn bounded<F: std::future::Future>(secs: u64, f: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(secs), f).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {secs}s"),
    }
}

/// Every thread of `pid` is stopped (state `T` in /proc/<pid>/task/*/stat).
fn all_threads_stopped(pid: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true; // gone: nothing can answer
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the parenthesised command name.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
        })
    })
}
