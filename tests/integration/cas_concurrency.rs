//! CAS under concurrency: 8 clients each do 500 gets/cas increments of one
//! key, retrying on EXISTS; the counter must end at exactly 4000.

use std::time::{Duration, Instant};

use memshift_tests::{escape, require_tools, Cluster, McClient, Unit};

const THREADS: usize = 8;
const INCREMENTS: usize = 500;
const KEY: &str = "cas:counter";

/// One gets + cas round; `Ok(true)` when the cas stored.
fn try_increment(c: &mut McClient) -> Result<bool, String> {
    let units = c
        .send(format!("gets {KEY}\r\n").as_bytes())
        .and_then(|()| c.read_reply())
        .map_err(|e| format!("gets: {e}"))?;
    let (value, cas) = match units.as_slice() {
        [v @ Unit::Value { cas: Some(cas), .. }, end] if end.is_line(b"END\r\n") => {
            (v.data().unwrap_or_default().to_vec(), *cas)
        }
        other => {
            let raw: Vec<u8> = other.iter().flat_map(Unit::raw).collect();
            return Err(format!("gets: unexpected reply {}", escape(&raw, 200)));
        }
    };
    let n: u64 = std::str::from_utf8(&value)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("counter is not a number: {}", escape(&value, 100)))?;
    let next = (n + 1).to_string();
    let req = format!("cas {KEY} 0 0 {} {cas}\r\n{next}\r\n", next.len());
    let reply = c.request(req.as_bytes()).map_err(|e| format!("cas: {e}"))?;
    match reply.as_slice() {
        b"STORED\r\n" => Ok(true),
        b"EXISTS\r\n" => Ok(false),
        other => Err(format!("cas: unexpected reply {}", escape(other, 200))),
    }
}

#[test]
fn cas_increments_under_concurrency() {
    if !require_tools("cas_increments_under_concurrency", &["redis-server"]) {
        return;
    }
    let cluster = Cluster::start();
    cluster.client().set(KEY, b"0").expect("initial set");
    let deadline = Instant::now() + Duration::from_secs(300);
    let addr = cluster.addr().to_string();

    let retries: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let addr = addr.clone();
                s.spawn(move || {
                    let mut c = McClient::connect(&addr).expect("connect");
                    let mut retries = 0;
                    for i in 0..INCREMENTS {
                        loop {
                            assert!(
                                Instant::now() < deadline,
                                "thread {t}: increment {i} still not done at the deadline"
                            );
                            match try_increment(&mut c) {
                                Ok(true) => break,
                                Ok(false) => retries += 1,
                                Err(e) => panic!("thread {t}, increment {i}: {e}"),
                            }
                        }
                    }
                    retries
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread panicked"))
            .collect()
    });
    eprintln!(
        "cas concurrency: {} increments, {} EXISTS retries",
        THREADS * INCREMENTS,
        retries.iter().sum::<usize>()
    );
    let value = cluster.client().get(KEY).expect("final get");
    assert_eq!(
        value.as_deref(),
        Some((THREADS * INCREMENTS).to_string().as_bytes()),
        "lost or duplicated increments"
    );
}
