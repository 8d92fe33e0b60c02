//! Real server processes owned by guards: `redis-server`, `memcached`,
//! `memshift`, and a `Cluster` (memshift over N Redis shards).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::client::McClient;
use crate::env::{free_port, memshift_bin};
use crate::resp::{RedisClient, Resp};

const START_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(20);

pub(crate) fn temp_dir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("create a temp dir")
}

fn append_log(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Spawns `cmd` with stdin closed and stdout/stderr appended to files, so a
/// chatty child can never block on a full pipe. On Linux the child is killed
/// if the spawning thread (the test) dies without cleaning up.
pub(crate) fn spawn(mut cmd: Command, stdout: &Path, stderr: &Path) -> io::Result<Child> {
    cmd.stdin(Stdio::null())
        .stdout(append_log(stdout)?)
        .stderr(append_log(stderr)?);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe; nothing else runs in pre_exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    cmd.spawn()
}

pub(crate) fn kill_and_reap(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

pub(crate) fn read_lossy(path: &Path) -> String {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The Redis server (or Sentinel) answering on `addr` is process `pid`:
/// ours, not another test run's that took the port first (ours then fails
/// to bind, but may not have exited yet).
pub(crate) fn redis_answers_as(addr: &str, pid: u32) -> bool {
    answering_pid(addr) == Some(pid)
}

/// The `process_id` of the Redis server answering on `addr`, if one does.
fn answering_pid(addr: &str) -> Option<u32> {
    let info = RedisClient::connect(addr, Duration::from_millis(500))
        .and_then(|mut c| c.cmd(&[b"INFO", b"server"]))
        .ok()?;
    let Resp::Bulk(Some(text)) = info else {
        return None;
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Waits until `ready()` is true, failing early if the child exits.
pub(crate) fn wait_ready(
    child: &mut Child,
    what: &str,
    log: &dyn Fn() -> String,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{what} exited during startup with {status}; output:\n{}",
                log()
            ));
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{what} not ready after {START_TIMEOUT:?}; output:\n{}",
                log()
            ));
        }
        sleep(POLL);
    }
}

/// Process `pid` holds the socket listening at `addr` (`"ip:port"` or
/// `"unix:/path"`), read from /proc without connecting: not another test
/// run's server that took the port first (ours then fails to bind, but may
/// not have exited yet), and no probe connection that memshift would count
/// as a client (a test then racing its accept against its own first client
/// under `max_connections`).
fn listening_as(addr: &str, pid: u32) -> bool {
    if let Some(path) = addr.strip_prefix("unix:") {
        return unix_listens_on(pid, Path::new(path));
    }
    match addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
    {
        Some(port) => listens_on(pid, port),
        None => false,
    }
}

/// Process `pid` holds the socket listening on unix socket `path` (from
/// /proc/net/unix and the process's fds).
fn unix_listens_on(pid: u32, path: &Path) -> bool {
    const ACCEPTING: u32 = 0x0001_0000; // __SO_ACCEPTCON: listen() was called.
    let Ok(table) = fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode Path
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            let inode = f.get(6)?;
            let ours = flags & ACCEPTING != 0 && Path::new(f.get(7)?) == path;
            ours.then(|| format!("socket:[{inode}]"))
        })
        .collect();
    holds_any(pid, &inodes)
}

/// Process `pid` holds the socket listening on TCP `port` (from
/// /proc/net/tcp{,6} and the process's fds).
fn listens_on(pid: u32, port: u16) -> bool {
    let port_hex = format!(":{port:04X}");
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    // local_address, st (0A: LISTEN), inode.
                    let listening = f.get(1)?.ends_with(&port_hex) && *f.get(3)? == "0A";
                    listening.then(|| f.get(9).map(|i| format!("socket:[{i}]")))?
                })
                .collect::<Vec<_>>()
        })
        .collect();
    holds_any(pid, &inodes)
}

/// One of process `pid`'s fds is one of `sockets` (`socket:[inode]`).
fn holds_any(pid: u32, sockets: &[String]) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .any(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
}

// ---------------------------------------------------------------------------
// redis-server

/// A `redis-server` on a free loopback port, without persistence.
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts on a free port (retrying on a port collision).
    pub fn start() -> Self {
        let mut last = String::new();
        for _ in 0..5 {
            match Self::start_on(free_port()) {
                Ok(server) => return server,
                Err(e) => last = e,
            }
        }
        panic!("could not start redis-server: {last}");
    }

    pub fn start_on(port: u16) -> Result<Self, String> {
        let mut server = RedisServer {
            port,
            dir: temp_dir("memshift-redis-"),
            child: None,
        };
        server.spawn()?;
        Ok(server)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path());
        let log = self.log_path();
        let mut child = spawn(cmd, &log, &log).map_err(|e| format!("spawn redis-server: {e}"))?;
        let addr = self.addr();
        let log_fn = || read_lossy(&log);
        let pid = child.id();
        let res = wait_ready(&mut child, "redis-server", &log_fn, || {
            redis_answers_as(&addr, pid)
        });
        match res {
            Ok(()) => {
                self.child = Some(child);
                Ok(())
            }
            Err(e) => {
                let mut c = Some(child);
                kill_and_reap(&mut c);
                Err(e)
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (its data is lost: no persistence).
    pub fn stop(&mut self) {
        kill_and_reap(&mut self.child);
    }

    /// Starts it again on the same port (retrying while the port is busy).
    pub fn restart(&mut self) {
        self.stop();
        let mut last = String::new();
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            sleep(Duration::from_millis(250));
        }
        panic!(
            "could not restart redis-server on port {}: {last}",
            self.port
        );
    }

    /// Sends a signal to the server (`libc::SIGSTOP` freezes it with its
    /// socket still accepting bytes; `libc::SIGCONT` resumes it).
    pub fn signal(&self, sig: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe {
                libc::kill(child.id() as libc::pid_t, sig);
            }
            if sig == libc::SIGSTOP {
                // kill returns before every thread has stopped.
                let deadline = Instant::now() + Duration::from_secs(10);
                while !all_threads_stopped(child.id()) {
                    assert!(Instant::now() < deadline, "redis-server did not stop");
                    sleep(Duration::from_millis(5));
                }
            }
        }
    }

    /// A client of this server. Its read timeout is long: under a busy box
    /// (two suites on two cores) a replica's INFO once took over 5 s.
    pub fn client(&self) -> RedisClient {
        RedisClient::connect(&self.addr(), Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("connect to redis {}: {e}", self.addr()))
    }

    pub fn cmd(&self, args: &[&[u8]]) -> Resp {
        self.client()
            .cmd(args)
            .unwrap_or_else(|e| panic!("redis {} {:?}: {e}", self.addr(), args))
    }

    pub fn dbsize(&self) -> i64 {
        self.cmd(&[b"DBSIZE"])
            .as_int()
            .expect("DBSIZE answers an integer")
    }

    /// `KEYS *`
    pub fn keys(&self) -> Vec<Vec<u8>> {
        self.cmd(&[b"KEYS", b"*"])
            .as_bulk_list()
            .expect("KEYS answers an array of bulk strings")
    }

    pub fn log(&self) -> String {
        read_lossy(&self.log_path())
    }

    /// Ids of the RESP3 clients: a memshift near cache's invalidation
    /// connections (its data connections speak RESP2).
    pub fn tracking_client_ids(&self) -> Vec<String> {
        let Resp::Bulk(Some(list)) = self.cmd(&[b"CLIENT", b"LIST"]) else {
            panic!("redis {}: CLIENT LIST", self.addr());
        };
        String::from_utf8_lossy(&list)
            .lines()
            .filter(|l| l.contains(" resp=3"))
            .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(str::to_owned)
            .collect()
    }

    /// Wait (20 s at most) until `n` invalidation connections are up: a
    /// near cache admits nothing of this shard before its own is.
    pub fn wait_tracking_clients(&self, n: usize) {
        crate::ops_support::wait_until(
            Duration::from_secs(20),
            Duration::from_millis(10),
            &format!(
                "{n} near-cache invalidation connection(s) on {}",
                self.addr()
            ),
            || (self.tracking_client_ids().len() >= n).then_some(()),
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

// ---------------------------------------------------------------------------
// memcached

/// A real `memcached` on a free loopback port (TCP only).
pub struct Memcached {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl Memcached {
    pub fn start() -> Self {
        Self::start_with_args(&[])
    }

    /// Starts with extra arguments, e.g. `["-I", "2m"]`.
    pub fn start_with_args(args: &[&str]) -> Self {
        let mut last = String::new();
        for _ in 0..5 {
            match Self::try_start(free_port(), args) {
                Ok(m) => return m,
                Err(e) => last = e,
            }
        }
        panic!("could not start memcached: {last}");
    }

    fn try_start(port: u16, args: &[&str]) -> Result<Self, String> {
        let dir = temp_dir("memshift-memcached-");
        let log = dir.path().join("memcached.log");
        let mut cmd = Command::new("memcached");
        cmd.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"]);
        if is_root() {
            cmd.args(["-u", "root"]);
        }
        cmd.args(args);
        let mut child = spawn(cmd, &log, &log).map_err(|e| format!("spawn memcached: {e}"))?;
        let addr = format!("127.0.0.1:{port}");
        let log_fn = || read_lossy(&log);
        // Ours (its `stats` pid), not another run's server on the port.
        let pid_line = format!("STAT pid {}\r\n", child.id());
        let res = wait_ready(&mut child, "memcached", &log_fn, || {
            McClient::connect_with_timeout(&addr, Duration::from_millis(500))
                .and_then(|mut c| c.request(b"stats\r\n"))
                .is_ok_and(|r| String::from_utf8_lossy(&r).contains(&pid_line))
        });
        let mut child = Some(child);
        match res {
            Ok(()) => Ok(Memcached { port, dir, child }),
            Err(e) => {
                kill_and_reap(&mut child);
                Err(e)
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> McClient {
        McClient::connect(&self.addr())
            .unwrap_or_else(|e| panic!("connect to memcached {}: {e}", self.addr()))
    }

    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join("memcached.log"))
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

// ---------------------------------------------------------------------------
// memshift

/// The `memshift` binary running with a given config file.
pub struct Memshift {
    child: Option<Child>,
    addr: String,
    dir: TempDir,
}

impl Memshift {
    /// Writes `config_toml` to a temp file, runs `memshift --config FILE` and
    /// waits until `[server] listen` accepts connections. Panics (with the
    /// process' stderr) on failure.
    pub fn start(config_toml: &str) -> Self {
        Self::try_start(config_toml).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_start(config_toml: &str) -> Result<Self, String> {
        let bin = memshift_bin();
        let addr = server_listen(config_toml)
            .ok_or("the config has no `listen = \"...\"` in its [server] table")?;
        let dir = temp_dir("memshift-proxy-");
        let config_path = dir.path().join("memshift.toml");
        fs::write(&config_path, config_toml).map_err(|e| format!("write config: {e}"))?;
        let mut cmd = Command::new(&bin);
        cmd.arg("--config").arg(&config_path);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        // Plain text in the captured stderr, for assertions.
        cmd.env("NO_COLOR", "1");
        let stdout = dir.path().join("stdout.log");
        let stderr = dir.path().join("stderr.log");
        let mut child =
            spawn(cmd, &stdout, &stderr).map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let log_fn = || read_lossy(&stderr);
        let pid = child.id();
        let res = wait_ready(&mut child, "memshift", &log_fn, || listening_as(&addr, pid));
        let mut child = Some(child);
        match res {
            Ok(()) => Ok(Memshift { child, addr, dir }),
            Err(e) => {
                kill_and_reap(&mut child);
                Err(e)
            }
        }
    }

    /// The plaintext listen address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("listen address has a port")
    }

    pub fn client(&self) -> McClient {
        McClient::connect(&self.addr)
            .unwrap_or_else(|e| panic!("connect to memshift {}: {e}", self.addr))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal (`libc::SIGHUP`, `libc::SIGTERM`, ...).
    pub fn signal(&self, sig: i32) {
        let pid = self.pid().expect("memshift is not running");
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }

    pub fn sighup(&self) {
        self.signal(libc::SIGHUP);
    }

    pub fn sigterm(&self) {
        self.signal(libc::SIGTERM);
    }

    /// The config file memshift was started with (rewrite it, then SIGHUP).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("memshift.toml")
    }

    pub fn rewrite_config(&self, config_toml: &str) {
        fs::write(self.config_path(), config_toml).expect("rewrite config");
    }

    /// Everything memshift wrote to stderr so far.
    pub fn stderr(&self) -> String {
        read_lossy(&self.dir.path().join("stderr.log"))
    }

    pub fn stdout(&self) -> String {
        read_lossy(&self.dir.path().join("stdout.log"))
    }

    /// Waits up to `timeout` for the process to exit; `None` if it did not.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            sleep(POLL);
        }
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn kill(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

impl Drop for Memshift {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
        // Killed, it could not remove its unix socket file itself.
        if let Some(path) = self.addr.strip_prefix("unix:") {
            let _ = fs::remove_file(path);
        }
    }
}

/// `listen` of the `[server]` table of a TOML config.
fn server_listen(config: &str) -> Option<String> {
    let mut section = String::new();
    for line in config.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            continue;
        }
        if section != "server" {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            if k.trim() == "listen" {
                let v = v.split('#').next().unwrap_or("").trim();
                return Some(v.trim_matches('"').to_string());
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------
// cluster: memshift over N redis shards

/// How to start a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub shards: usize,
    /// `[redis] timeout_ms`
    pub timeout_ms: u64,
    /// Extra lines for the `[server]` table (e.g. `max_item_size = 1048576`).
    pub server_extra: String,
    /// Extra lines for the `[redis]` table.
    pub redis_extra: String,
    /// Extra tables appended at the end.
    pub extra_tables: String,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            shards: 3,
            timeout_ms: 500,
            server_extra: String::new(),
            redis_extra: String::new(),
            extra_tables: String::new(),
        }
    }
}

/// The config for memshift in phase `redis` over `shards`.
pub fn memshift_config(
    listen_port: u16,
    admin_port: u16,
    shards: &[String],
    opts: &ClusterOptions,
) -> String {
    let shard_list = toml_list(shards);
    format!(
        "[server]\nlisten = \"127.0.0.1:{listen_port}\"\n{server_extra}\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [redis]\nshards = [{shard_list}]\ntimeout_ms = {timeout}\n{redis_extra}\n\
         [migration]\nphase = \"redis\"\n\n{extra}",
        server_extra = opts.server_extra,
        timeout = opts.timeout_ms,
        redis_extra = opts.redis_extra,
        extra = opts.extra_tables,
    )
}

/// A unix socket path for a test memshift, unique per (free) port.
pub fn test_socket_path(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("memshift-test-{port}.sock"))
}

/// `["a", "b"]` without the brackets: a TOML array's items.
pub fn toml_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Starts memshift with `config(listen_port, admin_port)` on free ports,
/// with new ports when one was taken by someone else between `free_port()`
/// and bind. Returns memshift, its admin port and the config it runs with.
pub fn start_memshift_on_free_ports(
    mut config: impl FnMut(u16, u16) -> String,
) -> (Memshift, u16, String) {
    let mut last = String::new();
    for _ in 0..3 {
        let admin_port = free_port();
        let config = config(free_port(), admin_port);
        match Memshift::try_start(&config) {
            Ok(memshift) => return (memshift, admin_port, config),
            Err(e) if e.to_ascii_lowercase().contains("in use") => last = e,
            Err(e) => panic!("memshift did not start with config:\n{config}\n{e}"),
        }
    }
    panic!("memshift did not start (ports in use?): {last}");
}

/// memshift (phase `redis`) over real Redis shards.
pub struct Cluster {
    // Field order = drop order: memshift goes first.
    pub memshift: Memshift,
    pub shards: Vec<RedisServer>,
    pub admin_port: u16,
    pub config: String,
}

impl Cluster {
    /// memshift over 3 shards, `timeout_ms = 500`.
    pub fn start() -> Self {
        Self::start_with(ClusterOptions::default())
    }

    pub fn start_with(opts: ClusterOptions) -> Self {
        Self::start_listening(opts, false)
    }

    /// Like [`Cluster::start_with`], with memshift's `listen` on a unix
    /// socket (`unix:<tmp>/memshift-test-<port>.sock`) instead of TCP.
    pub fn start_on_unix_socket(opts: ClusterOptions) -> Self {
        Self::start_listening(opts, true)
    }

    fn start_listening(opts: ClusterOptions, unix_socket: bool) -> Self {
        let shards: Vec<RedisServer> = (0..opts.shards).map(|_| RedisServer::start()).collect();
        let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
        let (memshift, admin_port, config) = start_memshift_on_free_ports(|port, admin_port| {
            let config = memshift_config(port, admin_port, &addrs, &opts);
            if !unix_socket {
                return config;
            }
            let path = test_socket_path(port);
            config.replacen(
                &format!("listen = \"127.0.0.1:{port}\""),
                &format!("listen = \"unix:{}\"", path.display()),
                1,
            )
        });
        Cluster {
            memshift,
            shards,
            admin_port,
            config,
        }
    }

    pub fn addr(&self) -> &str {
        self.memshift.addr()
    }

    pub fn client(&self) -> McClient {
        self.memshift.client()
    }

    /// Index of the shard whose Redis holds `key` (by `EXISTS`), if any.
    pub fn shard_holding(&self, key: &[u8]) -> Option<usize> {
        self.shards
            .iter()
            .position(|s| s.is_running() && s.cmd(&[b"EXISTS", key]).as_int() == Some(1))
    }
}

// ---------------------------------------------------------------------------
// one-shot commands

/// What a finished command printed.
#[derive(Debug)]
pub struct CommandOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` like [`run_with_timeout`] and returns its stdout; panics
/// naming `what`, with the output, when it fails or times out.
pub fn run_ok(cmd: Command, timeout: Duration, what: &str) -> String {
    let out = run_with_timeout(cmd, timeout).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// Runs `cmd` to completion with its output captured in files (no pipe can
/// fill up), killing it after `timeout`.
pub fn run_with_timeout(cmd: Command, timeout: Duration) -> Result<CommandOutput, String> {
    let dir = temp_dir("memshift-cmd-");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let what = format!("{cmd:?}");
    let mut child = spawn(cmd, &out, &err).map_err(|e| format!("{what}: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Ok(CommandOutput {
                    status,
                    stdout: read_lossy(&out),
                    stderr: read_lossy(&err),
                })
            }
            Ok(None) if Instant::now() < deadline => sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{what} did not finish within {timeout:?}; stdout:\n{}\nstderr:\n{}",
                    read_lossy(&out),
                    read_lossy(&err)
                ));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
}

/// Every thread of `pid` is stopped (state `T` in /proc/<pid>/task/*/stat).
fn all_threads_stopped(pid: u32) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::tool_available;

    /// A starter never takes another process's server on its port for the
    /// one it started (it waits for its own, which fails to bind).
    #[test]
    fn a_port_another_server_holds_is_not_taken_for_ours() {
        if !tool_available("redis-server") || !tool_available("memcached") {
            return;
        }
        let redis = RedisServer::start();
        assert!(RedisServer::start_on(redis.port()).is_err());
        let memcached = Memcached::start();
        assert!(Memcached::try_start(memcached.port(), &[]).is_err());
        // memshift, by the socket it listens on.
        let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = holder.local_addr().expect("addr").port();
        assert!(!listens_on(1, port));
        assert!(listens_on(std::process::id(), port));
        assert!(listening_as(
            &format!("127.0.0.1:{port}"),
            std::process::id()
        ));
    }

    #[test]
    fn a_unix_socket_is_ours_by_the_listener_we_hold_without_connecting() {
        let dir = temp_dir("memshift-listening-");
        let path = dir.path().join("l.sock");
        let addr = format!("unix:{}", path.display());
        assert!(!listening_as(&addr, std::process::id()), "no file yet");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        assert!(listening_as(&addr, std::process::id()));
        assert!(!listening_as(&addr, 1), "another process's");
        let other = dir.path().join("other.sock");
        assert!(!listening_as(
            &format!("unix:{}", other.display()),
            std::process::id()
        ));
        // Checked without a connection: nothing waits to be accepted.
        listener.set_nonblocking(true).expect("nonblocking");
        assert!(listener.accept().is_err());
        drop(listener);
        assert!(!listening_as(&addr, std::process::id()), "closed");
    }
}
