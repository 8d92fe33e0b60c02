//! A real binary protocol client, python-binary-memcached (pinned, see
//! `memshift_tests::PYTHON_BINARY_MEMCACHED`), runs the same script against
//! memcached 1.6.18 and against memshift: the outputs must be identical.
//! (`memccapable -b` is in `memccapable.rs`.)

use std::process::Command;
use std::time::Duration;

use memshift_tests::{
    binary_memcached_python, require_tools, run_with_timeout, Cluster, Memcached,
};

const SCRIPT: &str = r#"
import sys
import bmemcached

port = int(sys.argv[1])
c = bmemcached.Client(("127.0.0.1:%d" % port,), socket_timeout=5)

def show(what, value):
    print(what, "=>", repr(value), flush=True)

show("flush", c.flush_all())
show("set str", c.set("bm:str", "hello"))
show("get str", c.get("bm:str"))
show("set int", c.set("bm:int", 42))
show("get int", c.get("bm:int"))
d = {"a": 1, "b": [1, 2, 3], "bin": b"\r\nEND\r\n\x00"}
show("set dict", c.set("bm:dict", d))
show("get dict", c.get("bm:dict") == d)
show("set bytes", c.set("bm:bytes", b"\x00\x01\x80\xff"))
show("get bytes", c.get("bm:bytes"))
show("get missing", c.get("bm:missing"))
show("get default", c.get("bm:missing", default="dflt"))
keys = ["bm:key:%02d" % i for i in range(20)]
show("set_multi", sorted(c.set_multi({k: "v-" + k for k in keys})))
show("get_multi", sorted(c.get_multi(keys + ["bm:missing"]).items()))
show("add existing", c.add("bm:str", "x"))
show("add new", c.add("bm:new", "x"))
show("replace missing", c.replace("bm:nope", "x"))
show("replace existing", c.replace("bm:new", "y"))
show("get replaced", c.get("bm:new"))
v, cas = c.gets("bm:new")
show("gets value", v)
show("cas fresh", c.cas("bm:new", "z", cas))
show("cas stale", c.cas("bm:new", "w", cas))
show("get after cas", c.get("bm:new"))
show("incr create", c.incr("bm:n", 5, default=10, time=0))
show("incr", c.incr("bm:n", 5))
show("decr", c.decr("bm:n", 100))
try:
    show("incr non-numeric", c.incr("bm:str", 1))
except Exception as e:
    show("incr non-numeric raised", str(e))
show("delete", c.delete("bm:new"))
show("delete missing", c.delete("bm:new"))
show("delete_multi", c.delete_multi(keys[:5]))
show("get deleted", c.get_multi(keys[:6]).keys().__len__())
show("set with ttl", c.set("bm:ttl", "t", time=3600))
show("get ttl", c.get("bm:ttl"))
big = "x" * (2 * 1024 * 1024)
try:
    show("set too large", c.set("bm:big", big))
except Exception as e:
    show("set too large raised", type(e).__name__)
show("still serving", c.get("bm:str"))
stats = c.stats()
show("stats servers", len(stats))
show("flush again", c.flush_all())
show("get after flush", c.get("bm:str"))
"#;

fn run(python: &std::path::Path, port: u16) -> String {
    let mut cmd = Command::new(python);
    cmd.args(["-c", SCRIPT, &port.to_string()]);
    let out = run_with_timeout(cmd, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "python-binary-memcached script failed against port {port}:\n{}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

#[test]
fn python_binary_memcached_matches_memcached() {
    if !require_tools(
        "python_binary_memcached_matches_memcached",
        &["python3", "memcached", "redis-server"],
    ) {
        return;
    }
    let python = binary_memcached_python();
    let reference = Memcached::start();
    let want = run(&python, reference.port());
    drop(reference);
    let cluster = Cluster::start();
    let got = run(&python, cluster.memshift.port());
    assert!(
        want.lines().count() > 30,
        "script output too short:\n{want}"
    );
    assert_eq!(
        got, want,
        "python-binary-memcached: memshift (left) and memcached (right) differ"
    );
}

/// Binary requests count under `protocol="binary"` with the classic command
/// names, in the same families and `stats` counters as text.
#[test]
fn binary_requests_are_counted_as_binary() {
    if !require_tools("binary_requests_are_counted_as_binary", &["redis-server"]) {
        return;
    }
    let cluster = Cluster::start();
    let req = |opcode: u8, key: &[u8], extras: &[u8], value: &[u8]| {
        let mut out = vec![0x80, opcode];
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.push(extras.len() as u8);
        out.extend_from_slice(&[0, 0, 0]);
        out.extend_from_slice(&((key.len() + extras.len() + value.len()) as u32).to_be_bytes());
        out.extend_from_slice(&[0; 12]);
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    };
    let mut batch = Vec::new();
    for i in 0..3 {
        batch.extend(req(0x01, format!("bin:{i}").as_bytes(), &[0; 8], b"v"));
    }
    for i in 0..5 {
        batch.extend(req(0x00, format!("bin:{i}").as_bytes(), b"", b""));
    }
    batch.extend(req(0x0a, b"", b"", b""));
    let mut s = std::net::TcpStream::connect(cluster.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut s, &batch).unwrap();
    // 3 set + 5 get responses + the noop, each at least a header.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < 9 * 24 || got[got.len() - 24 + 1..].first() != Some(&0x0a) {
        let n = std::io::Read::read(&mut s, &mut buf).expect("read");
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    let text = memshift_tests::ops_support::metrics_text(cluster.admin_port);
    let value = |series: &str| memshift_tests::ops_support::metric_value(&text, series);
    assert_eq!(
        value(r#"memshift_requests_total{protocol="binary",command="set"}"#),
        Some(3.0)
    );
    assert_eq!(
        value(r#"memshift_requests_total{protocol="binary",command="get"}"#),
        Some(5.0)
    );
    assert_eq!(
        value(r#"memshift_requests_total{protocol="binary",command="mn"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(r#"memshift_get_hits_total{backend="redis"}"#),
        Some(3.0)
    );
    assert_eq!(
        value(r#"memshift_get_misses_total{backend="redis"}"#),
        Some(2.0)
    );
    let text_sets = value(r#"memshift_requests_total{protocol="text",command="set"}"#);
    assert!(
        text_sets.unwrap_or(0.0) == 0.0,
        "text counted: {text_sets:?}"
    );
}
