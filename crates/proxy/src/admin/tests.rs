//! The admin listener over real sockets, and its HTTP parsing.

use super::http::{find_end, request_line};
use super::*;
use crate::metrics::{
    command_index, Backend, CompareResult, ErrorKind, Protocol, ShadowResult, TlsResult, FAMILIES,
};
use memshift_shadow::queue::DropReason;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;

struct Server {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

async fn start(limits: Limits) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let flag = ready.clone();
    let state = AdminState {
        metrics: metrics.clone(),
        ready: Arc::new(move || flag.load(Ordering::SeqCst)),
    };
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(serve_with(listener, state, rx, limits));
    Server {
        addr,
        metrics,
        ready,
        stop,
        task,
    }
}

struct Reply {
    status_line: String,
    headers: HashMap<String, String>,
    body: String,
}

/// Send raw bytes, read the whole response (the server closes).
async fn raw(addr: SocketAddr, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("server answers and closes")
        .unwrap();
    parse_reply(&buf)
}

fn parse_reply(buf: &[u8]) -> Reply {
    let text = String::from_utf8(buf.to_vec()).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("complete head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap().to_string();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    Reply {
        status_line,
        headers,
        body: body.to_string(),
    }
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nUser-Agent: t\r\n\r\n");
    raw(addr, req.as_bytes()).await
}

fn scrape(body: &str) -> prometheus_parse::Scrape {
    // The parser skips lines it does not understand; refuse them instead.
    for line in body.lines() {
        let info = prometheus_parse::LineInfo::parse(line);
        assert!(
            !matches!(info, prometheus_parse::LineInfo::Ignored),
            "unparsable line: {line:?}"
        );
    }
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text")
}

/// Value of the sample `metric` whose labels include all of `labels`.
fn sample(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<_> = s
        .samples
        .iter()
        .filter(|x| x.metric == metric)
        .filter(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "{metric} {labels:?}: {found:?}");
    match &found[0].value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => *v,
        other => panic!("{metric} is not a scalar: {other:?}"),
    }
}

#[tokio::test]
async fn metrics_endpoint_serves_every_family_with_exact_values() {
    let srv = start(Limits::default()).await;
    let m = &srv.metrics;
    let get_i = command_index("get").unwrap();
    for _ in 0..3 {
        m.request(Protocol::Text, get_i, 0.0002);
    }
    m.request(Protocol::Text, command_index("set").unwrap(), 0.003);
    m.get_hit(Backend::Redis);
    m.get_hit(Backend::Redis);
    m.get_miss(Backend::Memcached);
    let shard = m.shard(Backend::Redis, "r1");
    shard.set_up(true);
    shard.error(ErrorKind::Timeout);
    m.shard(Backend::Memcached, "127.0.0.1:21211");
    m.read_errors_as_misses("r1").increment(2);
    m.primary("s1").primary_is("127.0.0.1:6379", None);
    m.replica_reads("s1").increment(3);
    m.client_connected(crate::metrics::Transport::Tcp);
    m.client_connected(crate::metrics::Transport::Tcp);
    m.client_disconnected(crate::metrics::Transport::Tcp);
    m.connection_rejected();
    m.shadow_write(Backend::Memcached, &ShadowResult::Ok);
    m.shadow_write(
        Backend::Memcached,
        &ShadowResult::Dropped(DropReason::QueueFull),
    );
    m.set_breaker_open(Backend::Memcached, true);
    m.compare(CompareResult::ValueMismatch);
    m.set_phase("canary");
    m.rollback();
    m.tls_handshake(TlsResult::NoClientCert);

    let r = get(srv.addr, "/metrics").await;
    assert_eq!(r.status_line, "HTTP/1.1 200 OK");
    assert!(
        r.headers["content-type"].starts_with("text/plain; version=0.0.4"),
        "{:?}",
        r.headers
    );
    assert_eq!(r.headers["content-length"], r.body.len().to_string());
    let s = scrape(&r.body);

    // Every family of the contract (and our extensions) is there, typed.
    let types: HashMap<&str, String> = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n, t.to_string()))
        .collect();
    for (family, kind, _) in FAMILIES {
        assert_eq!(
            types.get(family).map(String::as_str),
            Some(kind),
            "{family}"
        );
    }

    assert_eq!(
        sample(
            &s,
            "memshift_requests_total",
            &[("protocol", "text"), ("command", "get")]
        ),
        3.0
    );
    assert_eq!(
        sample(
            &s,
            "memshift_requests_total",
            &[("protocol", "text"), ("command", "set")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &s,
            "memshift_requests_total",
            &[("protocol", "text"), ("command", "gets")]
        ),
        0.0
    );
    assert_eq!(
        sample(&s, "memshift_replica_reads_total", &[("shard", "s1")]),
        3.0
    );

    // The duration is a real histogram: buckets, sum and count.
    let hist = s
        .samples
        .iter()
        .find(|x| {
            x.metric == "memshift_request_duration_seconds"
                && x.labels.get("command") == Some("get")
        })
        .expect("duration histogram for get");
    let prometheus_parse::Value::Histogram(buckets) = &hist.value else {
        panic!("not a histogram: {hist:?}");
    };
    assert_eq!(buckets.len(), crate::metrics::DURATION_BUCKETS.len() + 1);
    let at = |le: f64| {
        buckets
            .iter()
            .find(|b| b.less_than == le)
            .map(|b| b.count)
            .unwrap()
    };
    assert_eq!(at(0.0001), 0.0);
    assert_eq!(at(0.00025), 3.0);
    assert_eq!(at(f64::INFINITY), 3.0);
    assert!(r
        .body
        .contains("memshift_request_duration_seconds_sum{command=\"get\"}"));
    assert!(r
        .body
        .contains("memshift_request_duration_seconds_count{command=\"get\"} 3"));

    assert_eq!(
        sample(&s, "memshift_get_hits_total", &[("backend", "redis")]),
        2.0
    );
    assert_eq!(
        sample(&s, "memshift_get_hits_total", &[("backend", "memcached")]),
        0.0
    );
    assert_eq!(
        sample(&s, "memshift_get_misses_total", &[("backend", "memcached")]),
        1.0
    );
    assert_eq!(
        sample(
            &s,
            "memshift_backend_errors_total",
            &[("backend", "redis"), ("shard", "r1"), ("kind", "timeout")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &s,
            "memshift_backend_errors_total",
            &[("backend", "redis"), ("shard", "r1"), ("kind", "busy")]
        ),
        0.0
    );
    assert_eq!(sample(&s, "memshift_backend_up", &[("shard", "r1")]), 1.0);
    assert_eq!(
        sample(
            &s,
            "memshift_backend_up",
            &[("backend", "memcached"), ("shard", "127.0.0.1:21211")]
        ),
        0.0
    );
    assert_eq!(sample(&s, "memshift_client_connections", &[]), 1.0);
    assert_eq!(sample(&s, "memshift_client_connections_total", &[]), 2.0);
    assert_eq!(sample(&s, "memshift_rejected_connections_total", &[]), 1.0);
    let shadow = |result| {
        sample(
            &s,
            "memshift_shadow_writes_total",
            &[("backend", "memcached"), ("result", result)],
        )
    };
    assert_eq!(
        (shadow("ok"), shadow("error"), shadow("dropped")),
        (1.0, 0.0, 1.0)
    );
    assert_eq!(
        sample(
            &s,
            "memshift_shadow_breaker_open",
            &[("backend", "memcached")]
        ),
        1.0
    );
    assert_eq!(
        sample(&s, "memshift_shadow_breaker_open", &[("backend", "redis")]),
        0.0
    );
    assert_eq!(
        sample(
            &s,
            "memshift_compare_total",
            &[("result", "value_mismatch")]
        ),
        1.0
    );
    assert_eq!(
        sample(&s, "memshift_compare_total", &[("result", "match")]),
        0.0
    );
    assert_eq!(
        sample(&s, "memshift_migration_phase", &[("phase", "canary")]),
        1.0
    );
    assert_eq!(
        sample(&s, "memshift_migration_phase", &[("phase", "redis")]),
        0.0
    );
    assert_eq!(sample(&s, "memshift_rollbacks_total", &[]), 1.0);
    assert_eq!(
        sample(
            &s,
            "memshift_tls_handshakes_total",
            &[("result", "no_client_cert")]
        ),
        1.0
    );
    assert_eq!(
        sample(&s, "memshift_tls_handshakes_total", &[("result", "ok")]),
        0.0
    );
}

#[tokio::test]
async fn health_and_ready() {
    let srv = start(Limits::default()).await;
    let r = get(srv.addr, "/health").await;
    assert_eq!(r.status_line, "HTTP/1.1 200 OK");
    assert_eq!(r.body, "ok\n");

    let r = get(srv.addr, "/ready").await;
    assert_eq!(r.status_line, "HTTP/1.1 503 Service Unavailable");
    assert_eq!(r.body, "not ready\n");
    srv.ready.store(true, Ordering::SeqCst);
    let r = get(srv.addr, "/ready").await;
    assert_eq!(r.status_line, "HTTP/1.1 200 OK");
    assert_eq!(r.body, "ready\n");
    assert_eq!(r.headers["connection"], "close");
}

#[tokio::test]
async fn unknown_paths_methods_and_garbage() {
    let srv = start(Limits::default()).await;
    let r = get(srv.addr, "/nope").await;
    assert_eq!(r.status_line, "HTTP/1.1 404 Not Found");
    let r = get(srv.addr, "/metricsx").await;
    assert_eq!(r.status_line, "HTTP/1.1 404 Not Found");

    let r = raw(
        srv.addr,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    )
    .await;
    assert_eq!(r.status_line, "HTTP/1.1 405 Method Not Allowed");
    assert_eq!(r.headers["allow"], "GET, HEAD");
    let r = raw(srv.addr, b"DELETE /nope HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status_line, "HTTP/1.1 405 Method Not Allowed");

    for bad in [
        &b"hello\r\n\r\n"[..],
        b"GET /health\r\n\r\n",
        b"GET /health HTTP/2.0\r\n\r\n",
        b"GET  /health HTTP/1.1\r\n\r\n",
        b"GET health HTTP/1.1\r\n\r\n",
        b"\xff\xfe /x HTTP/1.1\r\n\r\n",
        b"\r\n\r\n",
    ] {
        let r = raw(srv.addr, bad).await;
        assert_eq!(r.status_line, "HTTP/1.1 400 Bad Request", "{bad:?}");
    }
}

#[tokio::test]
async fn query_strings_head_and_lenient_newlines() {
    let srv = start(Limits::default()).await;
    let r = get(srv.addr, "/health?verbose=1").await;
    assert_eq!(r.status_line, "HTTP/1.1 200 OK");

    let r = raw(srv.addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status_line, "HTTP/1.1 200 OK");
    assert!(r.body.is_empty());
    let len: usize = r.headers["content-length"].parse().unwrap();
    assert_eq!(len, srv.metrics.render().len());

    let r = raw(srv.addr, b"GET /health HTTP/1.0\n\n").await;
    assert_eq!(r.status_line, "HTTP/1.1 200 OK");
    assert_eq!(r.body, "ok\n");
}

#[tokio::test]
async fn head_split_across_writes() {
    let srv = start(Limits::default()).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    for part in ["GET /hea", "lth HTTP/1.1\r", "\nHost: x\r\n\r", "\n"] {
        s.write_all(part.as_bytes()).await.unwrap();
        s.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let r = parse_reply(&buf);
    assert_eq!(r.status_line, "HTTP/1.1 200 OK");
    assert_eq!(r.body, "ok\n");
}

#[tokio::test]
async fn oversized_head_is_refused() {
    let srv = start(Limits::default()).await;
    let mut req = b"GET /health HTTP/1.1\r\n".to_vec();
    while req.len() <= 9 * 1024 {
        req.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    req.extend_from_slice(b"\r\n");
    let r = raw(srv.addr, &req).await;
    assert_eq!(
        r.status_line,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
}

#[tokio::test]
async fn silent_client_times_out() {
    let limits = Limits {
        read_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let srv = start(limits).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap(); // never finishes
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("closed by the server")
        .unwrap();
    assert_eq!(
        parse_reply(&buf).status_line,
        "HTTP/1.1 408 Request Timeout"
    );
}

#[tokio::test]
async fn connections_over_the_cap_are_closed() {
    let limits = Limits {
        max_connections: 1,
        read_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let srv = start(limits).await;
    let _hog = TcpStream::connect(srv.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut second = TcpStream::connect(srv.addr).await.unwrap();
    let _ = second.write_all(b"GET /health HTTP/1.1\r\n\r\n").await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), second.read_to_end(&mut buf))
        .await
        .expect("closed at once");
    assert!(buf.is_empty(), "{buf:?}");
    // Once the hog times out, its slot is free again.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        get(srv.addr, "/health").await.status_line,
        "HTTP/1.1 200 OK"
    );
}

#[tokio::test]
async fn shutdown_stops_the_listener() {
    let srv = start(Limits::default()).await;
    assert_eq!(
        get(srv.addr, "/health").await.status_line,
        "HTTP/1.1 200 OK"
    );
    srv.stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), srv.task)
        .await
        .expect("serve returns on shutdown")
        .unwrap();
    // The listener is gone with the task.
    assert!(TcpStream::connect(srv.addr).await.is_err());
}

#[tokio::test]
async fn shutdown_already_requested_returns_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let state = AdminState {
        metrics: Arc::new(Metrics::new()),
        ready: Arc::new(|| true),
    };
    let (_tx, rx) = watch::channel(true);
    tokio::time::timeout(Duration::from_secs(5), serve(listener, state, rx))
        .await
        .expect("returns");
}

#[tokio::test]
async fn dropped_shutdown_sender_keeps_serving() {
    let srv = start(Limits::default()).await;
    drop(srv.stop);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        get(srv.addr, "/health").await.status_line,
        "HTTP/1.1 200 OK"
    );
    assert!(!srv.task.is_finished());
}

#[test]
fn request_line_parsing() {
    assert_eq!(
        request_line(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a"),
        Some(("GET", "/metrics"))
    );
    assert_eq!(request_line(b"GET / HTTP/1.0"), Some(("GET", "/")));
    assert_eq!(request_line(b"GET /a#frag HTTP/1.1"), Some(("GET", "/a")));
    assert_eq!(request_line(b""), None);
    assert_eq!(request_line(b"GET /a HTTP/1.1 extra"), None);
    assert_eq!(request_line(b"GET http://h/a HTTP/1.1"), None);
}

#[test]
fn find_end_variants() {
    assert_eq!(find_end(b"a\r\n\r\nb"), Some(1));
    assert_eq!(find_end(b"a\n\nb"), Some(1));
    assert_eq!(find_end(b"a\r\nb\r\n"), None);
}
