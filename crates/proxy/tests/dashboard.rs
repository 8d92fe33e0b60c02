//! The Grafana dashboard in `deploy/grafana/memshift.json` has the shape
//! Grafana needs and only queries metrics the proxy really exposes, so a
//! renamed or removed metric breaks this test instead of a dashboard panel.

use std::collections::{HashMap, HashSet};

use memshift_proxy::metrics::{Backend, Metrics};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../../deploy/grafana/memshift.json");

/// Families the interface contract promises; each must be on the dashboard.
const CONTRACT: [&str; 15] = [
    "memshift_requests_total",
    "memshift_request_duration_seconds",
    "memshift_get_hits_total",
    "memshift_get_misses_total",
    "memshift_backend_errors_total",
    "memshift_backend_up",
    "memshift_client_connections",
    "memshift_client_connections_total",
    "memshift_rejected_connections_total",
    "memshift_shadow_writes_total",
    "memshift_shadow_breaker_open",
    "memshift_compare_total",
    "memshift_migration_phase",
    "memshift_rollbacks_total",
    "memshift_tls_handshakes_total",
];

fn dashboard() -> Value {
    serde_json::from_str(DASHBOARD).expect("dashboard is valid JSON")
}

/// Series names the registry renders, mapped to their Prometheus type;
/// histograms contribute their `_bucket`, `_sum` and `_count` series.
fn exposed() -> HashMap<String, String> {
    let m = Metrics::new();
    // Per-shard families only exist once a shard is registered.
    m.shard(Backend::Redis, "r1");
    m.shard(Backend::Memcached, "m1");
    // Sentinel-managed shards' series exist once a primary is known.
    m.primary("s1").primary_is("127.0.0.1:6379", None);
    let mut out = HashMap::new();
    for line in m.render().lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("TYPE line has a type");
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                let kind = if suffix == "_bucket" {
                    "histogram_bucket"
                } else {
                    "counter"
                };
                out.insert(format!("{name}{suffix}"), kind.to_string());
            }
        }
        out.insert(name.to_string(), kind.to_string());
    }
    out
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Metric names (`memshift_*`) used in a PromQL expression, with their byte
/// offsets. Label names and values never start with `memshift_` here.
fn metric_names(expr: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("memshift_") {
        let start = i + pos;
        let preceded_by_name = expr[..start].chars().next_back().is_some_and(is_name_char);
        let end = expr[start..]
            .find(|c: char| !is_name_char(c))
            .map_or(expr.len(), |e| start + e);
        if !preceded_by_name {
            out.push((start, &expr[start..end]));
        }
        i = end;
    }
    out
}

/// Every non-row panel, descending into rows' nested `panels`.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    let top = d["panels"].as_array().expect("panels array");
    for p in top {
        out.push(p);
        if let Some(nested) = p.get("panels").and_then(Value::as_array) {
            out.extend(nested);
        }
    }
    out
}

fn exprs(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        let title = p["title"].as_str().unwrap_or("?").to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push((title.clone(), e.to_string()));
            }
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .unwrap_or_default();
            out.push((format!("variable {}", v["name"]), q.to_string()));
        }
    }
    out
}

#[test]
fn metric_name_extraction() {
    assert_eq!(
        metric_names(r#"sum(rate(memshift_a_total{x="memshift_not"}[5m])) / memshift_b"#)
            .into_iter()
            .map(|(_, n)| n)
            .collect::<Vec<_>>(),
        // A label value that looks like a name is a false positive we accept:
        // it errs towards failing, never towards passing.
        vec!["memshift_a_total", "memshift_not", "memshift_b"]
    );
    assert!(metric_names("xmemshift_a").is_empty());
}

#[test]
fn dashboard_shape() {
    let d = dashboard();
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()), "title");
    let uid = d["uid"].as_str().expect("uid");
    assert!(
        !uid.is_empty()
            && uid.len() <= 40
            && uid
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "uid {uid:?}"
    );
    assert!(d["schemaVersion"].as_u64().expect("schemaVersion") >= 36);

    // A Prometheus data-source variable every query goes through.
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let ds_vars: HashSet<&str> = vars
        .iter()
        .filter(|v| v["type"] == "datasource" && v["query"] == "prometheus")
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(!ds_vars.is_empty(), "no Prometheus datasource variable");
    let ds_ok = |ds: &Value| {
        ds["type"] == "prometheus"
            && ds["uid"].as_str().is_some_and(|u| {
                ds_vars
                    .iter()
                    .any(|v| u == format!("${{{v}}}") || u == format!("${v}"))
            })
    };

    let all = panels(&d);
    assert!(all.len() > 10, "a real dashboard");
    let mut ids = HashSet::new();
    let mut boxes = Vec::new();
    for p in &all {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "duplicate panel id {id}");
        let kind = p["type"].as_str().expect("panel type");
        let title = p["title"].as_str().expect("panel title");
        assert!(!title.is_empty(), "panel {id} has no title");
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        });
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: gridPos {g}");
        boxes.push((title, x, y, w, h));

        if kind == "row" {
            assert!(p.get("targets").is_none(), "row {title} has targets");
            continue;
        }
        assert!(
            [
                "timeseries",
                "stat",
                "state-timeline",
                "gauge",
                "bargauge",
                "table"
            ]
            .contains(&kind),
            "{title}: unexpected panel type {kind}"
        );
        assert!(
            ds_ok(&p["datasource"]),
            "{title}: datasource {}",
            p["datasource"]
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no targets");
        let mut refs = HashSet::new();
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "{title}: empty expr");
            let r = t["refId"].as_str().expect("refId");
            assert!(refs.insert(r), "{title}: duplicate refId {r}");
            assert!(ds_ok(&t["datasource"]), "{title}: target datasource");
        }
    }

    // Panels must not overlap, or Grafana shuffles them on load.
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            let apart =
                a.1 + a.3 <= b.1 || b.1 + b.3 <= a.1 || a.2 + a.4 <= b.2 || b.2 + b.4 <= a.2;
            assert!(apart, "panels {:?} and {:?} overlap", a.0, b.0);
        }
    }
}

#[test]
fn every_queried_metric_is_exposed() {
    let d = dashboard();
    let exposed = exposed();
    let mut used = HashSet::new();
    for (title, expr) in exprs(&d) {
        for (_, name) in metric_names(&expr) {
            assert!(
                exposed.contains_key(name),
                "{title}: `{name}` is not a metric memshift exposes (expr: {expr})"
            );
            used.insert(name.to_string());
        }
    }
    for family in CONTRACT {
        let shown = used.contains(family) || used.contains(&format!("{family}_bucket"));
        assert!(shown, "no panel shows {family}");
    }
}

#[test]
fn queries_use_each_type_correctly() {
    let d = dashboard();
    let exposed = exposed();
    for (title, expr) in exprs(&d) {
        // Balanced brackets and quotes: a cheap guard against typos.
        let mut stack = Vec::new();
        let mut in_quote = false;
        for c in expr.chars() {
            match c {
                '"' => in_quote = !in_quote,
                _ if in_quote => {}
                '(' | '{' | '[' => stack.push(c),
                ')' | '}' | ']' => {
                    let open = stack.pop();
                    let want = match c {
                        ')' => '(',
                        '}' => '{',
                        _ => '[',
                    };
                    assert_eq!(open, Some(want), "{title}: unbalanced {c} in {expr}");
                }
                _ => {}
            }
        }
        assert!(stack.is_empty() && !in_quote, "{title}: unclosed in {expr}");

        for (pos, name) in metric_names(&expr) {
            // Unknown names are reported by `every_queried_metric_is_exposed`.
            let Some(kind) = exposed.get(name).map(String::as_str) else {
                continue;
            };
            let before = expr[..pos].trim_end();
            let ranged = before.ends_with("rate(") || before.ends_with("increase(");
            match kind {
                // rate() of a gauge is meaningless; a bare counter is rarely meant.
                "counter" | "histogram_bucket" => {
                    assert!(ranged, "{title}: {name} ({kind}) outside rate/increase")
                }
                "gauge" => assert!(!ranged, "{title}: rate() over gauge {name}"),
                other => panic!("{title}: {name} queried directly as {other}"),
            }
            if kind == "histogram_bucket" {
                assert!(
                    expr.contains("histogram_quantile(") && expr.contains("by (le"),
                    "{title}: {name} without histogram_quantile by le"
                );
            }
        }
    }
}
