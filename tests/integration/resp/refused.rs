//! Commands memshift cannot serve over a ring answer `-ERR ... not
//! supported by memshift: <why>` at once, even with every shard stopped;
//! a RESP listener with `resp_password` is no open door.

use std::time::{Duration, Instant};

use memshift_tests::{require_tools, send_and_read, send_and_read_reply, RespCluster};

fn request(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Send `req` and read one reply line (the peer closing ends it too).
fn one_line(conn: &mut std::net::TcpStream, req: &[u8]) -> (Vec<u8>, bool) {
    use std::io::{Read, Write};
    conn.write_all(req).expect("write");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    while !out.ends_with(b"\r\n") {
        match conn.read(&mut byte) {
            Ok(0) | Err(_) => return (out, true),
            Ok(_) => out.push(byte[0]),
        }
    }
    (out, false)
}

#[test]
fn unsupported_commands_are_refused_at_once() {
    if !require_tools(
        "unsupported_commands_are_refused_at_once",
        &["redis-server"],
    ) {
        return;
    }
    let cluster = RespCluster::start();
    // No backend can answer: a refusal must not wait for one.
    for s in &cluster.shards {
        s.signal(libc::SIGSTOP);
    }
    let refused: &[&[&str]] = &[
        &["WAIT", "1", "0"],
        &["CLUSTER", "INFO"],
        &["CONFIG", "SET", "maxmemory", "0"],
        &["DUMP", "a"],
        &["MOVE", "a", "1"],
        &["SCRIPT", "FLUSH"],
        &["COMMAND", "GETKEYS", "GET", "a"],
        &["SINTER", "a", "b"],
        &["RENAME", "a", "b"],
        &["SETBIT", "a", "1", "1"],
        &["SELECT", "1"],
        &["CLIENT", "LIST"],
        &["CLIENT", "TRACKING", "on"],
        &["EVAL", "return 1", "0"],
        &["EVAL", "return 1", "2", "a", "b"],
    ];
    let mut conn = cluster.raw();
    for args in refused {
        let started = Instant::now();
        let (reply, closed) = one_line(&mut conn, &request(args));
        let text = String::from_utf8_lossy(&reply).into_owned();
        assert!(
            text.starts_with("-ERR ")
                && text.contains("not supported by memshift: ")
                && text.ends_with("\r\n")
                && text.matches("\r\n").count() == 1,
            "{args:?}: {text:?}"
        );
        assert!(!closed, "{args:?} closed the connection");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
    // Answered locally, too: connection commands.
    for (args, want) in [
        (&["PING"][..], &b"+PONG\r\n"[..]),
        (&["ECHO", "x"], b"$1\r\nx\r\n"),
        (&["SELECT", "0"], b"+OK\r\n"),
        (&["INFO", "nosuch"], b"$0\r\n\r\n"),
        (&["CLIENT", "SETNAME", "me"], b"+OK\r\n"),
        (&["CLIENT", "GETNAME"], b"$2\r\nme\r\n"),
        (&["CLIENT", "SETINFO", "LIB-NAME", "x"], b"+OK\r\n"),
        (
            &["NOSUCH", "a"],
            b"-ERR unknown command 'NOSUCH', with args beginning with: 'a' \r\n",
        ),
    ] {
        let (reply, _) = send_and_read(&mut conn, &request(args), Duration::from_millis(500));
        assert_eq!(
            String::from_utf8_lossy(&reply),
            String::from_utf8_lossy(want),
            "{args:?}"
        );
    }
    for s in &cluster.shards {
        s.signal(libc::SIGCONT);
    }
    // MSETNX over keys on different shards is refused (all-or-nothing).
    let mut args = vec!["MSETNX".to_owned()];
    for i in 0..20 {
        args.push(format!("msetnx:{i}"));
        args.push("v".to_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (reply, _) = send_and_read(&mut conn, &request(&args), Duration::from_secs(10));
    assert!(
        String::from_utf8_lossy(&reply).starts_with("-ERR MSETNX is not supported by memshift"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
}

#[test]
fn resp_password_is_required() {
    if !require_tools("resp_password_is_required", &["redis-server"]) {
        return;
    }
    let cluster = RespCluster::start_with(3, "resp_password = \"s3cret\"\n");
    let exchange = |conn: &mut std::net::TcpStream, args: &[&str]| {
        let (reply, closed) = send_and_read_reply(conn, &request(args), Duration::from_secs(10));
        (String::from_utf8_lossy(&reply).into_owned(), closed)
    };
    let mut c = cluster.raw();
    assert_eq!(
        exchange(&mut c, &["GET", "a"]).0,
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        exchange(&mut c, &["AUTH", "wrong"]).0,
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        exchange(&mut c, &["HELLO", "3", "AUTH", "default", "wrong"]).0,
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert!(exchange(&mut c, &["HELLO", "3"])
        .0
        .starts_with("-NOAUTH HELLO must be called"));
    let (hello, _) = exchange(&mut c, &["HELLO", "3", "AUTH", "default", "s3cret"]);
    assert!(hello.starts_with("%7\r\n$6\r\nserver\r\n"), "{hello:?}");
    assert_eq!(exchange(&mut c, &["SET", "a", "1"]).0, "+OK\r\n");
    assert_eq!(exchange(&mut c, &["GET", "a"]).0, "$1\r\n1\r\n");
    // RESP3 null after HELLO 3.
    assert_eq!(exchange(&mut c, &["GET", "nope"]).0, "_\r\n");

    let mut c = cluster.raw();
    assert_eq!(exchange(&mut c, &["AUTH", "s3cret"]).0, "+OK\r\n");
    assert_eq!(exchange(&mut c, &["GET", "a"]).0, "$1\r\n1\r\n");

    // Before AUTH, Redis' tight limits: no large request from a stranger.
    let mut c = cluster.raw();
    let (reply, closed) = send_and_read(&mut c, b"*11\r\n", Duration::from_secs(5));
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
    assert!(closed);
    let mut c = cluster.raw();
    let (reply, closed) = send_and_read(
        &mut c,
        b"*2\r\n$3\r\nGET\r\n$16385\r\n",
        Duration::from_secs(5),
    );
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "-ERR Protocol error: unauthenticated bulk length\r\n"
    );
    assert!(closed);
}
