//! Differential test: the same bytes to a live memcached and to the parser.
//!
//! For each input (error cases mostly, requests that never read back what
//! they stored), the reply bytes memcached sends must equal what the
//! parser's verdicts imply on an empty cache (see
//! `memcache_support::render_on_empty_cache`), and the connection must be
//! closed in the same cases. Skipped with a message when memcached is not
//! installed. Meta commands are in (`meta_cases`), except `me` (memcached
//! serves it, this server answers ERROR) and the flags memshift does not
//! serve (mg N/R/h/l, md I, ms I with C: answered `CLIENT_ERROR invalid flag`).

mod memcache_support;

use std::io::{Read, Write};
use std::time::Duration;

use memcache_support::{render_on_empty_cache, run, Event, Memcached};
use memshift_protocol::memcache::{unterminated_line_closes, ParseLimits};

const SENTINEL: &[u8] = b"version\r\n";
const SENTINEL_REPLY: &[u8] = b"VERSION 1.6.18\r\n";
/// Bytes per write of a trickled input (30 ms apart).
const TRICKLE_PIECE: usize = 1000;

fn cases() -> Vec<Vec<u8>> {
    let k250 = "k".repeat(250);
    let k251 = "k".repeat(251);
    let mut c: Vec<Vec<u8>> = [
        // retrieval
        "get nokey\r\n",
        "gets a b c\r\n",
        "gat 10 a\r\n",
        "gats 10\r\n",
        "gat 10\r\n",
        "gat\r\n",
        "gat abc a\r\n",
        "get\r\n",
        "get \r\n",
        "bget a\r\n",
        "get a   \r\n",
        "   get a\r\n",
        "get\ta\r\n",
        "get HTTP/1.1\r\n",
        // storage
        "set a 5 0 3\r\nabc\r\n",
        "set a 5 0 3 noreply\r\nabc\r\n",
        "add a 0 0 1\r\nx\r\n",
        "replace a 0 0 1\r\nx\r\n",
        "replace a 0 0 1 noreply\r\nx\r\n",
        "append a 0 0 1\r\nx\r\n",
        "prepend a 0 0 1\r\nx\r\n",
        "cas a 0 0 1 99\r\nx\r\n",
        "cas a 0 0 1 99 noreply\r\nx\r\n",
        "set b 0 0 0\r\n\r\n",
        "set a 0 0 1 junk\r\nx\r\n",
        "cas a 0 0 1 1 junk\r\nx\r\n",
        "set a 0 0 1 noreply x\r\nx\r\n",
        "set a 0 0\r\nx\r\n",
        "set a 0 0 noreply\r\nx\r\n",
        "cas a 0 0 1\r\nx\r\n",
        "cas a 0 0 1 abc\r\nx\r\n",
        "cas a 0 0 1 -1\r\nx\r\n",
        "set   a   0  0   1\r\nx\r\n",
        "set a 0 0 1   \r\nx\r\n",
        "set a 0 0 1\nx\r\n",
        "set a 0 0 1\nx\nget a\n",
        "set a 0 0 1\r\r\nx\r\n",
        // flags, exptime, length
        "set f 4294967295 0 1\r\nx\r\n",
        "set f 4294967296 0 1\r\nx\r\n",
        "set f -1 0 1\r\nx\r\n",
        "set f -0 0 1\r\nx\r\n",
        "set f +5 0 1\r\nx\r\n",
        "set f abc 0 1\r\nx\r\n",
        "set f 5abc 0 1\r\nx\r\n",
        "set f \t5 0 1\r\nx\r\n",
        "set f 5\tjunk 0 1\r\nx\r\n",
        "set f 99999999999999999999 0 1\r\nx\r\n",
        "set f -18446744073709551615 0 1\r\nx\r\n",
        "set f 0x10 0 1\r\nx\r\n",
        "set f abc 0 1 noreply\r\nx\r\n",
        "set e 0 -1 1\r\nx\r\n",
        "set e 0 2147483648 1\r\nx\r\n",
        "set e 0 99999999999999999999 1\r\nx\r\n",
        "set e 0 abc 1\r\nx\r\n",
        "set b 0 0 -1\r\nx\r\n",
        "set b 0 0 abc\r\nx\r\n",
        "set b 0 0 4294967297\r\nx\r\n",
        "set b 0 0 2147483648\r\nx\r\n",
        "set b 0 0 2147483646\r\nx\r\n",
        "set b 0 0 -1 noreply\r\nx\r\n",
        // bad data chunks
        "set b 0 0 3\r\nhello\r\n",
        "set b 0 0 5\r\nabc\r\nXY\r\n",
        "set b 0 0 3\r\nabc\nmn\r\n",
        "set b 0 0 3 noreply\r\nhello\r\n",
        "set b 0 0 3\r\nabc\rXversion\r\n",
        // arith, touch, delete
        "incr n 5\r\n",
        "decr n 5 noreply\r\n",
        "incr n abc\r\n",
        "incr n -1\r\n",
        "incr n -0\r\n",
        "incr n 18446744073709551616\r\n",
        "incr n abc noreply\r\n",
        "incr a 1 junk\r\n",
        "incr a noreply\r\n",
        "incr a\r\n",
        "touch a 10\r\n",
        "touch a 10 noreply\r\n",
        "touch a abc\r\n",
        "touch a abc noreply\r\n",
        "touch a\r\n",
        "touch a noreply\r\n",
        "delete a\r\n",
        "delete a 0\r\n",
        "delete a noreply\r\n",
        "delete a 0 noreply\r\n",
        "delete a 1\r\n",
        "delete a 1 noreply\r\n",
        "delete a 0 0\r\n",
        "delete a 0 noreply x\r\n",
        "delete\r\n",
        "delete noreply\r\n",
        // admin
        "flush_all\r\n",
        "flush_all 0\r\n",
        "flush_all noreply\r\n",
        "flush_all 0 noreply\r\n",
        "flush_all abc\r\n",
        "flush_all abc noreply\r\n",
        "flush_all noreply junk\r\n",
        "flush_all -1\r\n",
        "flush_all 0 junk\r\n",
        "flush_all 0 noreply x\r\n",
        "version extra args\r\n",
        "verbosity 0\r\n",
        "verbosity 0 noreply\r\n",
        "verbosity\r\n",
        "verbosity noreply\r\n",
        "verbosity abc\r\n",
        "verbosity -1\r\n",
        "verbosity 0 junk\r\n",
        "stats reset\r\n",
        "stats reset x y\r\n",
        // line shapes and unknown commands
        "\r\n",
        "\n",
        "   \r\n",
        "\r\r\n",
        "g\r\n",
        "GET a\r\n",
        "foo bar\r\n",
        "foo noreply\r\n",
        "quitx\r\n",
        "foo http/1.1\r\n",
        "foo HTTP/1.1 x\r\n",
        "sett HTTP/1.1\r\n",
        "GET / HTTP/1.1\r\n",
        "POST /x HTTP/1.0\r\n",
        "quit\r\n",
        "quit now\r\n",
        // keys
        "set a\tb 0 0 1\r\nx\r\n",
        "set a\x01b 0 0 1\r\nx\r\n",
        "set a\rb 0 0 1\r\nx\r\n",
        "get a\0zzz\r\n",
        "set b 0 0 1\0junk\r\nx\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    for prefix in ["get ", "gets ", "gat 0 ", "delete "] {
        c.push(format!("{prefix}{k250}\r\n").into_bytes());
        c.push(format!("{prefix}{k251}\r\n").into_bytes());
    }
    c.push(format!("set {k250} 0 0 1\r\nx\r\n").into_bytes());
    c.push(format!("set {k251} 0 0 1\r\nx\r\n").into_bytes());
    c.push(format!("set {k251} 0 0 1 noreply\r\nx\r\n").into_bytes());
    c.push(format!("incr {k251} 1\r\n").into_bytes());
    c.push(format!("incr {k251} 1 noreply\r\n").into_bytes());
    c.push(format!("touch {k251} 1\r\n").into_bytes());
    c.push(format!("delete {k251} noreply\r\n").into_bytes());
    c.push(format!("get a {k251} c\r\n").into_bytes());
    c.push(format!("get{} {k251}\r\n", " z".repeat(25)).into_bytes());
    c.push(format!("get{} a\r\n", " z".repeat(29)).into_bytes());
    c.push(format!("set a 0 0 1{}\r\n", " x".repeat(18)).into_bytes());
    c.push(format!("incr a 1{}\r\n", " x".repeat(22)).into_bytes());
    c.push(format!("version{}\r\n", " x".repeat(30)).into_bytes());
    c.push(format!("stats reset{}\r\n", " x".repeat(30)).into_bytes());
    c.push([&[b'x'; 2048][..], b"\r\n"].concat());
    // Lines over 2048 bytes read whole are served, up to the 16 KiB buffer.
    c.push([&[b'x'; 2049][..], b"\r\n"].concat());
    c.push([&b"delete a"[..], &[b' '; 3000], b"\r\n"].concat());
    for text in [2100, 16382, 16383] {
        let mut line = b"mg a v".to_vec();
        line.resize(text, b' ');
        line.extend(b"\r\n");
        c.push(line);
    }
    // Item size threshold at the default -I 1m, key "b", flags 0 and 1.
    for (flags, fits) in [(0, 1048516), (1, 1048512)] {
        for len in [fits, fits + 1] {
            let mut input = format!("set b {flags} 0 {len}\r\n").into_bytes();
            input.resize(input.len() + len, b'x');
            input.extend(b"\r\n");
            c.push(input);
        }
    }
    c.extend(meta_cases());
    let mut big = b"set b 0 0 2000000 noreply\r\n".to_vec();
    big.resize(big.len() + 2_000_000, b'x');
    big.extend(b"\r\n");
    c.push(big);
    c
}

/// Meta commands on an empty cache: every error path, and requests whose
/// reply does not depend on stored items.
fn meta_cases() -> Vec<Vec<u8>> {
    let k250 = "k".repeat(250);
    let k251 = "k".repeat(251);
    let mut c: Vec<Vec<u8>> = [
        "mn\r\n",
        "mn x y\r\n",
        "mz\r\n",
        "mx a\r\n",
        "mgx a\r\n",
        "mg\r\n",
        "mg \r\n",
        "mg a\r\n",
        "mg a v\r\n",
        "mg a q\r\nmn\r\n",
        "mg a v f t c s k O123 q u\r\n",
        "mg a k O1\r\n",
        "mg a O1 k\r\n",
        "mg a vv kk\r\n",
        "mg a v v\r\n",
        "mg a X\r\n",
        "mg a E5\r\n",
        "mg a \x7f\r\n",
        "mg a \u{e9}x\r\n",
        "mg a T\r\n",
        "mg a Tx\r\n",
        "mg a Tx X\r\n",
        "mg a X Tx\r\n",
        "mg a Tx Jx\r\n",
        "mg a Jx Tx\r\n",
        "mg a Fx\r\n",
        "mg a Tx Fx\r\n",
        "mg a Cx\r\n",
        "mg a Dx\r\n",
        "mg a M\r\n",
        "mg a MEE\r\n",
        "mg a Mx C5 D9 J1 I F1 T0 u\r\n",
        "mg a T30 t\r\n",
        "mg a O12345678901234567890123456789012\r\n",
        "mg a O1234567890123456789012345678901\r\n",
        "mg a q O12345678901234567890123456789012\r\n",
        "mg a 1 2 3 4 5 6 7 8 9 0 A B G H K L Q\r\n",
        "mg a 1 2 3 4 5 6 7 8 9 0 A B G H K L Q W\r\n",
        "mg YWJj b k v\r\n",
        "mg YW=j b k\r\n",
        "mg YWJjZA=x b k O1\r\n",
        "mg YWI b k\r\n",
        "mg YW*j b\r\n",
        "mg ==== b\r\n",
        "mg YWJj b b\r\n",
        "md\r\n",
        "md a\r\n",
        "md a q\r\n",
        "md a k O1 q\r\n",
        "md a C5\r\n",
        "md a x\r\n",
        "md a Cx\r\n",
        "md a q q\r\n",
        "md a 1 2\r\n",
        "md a T5 O9\r\n",
        "md a O12345678901234567890123456789012\r\n",
        "md a 1 2 3 4 5 6 7 8 9 0 A B G H K L Q W\r\n",
        "md YWJj b k\r\n",
        "md YWI b k\r\n",
        "ma\r\n",
        "ma a\r\n",
        "ma a q\r\n",
        "ma a v t c k O1\r\n",
        "ma a MD D5 q\r\n",
        "ma a Mi\r\n",
        "ma a Mx\r\n",
        "ma a M++\r\n",
        "ma a D\r\n",
        "ma a Dx\r\n",
        "ma a J\r\n",
        "ma a D18446744073709551616\r\n",
        "ma a X\r\n",
        "ma a 5\r\n",
        "ma a Mx X\r\n",
        "ma a 1 2 3 4 5 6 7 8 9 0 A B G H K L Q W\r\n",
        "ma YWJj b k\r\n",
        "ms\r\n",
        "ms a\r\nhi\r\n",
        "ms a 2\r\nhi\r\n",
        "ms a 2 q\r\nhi\r\nmn\r\n",
        "ms a 2 T0 F5 k O1 b\r\nhi\r\n",
        "ms YWJj 2 T0 F5 k O1 b\r\nhi\r\n",
        "ms a 2 k O1 s\r\nhi\r\n",
        "ms a 0\r\n\r\n",
        "ms a 2 ME\r\nhi\r\n",
        "ms a 2 MR k\r\nhi\r\n",
        "ms a 2 MA\r\nhi\r\n",
        "ms a 2 MP q\r\nhi\r\n",
        "ms a 2 MS q\r\nhi\r\n",
        "ms a 2 C5 O2\r\nhi\r\n",
        "ms a 2 MR C5\r\nhi\r\n",
        "ms a 2 ME C5\r\nhi\r\n",
        "ms a 2 MA C5\r\nhi\r\n",
        "ms a 2 I\r\nhi\r\n",
        "ms a 2 Ma\r\nhi\r\n",
        "ms a 2 Mx\r\nhi\r\n",
        "ms a 2 MEE\r\nhi\r\n",
        "ms a 2 M\r\nhi\r\n",
        "ms a 2 MS MS\r\nhi\r\n",
        "ms a 2 X\r\nhi\r\n",
        "ms a 2 X\r\nmn\r\n",
        "ms a 2 E5\r\nhi\r\n",
        "ms a 2 S\r\nhi\r\n",
        "ms a 2 F\r\nhi\r\n",
        "ms a 2 Fx\r\nhi\r\n",
        "ms a 2 F-1\r\nhi\r\n",
        "ms a 2 F4294967296\r\nhi\r\n",
        "ms a 2 T\r\nhi\r\n",
        "ms a 2 Tx q\r\nhi\r\n",
        "ms a 2 C\r\nhi\r\n",
        "ms a 2 Mx O12345678901234567890123456789012\r\nhi\r\n",
        "ms a 2 O12345678901234567890123456789012\r\nhi\r\n",
        "ms a x\r\nhi\r\n",
        "ms a -1\r\nhi\r\n",
        "ms a 2\r\nhiXX\r\n",
        "ms a 2 q\r\nhiXX\r\n",
        "ms a 2 1 2 3 4 5 6 7 8 9 0 A B G H K L\r\nhi\r\n",
        "ms a 2 1 2 3 4 5 6 7 8 9 0 A B G H K\r\nhi\r\n",
        "ms YWI 2 b\r\nhi\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    for prefix in ["mg ", "md ", "ma "] {
        c.push(format!("{prefix}{k250}\r\n").into_bytes());
        c.push(format!("{prefix}{k251}\r\n").into_bytes());
        c.push(format!("{prefix}{k251} q\r\n").into_bytes());
    }
    c.push(format!("ms {k250} 1\r\nx\r\n").into_bytes());
    c.push(format!("ms {k251} 1\r\nx\r\n").into_bytes());
    // Item size threshold, as for set.
    for (flags, fits) in [(0, 1048516), (1, 1048512)] {
        for len in [fits, fits + 1] {
            let mut input = format!("ms b {len} F{flags}\r\n").into_bytes();
            input.resize(input.len() + len, b'x');
            input.extend(b"\r\n");
            c.push(input);
        }
    }
    let mut big = b"ms b 2000000 X\r\n".to_vec();
    big.resize(big.len() + 2_000_000, b'x');
    big.extend(b"\r\nmn\r\n");
    c.push(big);
    c
}

/// Inputs over 2048 bytes without `\n` go out in pieces with pauses, so
/// memcached sees them trickle in (its verdict depends on what one read
/// returns: `expected` asks `unterminated_line_closes` after each piece).
fn trickled_cases() -> Vec<Vec<u8>> {
    let keys: Vec<u8> = (0..400)
        .flat_map(|i| format!(" key{i:05}").into_bytes())
        .collect();
    vec![
        [&b"set a 0 0 1"[..], &[b' '; 3000]].concat(),
        [&b"mg a v"[..], &[b' '; 3100], b"\r\n"].concat(),
        [&b"mg a v"[..], &[b' '; 1500], b"\r\n"].concat(),
        [&b"gat 0"[..], &keys[..], b"\r\n"].concat(),
        [&b"get"[..], &keys[..], b"\r\n"].concat(),
        [&b"gets"[..], &keys[..], b"\r\n"].concat(),
        [&[b' '; 100][..], b"get", &keys[..], b"\r\n"].concat(),
        [&[b' '; 101][..], b"get", &keys[..], b"\r\n"].concat(),
        [&b"getx"[..], &keys[..], b"\r\n"].concat(),
        vec![b'x'; 2049],
    ]
}

/// Reply bytes and whether the server closed, reading until the sentinel's
/// reply (and at least `want_len` bytes, as `version` may be in the input
/// too) or the end of the connection.
fn talk(server: &Memcached, input: &[u8], trickle: bool, want_len: usize) -> (Vec<u8>, bool) {
    let mut conn = server.connect();
    conn.write_all(b"flush_all\r\n").unwrap();
    let mut ok = [0u8; 4];
    conn.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"OK\r\n");
    if trickle {
        for piece in input.chunks(TRICKLE_PIECE) {
            if conn.write_all(piece).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    } else {
        conn.write_all(input).unwrap();
    }
    let _ = conn.write_all(SENTINEL);
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if out.ends_with(SENTINEL_REPLY) && out.len() >= want_len {
            return (out, false);
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return (out, true),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
}

fn expected(input: &[u8], trickle: bool) -> (Vec<u8>, bool) {
    if trickle {
        // memcached judges what each piece leaves in its buffer.
        let ends = (TRICKLE_PIECE..input.len()).step_by(TRICKLE_PIECE);
        for end in ends.chain([input.len()]) {
            let (events, left) = run(&input[..end], &ParseLimits::default());
            let stalled = usize::try_from(left).is_ok_and(|left| {
                left > 0
                    && unterminated_line_closes(&input[end - left..end], &ParseLimits::default())
            });
            if stalled || matches!(events.last(), Some(Event::Close)) {
                return (Vec::new(), true);
            }
        }
    }
    let whole = [input, SENTINEL].concat();
    let (events, left) = run(&whole, &ParseLimits::default());
    let (mut bytes, closed) = render_on_empty_cache(&events);
    if !closed {
        assert_eq!(left, 0, "input left unparsed: {:?}", show(input));
        assert!(bytes.ends_with(SENTINEL_REPLY));
    }
    if closed {
        // memcached drops replies still queued when it hangs up.
        bytes.clear();
    }
    (bytes, closed)
}

fn show(input: &[u8]) -> String {
    let s = String::from_utf8_lossy(&input[..input.len().min(80)]).into_owned();
    format!("{s:?} ({} bytes)", input.len())
}

#[test]
fn parser_agrees_with_memcached() {
    let Some(server) = Memcached::start(&[]) else {
        return;
    };
    let mut failures = Vec::new();
    let all = cases()
        .into_iter()
        .map(|c| (c, false))
        .chain(trickled_cases().into_iter().map(|c| (c, true)));
    let mut count = 0;
    for (input, trickle) in all {
        count += 1;
        let (want, want_closed) = expected(&input, trickle);
        let (got, got_closed) = talk(&server, &input, trickle, want.len());
        let got_shown = if got_closed { Vec::new() } else { got.clone() };
        if got_shown != want || got_closed != want_closed {
            failures.push(format!(
                "{}\n  memcached: {:?} closed={got_closed}\n  parser:    {:?} closed={want_closed}",
                show(&input),
                String::from_utf8_lossy(&got[..got.len().min(200)]),
                String::from_utf8_lossy(&want[..want.len().min(200)]),
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Refused stores and the key memcached drops: (key stored first, line).
/// The line's data block is sent when the parser swallows one.
fn stale_key_cases() -> Vec<(&'static [u8], &'static [u8])> {
    vec![
        (b"sk", b"set sk 0 0 1048577\r\n"),
        (b"sk", b"set sk 0 0 1048577 noreply\r\n"),
        (b"sk", b"set sk 0 0 1048577 junk\r\n"),
        (b"sk", b"set sk 0 -1 1048577\r\n"),
        (b"sk", b"set sk 4294967296 0 1048577\r\n"),
        (b"sk", b"set sk 1 0 1048513\r\n"),
        (b"sk", b"set sk 0 0 2000000 noreply junk\r\n"),
        (b"sk", b"set sk 0 0 2147483646\r\n"),
        (b"sk", b"set sk 0 0 -1\r\n"),
        (b"sk", b"set sk 0 abc 1048577\r\n"),
        (b"sk", b"add sk 0 0 1048577\r\n"),
        (b"sk", b"replace sk 0 0 1048577\r\n"),
        (b"sk", b"append sk 0 0 1048577\r\n"),
        (b"sk", b"prepend sk 0 0 1048577\r\n"),
        (b"sk", b"cas sk 0 0 1048577 1\r\n"),
        (b"key", b"set key\r 0 0 1048577\r\n"),
        (b"key\r", b"set key\r 0 0 1048577\r\n"),
        (b"sk", b"ms sk 1048577\r\n"),
        (b"sk", b"ms sk 1048577 q ME\r\n"),
        (b"sk", b"ms sk 1048577 MA\r\n"),
        (b"sk", b"ms sk 1048577 MR C1\r\n"),
        (b"sk", b"ms sk 1048577 I C1\r\n"),
        (b"sk", b"ms sk 1048577 MX\r\n"),
        (b"sk", b"ms sk 1048577 S5\r\n"),
        (b"sk", b"ms sk 1048577 b\r\n"),
        (b"sk", b"ms c2s= 1048577 b\r\n"),
        (b"sk", b"ms sk 2147483646\r\n"),
    ]
}

#[test]
fn stale_keys_agree_with_memcached() {
    use memshift_protocol::memcache::{base64, parse_request, Parsed, ProtocolError};
    let Some(server) = Memcached::start(&[]) else {
        return;
    };
    let limits = ParseLimits::default();
    let mut failures = Vec::new();
    for (key, line) in stale_key_cases() {
        let Parsed::Invalid(ProtocolError::Reply { skip, delete, .. }) =
            parse_request(line, &limits)
        else {
            panic!("{}: not refused", show(line));
        };
        let deleted = delete.and_then(|d| {
            if d.base64 {
                base64::decode(d.key)
            } else {
                Some(d.key.to_vec())
            }
        });
        let want_deleted = deleted.as_deref() == Some(key);
        let mut input = [b"set ", key, b" 0 0 1\r\na\r\n", line].concat();
        if skip > line.len() {
            input.resize(input.len() + skip - line.len() - 2, b'x');
            input.extend(b"\r\n");
        }
        input.extend([b"get ", key, b"\r\n"].concat());
        let (got, _) = talk(&server, &input, false, 0);
        let got_deleted = !got.windows(6).any(|w| w == b"VALUE ");
        if got_deleted != want_deleted {
            failures.push(format!(
                "{} (key {:?}): memcached deleted={got_deleted}, parser says {want_deleted}",
                show(line),
                String::from_utf8_lossy(key)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
