//! Unix-domain sockets (issue 29): memshift listening on `unix:/path`
//! (memcached protocol and RESP), and Redis shards and legacy memcached
//! servers reached over their own unix sockets.
//!
//! * `lifecycle`: the socket file's mode, a stale file replaced, a live one
//!   refused, the file removed on exit, bad paths failing at start with one
//!   line (and in `memshift check`), per-transport metrics;
//! * `clients`: the differential stream, memccapable, pymemcache, PHP
//!   `Memcached`, gomemcache and redis-py over the socket;
//! * `backends`: a Redis shard with `unixsocket`, a legacy memcached with `-s`.

mod backends;
mod clients;
mod lifecycle;

use std::path::{Path, PathBuf};

use memshift_tests::process::toml_list;
use memshift_tests::{free_port, Memshift, RedisServer};

/// A fresh directory for socket files, readable by every user (the
/// permission test runs memshift as `nobody`).
fn socket_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("memshift-unix-")
        .tempdir()
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the temp dir");
    dir
}

fn unix(path: &Path) -> String {
    format!("unix:{}", path.display())
}

/// The config of memshift (phase `redis`) over `shards`, `[server]
/// listen` on `listen` plus `server_extra` lines, admin on `admin_port`.
fn config(listen: &str, admin_port: u16, shards: &[String], server_extra: &str) -> String {
    format!(
        "[server]\nlisten = \"{listen}\"\n{server_extra}\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [redis]\nshards = [{}]\n\n[migration]\nphase = \"redis\"\n",
        toml_list(shards)
    )
}

/// memshift over `shards` listening on `listen`; returns it and its admin port.
fn memshift_on(listen: &str, shards: &[String], server_extra: &str) -> (Memshift, u16) {
    let admin_port = free_port();
    let memshift = Memshift::start(&config(listen, admin_port, shards, server_extra));
    (memshift, admin_port)
}

/// One Redis shard and memshift listening on a unix socket in a fresh dir.
struct UnixProxy {
    memshift: Memshift,
    admin_port: u16,
    _shard: RedisServer,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl UnixProxy {
    fn start(server_extra: &str) -> UnixProxy {
        let dir = socket_dir();
        let path = dir.path().join("memshift.sock");
        let shard = RedisServer::start();
        let (memshift, admin_port) = memshift_on(&unix(&path), &[shard.addr()], server_extra);
        UnixProxy {
            memshift,
            admin_port,
            _shard: shard,
            path,
            _dir: dir,
        }
    }

    fn addr(&self) -> String {
        unix(&self.path)
    }
}
