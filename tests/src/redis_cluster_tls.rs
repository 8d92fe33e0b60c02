//! A real Redis Cluster over TLS: 6 nodes (`--tls-port N --tls-cluster yes
//! --tls-replication yes`, and a plaintext `--port` too, which a TLS client
//! must not be sent to) joined by
//! `redis-cli --tls --cluster create` into 3 masters with one replica each,
//! stopped by PID on drop. Clients need the CA, no certificate.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::env::{free_cluster_port, free_port};
use crate::process::{kill_and_reap, run_with_timeout, spawn, temp_dir, CommandOutput};
use crate::tls::{CertFiles, Pki};

const READY: Duration = Duration::from_secs(60);

pub struct TlsClusterNodes {
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
    ca: std::path::PathBuf,
    _dir: TempDir,
}

impl TlsClusterNodes {
    /// Starts 6 TLS nodes with a certificate for 127.0.0.1 from `pki` and
    /// waits for `cluster_state:ok` on every one.
    pub fn start(pki: &Pki) -> Self {
        let cert = pki.issue(
            &format!("cluster-node-{}", free_port()),
            &["127.0.0.1", "localhost"],
        );
        let dir = temp_dir("memshift-rcluster-tls-");
        let mut ports = Vec::new();
        let mut children = Vec::new();
        for i in 0..6 {
            let mut last = String::new();
            for _ in 0..5 {
                let port = free_cluster_port();
                match spawn_node(&dir, i, port, &cert, pki) {
                    Ok(child) => {
                        ports.push(port);
                        children.push(Some(child));
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            assert_eq!(ports.len(), i + 1, "TLS cluster node {i}: {last}");
        }
        let nodes = TlsClusterNodes {
            ports,
            children,
            ca: pki.ca_cert(),
            _dir: dir,
        };
        for i in 0..6 {
            nodes.wait_for(i, &["PING"], "PONG");
        }
        let mut cmd = nodes.cli_command(None);
        cmd.arg("--cluster").arg("create");
        for a in nodes.addrs() {
            cmd.arg(a);
        }
        cmd.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = run_with_timeout(cmd, READY).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "redis-cli --tls --cluster create failed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        for i in 0..6 {
            nodes.wait_for(i, &["CLUSTER", "INFO"], "cluster_state:ok");
        }
        nodes
    }

    pub fn addrs(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    pub fn ca(&self) -> &std::path::Path {
        &self.ca
    }

    fn cli_command(&self, node: Option<usize>) -> Command {
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--tls").arg("--cacert").arg(&self.ca);
        if let Some(i) = node {
            cmd.args(["-h", "127.0.0.1", "-p", &self.ports[i].to_string()]);
        }
        cmd
    }

    /// `redis-cli --tls` with `args` on node `i`.
    pub fn cli(&self, i: usize, args: &[&str]) -> CommandOutput {
        let mut cmd = self.cli_command(Some(i));
        cmd.args(args);
        run_with_timeout(cmd, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn wait_for(&self, i: usize, args: &[&str], want: &str) {
        let deadline = Instant::now() + READY;
        loop {
            let out = self.cli(i, args);
            if out.stdout.contains(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "TLS node {i}: no {want:?} after {READY:?}: {}{}",
                out.stdout,
                out.stderr
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `DBSIZE` of node `i`.
    pub fn dbsize(&self, i: usize) -> i64 {
        let out = self.cli(i, &["DBSIZE"]);
        out.stdout
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("DBSIZE on node {i}: {out:?}"))
    }

    /// Nodes that are masters (`ROLE`).
    pub fn masters(&self) -> Vec<usize> {
        (0..self.ports.len())
            .filter(|&i| self.cli(i, &["ROLE"]).stdout.starts_with("master"))
            .collect()
    }
}

fn spawn_node(
    dir: &TempDir,
    i: usize,
    port: u16,
    cert: &CertFiles,
    pki: &Pki,
) -> Result<Child, String> {
    let node_dir = dir.path().join(format!("n{i}-{port}"));
    std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &free_port().to_string()])
        .args(["--tls-port", &port.to_string()])
        .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
        .arg("--tls-cert-file")
        .arg(&cert.cert)
        .arg("--tls-key-file")
        .arg(&cert.key)
        .arg("--tls-ca-cert-file")
        .arg(pki.ca_cert())
        .args(["--tls-auth-clients", "no"])
        .args(["--bind", "127.0.0.1"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", "nodes.conf"])
        .args(["--cluster-node-timeout", "2000"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .arg("--dir")
        .arg(&node_dir);
    let log = node_dir.join("redis.log");
    let mut child = spawn(cmd, &log, &log).map_err(|e| e.to_string())?;
    // Port taken: the server exits at once.
    std::thread::sleep(Duration::from_millis(200));
    match child.try_wait() {
        Ok(Some(status)) => Err(format!(
            "redis-server exited with {status}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )),
        _ => Ok(child),
    }
}

impl Drop for TlsClusterNodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            kill_and_reap(c);
        }
    }
}
