//! The Kubernetes manifests (sidecar and standalone).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;
use serde_yaml::Value;

use super::docker::{load_image, Image};
use super::{
    backend_addrs, cfg_addr, cfg_str, deploy_path, memshift_check, read, tls_files,
    worst_case_stop_s, CONFIG_PATH,
};

pub(super) fn yaml_docs(rel: &str) -> Vec<Value> {
    let src = read(&deploy_path(rel));
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&src)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .collect();
    assert!(!docs.is_empty(), "{rel}: no YAML documents");
    for d in &docs {
        for key in ["apiVersion", "kind"] {
            assert!(
                d[key].as_str().is_some_and(|s| !s.is_empty()),
                "{rel}: a document without {key}"
            );
        }
        assert!(
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{rel}: {} without metadata.name",
            d["kind"].as_str().unwrap()
        );
    }
    docs
}

pub(super) fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

pub(super) fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or(&[])
}

fn pod_containers(pod: &Value) -> impl Iterator<Item = &Value> {
    seq(&pod["initContainers"])
        .iter()
        .chain(seq(&pod["containers"]))
}

pub(super) fn memshift_container(pod: &Value) -> &Value {
    let found: Vec<&Value> = pod_containers(pod)
        .filter(|c| c["image"].as_str().is_some_and(|i| i.contains("memshift")))
        .collect();
    assert_eq!(found.len(), 1, "expected one memshift container");
    found[0]
}

/// `labels` holds every pair of `selector`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let sel = selector.as_mapping().expect("a label selector");
    !sel.is_empty() && sel.iter().all(|(k, v)| &labels[k.as_str().unwrap()] == v)
}

/// A probe's or Service's port: a number, or a container port's name.
fn container_port(container: &Value, port: &Value) -> u16 {
    if let Some(n) = port.as_u64() {
        return n as u16;
    }
    let name = port.as_str().expect("port is a number or a name");
    seq(&container["ports"])
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no container port named {name}")) as u16
}

fn prestop_sleep_s(container: &Value) -> f64 {
    let pre = &container["lifecycle"]["preStop"];
    if let Some(s) = pre["sleep"]["seconds"].as_f64() {
        return s;
    }
    match seq(&pre["exec"]["command"]) {
        [cmd, secs] if cmd.as_str().is_some_and(|c| c.ends_with("sleep")) => secs
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("sleep seconds"),
        [] => 0.0,
        other => panic!("preStop is not a plain sleep: {other:?}"),
    }
}

/// Is `path` inside the mount at `mount`?
pub(super) fn under(path: &str, mount: &str) -> bool {
    Path::new(path).starts_with(mount)
}

/// Checks a Deployment's memshift pod against its ConfigMap, the image and
/// the probes; returns the resolved config.
fn check_memshift_pod(rel: &str, docs: &[Value], image: &Image) -> (toml::Table, Value) {
    let deployment = find(docs, "Deployment")
        .into_iter()
        .find(|d| memshift_container_opt(&d["spec"]["template"]["spec"]).is_some())
        .unwrap_or_else(|| panic!("{rel}: no Deployment with a memshift container"))
        .clone();
    let spec = &deployment["spec"];
    let pod = &spec["template"]["spec"];
    assert!(
        selects(
            &spec["selector"]["matchLabels"],
            &spec["template"]["metadata"]["labels"]
        ),
        "{rel}: the Deployment's selector does not match its pod labels"
    );
    let c = memshift_container(pod);

    // Config: the image's path, mounted from a ConfigMap of this file.
    let args: Vec<&str> = seq(&c["args"]).iter().filter_map(Value::as_str).collect();
    assert!(c["command"].is_null(), "{rel}: keep the image's ENTRYPOINT");
    assert!(
        args.is_empty() || args == ["--config", CONFIG_PATH],
        "{rel}: memshift args {args:?}"
    );
    let config_dir = Path::new(CONFIG_PATH).parent().unwrap().to_str().unwrap();
    let file_name = Path::new(CONFIG_PATH)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let mount = seq(&c["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"] == config_dir)
        .unwrap_or_else(|| panic!("{rel}: nothing mounted at {config_dir}"));
    assert!(
        mount["subPath"].is_null(),
        "{rel}: a subPath mount never sees ConfigMap updates"
    );
    let volume = seq(&pod["volumes"])
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the config volume");
    let cm_name = volume["configMap"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("{rel}: {config_dir} is not a ConfigMap volume"));
    let key = match seq(&volume["configMap"]["items"]) {
        [] => file_name.to_string(),
        items => items
            .iter()
            .find(|i| i["path"] == file_name)
            .and_then(|i| i["key"].as_str())
            .unwrap_or_else(|| panic!("{rel}: the ConfigMap items do not produce {file_name}"))
            .to_string(),
    };
    let cm = find(docs, "ConfigMap")
        .into_iter()
        .find(|d| d["metadata"]["name"] == cm_name)
        .unwrap_or_else(|| panic!("{rel}: ConfigMap {cm_name} is not in the file"));
    let toml_src = cm["data"][key.as_str()]
        .as_str()
        .unwrap_or_else(|| panic!("{rel}: ConfigMap {cm_name} has no key {key}"));
    let cfg = check_pod_config(&format!("{rel}: ConfigMap {cm_name}"), toml_src);

    // Probes on the admin listener; kubelet connects to the pod IP.
    let admin = cfg_addr(&cfg, "admin", "listen").expect("admin.listen must be enabled");
    assert!(
        admin.ip().is_unspecified(),
        "{rel}: admin.listen {admin} is unreachable for kubelet probes"
    );
    for (kind, path) in [("livenessProbe", "/health"), ("readinessProbe", "/ready")] {
        let probe = &c[kind]["httpGet"];
        assert_eq!(probe["path"], path, "{rel}: {kind} path");
        assert_eq!(
            container_port(c, &probe["port"]),
            admin.port(),
            "{rel}: {kind} port"
        );
    }
    if !c["startupProbe"].is_null() {
        let probe = &c["startupProbe"]["httpGet"];
        assert_eq!(
            container_port(c, &probe["port"]),
            admin.port(),
            "{rel}: startupProbe port"
        );
    }

    // Stopping: room for the preStop sleeps and the worst-case drain.
    let grace = pod["terminationGracePeriodSeconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("{rel}: set terminationGracePeriodSeconds"));
    let prestop: f64 = pod_containers(pod).map(prestop_sleep_s).sum();
    assert!(
        grace > prestop + worst_case_stop_s(&cfg),
        "{rel}: terminationGracePeriodSeconds {grace} <= preStop {prestop} s + 2 x drain {} s",
        worst_case_stop_s(&cfg) / 2.0
    );

    // Hardening, and the image's user.
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true, "{rel}: runAsNonRoot");
    assert_eq!(
        sc["readOnlyRootFilesystem"], true,
        "{rel}: readOnlyRootFilesystem"
    );
    assert_eq!(
        sc["allowPrivilegeEscalation"], false,
        "{rel}: allowPrivilegeEscalation"
    );
    assert!(
        seq(&sc["capabilities"]["drop"]).iter().any(|d| d == "ALL"),
        "{rel}: drop ALL"
    );
    if let Some(uid) = sc["runAsUser"].as_u64() {
        assert_eq!(
            uid,
            u64::from(image.uid),
            "{rel}: runAsUser differs from the image's USER"
        );
    }
    for kind in ["requests", "limits"] {
        for res in ["cpu", "memory"] {
            assert!(
                !c["resources"][kind][res].is_null(),
                "{rel}: resources.{kind}.{res}"
            );
        }
    }

    // TLS files come from a read-only Secret mount memshift can read.
    let files = tls_files(&cfg);
    assert!(
        !files.is_empty(),
        "{rel}: the config uses no TLS files from the Secret"
    );
    for file in files {
        let m = seq(&c["volumeMounts"])
            .iter()
            .find(|m| m["mountPath"].as_str().is_some_and(|p| under(&file, p)))
            .unwrap_or_else(|| panic!("{rel}: TLS file {file} is not under any mount"));
        assert_eq!(
            m["readOnly"], true,
            "{rel}: the TLS mount must be read-only"
        );
        let v = seq(&pod["volumes"])
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap();
        let secret = &v["secret"];
        assert!(!secret.is_null(), "{rel}: {file} is not from a Secret");
        let rel_path = Path::new(&file)
            .strip_prefix(m["mountPath"].as_str().unwrap())
            .unwrap()
            .to_str()
            .unwrap();
        let items = seq(&secret["items"]);
        assert!(
            items.is_empty() || items.iter().any(|i| i["path"] == rel_path),
            "{rel}: Secret items do not produce {file}"
        );
        // Secret files are root-owned: memshift reads them as "other" or
        // through fsGroup.
        let mode = secret["defaultMode"].as_u64().unwrap_or(0o644);
        if mode & 0o004 == 0 {
            assert!(
                mode & 0o040 != 0,
                "{rel}: Secret mode {mode:o} is unreadable to memshift"
            );
            assert_eq!(
                pod["securityContext"]["fsGroup"].as_u64(),
                Some(u64::from(image.gid)),
                "{rel}: Secret mode {mode:o} needs fsGroup = memshift's gid"
            );
        }
    }

    // The migration example: warmup over 3 Redis shards named by DNS.
    assert_eq!(cfg_str(&cfg, "migration", "phase"), Some("warmup"), "{rel}");
    let shards = backend_addrs(&cfg, "redis", "shards");
    assert_eq!(shards.len(), 3, "{rel}: shards {shards:?}");
    for (host, _) in &shards {
        assert!(
            host.parse::<IpAddr>().is_err(),
            "{rel}: shard {host} is not a DNS name"
        );
    }
    assert!(
        !backend_addrs(&cfg, "memcached", "servers").is_empty(),
        "{rel}: legacy pool"
    );
    (cfg, deployment)
}

/// The pods' unix socket directory (an `emptyDir`).
const POD_SOCKET_DIR: &str = "unix:/run/memshift/";

/// `memshift check` of a pod's config. check tests that each unix socket's
/// directory exists and is writable here, so the pod's socket directory is
/// a temp dir for the check, mapped back in the resolved config.
fn check_pod_config(what: &str, toml_src: &str) -> toml::Table {
    let tmp = tempfile::tempdir().expect("temp dir");
    let local = format!("unix:{}/", tmp.path().display());
    let cfg = memshift_check(what, &toml_src.replace(POD_SOCKET_DIR, &local));
    let text = toml::to_string(&cfg).expect("render the resolved config");
    toml::from_str(&text.replace(&local, POD_SOCKET_DIR)).expect("parse it back")
}

/// `server.listen`: a string or an array of them.
fn listen_addrs(cfg: &toml::Table) -> Vec<String> {
    match super::section(cfg, "server").get("listen") {
        Some(toml::Value::String(s)) => vec![s.clone()],
        Some(toml::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// The volume mounted at `dir` in `container`, from the pod's `volumes`.
fn volume_at<'a>(pod: &'a Value, container: &Value, dir: &str) -> Option<&'a Value> {
    let mount = seq(&container["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(dir))?;
    seq(&pod["volumes"])
        .iter()
        .find(|v| v["name"] == mount["name"])
}

fn memshift_container_opt(pod: &Value) -> Option<&Value> {
    pod_containers(pod).find(|c| c["image"].as_str().is_some_and(|i| i.contains("memshift")))
}

fn kinds(docs: &[Value]) -> BTreeSet<&str> {
    docs.iter().map(|d| d["kind"].as_str().unwrap()).collect()
}

#[test]
fn kubernetes_sidecar_runs_memshift_on_loopback_next_to_the_app() {
    let image = load_image();
    let docs = yaml_docs("kubernetes/sidecar.yaml");
    assert_eq!(kinds(&docs), BTreeSet::from(["ConfigMap", "Deployment"]));
    let (cfg, deployment) = check_memshift_pod("sidecar.yaml", &docs, &image);
    let pod = &deployment["spec"]["template"]["spec"];

    let listens = listen_addrs(&cfg);
    let listen = "127.0.0.1:11211";
    assert!(
        listens.iter().any(|l| l == listen),
        "the sidecar listens on loopback: {listens:?}"
    );
    // And on a unix socket in a directory both containers mount (emptyDir).
    let socket = listens
        .iter()
        .find_map(|l| l.strip_prefix("unix:"))
        .unwrap_or_else(|| panic!("no unix socket listener: {listens:?}"));
    let socket_dir = Path::new(socket)
        .parent()
        .and_then(Path::to_str)
        .unwrap_or("/");

    // Native sidecar: restarted like a container, and its startup probe is
    // what holds the app back until memshift is ready.
    let c = memshift_container(pod);
    if seq(&pod["initContainers"]).iter().any(|i| i == c) {
        assert_eq!(
            c["restartPolicy"], "Always",
            "a plain init container would block the pod"
        );
        assert_eq!(
            c["startupProbe"]["httpGet"]["path"], "/ready",
            "gate the app on readiness"
        );
    }

    // The app container is pointed at memshift, over TCP and the socket.
    let apps: Vec<&Value> = seq(&pod["containers"]).iter().filter(|a| *a != c).collect();
    assert!(!apps.is_empty(), "no app container");
    for target in [listen, socket] {
        assert!(
            apps.iter()
                .flat_map(|a| seq(&a["env"]))
                .any(|e| e["value"].as_str().is_some_and(|v| v.contains(target))),
            "no app env var points at {target}"
        );
    }
    let shared = volume_at(pod, c, socket_dir)
        .unwrap_or_else(|| panic!("memshift does not mount {socket_dir}"));
    assert!(
        shared["emptyDir"].is_mapping(),
        "{socket_dir} is not an emptyDir: {shared:?}"
    );
    for app in &apps {
        let theirs = volume_at(pod, app, socket_dir)
            .unwrap_or_else(|| panic!("the app does not mount {socket_dir}"));
        assert_eq!(theirs["name"], shared["name"], "one shared socket volume");
    }
}

#[test]
fn kubernetes_standalone_serves_a_service_through_replicas() {
    let image = load_image();
    let docs = yaml_docs("kubernetes/standalone.yaml");
    assert_eq!(
        kinds(&docs),
        BTreeSet::from(["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"])
    );
    let (cfg, deployment) = check_memshift_pod("standalone.yaml", &docs, &image);
    let spec = &deployment["spec"];
    let labels = &spec["template"]["metadata"]["labels"];
    let c = memshift_container(&spec["template"]["spec"]);
    let replicas = spec["replicas"].as_u64().unwrap_or(1);
    assert!(replicas >= 2, "replicas {replicas}");

    // Reachable from other pods: every protocol listener on all interfaces.
    let mut listen_ports = BTreeSet::new();
    for key in ["listen", "tls_listen"] {
        if let Some(a) = cfg_addr(&cfg, "server", key) {
            assert!(
                a.ip().is_unspecified(),
                "server.{key} {a} is unreachable through a Service"
            );
            listen_ports.insert(a.port());
        }
    }
    assert!(listen_ports.contains(&11211), "server.listen on 11211");

    // The Service selects these pods and forwards to memshift's listeners.
    let services = find(&docs, "Service");
    assert_eq!(services.len(), 1);
    let svc = &services[0]["spec"];
    assert!(
        selects(&svc["selector"], labels),
        "the Service selects no memshift pod"
    );
    let mut forwarded = BTreeMap::new();
    for p in seq(&svc["ports"]) {
        let port = p["port"].as_u64().expect("service port") as u16;
        let target = if p["targetPort"].is_null() {
            &p["port"]
        } else {
            &p["targetPort"]
        };
        let to = container_port(c, target);
        assert!(
            listen_ports.contains(&to),
            "Service port {port} -> {to}: memshift does not listen there"
        );
        forwarded.insert(port, to);
    }
    assert_eq!(
        forwarded.get(&11211),
        Some(&11211),
        "Service 11211 -> memshift 11211"
    );

    // Voluntary disruptions never take every replica, and never block a drain forever.
    let pdbs = find(&docs, "PodDisruptionBudget");
    assert_eq!(pdbs.len(), 1);
    let pdb = &pdbs[0]["spec"];
    assert!(
        selects(&pdb["selector"]["matchLabels"], labels),
        "the PDB selects no memshift pod"
    );
    let allowed = match (pdb["maxUnavailable"].as_u64(), pdb["minAvailable"].as_u64()) {
        (Some(max), None) => max,
        (None, Some(min)) => replicas.saturating_sub(min),
        other => panic!("PDB: set one of maxUnavailable/minAvailable as a number: {other:?}"),
    };
    assert!(
        allowed >= 1 && allowed < replicas,
        "PDB allows {allowed} of {replicas} down"
    );
}
