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
        // A longer line whose `\n` comes in the same read is served, up to
        // memcached's 16 KiB read buffer.
        (
            "long mg line read whole",
            long_line(b"mg qa v", 2100, b"\r\n"),
        ),
        (
            "long delete line read whole",
            long_line(b"delete qe", 3000, b"\r\n"),
        ),
        ("long gat line read whole", long_keys(b"gat 0", 400)),
        ("long get line read whole", long_keys(b"get", 3000)),
        (
            "line filling the read buffer",
            long_line(b"mg qa v", 16382, b"\r\n"),
        ),
        (
            "line past the read buffer",
            long_line(b"mg qa v", 16383, b"\r\n"),
        ),
        (
            "line far past the read buffer",
            long_line(b"mg qa v", 20000, b"\r\nmn\r\n"),
        ),
        ("incomplete data block", b"set qd 0 0 10\r\nabc".to_vec()),
        ("incomplete command line", b"get qa".to_vec()),
        ("shutdown (disabled)", b"shutdown\r\n".to_vec()),
    ]
}

/// (name, pieces): each piece is sent once the server has gone quiet (or
/// closed) after the previous one, so it judges each piece on its own.
pub(super) fn trickled_closing_cases() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let get = long_keys(b"get", 3000);
    let (get_head, get_tail) = get.split_at(5000);
    vec![
        (
            "long mg line without its newline, then the newline",
            vec![long_line(b"mg qa v", 2100, b""), b"\r\n".to_vec()],
        ),
        (
            "mg line in two pieces under 2048 bytes each",
            vec![
                long_line(b"mg qa v", 1000, b""),
                long_line(b"", 1100, b"\r\n"),
            ],
        ),
        (
            "long get line in two pieces",
            vec![get_head.to_vec(), get_tail.to_vec()],
        ),
    ]
}

/// `head` padded with spaces to `len` bytes, then `tail`.
fn long_line(head: &[u8], len: usize, tail: &[u8]) -> Vec<u8> {
    let mut line = head.to_vec();
    line.resize(len, b' ');
    line.extend_from_slice(tail);
    line
}

/// `head` and `n` keys, then `\r\n`.
fn long_keys(head: &[u8], n: usize) -> Vec<u8> {
    let mut line = head.to_vec();
    for i in 0..n {
        line.extend_from_slice(format!(" key{i:05}").as_bytes());
    }
    line.extend_from_slice(b"\r\n");
    line
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

/// Sends `pieces` to `addr` on a fresh connection, each once the server has
/// gone quiet after the one before (or closed): (whether the last piece
/// was sent, what arrived, whether the server closed). Silent for 2.5 s
/// after the last piece is "open".
fn run_case(addr: &str, pieces: &[Vec<u8>]) -> (bool, Vec<u8>, bool) {
    let mut c = connect(addr);
    let (last, first) = pieces.split_last().expect("a piece");
    let mut bytes = Vec::new();
    for piece in first {
        let _ = c.send(piece);
        let (more, closed) =
            c.read_until_closed_or_idle(Duration::from_millis(1000), Duration::from_secs(10));
        bytes.extend(more);
        if closed {
            return (false, normalize_raw(&bytes), true);
        }
    }
    let sent = c.send(last);
    let (more, closed) =
        c.read_until_closed_or_idle(Duration::from_millis(2500), Duration::from_secs(10));
    bytes.extend(more);
    (sent.is_ok(), normalize_raw(&bytes), closed)
}

#[test]
fn differential_connection_closing() {
    let Some((reference, target)) = start_sides("differential_connection_closing") else {
        return;
    };
    // The cases run at once, each on its own connections (most end by
    // waiting 2.5 s for silence: one after the other they took 35 s). So
    // the items they read exist before any starts, and the one case that
    // writes a key they read (`qa`) writes the value it already has; the
    // delete has a key of its own.
    for addr in [reference.addr(), target.addr()] {
        let mut c = connect(&addr);
        for (key, value) in [("qa", b"x"), ("qe", b"y")] {
            c.set(key, value)
                .unwrap_or_else(|e| panic!("{addr}: setting {key}: {e}"));
        }
    }
    let cases: Vec<(&str, Vec<Vec<u8>>)> = closing_cases()
        .into_iter()
        .map(|(name, input)| (name, vec![input]))
        .chain(trickled_closing_cases())
        .collect();
    let sides = [reference.addr(), target.addr()];
    let results: Vec<[(bool, Vec<u8>, bool); 2]> = std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(_, pieces)| {
                sides
                    .clone()
                    .map(|addr| scope.spawn(move || run_case(&addr, pieces)))
            })
            .collect();
        handles
            .into_iter()
            .map(|pair| pair.map(|h| h.join().expect("closing-case thread")))
            .collect()
    });
    let mut diffs = Vec::new();
    for ((name, pieces), [r, t]) in cases.iter().zip(&results) {
        let input = pieces.concat();
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
