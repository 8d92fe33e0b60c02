//! Meta commands in the migration phases: where memcached is a key's
//! primary the request is forwarded and memcached's own reply comes back
//! (with `q` applied by memshift); the shadow gets the resulting item when a
//! meta write's result is known (ms set/add/replace, mg T), a delete when it
//! is not (ms append/prepend, ma, md).

use memshift_tests::migration_support::{MigrationOptions, MigrationSetup};
use memshift_tests::McClient;

use super::*;

/// Sends `request` and a `mn`, returns everything answered before the `MN`.
fn meta(c: &mut McClient, request: &str) -> String {
    c.send(format!("{request}mn\r\n").as_bytes())
        .expect("send meta request");
    let mut out = Vec::new();
    loop {
        let unit = c.read_unit().expect("meta reply");
        if unit.is_line(b"MN\r\n") {
            return String::from_utf8_lossy(&out).into_owned();
        }
        out.extend_from_slice(&unit.raw());
    }
}

fn run(phase: &str, primary: Side, shadow: Option<Side>) {
    let setup = MigrationSetup::start(MigrationOptions {
        phase: phase.into(),
        ..MigrationOptions::default()
    });
    let s = &setup;
    let what = |step: &str| format!("phase {phase}: {step}");
    let both = |key: &str, want: &Want, step: &str| {
        assert_state(s, primary, key, want, &what(step));
        if let Some(shadow) = shadow {
            wait_state(s, shadow, key, want, &what(step));
        }
    };
    let gone_from_shadow = |key: &str, step: &str| {
        if let Some(shadow) = shadow {
            wait_absent(s, shadow, key, &what(step));
        }
    };
    let mut c = setup.client();
    let k = |b: &str| format!("meta:{phase}:{b}");

    // ms: the item as written, on both sides; q hides HD.
    let key = k("set");
    assert_eq!(
        meta(&mut c, &format!("ms {key} 4 F5 T300 q\r\ndata\r\n")),
        ""
    );
    both(&key, &Want::new("data", 5, 300), "ms");
    assert_eq!(
        meta(&mut c, &format!("mg {key} v f k O7\r\n")),
        format!("VA 4 f5 k{key} O7\r\ndata\r\n"),
        "{}",
        what("mg")
    );
    assert_eq!(meta(&mut c, &format!("ms {key} 1 ME\r\nx\r\n")), "NS\r\n");
    assert_eq!(
        meta(&mut c, &format!("ms {key} 3 MR F6\r\nnew\r\n")),
        "HD\r\n"
    );
    both(&key, &Want::new("new", 6, -1), "ms MR");

    // mg T: the new TTL reaches the shadow; a miss is hidden by q.
    assert_eq!(meta(&mut c, &format!("mg {key} T600\r\n")), "HD\r\n");
    both(&key, &Want::new("new", 6, 600), "mg T");
    assert_eq!(meta(&mut c, &format!("mg {} v q\r\n", k("none"))), "");

    // ms MA: the result is not known here, the shadow loses the key.
    assert_eq!(meta(&mut c, &format!("ms {key} 2 MA\r\n++\r\n")), "HD\r\n");
    assert_state(
        s,
        primary,
        &key,
        &Want::new("new++", 6, 600),
        &what("ms MA"),
    );
    gone_from_shadow(&key, "ms MA");

    // ma: counted on the primary, deleted on the shadow.
    let ctr = k("ctr");
    assert_eq!(
        meta(&mut c, &format!("ma {ctr} N0 J10 v\r\n")),
        "VA 2\r\n10\r\n"
    );
    assert_eq!(
        meta(&mut c, &format!("ma {ctr} D5 v\r\n")),
        "VA 2\r\n15\r\n"
    );
    assert_eq!(meta(&mut c, &format!("ma {ctr} q\r\n")), "");
    assert_state(s, primary, &ctr, &Want::new("16", 0, -1), &what("ma"));
    gone_from_shadow(&ctr, "ma");
    assert_eq!(meta(&mut c, &format!("ma {} q\r\n", k("none"))), "NF\r\n");

    // md: gone on both sides; NF is not hidden by q.
    let del = k("del");
    assert_eq!(meta(&mut c, &format!("ms {del} 1\r\nx\r\n")), "HD\r\n");
    both(&del, &Want::new("x", 0, -1), "ms before md");
    assert_eq!(meta(&mut c, &format!("md {del} q\r\n")), "");
    assert!(state(s, primary, &del).is_none(), "{}", what("md"));
    gone_from_shadow(&del, "md");
    assert_eq!(
        meta(&mut c, &format!("md {del} q k\r\n")),
        format!("NF k{del}\r\n")
    );

    // Errors are the parser's, whatever the phase.
    assert_eq!(
        meta(&mut c, &format!("mg {key} X\r\n")),
        "CLIENT_ERROR invalid flag\r\n"
    );
}

#[test]
fn meta_commands_in_phase_memcached() {
    if !tools("meta_commands_in_phase_memcached") {
        return;
    }
    run("memcached", Side::Memcached, None);
}

#[test]
fn meta_commands_in_phase_warmup() {
    if !tools("meta_commands_in_phase_warmup") {
        return;
    }
    run("warmup", Side::Memcached, Some(Side::Redis));
}

#[test]
fn meta_commands_in_phase_cutover() {
    if !tools("meta_commands_in_phase_cutover") {
        return;
    }
    run("cutover", Side::Redis, Some(Side::Memcached));
}
