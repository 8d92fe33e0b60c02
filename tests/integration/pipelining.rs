//! Pipelining: 1000 requests (sets, gets, multi-gets) written before any
//! reply is read; the 1000 replies come back complete and in order.

use std::collections::HashMap;
use std::io::Write;

use memshift_tests::{escape, require_tools, Cluster};

const REQUESTS: usize = 1000;

#[test]
fn pipelined_requests_answer_in_order() {
    if !require_tools("pipelined_requests_answer_in_order", &["redis-server"]) {
        return;
    }
    let cluster = Cluster::start();
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    let mut stream = Vec::new();
    let mut expected: Vec<Vec<u8>> = Vec::with_capacity(REQUESTS);
    let mut x: u64 = 0x1234_5678;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let value_of = |k: &str, v: &[u8]| {
        let mut r = format!("VALUE {k} 0 {}\r\n", v.len()).into_bytes();
        r.extend_from_slice(v);
        r.extend_from_slice(b"\r\n");
        r
    };
    for i in 0..REQUESTS {
        let key = format!("pipe:{}", next() % 80);
        match next() % 10 {
            0..=3 => {
                // Binary value, CRLF and protocol look-alikes included.
                let mut v = format!("v{i}\r\nEND\r\n").into_bytes();
                v.extend((0..next() % 200).map(|_| next() as u8));
                stream.extend_from_slice(format!("set {key} 0 0 {}\r\n", v.len()).as_bytes());
                stream.extend_from_slice(&v);
                stream.extend_from_slice(b"\r\n");
                expected.push(b"STORED\r\n".to_vec());
                model.insert(key, v);
            }
            4..=7 => {
                stream.extend_from_slice(format!("get {key}\r\n").as_bytes());
                let mut r = model
                    .get(&key)
                    .map(|v| value_of(&key, v))
                    .unwrap_or_default();
                r.extend_from_slice(b"END\r\n");
                expected.push(r);
            }
            _ => {
                let keys: Vec<String> = (0..1 + next() % 6)
                    .map(|_| format!("pipe:{}", next() % 80))
                    .collect();
                stream.extend_from_slice(format!("get {}\r\n", keys.join(" ")).as_bytes());
                let mut r = Vec::new();
                for k in &keys {
                    if let Some(v) = model.get(k) {
                        r.extend_from_slice(&value_of(k, v));
                    }
                }
                r.extend_from_slice(b"END\r\n");
                expected.push(r);
            }
        }
    }

    let mut client = cluster.client();
    let mut writer = client.try_clone_stream().expect("clone socket");
    // A writer thread, so a full socket buffer can never deadlock the test.
    let writer = std::thread::spawn(move || {
        writer.write_all(&stream)?;
        writer.flush()
    });
    for (i, want) in expected.iter().enumerate() {
        let got: Vec<u8> = client
            .read_reply()
            .unwrap_or_else(|e| panic!("reply {i} of {REQUESTS}: {e}"))
            .iter()
            .flat_map(|u| u.raw())
            .collect();
        assert!(
            &got == want,
            "reply {i} of {REQUESTS} differs:\n  want {}\n  got  {}",
            escape(want, 300),
            escape(&got, 300)
        );
    }
    writer
        .join()
        .expect("writer thread")
        .expect("write the pipeline");
}
