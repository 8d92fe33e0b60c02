//! A memccapable-style capability suite for the meta commands (libmemcached's
//! `memccapable` has no meta tests): named checks of what meta clients rely
//! on, each run against a real memcached 1.6.18 and against memshift. Every
//! check must pass against memcached (so the checks are right) and then
//! against memshift. Unlike the differential test, checks assert meaning
//! (a CAS read with `c` works in `C`, a quiet pipeline answers only the
//! hits), not bytes.

use memshift_tests::{require_tools, Cluster, McClient, Memcached};

/// Sends `request` + `mn`; the reply units before `MN`, as text.
fn ask(c: &mut McClient, request: &str) -> Result<Vec<String>, String> {
    c.send(format!("{request}mn\r\n").as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut out = Vec::new();
    loop {
        let unit = c.read_unit().map_err(|e| format!("read: {e}"))?;
        if unit.is_line(b"MN\r\n") {
            return Ok(out);
        }
        // A `VA <len> <flags>\r\n<data>\r\n` is one string.
        out.push(String::from_utf8_lossy(&unit.raw()).into_owned());
        if out.len() > 10_000 {
            return Err("no MN after 10000 replies".into());
        }
    }
}

fn expect(got: Vec<String>, want: &[&str], what: &str) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: want {want:?}, got {got:?}"))
    }
}

/// The value of flag `letter` in a meta reply (its first line).
fn flag(reply: &str, letter: char) -> Option<String> {
    reply
        .split("\r\n")
        .next()?
        .split(' ')
        .skip(1)
        .find_map(|t| t.strip_prefix(letter).map(str::to_string))
}

type Check = fn(&mut McClient) -> Result<(), String>;

const CHECKS: &[(&str, Check)] = &[
    ("meta noop", |c| expect(ask(c, "")?, &[], "mn alone")),
    ("meta set get", |c| {
        expect(ask(c, "ms cap:a 5 F3 T0\r\nhello\r\n")?, &["HD\r\n"], "ms")?;
        expect(
            ask(c, "mg cap:a v f s\r\n")?,
            &["VA 5 f3 s5\r\nhello\r\n"],
            "mg",
        )?;
        expect(ask(c, "mg cap:a\r\n")?, &["HD\r\n"], "mg without flags")
    }),
    ("meta get miss", |c| {
        expect(ask(c, "mg cap:none v\r\n")?, &["EN\r\n"], "miss")?;
        expect(ask(c, "mg cap:none v q\r\n")?, &[], "quiet miss")
    }),
    ("meta quiet pipeline", |c| {
        ask(c, "ms cap:p1 1 q\r\n1\r\nms cap:p3 1 q\r\n3\r\n")?;
        expect(
            ask(
                c,
                "mg cap:p1 v q k\r\nmg cap:p2 v q k\r\nmg cap:p3 v q k\r\n",
            )?,
            &["VA 1 kcap:p1\r\n1\r\n", "VA 1 kcap:p3\r\n3\r\n"],
            "only hits answered",
        )
    }),
    ("meta opaque", |c| {
        expect(
            ask(c, "mg cap:none O42 k q\r\nmg cap:none O43 k\r\n")?,
            &["EN O43 kcap:none\r\n"],
            "opaque and key echoed",
        )
    }),
    ("meta cas", |c| {
        let set = ask(c, "ms cap:c 1 c\r\nx\r\n")?;
        let cas = set.first().and_then(|l| flag(l, 'c')).ok_or("no c")?;
        let got = ask(c, "mg cap:c c\r\n")?;
        if got.first().and_then(|l| flag(l, 'c')).as_deref() != Some(cas.as_str()) {
            return Err(format!("mg c {got:?} is not the ms c {cas}"));
        }
        expect(
            ask(c, &format!("ms cap:c 1 C{cas}\r\ny\r\n"))?,
            &["HD\r\n"],
            "cas match",
        )?;
        expect(
            ask(c, &format!("ms cap:c 1 C{cas}\r\nz\r\n"))?,
            &["EX\r\n"],
            "stale cas",
        )?;
        expect(ask(c, "ms cap:nc 1 C1\r\nz\r\n")?, &["NF\r\n"], "cas miss")
    }),
    ("meta modes", |c| {
        expect(
            ask(c, "ms cap:m 1 MR\r\nx\r\n")?,
            &["NS\r\n"],
            "replace miss",
        )?;
        expect(ask(c, "ms cap:m 1 ME\r\nb\r\n")?, &["HD\r\n"], "add")?;
        expect(ask(c, "ms cap:m 1 ME\r\nx\r\n")?, &["NS\r\n"], "add exists")?;
        expect(ask(c, "ms cap:m 1 MA\r\nc\r\n")?, &["HD\r\n"], "append")?;
        expect(ask(c, "ms cap:m 1 MP\r\na\r\n")?, &["HD\r\n"], "prepend")?;
        expect(ask(c, "mg cap:m v\r\n")?, &["VA 3\r\nabc\r\n"], "result")
    }),
    ("meta delete", |c| {
        ask(c, "ms cap:d 1 c\r\nx\r\n")?;
        expect(ask(c, "md cap:d C1\r\n")?, &["EX\r\n"], "delete stale cas")?;
        expect(ask(c, "md cap:d q\r\n")?, &[], "quiet delete")?;
        expect(ask(c, "md cap:d\r\n")?, &["NF\r\n"], "delete miss")
    }),
    ("meta arithmetic", |c| {
        expect(ask(c, "ma cap:n\r\n")?, &["NF\r\n"], "miss")?;
        expect(
            ask(c, "ma cap:n N0 J10 v\r\n")?,
            &["VA 2\r\n10\r\n"],
            "create",
        )?;
        expect(ask(c, "ma cap:n D5 v\r\n")?, &["VA 2\r\n15\r\n"], "incr")?;
        expect(
            ask(c, "ma cap:n MD D20 v\r\n")?,
            &["VA 1\r\n0\r\n"],
            "decr floor",
        )?;
        expect(ask(c, "ma cap:n q\r\n")?, &[], "quiet incr")?;
        // The shorter number is written in place, padded with a space.
        expect(ask(c, "mg cap:n v\r\n")?, &["VA 2\r\n1 \r\n"], "value")
    }),
    ("meta ttl", |c| {
        ask(c, "ms cap:t 1\r\nx\r\n")?;
        expect(ask(c, "mg cap:t t\r\n")?, &["HD t-1\r\n"], "no ttl")?;
        expect(ask(c, "mg cap:t T100 t\r\n")?, &["HD t100\r\n"], "touch")?;
        let got = ask(c, "mg cap:t t v\r\n")?;
        let t: i64 = got
            .first()
            .and_then(|l| flag(l, 't'))
            .and_then(|t| t.parse().ok())
            .ok_or(format!("no t in {got:?}"))?;
        if !(98..=100).contains(&t) {
            return Err(format!("ttl {t} after T100"));
        }
        expect(ask(c, "mg cap:t T-1\r\n")?, &["HD\r\n"], "expire")?;
        expect(ask(c, "mg cap:t\r\n")?, &["EN\r\n"], "expired")
    }),
    ("meta base64 key", |c| {
        // "a b\r" as a key: only possible through base64.
        expect(ask(c, "ms YSBiDQ== 1 b\r\nx\r\n")?, &["HD\r\n"], "ms")?;
        expect(
            ask(c, "mg YSBiDQ== b v k\r\n")?,
            &["VA 1 kYSBiDQ== b\r\nx\r\n"],
            "mg",
        )
    }),
    ("meta and classic commands share items", |c| {
        c.send(b"set cap:x 7 0 3\r\nabc\r\n")
            .map_err(|e| e.to_string())?;
        c.read_unit().map_err(|e| e.to_string())?;
        expect(
            ask(c, "mg cap:x v f\r\n")?,
            &["VA 3 f7\r\nabc\r\n"],
            "mg of set",
        )?;
        ask(c, "ms cap:y 2 F9\r\n10\r\n")?;
        let got = c
            .request_str(b"incr cap:y 5\r\n")
            .map_err(|e| e.to_string())?;
        if got != "15\r\n" {
            return Err(format!("incr of ms: {got:?}"));
        }
        expect(
            ask(c, "mg cap:y v f\r\n")?,
            &["VA 2 f9\r\n15\r\n"],
            "mg after incr",
        )
    }),
    ("meta large value", |c| {
        let data = "v".repeat(500_000);
        expect(
            ask(c, &format!("ms cap:big {} T0\r\n{data}\r\n", data.len()))?,
            &["HD\r\n"],
            "ms",
        )?;
        let got = ask(c, "mg cap:big v s\r\n")?;
        let want = format!("VA 500000 s500000\r\n{data}\r\n");
        if got != [want] {
            return Err("mg of a 500 KB value differs".into());
        }
        Ok(())
    }),
    ("meta errors", |c| {
        expect(
            ask(c, "mg cap:e v v\r\nma cap:e Mx\r\nms cap:e 1 X\r\nZ\r\n")?,
            &[
                "CLIENT_ERROR duplicate flag\r\n",
                "CLIENT_ERROR invalid mode for ma M token\r\n",
                "CLIENT_ERROR invalid flag\r\n",
            ],
            "errors, data swallowed",
        )
    }),
];

fn run_all(addr: &str) -> Vec<(&'static str, Result<(), String>)> {
    CHECKS
        .iter()
        .map(|(name, check)| {
            let mut c = McClient::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
            (*name, check(&mut c))
        })
        .collect()
}

#[test]
fn meta_capable() {
    if !require_tools("meta_capable", &["memcached", "redis-server"]) {
        return;
    }
    let reference = Memcached::start();
    let failed: Vec<String> = run_all(&reference.addr())
        .into_iter()
        .filter_map(|(name, r)| r.err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "checks that fail against memcached itself:\n  {}",
        failed.join("\n  ")
    );
    drop(reference);
    let cluster = Cluster::start();
    let failed: Vec<String> = run_all(cluster.addr())
        .into_iter()
        .filter_map(|(name, r)| r.err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "meta checks that pass against memcached but not against memshift:\n  {}",
        failed.join("\n  ")
    );
}
