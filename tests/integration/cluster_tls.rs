//! `redis.tls` in cluster mode: memshift reads the topology and talks to
//! every node of a Redis Cluster (`--tls-cluster yes`, plaintext ports
//! open too) over TLS,
//! with the nodes' certificates verified against `tls_ca`.

use memshift_tests::process::start_memshift_on_free_ports;
use memshift_tests::redis_cluster_tls::TlsClusterNodes;
use memshift_tests::tls::Pki;
use memshift_tests::{require_tools, Memshift};

fn config(port: u16, admin: u16, seeds: &[String], ca: &std::path::Path) -> String {
    let seeds = seeds
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [redis]\nmode = \"cluster\"\ncluster_nodes = [{seeds}]\ntimeout_ms = 1000\n\
         cluster_refresh_ms = 500\ntls = true\ntls_ca = \"{}\"\n\
         [migration]\nphase = \"redis\"\n",
        ca.display()
    )
}

#[test]
fn cluster_over_tls_serves_every_master() {
    if !require_tools(
        "cluster_over_tls_serves_every_master",
        &["redis-server", "redis-cli"],
    ) {
        return;
    }
    let pki = Pki::new("cluster-tls");
    let nodes = TlsClusterNodes::start(&pki);
    let seeds = nodes.addrs()[..2].to_vec();
    let (memshift, _, _) =
        start_memshift_on_free_ports(|port, admin| config(port, admin, &seeds, nodes.ca()));
    let mut c = memshift.client();
    let keys: Vec<String> = (0..60)
        .map(|i| format!("tls:{i}"))
        .chain((0..5).map(|i| format!("{{tls-tag}}:{i}")))
        .collect();
    for k in &keys {
        c.set(k, format!("v-{k}").as_bytes()).expect("set");
    }
    let mut req = b"get".to_vec();
    let mut want = String::new();
    for k in &keys {
        req.extend_from_slice(format!(" {k}").as_bytes());
        let v = format!("v-{k}");
        want.push_str(&format!("VALUE {k} 0 {}\r\n{v}\r\n", v.len()));
    }
    req.extend_from_slice(b"\r\n");
    want.push_str("END\r\n");
    assert_eq!(c.request_str(&req).expect("multi-get"), want);
    // Every master holds some of the keys: each node connection carried TLS.
    let masters = nodes.masters();
    assert_eq!(masters.len(), 3, "masters: {masters:?}");
    for m in masters {
        assert!(nodes.dbsize(m) > 0, "master {m} got no key");
    }

    // A CA that did not sign the nodes: no seed gives the slot map.
    let other = Pki::new("cluster-tls-other");
    let err = Memshift::try_start(&config(
        memshift_tests::free_port(),
        memshift_tests::free_port(),
        &seeds,
        &other.ca_cert(),
    ))
    .err()
    .expect("memshift must not start with the wrong CA");
    assert!(err.contains("cluster_nodes"), "{err}");
}
