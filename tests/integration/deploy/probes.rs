//! The health check command and the probe paths, against a real memshift.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::thread;
use std::time::Duration;

use memshift_tests::{free_port, require_tools, run_with_timeout, Memshift};

use super::compose::load_compose;
use super::docker::load_image;
use super::kubernetes::{memshift_container, yaml_docs};

/// memshift with its admin listener on a free port; its only shard is a
/// closed port, so it is alive but not ready.
fn start_unready_memshift() -> (Memshift, u16) {
    let admin = free_port();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [redis]\nshards = [\"127.0.0.1:{}\"]\n",
        free_port(),
        free_port()
    );
    (Memshift::start(&config), admin)
}

/// Status code of `GET path` on 127.0.0.1:port.
fn http_status(port: u16, path: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the admin port");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("GET {path}: not an HTTP reply: {reply:?}"))
}

/// A one-shot HTTP server answering `status`; returns its port and the
/// request line it received.
fn fake_admin(status: &'static str) -> (u16, thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 512];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        String::from_utf8_lossy(&head)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    });
    (port, handle)
}

/// Runs a health check command with the admin port in MEMSHIFT_ADMIN_PORT.
fn health_check_passes(argv: &[String], port: u16) -> bool {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("MEMSHIFT_ADMIN_PORT", port.to_string());
    run_with_timeout(cmd, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("health check hung: {e}"))
        .status
        .success()
}

#[test]
fn health_check_command_passes_only_on_200_from_health() {
    if !require_tools(
        "health_check_command_passes_only_on_200_from_health",
        &["bash"],
    ) {
        return;
    }
    let image = load_image();
    let compose = load_compose();
    let mut commands = vec![("Dockerfile HEALTHCHECK", image.healthcheck.clone())];
    commands.push((
        "compose memshift healthcheck",
        compose.memshift_healthcheck(),
    ));

    let (_memshift, admin) = start_unready_memshift();
    for (what, argv) in &commands {
        assert!(
            health_check_passes(argv, admin),
            "{what} fails against a serving memshift"
        );

        let (port, req) = fake_admin("503 Service Unavailable");
        assert!(!health_check_passes(argv, port), "{what} passes on a 503");
        let req = req.join().unwrap();
        assert!(
            req.starts_with("GET /health HTTP/1."),
            "{what} sent {req:?}"
        );

        let closed = free_port();
        assert!(
            !health_check_passes(argv, closed),
            "{what} passes with nothing listening"
        );
    }
}

#[test]
fn probe_paths_are_liveness_and_readiness_endpoints() {
    let (_memshift, admin) = start_unready_memshift();
    let mut probes = Vec::new();
    for file in ["kubernetes/sidecar.yaml", "kubernetes/standalone.yaml"] {
        for doc in yaml_docs(file) {
            if doc["kind"] != "Deployment" {
                continue;
            }
            let pod = &doc["spec"]["template"]["spec"];
            let c = memshift_container(pod);
            for kind in ["livenessProbe", "readinessProbe", "startupProbe"] {
                if let Some(path) = c[kind]["httpGet"]["path"].as_str() {
                    probes.push((file, kind, path.to_string()));
                }
            }
        }
    }
    assert!(probes.len() >= 4, "probes: {probes:?}");
    for (file, kind, path) in probes {
        let status = http_status(admin, &path);
        match kind {
            // Must hold while the process serves, shard down or not: a
            // failure restarts the container.
            "livenessProbe" => assert_eq!(status, 200, "{file}: liveness {path}"),
            // Must drop while a backend is down (this memshift's shard is).
            "readinessProbe" => assert_eq!(status, 503, "{file}: readiness {path}"),
            _ => assert!(
                matches!(status, 200 | 503),
                "{file}: startup probe {path}: {status}"
            ),
        }
    }
}
