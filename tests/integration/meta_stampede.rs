//! memcached's anti-stampede tokens across proxies: 50 clients spread over
//! two memshift processes on the same Redis shards miss one key at once
//! with `mg k N30 v c t`; exactly one gets the win token `W` (and the empty
//! item `N` created), the others `Z`. After `md k I T30` the item is stale:
//! exactly one `mg` gets `W`, all get `X` and the stale value, until the
//! winner's `ms` replaces it, after which every `mg` is a plain hit.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use memshift_tests::process::start_memshift_on_free_ports;
use memshift_tests::{escape, memshift_config, require_tools, Cluster, ClusterOptions, McClient};

const CLIENTS: usize = 50;
const KEY: &str = "stampede:hot";

/// One `mg` with `v`: the reply line (without `\r\n`) and the value.
fn meta_get(c: &mut McClient, req: &str) -> Result<(String, Vec<u8>), String> {
    c.send(req.as_bytes()).map_err(|e| format!("{req}: {e}"))?;
    let line = c.read_line().map_err(|e| format!("{req}: {e}"))?;
    let text = String::from_utf8_lossy(&line).trim_end().to_string();
    let Some(rest) = text.strip_prefix("VA ") else {
        return Err(format!("{req}: unexpected reply {}", escape(&line, 200)));
    };
    let len: usize = rest
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{req}: bad VA line {text}"))?;
    let mut block = c.read_exact_n(len + 2).map_err(|e| format!("{req}: {e}"))?;
    block.truncate(len);
    Ok((text, block))
}

/// The return flags of a reply line (after `VA <len>`).
fn flags(line: &str) -> Vec<&str> {
    line.split(' ').skip(2).collect()
}

/// All clients send `req` at once (half through each proxy); their replies.
fn race(addrs: &[String; 2], req: &str) -> Vec<(String, Vec<u8>)> {
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let addr = addrs[i % 2].clone();
            let barrier = Arc::clone(&barrier);
            let req = req.to_string();
            thread::spawn(move || {
                let mut c = McClient::connect_with_timeout(&addr, Duration::from_secs(30))
                    .map_err(|e| format!("connect {addr}: {e}"))?;
                // Connected (and the proxy's shard connections up) before
                // the race starts.
                c.request(b"mn\r\n").map_err(|e| format!("mn: {e}"))?;
                barrier.wait();
                meta_get(&mut c, &req)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| match h.join() {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => panic!("client failed: {e}"),
            Err(_) => panic!("client thread panicked"),
        })
        .collect()
}

fn count(replies: &[(String, Vec<u8>)], flag: &str) -> usize {
    replies
        .iter()
        .filter(|(line, _)| flags(line).contains(&flag))
        .count()
}

#[test]
fn one_win_token_across_two_proxies() {
    if !require_tools("one_win_token_across_two_proxies", &["redis-server"]) {
        return;
    }
    let opts = ClusterOptions {
        shards: 2,
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start_with(opts.clone());
    let shard_addrs: Vec<String> = cluster.shards.iter().map(|s| s.addr()).collect();
    let (second, _, _) = start_memshift_on_free_ports(|port, admin| {
        memshift_config(port, admin, &shard_addrs, &opts)
    });
    let addrs = [cluster.addr().to_string(), second.addr().to_string()];
    let mut c = cluster.client();

    // A miss with N: one client creates the empty item and wins.
    let replies = race(&addrs, &format!("mg {KEY} N30 v c t\r\n"));
    let summary: Vec<&str> = replies.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(count(&replies, "W"), 1, "one W on a miss: {summary:?}");
    assert_eq!(count(&replies, "Z"), CLIENTS - 1, "{summary:?}");
    assert_eq!(count(&replies, "X"), 0, "{summary:?}");
    assert!(replies.iter().all(|(_, v)| v.is_empty()), "{summary:?}");

    // The winner fills the item: plain hits from then on.
    let stored = c
        .request_str(format!("ms {KEY} 5 T60\r\nfresh\r\n").as_bytes())
        .expect("ms");
    assert_eq!(stored, "HD\r\n");
    let replies = race(&addrs, &format!("mg {KEY} v c t\r\n"));
    for (line, value) in &replies {
        assert!(
            !flags(line).iter().any(|f| ["W", "Z", "X"].contains(f)),
            "a plain hit after ms: {line}"
        );
        assert_eq!(value, b"fresh");
    }

    // Invalidated: stale, one client wins the right to refresh it.
    let marked = c
        .request_str(format!("md {KEY} I T30\r\n").as_bytes())
        .expect("md");
    assert_eq!(marked, "HD\r\n");
    let replies = race(&addrs, &format!("mg {KEY} v c t\r\n"));
    let summary: Vec<&str> = replies.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        count(&replies, "W"),
        1,
        "one W on a stale item: {summary:?}"
    );
    assert_eq!(count(&replies, "X"), CLIENTS, "{summary:?}");
    assert_eq!(count(&replies, "Z"), CLIENTS - 1, "{summary:?}");
    assert!(replies.iter().all(|(_, v)| v == b"fresh"), "{summary:?}");
    // Still stale for a latecomer, whose token is taken.
    let (line, _) = meta_get(&mut c, &format!("mg {KEY} v\r\n")).expect("mg");
    assert_eq!(flags(&line), ["Z", "X"], "{line}");

    // The winner's ms replaces it.
    let stored = c
        .request_str(format!("ms {KEY} 6 T60\r\nfresh2\r\n").as_bytes())
        .expect("ms");
    assert_eq!(stored, "HD\r\n");
    let replies = race(&addrs, &format!("mg {KEY} v t\r\n"));
    for (line, value) in &replies {
        assert!(
            !flags(line).iter().any(|f| ["W", "Z", "X"].contains(f)),
            "a plain hit after ms: {line}"
        );
        assert_eq!(value, b"fresh2");
    }
}
