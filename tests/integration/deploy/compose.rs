//! The docker compose file.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use memshift_tests::workspace_root;
use serde_yaml::Value;

use super::docker::load_image;
use super::kubernetes::{seq, under};
use super::{
    backend_addrs, cfg_addr, cfg_str, deploy_path, memshift_check, read, worst_case_stop_s,
    CONFIG_PATH,
};

pub(super) struct Compose {
    pub(super) doc: Value,
}

pub(super) fn load_compose() -> Compose {
    let src = read(&deploy_path("docker-compose.yml"));
    let doc: Value = serde_yaml::from_str(&src).expect("docker-compose.yml parses");
    assert!(
        doc["services"].is_mapping(),
        "docker-compose.yml: no services"
    );
    Compose { doc }
}

impl Compose {
    pub(super) fn service(&self, name: &str) -> &Value {
        let s = &self.doc["services"][name];
        assert!(s.is_mapping(), "compose has no service {name}");
        s
    }

    pub(super) fn memshift_healthcheck(&self) -> Vec<String> {
        let test: Vec<String> = seq(&self.service("memshift")["healthcheck"]["test"])
            .iter()
            .map(|a| a.as_str().expect("healthcheck arg").replace("$$", "$"))
            .collect();
        assert_eq!(
            test.first().map(String::as_str),
            Some("CMD"),
            "exec-form healthcheck"
        );
        test[1..].to_vec()
    }
}

/// Compose durations: `1m30s`, `15s`, `500ms`.
pub(super) fn compose_duration_s(s: &str) -> f64 {
    let mut total = 0.0;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch.is_ascii_digit() || ch == '.' {
            num.push(ch);
            continue;
        }
        let n: f64 = num.parse().unwrap_or_else(|_| panic!("duration {s}"));
        num.clear();
        total += match ch {
            'h' => n * 3600.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                n / 1000.0
            }
            'm' => n * 60.0,
            's' => n,
            _ => panic!("duration {s}"),
        };
    }
    assert!(num.is_empty(), "duration {s} without a unit");
    total
}

/// The container-side port of each `ports:` entry (`[ip:]host:container`).
fn published(service: &Value) -> BTreeSet<u16> {
    seq(&service["ports"])
        .iter()
        .map(|p| {
            let s = p.as_str().expect("short port syntax");
            s.rsplit(':')
                .next()
                .unwrap()
                .trim_end_matches("/tcp")
                .parse()
                .expect("port")
        })
        .collect()
}

/// The port a backend container listens on: `--port`/`-p` in its command,
/// else the image's default.
fn backend_port(service: &Value, default: u16) -> u16 {
    let cmd: Vec<&str> = seq(&service["command"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    cmd.windows(2)
        .find(|w| matches!(w[0], "--port" | "-p"))
        .map(|w| w[1].parse().expect("port"))
        .unwrap_or(default)
}

/// `a/b/../c` → `a/c`, without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn compose_runs_memshift_over_three_redis_and_memcached() {
    let image = load_image();
    let compose = load_compose();
    let base = deploy_path("");
    let services = compose.doc["services"].as_mapping().expect("services");
    let memshift = compose.service("memshift");

    // Built from the repository root with deploy/Dockerfile, like the docs say.
    let context = normalize(
        &base.join(
            memshift["build"]["context"]
                .as_str()
                .expect("build.context"),
        ),
    );
    assert_eq!(context, normalize(&workspace_root()), "build context");
    let dockerfile = memshift["build"]["dockerfile"]
        .as_str()
        .expect("build.dockerfile");
    assert_eq!(
        normalize(&context.join(dockerfile)),
        normalize(&deploy_path("Dockerfile"))
    );

    // The config: mounted where the image's CMD reads it, and valid.
    let cmd: Vec<&str> = seq(&memshift["command"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        cmd.is_empty() || cmd == ["--config", CONFIG_PATH],
        "command {cmd:?}"
    );
    let host_config = seq(&memshift["volumes"])
        .iter()
        .filter_map(|v| {
            let (src, rest) = v.as_str()?.split_once(':')?;
            let dst = rest.split(':').next()?;
            let host = base.join(src);
            if dst == CONFIG_PATH {
                Some(host)
            } else if under(CONFIG_PATH, dst) {
                Some(host.join(Path::new(CONFIG_PATH).strip_prefix(dst).ok()?))
            } else {
                None
            }
        })
        .next()
        .unwrap_or_else(|| panic!("nothing mounted at {CONFIG_PATH}"));
    assert_eq!(
        normalize(&host_config),
        normalize(&deploy_path("compose/memshift.toml"))
    );
    let cfg = memshift_check("deploy/compose/memshift.toml", &read(&host_config));
    assert_eq!(cfg_str(&cfg, "migration", "phase"), Some("warmup"));

    // Listeners reachable through the published ports.
    let ports = published(memshift);
    let listen = cfg_addr(&cfg, "server", "listen").expect("server.listen");
    let admin = cfg_addr(&cfg, "admin", "listen").expect("admin.listen");
    for (what, a) in [("server.listen", listen), ("admin.listen", admin)] {
        assert!(
            a.ip().is_unspecified(),
            "{what} {a}: published ports never reach a loopback listener"
        );
        assert!(
            ports.contains(&a.port()),
            "{what} port {} is not published: {ports:?}",
            a.port()
        );
    }
    // The health check finds the admin port through the image's default.
    assert_eq!(
        admin.port(),
        image.health_port(),
        "admin port vs MEMSHIFT_ADMIN_PORT"
    );
    assert_eq!(
        compose.memshift_healthcheck(),
        image.healthcheck,
        "healthcheck vs Dockerfile"
    );

    // Backends: every shard and legacy server is a service on the right port.
    let shards = backend_addrs(&cfg, "redis", "shards");
    assert_eq!(shards.len(), 3, "shards {shards:?}");
    let legacy = backend_addrs(&cfg, "memcached", "servers");
    assert_eq!(legacy.len(), 1, "memcached servers {legacy:?}");
    let mut backends = BTreeSet::new();
    for ((host, port), image_prefix, default_port) in shards
        .iter()
        .map(|s| (s, "redis:", 6379))
        .chain(legacy.iter().map(|s| (s, "memcached:", 11211)))
    {
        let svc = compose.service(host);
        assert!(
            svc["image"]
                .as_str()
                .is_some_and(|i| i.starts_with(image_prefix)),
            "{host} should run {image_prefix}*"
        );
        assert_eq!(
            *port,
            backend_port(svc, default_port),
            "{host}: port in the config"
        );
        backends.insert(host.as_str());
    }
    let others: BTreeSet<&str> = services
        .keys()
        .filter_map(Value::as_str)
        .filter(|s| *s != "memshift")
        .collect();
    assert_eq!(
        others, backends,
        "services that are not backends of the config, or missing"
    );

    // memshift starts after its backends are healthy; everything has a check.
    for b in &backends {
        assert_eq!(
            memshift["depends_on"][*b]["condition"], "service_healthy",
            "memshift should wait for {b}"
        );
    }
    for (name, svc) in services {
        assert!(
            !seq(&svc["healthcheck"]["test"]).is_empty(),
            "service {} has no healthcheck",
            name.as_str().unwrap()
        );
    }

    // Stopping: the drain and the shadow flush fit in the grace period.
    let grace = compose_duration_s(memshift["stop_grace_period"].as_str().unwrap_or("10s"));
    assert!(
        grace > worst_case_stop_s(&cfg),
        "stop_grace_period {grace} s <= 2 x drain_timeout"
    );
    assert!(matches!(
        memshift["stop_signal"].as_str(),
        None | Some("SIGTERM")
    ));
}
