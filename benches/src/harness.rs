//! Real server processes for the end-to-end bench: `redis-server` shards and
//! `target/release/memshift`, each killed (and reaped) on drop, and killed by
//! the kernel if the bench process dies first.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A free loopback port (bound then released; callers retry on a collision).
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn spawn(mut cmd: Command, log: &Path) -> io::Result<Child> {
    let out = File::create(log)?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
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

/// A child process killed and reaped on drop.
pub struct Proc {
    child: Child,
    pub name: String,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Waits until `ready` holds, failing early if the child exits.
    fn wait(&mut self, mut ready: impl FnMut() -> bool) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!("{} exited with {st}:\n{}", self.name, self.log()));
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("{} not ready:\n{}", self.name, self.log()));
            }
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request/reply exchange on a fresh connection; `None` on any failure.
pub fn exchange(addr: SocketAddr, req: &[u8], until: &[u8]) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(req).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while !out.ends_with(until) {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Some(out)
}

pub fn start_redis(dir: &Path) -> Result<Proc, String> {
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port().map_err(|e| e.to_string())?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir);
        let log = dir.join(format!("redis-{port}.log"));
        let child = spawn(cmd, &log).map_err(|e| format!("spawn redis-server: {e}"))?;
        let mut p = Proc {
            child,
            name: format!("redis-server :{port}"),
            addr,
            log,
        };
        match p.wait(|| exchange(addr, b"PING\r\n", b"\r\n").is_some_and(|r| r == b"+PONG\r\n")) {
            Ok(()) => return Ok(p),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// `target/release/memshift`, freshly built: `cargo build --release -p
/// memshift-proxy` runs first (a no-op when up to date; cargo does not hold
/// the build lock while benches run). `$MEMSHIFT_BIN` skips the build and
/// names the binary.
pub fn memshift_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("MEMSHIFT_BIN") {
        return Ok(PathBuf::from(p));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no workspace root")?
        .to_path_buf();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bin = target.join("release").join("memshift");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "--release", "-q", "-p", "memshift-proxy"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !st.success() || !bin.exists() {
        return Err(format!(
            "cargo build --release -p memshift-proxy: {st} ({} missing?)",
            bin.display()
        ));
    }
    Ok(bin)
}

/// memshift (plaintext listener only) over `shards`.
pub fn start_memshift(
    bin: &Path,
    dir: &Path,
    shards: &[SocketAddr],
    threads: usize,
) -> Result<Proc, String> {
    let mut last = String::new();
    for attempt in 0..5 {
        let port = free_port().map_err(|e| e.to_string())?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let list: Vec<String> = shards.iter().map(|s| format!("\"{s}\"")).collect();
        let config = format!(
            "[server]\nlisten = \"{addr}\"\nthreads = {threads}\n\n\
             [log]\nlevel = \"warn\"\n\n[admin]\nlisten = \"\"\n\n\
             [redis]\nshards = [{}]\n\n[migration]\nphase = \"redis\"\n",
            list.join(", ")
        );
        let cfg = dir.join(format!("memshift-{attempt}.toml"));
        fs::write(&cfg, config).map_err(|e| format!("write config: {e}"))?;
        let mut cmd = Command::new(bin);
        cmd.arg("--config").arg(&cfg);
        let log = dir.join(format!("memshift-{port}.log"));
        let child = spawn(cmd, &log).map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let mut p = Proc {
            child,
            name: format!("memshift :{port}"),
            addr,
            log,
        };
        match p.wait(|| {
            exchange(addr, b"version\r\n", b"\r\n").is_some_and(|r| r.starts_with(b"VERSION"))
        }) {
            Ok(()) => return Ok(p),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// 3 Redis shards and memshift in front of them; everything stops on drop.
pub struct Cluster {
    // Field order: memshift stops before its shards, the dir goes last.
    pub memshift: Proc,
    pub shards: Vec<Proc>,
    pub dir: TempDir,
}

impl Cluster {
    pub fn start(shards: usize, threads: usize) -> Result<Cluster, String> {
        let bin = memshift_bin()?;
        let dir = tempfile::Builder::new()
            .prefix("memshift-e2e-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let shards = (0..shards)
            .map(|_| start_redis(dir.path()))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<SocketAddr> = shards.iter().map(|s| s.addr).collect();
        let memshift = start_memshift(&bin, dir.path(), &addrs, threads)?;
        Ok(Cluster {
            memshift,
            shards,
            dir,
        })
    }
}

/// Total `calls` of every command in `INFO commandstats` except INFO itself
/// and PING (health checks), i.e. the data commands a shard executed.
pub fn redis_data_calls(addr: SocketAddr) -> Option<u64> {
    // INFO's text ends with a blank line: "...\r\n" + the bulk's "\r\n".
    let r = exchange(
        addr,
        b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n",
        b"\r\n\r\n",
    )?;
    let text = String::from_utf8_lossy(&r).into_owned();
    let mut total = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, fields) = rest.split_once(':')?;
        if matches!(
            name,
            "info" | "ping" | "client|setname" | "hello" | "script|load"
        ) {
            continue;
        }
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))?
            .parse::<u64>()
            .ok()?;
        total += calls;
    }
    Some(total)
}
