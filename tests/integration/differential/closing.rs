//! Inputs that may close the connection, each on fresh connections.

use std::time::Duration;

use memshift_tests::escape;

use super::runner::{connect, start_sides};

/// (name, bytes to send). Each is sent on a fresh connection; then whatever
/// arrives until the server closes or goes quiet is compared, and whether it
/// closed.
pub(super) fn closing_cases() -> Vec<(&'static str, Vec<u8>)> {
    let mut long_get = b"get ".to_vec();
    long_get.resize(4096, b'a');
    vec![
        ("quit", b"quit\r\n".to_vec()),
        ("quit with LF", b"quit\n".to_vec()),
        ("quit with argument", b"quit now\r\n".to_vec()),
        (
            "quit after a pipeline",
            b"set qa 0 0 1\r\nx\r\nget qa\r\nquit\r\nget qa\r\n".to_vec(),
        ),
        (
            "commands after quit",
            b"get qa\r\nquit\r\nversion\r\n".to_vec(),
        ),
        (
            "quit after noreply",
            b"set qb 0 0 1 noreply\r\nx\r\nquit\r\n".to_vec(),
        ),
        (
            "quit as data",
            b"set qc 0 0 4\r\nquit\r\nget qc\r\n".to_vec(),
        ),
        // memcached closes a connection whose line passes 2048 bytes without
        // a newline, unless it is a get/gets (large multi-gets).
        ("line too long without newline", vec![b'x'; 4096]),
        ("long get line without newline", long_get),
        ("incomplete data block", b"set qd 0 0 10\r\nabc".to_vec()),
        ("incomplete command line", b"get qa".to_vec()),
        ("shutdown (disabled)", b"shutdown\r\n".to_vec()),
    ]
}

fn normalize_raw(bytes: &[u8]) -> Vec<u8> {
    // VERSION lines: shape only.
    let mut out = Vec::new();
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(b"VERSION ") {
            out.extend_from_slice(b"VERSION *\r\n");
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

#[test]
fn differential_connection_closing() {
    let Some((reference, target)) = start_sides("differential_connection_closing") else {
        return;
    };
    let mut diffs = Vec::new();
    for (name, input) in closing_cases() {
        // Both sides at once; a side that stays silent for 2.5 s is "open".
        let results: Vec<(bool, Vec<u8>, bool)> = std::thread::scope(|scope| {
            let handles: Vec<_> = [reference.addr(), target.addr()]
                .into_iter()
                .map(|addr| {
                    let input = &input;
                    scope.spawn(move || {
                        let mut c = connect(&addr);
                        let sent = c.send(input);
                        let (bytes, closed) = c.read_until_closed_or_idle(
                            Duration::from_millis(2500),
                            Duration::from_secs(10),
                        );
                        (sent.is_ok(), normalize_raw(&bytes), closed)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("closing-case thread"))
                .collect()
        });
        let (r, t) = (&results[0], &results[1]);
        eprintln!(
            "closing case {name:?}: memcached {} {:?}, {} {} {:?}",
            if r.2 { "closed" } else { "open" },
            escape(&r.1, 80),
            target.name(),
            if t.2 { "closed" } else { "open" },
            escape(&t.1, 80)
        );
        if r.1 != t.1 || r.2 != t.2 {
            diffs.push(format!(
                "case {name:?}: sent {}\n  reference memcached: {} after {}\n  {}: {} after {}",
                escape(&input, 120),
                if r.2 { "closed" } else { "left open" },
                escape(&r.1, 300),
                target.name(),
                if t.2 { "closed" } else { "left open" },
                escape(&t.1, 300),
            ));
        }
    }
    // Both still serve new connections.
    for addr in [reference.addr(), target.addr()] {
        let reply = connect(&addr)
            .request(b"version\r\n")
            .unwrap_or_else(|e| panic!("{addr} no longer answers: {e}"));
        assert!(
            reply.starts_with(b"VERSION "),
            "{addr}: {}",
            escape(&reply, 100)
        );
    }
    assert!(
        diffs.is_empty(),
        "{} connection-level difference(s):\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}
