//! Request parser behaviour, case by case.
//!
//! Every error reply, silence and close asserted here was observed from a
//! live memcached 1.6.18 (`memcached -u root -l 127.0.0.1 -p 22122 -U 0`)
//! with `tests/fixtures/memcache/probe.py`; the comment on each test says
//! what memcached did. `memcache_live.rs` replays many of the same inputs
//! against a running memcached when one is installed.

mod memcache_support;

use memcache_support::{complete, parse, rejected, run, Event};
use memshift_protocol::memcache::{
    base64, parse_request, reply, ArithCommand, MetaCommand, MetaFlags, MetaSetMode, ParseLimits,
    Parsed, ProtocolError, Request, RetrievalCommand, StatsGroup, StorageCommand, ITEM_OVERHEAD,
};
use memshift_protocol::memcache::{unterminated_line_closes, READ_BUFFER_SIZE};

const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
const BAD_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
const BAD_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
const DELETE_USAGE: &[u8] =
    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
const ERROR: &[u8] = b"ERROR\r\n";
const SILENT: &[u8] = b"";

fn assert_reply(input: &[u8], expected: &[u8]) {
    let (reply, skip) = rejected(input);
    assert_eq!(
        String::from_utf8_lossy(reply),
        String::from_utf8_lossy(expected),
        "reply to {input:?}"
    );
    let line_len = memchr::memchr(b'\n', input).unwrap() + 1;
    assert_eq!(skip, line_len, "skip for {input:?}");
}

fn assert_closes(input: &[u8]) {
    assert_eq!(
        parse(input),
        Parsed::Invalid(ProtocolError::Close { reply: b"" }),
        "{:?}",
        String::from_utf8_lossy(&input[..input.len().min(60)])
    );
}

/// The error replies of a whole stream (requests as their command name).
fn stream(input: &[u8]) -> Vec<String> {
    let (events, left) = run(input, &ParseLimits::default());
    let mut out: Vec<String> = events
        .into_iter()
        .map(|e| match e {
            Event::Request(r) => format!("<{}>", r.command_name()),
            Event::Reply(r) if r.is_empty() => "(silent)".to_string(),
            Event::Reply(r) => String::from_utf8_lossy(&r).trim_end().to_string(),
            Event::Close => "CLOSE".to_string(),
        })
        .collect();
    if left != 0 {
        out.push(format!("(left {left})"));
    }
    out
}

fn set<'a>(
    key: &'a [u8],
    flags: u32,
    exptime: i64,
    data: &'a [u8],
    noreply: bool,
) -> Request<&'a [u8]> {
    Request::Storage {
        command: StorageCommand::Set,
        key,
        flags,
        exptime,
        cas: 0,
        data,
        noreply,
    }
}

fn keys_of(request: &Request<&[u8]>) -> Vec<Vec<u8>> {
    match request {
        Request::Retrieval { keys, .. } => keys.iter().map(|k| k.to_vec()).collect(),
        other => panic!("not a retrieval: {other:?}"),
    }
}

// ---------------------------------------------------------------- happy paths

#[test]
fn get_and_gets_single_and_multi() {
    let r = complete(b"get foo\r\n");
    assert_eq!(r.command_name(), "get");
    assert_eq!(keys_of(&r), vec![b"foo".to_vec()]);
    let r = complete(b"gets a bb ccc\r\n");
    assert!(matches!(
        r,
        Request::Retrieval {
            command: RetrievalCommand::Gets,
            exptime: 0,
            ..
        }
    ));
    assert_eq!(
        keys_of(&r),
        vec![b"a".to_vec(), b"bb".to_vec(), b"ccc".to_vec()]
    );
    if let Request::Retrieval { keys, .. } = &r {
        assert_eq!(keys.len(), 3);
        assert_eq!(*keys.raw(), b"a bb ccc");
    }
}

#[test]
fn gat_and_gats_take_exptime_first() {
    let r = complete(b"gat 100 a nokey\r\n");
    assert!(matches!(
        r,
        Request::Retrieval {
            command: RetrievalCommand::Gat,
            exptime: 100,
            ..
        }
    ));
    assert_eq!(keys_of(&r), vec![b"a".to_vec(), b"nokey".to_vec()]);
    let r = complete(b"gats -1 a\r\n");
    assert!(matches!(
        r,
        Request::Retrieval {
            command: RetrievalCommand::Gats,
            exptime: -1,
            ..
        }
    ));
}

#[test]
fn bget_is_a_get() {
    // memcached 1.6.18: `bget a` answers like `get a`.
    assert!(matches!(
        complete(b"bget a\r\n"),
        Request::Retrieval {
            command: RetrievalCommand::Get,
            ..
        }
    ));
}

#[test]
fn storage_commands_with_and_without_noreply() {
    assert_eq!(
        complete(b"set a 5 0 3\r\nabc\r\n"),
        set(b"a", 5, 0, b"abc", false)
    );
    assert_eq!(
        complete(b"set a 5 0 3 noreply\r\nabc\r\n"),
        set(b"a", 5, 0, b"abc", true)
    );
    for (name, command) in [
        ("add", StorageCommand::Add),
        ("replace", StorageCommand::Replace),
        ("append", StorageCommand::Append),
        ("prepend", StorageCommand::Prepend),
    ] {
        for noreply in [false, true] {
            let input = format!(
                "{name} k 1 2 1{}\r\nx\r\n",
                if noreply { " noreply" } else { "" }
            );
            assert_eq!(
                complete(input.as_bytes()),
                Request::Storage {
                    command,
                    key: &b"k"[..],
                    flags: 1,
                    exptime: 2,
                    cas: 0,
                    data: &b"x"[..],
                    noreply,
                }
            );
        }
    }
    assert_eq!(
        complete(b"cas a 0 0 1 999999\r\nc\r\n"),
        Request::Storage {
            command: StorageCommand::Cas,
            key: &b"a"[..],
            flags: 0,
            exptime: 0,
            cas: 999999,
            data: &b"c"[..],
            noreply: false,
        }
    );
    assert!(complete(b"cas a 0 0 1 1 noreply\r\nc\r\n").noreply());
}

#[test]
fn zero_length_data() {
    // memcached 1.6.18: `set b 0 0 0\r\n\r\n` is STORED, get returns an empty value.
    assert_eq!(
        complete(b"set b 0 0 0\r\n\r\n"),
        set(b"b", 0, 0, b"", false)
    );
}

#[test]
fn data_may_contain_line_breaks() {
    assert_eq!(
        complete(b"set a 0 0 4\r\n\r\n\r\n\r\n"),
        set(b"a", 0, 0, b"\r\n\r\n", false)
    );
}

#[test]
fn incr_decr_touch_delete() {
    assert_eq!(
        complete(b"incr n 5\r\n"),
        Request::Arith {
            command: ArithCommand::Incr,
            key: &b"n"[..],
            delta: 5,
            noreply: false
        }
    );
    assert_eq!(
        complete(b"decr n 18446744073709551615 noreply\r\n"),
        Request::Arith {
            command: ArithCommand::Decr,
            key: &b"n"[..],
            delta: u64::MAX,
            noreply: true
        }
    );
    assert_eq!(
        complete(b"touch a 10\r\n"),
        Request::Touch {
            key: &b"a"[..],
            exptime: 10,
            noreply: false
        }
    );
    assert_eq!(
        complete(b"touch a 10 noreply\r\n"),
        Request::Touch {
            key: &b"a"[..],
            exptime: 10,
            noreply: true
        }
    );
    assert_eq!(
        complete(b"delete a\r\n"),
        Request::Delete {
            key: &b"a"[..],
            noreply: false
        }
    );
}

#[test]
fn delete_legacy_forms() {
    // memcached 1.6.18: `delete a 0` answers, `delete a noreply` and
    // `delete a 0 noreply` are silent.
    let del = |key: &'static [u8], noreply| Request::Delete { key, noreply };
    assert_eq!(complete(b"delete a 0\r\n"), del(b"a", false));
    assert_eq!(complete(b"delete a noreply\r\n"), del(b"a", true));
    assert_eq!(complete(b"delete a 0 noreply\r\n"), del(b"a", true));
    // A lone `noreply` is the key: `delete noreply` answers NOT_FOUND.
    assert_eq!(complete(b"delete noreply\r\n"), del(b"noreply", false));
}

#[test]
fn delete_with_other_times() {
    // memcached 1.6.18 answers the usage line to any other hold time ...
    assert_reply(b"delete a 1\r\n", DELETE_USAGE);
    assert_reply(b"delete a 0 0\r\n", DELETE_USAGE);
    // ... but says nothing when the line ends in noreply.
    assert_reply(b"delete a 1 noreply\r\n", SILENT);
    assert_reply(b"delete a noreply noreply\r\n", SILENT);
    // Too many or too few tokens: ERROR, even with noreply.
    assert_reply(b"delete a 0 noreply x\r\n", ERROR);
    assert_reply(b"delete\r\n", ERROR);
}

#[test]
fn flush_all_forms() {
    let flush = |delay, noreply| Request::FlushAll { delay, noreply };
    assert_eq!(complete(b"flush_all\r\n"), flush(0, false));
    assert_eq!(complete(b"flush_all 0\r\n"), flush(0, false));
    assert_eq!(complete(b"flush_all 10\r\n"), flush(10, false));
    assert_eq!(complete(b"flush_all noreply\r\n"), flush(0, true));
    assert_eq!(complete(b"flush_all 0 noreply\r\n"), flush(0, true));
    // memcached 1.6.18: negative delay is OK (flushes now).
    assert_eq!(complete(b"flush_all -1\r\n"), flush(-1, false));
    // memcached 1.6.18: a second token other than noreply is ignored: OK.
    assert_eq!(complete(b"flush_all 0 junk\r\n"), flush(0, false));
    // 32-bit truncation: 4294967296 is 0 (OK).
    assert_eq!(complete(b"flush_all 4294967296\r\n"), flush(0, false));
}

#[test]
fn flush_all_errors() {
    // memcached 1.6.18.
    assert_reply(b"flush_all abc\r\n", BAD_EXPTIME);
    assert_reply(b"flush_all abc noreply\r\n", SILENT);
    assert_reply(b"flush_all noreply junk\r\n", BAD_EXPTIME);
    assert_reply(b"flush_all 0 noreply x\r\n", ERROR);
}

#[test]
fn version_verbosity_quit() {
    assert_eq!(complete(b"version\r\n"), Request::Version);
    // memcached 1.6.18 ignores arguments to version and quit.
    assert_eq!(complete(b"version extra args\r\n"), Request::Version);
    assert_eq!(complete(b"quit\r\n"), Request::Quit);
    assert_eq!(complete(b"quit now\r\n"), Request::Quit);
    assert_eq!(
        complete(b"verbosity 1\r\n"),
        Request::Verbosity { noreply: false }
    );
    assert_eq!(
        complete(b"verbosity 1 noreply\r\n"),
        Request::Verbosity { noreply: true }
    );
    // memcached 1.6.18: a second token that is not noreply is ignored (OK);
    // the level keeps its low 32 bits (99999999999 is OK).
    assert_eq!(
        complete(b"verbosity 1 junk\r\n"),
        Request::Verbosity { noreply: false }
    );
    assert_eq!(
        complete(b"verbosity 99999999999\r\n"),
        Request::Verbosity { noreply: false }
    );
}

#[test]
fn verbosity_errors() {
    // memcached 1.6.18.
    assert_reply(b"verbosity\r\n", ERROR);
    assert_reply(b"verbosity abc\r\n", BAD_FORMAT);
    assert_reply(b"verbosity -1\r\n", BAD_FORMAT);
    // `verbosity noreply`: the level is bad, and the error is silent.
    assert_reply(b"verbosity noreply\r\n", SILENT);
}

#[test]
fn stats_groups() {
    assert_eq!(complete(b"stats\r\n"), Request::Stats(StatsGroup::General));
    assert_eq!(
        complete(b"stats items\r\n"),
        Request::Stats(StatsGroup::Items)
    );
    // memcached 1.6.18 answers ERROR to an unknown group (`stats foo`,
    // `stats noreply`).
    assert_reply(b"stats foo bar\r\n", ERROR);
    assert_reply(b"stats noreply\r\n", ERROR);
    // memcached 1.6.18: `stats reset x x ...` (30 tokens) answers RESET:
    // only the first token picks the group.
    let mut line = b"stats reset".to_vec();
    line.extend(b" x".repeat(30));
    line.extend(b"\r\n");
    assert_eq!(complete(&line), Request::Stats(StatsGroup::Reset));
}

// ----------------------------------------------------------------------- keys

#[test]
fn key_of_250_bytes_is_fine_251_is_not() {
    let k250 = vec![b'k'; 250];
    let k251 = vec![b'k'; 251];
    let line = [b"set ", &k250[..], b" 0 0 1\r\nx\r\n"].concat();
    assert_eq!(complete(&line), set(&k250, 0, 0, b"x", false));
    // memcached 1.6.18: CLIENT_ERROR bad command line format for each command.
    for command in ["get ", "gets ", "gat 0 ", "delete ", "touch "] {
        let line = [
            command.as_bytes(),
            &k251,
            if command == "touch " {
                b" 1\r\n"
            } else {
                b"\r\n"
            },
        ]
        .concat();
        assert_reply(&line, BAD_FORMAT);
    }
    assert_reply(&[b"incr ", &k251[..], b" 1\r\n"].concat(), BAD_FORMAT);
    // The data block of a rejected set is not swallowed: memcached runs
    // `x` as a command and answers ERROR.
    assert_eq!(
        stream(&[b"set ", &k251[..], b" 0 0 1\r\nx\r\n"].concat()),
        ["CLIENT_ERROR bad command line format", "ERROR"]
    );
}

#[test]
fn key_too_long_under_noreply_is_silent() {
    // memcached 1.6.18: no reply for set/incr/delete with noreply; the data
    // line of the set still gets ERROR.
    let k251 = vec![b'k'; 251];
    assert_eq!(
        stream(&[b"set ", &k251[..], b" 0 0 1 noreply\r\nx\r\n"].concat()),
        ["(silent)", "ERROR"]
    );
    assert_reply(&[b"incr ", &k251[..], b" 1 noreply\r\n"].concat(), SILENT);
    assert_reply(&[b"delete ", &k251[..], b" noreply\r\n"].concat(), SILENT);
}

#[test]
fn keys_may_hold_control_and_high_bytes() {
    // memcached 1.6.18 stores and returns keys with \t, \x01, \x7f, \xff and
    // a \r in the middle: only space, \n and NUL are special.
    for key in [&b"a\tb"[..], b"a\x01b", b"a\x7f\xffb", b"a\rb"] {
        let line = [b"set ", key, b" 0 0 1\r\nx\r\n"].concat();
        assert_eq!(complete(&line), set(key, 0, 0, b"x", false));
        let line = [b"get ", key, b"\r\n"].concat();
        assert_eq!(keys_of(&complete(&line)), vec![key.to_vec()]);
    }
}

#[test]
fn nul_ends_the_line() {
    // memcached 1.6.18 reads lines as C strings: `get a\0zzz` gets `a`, and
    // `set b 0 0 1\0junk` is `set b 0 0 1`.
    assert_eq!(keys_of(&complete(b"get a\x00zzz\r\n")), vec![b"a".to_vec()]);
    assert_eq!(
        complete(b"set b 0 0 1\x00junk\r\nx\r\n"),
        set(b"b", 0, 0, b"x", false)
    );
}

#[test]
fn multiget_with_a_long_key_in_the_middle() {
    // memcached 1.6.18: `get a <251 bytes> c` with a and c stored answers
    // only `CLIENT_ERROR bad command line format` (no VALUE for a, no END).
    let line = [b"get a ", &[b'k'; 251][..], b" c\r\n"].concat();
    assert_reply(&line, BAD_FORMAT);
    // Also past the 24th token, where memcached re-tokenizes.
    let line = [
        b"get".to_vec(),
        b" z".repeat(25),
        b" ".to_vec(),
        vec![b'k'; 251],
        b"\r\n".to_vec(),
    ]
    .concat();
    assert_reply(&line, BAD_FORMAT);
}

#[test]
fn many_keys_in_a_get() {
    // memcached 1.6.18: 30 keys (past its 24-token tokenizer) all served.
    let mut line = b"get".to_vec();
    for _ in 0..29 {
        line.extend(b" z");
    }
    line.extend(b" a\r\n");
    let r = complete(&line);
    assert_eq!(keys_of(&r).len(), 30);
    assert_eq!(keys_of(&r).last().unwrap(), b"a");
}

// ---------------------------------------------------------------------- flags

#[test]
fn flags_are_32_bit_with_c_quirks() {
    // memcached 1.6.18, each answered by `get`:
    let flags_of = |token: &str| match complete(format!("set f {token} 0 1\r\nx\r\n").as_bytes()) {
        Request::Storage { flags, .. } => flags,
        other => panic!("{other:?}"),
    };
    assert_eq!(flags_of("4294967295"), u32::MAX);
    assert_eq!(flags_of("4294967296"), 0); // VALUE f 0 1
    assert_eq!(flags_of("-0"), 0);
    assert_eq!(flags_of("+5"), 5);
    assert_eq!(flags_of("\t5"), 5);
    assert_eq!(flags_of("5\tjunk"), 5);
    assert_eq!(flags_of("-18446744073709551615"), 1); // VALUE f 1 1
}

#[test]
fn bad_flags() {
    // memcached 1.6.18: CLIENT_ERROR, then the data line `x` is a command: ERROR.
    for token in ["-1", "abc", "5abc", "99999999999999999999", "0x10"] {
        let input = format!("set f {token} 0 1\r\nx\r\n");
        assert_eq!(
            stream(input.as_bytes()),
            ["CLIENT_ERROR bad command line format", "ERROR"],
            "{token}"
        );
    }
    // Under noreply the CLIENT_ERROR is silent, the ERROR for `x` is not.
    assert_eq!(
        stream(b"set f abc 0 1 noreply\r\nx\r\n"),
        ["(silent)", "ERROR"]
    );
}

// -------------------------------------------------------------------- exptime

#[test]
fn exptime_keeps_the_low_32_bits() {
    let exptime_of = |token: &str| match complete(format!("set e 0 {token} 1\r\nx\r\n").as_bytes())
    {
        Request::Storage { exptime, .. } => exptime,
        other => panic!("{other:?}"),
    };
    // memcached 1.6.18: -1 expires at once; 2147483647 is kept;
    // 2147483648 wraps negative (expired at once); 4294967296 is 0 (never
    // expires); -2147483649 wraps to 2147483647 (kept); 4294967396 is 100
    // (`me` shows exp=-100 like for 100).
    assert_eq!(exptime_of("-1"), -1);
    assert_eq!(exptime_of("2147483647"), 2147483647);
    assert_eq!(exptime_of("2147483648"), -2147483648);
    assert_eq!(exptime_of("4294967296"), 0);
    assert_eq!(exptime_of("-2147483648"), -2147483648);
    assert_eq!(exptime_of("-2147483649"), 2147483647);
    assert_eq!(exptime_of("4294967396"), 100);
    // touch and gat read it the same way (TOUCHED / value kept).
    assert!(matches!(
        complete(b"touch e 4294967296\r\n"),
        Request::Touch { exptime: 0, .. }
    ));
    assert!(matches!(
        complete(b"gat 2147483648 e\r\n"),
        Request::Retrieval {
            exptime: -2147483648,
            ..
        }
    ));
}

#[test]
fn bad_exptime() {
    // memcached 1.6.18.
    for token in ["abc", "99999999999999999999"] {
        let input = format!("set e 0 {token} 1\r\nx\r\n");
        assert_eq!(
            stream(input.as_bytes()),
            ["CLIENT_ERROR bad command line format", "ERROR"]
        );
    }
    assert_reply(b"touch a abc\r\n", BAD_EXPTIME);
    assert_reply(b"touch a abc noreply\r\n", SILENT);
    assert_reply(b"gat abc a\r\n", BAD_EXPTIME);
}

// ---------------------------------------------------------------- data length

#[test]
fn bad_lengths_are_not_swallowed() {
    // memcached 1.6.18: CLIENT_ERROR and the data line runs as a command.
    for token in ["-1", "abc", "2147483648", "2147483646"] {
        let input = format!("set b 0 0 {token}\r\nx\r\n");
        assert_eq!(
            stream(input.as_bytes()),
            ["CLIENT_ERROR bad command line format", "ERROR"],
            "{token}"
        );
    }
    assert_eq!(
        stream(b"set b 0 0 -1 noreply\r\nx\r\n"),
        ["(silent)", "ERROR"]
    );
}

#[test]
fn length_keeps_the_low_32_bits() {
    // memcached 1.6.18: `set b 0 0 4294967297` reads 1 data byte (STORED).
    assert_eq!(
        complete(b"set b 0 0 4294967297\r\nx\r\n"),
        set(b"b", 0, 0, b"x", false)
    );
}

#[test]
fn too_large_is_swallowed_whole() {
    // memcached 1.6.18: `set b 0 0 2000000` + 2000000 bytes + `\r\n` answers
    // SERVER_ERROR object too large for cache (once the data has been read)
    // and the next command is served normally.
    let line = b"set b 0 0 2000000\r\n";
    let (reply, skip) = rejected(line);
    assert_eq!(reply, TOO_LARGE);
    assert_eq!(skip, line.len() + 2_000_000 + 2);
    let (reply, skip) = rejected(b"set b 0 0 2000000 noreply\r\n");
    assert_eq!((reply, skip), (SILENT, 27 + 2_000_002));
    // The largest length memcached parses: also swallowed (nothing answered
    // before 2 GiB arrive).
    let (reply, skip) = rejected(b"set b 0 0 2147483645\r\n");
    assert_eq!((reply, skip), (TOO_LARGE, 22 + 2147483647));
}

/// The key whose item the parser says memcached drops for `input`, with
/// whether it is base64; `None` when nothing is deleted.
fn stale_key(input: &[u8]) -> Option<(Vec<u8>, bool)> {
    match parse(input) {
        Parsed::Invalid(ProtocolError::Reply { delete, .. }) => {
            delete.map(|d| (d.key.to_vec(), d.base64))
        }
        other => panic!("{input:?}: expected an error reply, got {other:?}"),
    }
}

#[test]
fn refused_set_drops_the_old_item() {
    // memcached 1.6.18, after `set sk 0 0 1\r\na\r\n`, then the line below
    // (plus the data when swallowed), then `get sk`: a refused too-large
    // `set` (also under noreply, with a junk 6th token, negative exptime,
    // or flags that wrap to 0) answers END (deleted) ...
    let plain = |k: &[u8]| Some((k.to_vec(), false));
    for line in [
        &b"set sk 0 0 1048577\r\n"[..],
        b"set sk 0 0 1048577 noreply\r\n",
        b"set sk 0 0 1048577 junk\r\n",
        b"set  sk  0 0 1048577  \r\n",
        b"set sk 0 -1 1048577\r\n",
        b"set sk 4294967296 0 1048577\r\n",
        b"set sk 0 0 1048517\r\n",
        b"set sk 1 0 1048513\r\n",
        b"set sk 0 0 2147483645\r\n",
    ] {
        assert_eq!(stale_key(line), plain(b"sk"), "{line:?}");
    }
    // The key is the whole space-separated token, `\r` included: memcached
    // keeps the item under `key` after a refused `set key\r ...`.
    assert_eq!(stale_key(b"set key\r 0 0 1048577\r\n"), plain(b"key\r"));
    // ... while other commands and earlier errors keep it (VALUE sk 0 1).
    for line in [
        &b"add sk 0 0 1048577\r\n"[..],
        b"replace sk 0 0 1048577\r\n",
        b"append sk 0 0 1048577\r\n",
        b"prepend sk 0 0 1048577\r\n",
        b"cas sk 0 0 1048577 1\r\n",
        b"set sk 0 0 2000000 noreply junk\r\n", // ERROR: 7 tokens
        b"set sk 0 0 2147483646\r\n",           // bad command line format
        b"set sk 0 0 -1\r\n",
        b"set sk 0 abc 1048577\r\n",
        b"set sk 99999999999999999999 0 1048577\r\n",
    ] {
        assert_eq!(stale_key(line), None, "{line:?}");
    }
}

#[test]
fn refused_meta_set_drops_the_old_item() {
    // memcached 1.6.18, same sequence with `ms`: every mode deletes, `q`
    // still answers SERVER_ERROR, the size check comes before `I` with `C`,
    // flags that wrap count as 0; with `b` the decoded key is deleted.
    for line in [
        &b"ms sk 1048577\r\n"[..],
        b"ms sk 1048577 q\r\n",
        b"ms sk 1048577 ME\r\n",
        b"ms sk 1048577 MA\r\n",
        b"ms sk 1048577 MP\r\n",
        b"ms sk 1048577 MR C1\r\n",
        b"ms sk 1048577 I C1\r\n",
        b"ms sk 1048577 T-1\r\n",
        b"ms sk 1048577 F4294967296\r\n",
    ] {
        assert_eq!(rejected(line).0, TOO_LARGE, "{line:?}");
        assert_eq!(stale_key(line), Some((b"sk".to_vec(), false)), "{line:?}");
    }
    assert_eq!(
        stale_key(b"ms c2s= 1048577 b\r\n"),
        Some((b"c2s=".to_vec(), true))
    );
    // Errors before the size check keep the item.
    for line in [
        &b"ms sk 1048577 MX\r\n"[..],
        b"ms sk 1048577 Tabc\r\n",
        b"ms sk 1048577 Fabc\r\n",
        b"ms sk 1048577 S5\r\n",
        b"ms sk 1048577 zz\r\n",
        b"ms sk 1048577 b\r\n", // `sk` is not base64
        b"ms sk -1\r\n",
        b"ms sk 2147483646\r\n",
    ] {
        assert_eq!(stale_key(line), None, "{line:?}");
    }
}

#[test]
fn item_size_threshold_matches_memcached() {
    // Measured on memcached 1.6.18 with the default -I 1m by bisection:
    // largest data stored for (key length, flags):
    //   (1, 0) 1048516   (1, 1) 1048512   (10, 0) 1048507   (10, 1) 1048503
    //   (250, 0) 1048267 (250, 1) 1048263
    // and with -I 2m, key `b`, flags 0: 2097092.
    // That is max_item_size - 59 - key_len - (flags != 0 ? 4 : 0).
    let limits = ParseLimits::default();
    let cases = [
        (1, 0, 1048516),
        (1, 1, 1048512),
        (10, 0, 1048507),
        (10, 1, 1048503),
        (250, 0, 1048267),
        (250, 1, 1048263),
    ];
    for (key_len, flags, max) in cases {
        assert_eq!(limits.max_data_len(key_len, flags), max);
        let key = vec![b'k'; key_len];
        for (len, fits) in [(max, true), (max + 1, false)] {
            let mut input = b"set ".to_vec();
            input.extend(&key);
            input.extend(format!(" {flags} 0 {len}\r\n").as_bytes());
            let header = input.len();
            input.resize(header + len, b'x');
            input.extend(b"\r\n");
            match parse_request(&input, &limits) {
                Parsed::Complete { consumed, .. } => {
                    assert!(fits, "{key_len} {flags} {len} should be too large");
                    assert_eq!(consumed, input.len());
                }
                Parsed::Invalid(ProtocolError::Reply { reply, skip, .. }) => {
                    assert!(!fits, "{key_len} {flags} {len} should fit");
                    assert_eq!(reply, TOO_LARGE);
                    assert_eq!(skip, input.len());
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(ITEM_OVERHEAD, 59);
    let two_mib = ParseLimits {
        max_item_size: 2 * 1024 * 1024,
        ..ParseLimits::default()
    };
    assert_eq!(two_mib.max_data_len(1, 0), 2097092);
}

// ------------------------------------------------------------ bad data chunks

#[test]
fn bad_data_chunk_consumes_exactly_length_plus_two() {
    // memcached 1.6.18 reads exactly <bytes>+2 and checks the last two:
    // `set b 0 0 3\r\nhello\r\n` reads "hello" → bad data chunk, then the
    // remaining `\r\n` is an empty command → ERROR.
    assert_eq!(
        stream(b"set b 0 0 3\r\nhello\r\nversion\r\n"),
        ["CLIENT_ERROR bad data chunk", "ERROR", "<version>"]
    );
    let (reply, skip) = rejected(b"set b 0 0 3\r\nhello\r\n");
    assert_eq!((reply, skip), (BAD_CHUNK, 13 + 5));
    // Short data: "abc\r\nXY" are the 7 bytes read; `\r\n` → ERROR.
    assert_eq!(
        stream(b"set b 0 0 5\r\nabc\r\nXY\r\nversion\r\n"),
        ["CLIENT_ERROR bad data chunk", "ERROR", "<version>"]
    );
    // `\n` alone does not end a data block: "abc\nm" read, "n" → ERROR.
    assert_eq!(
        stream(b"set b 0 0 3\r\nabc\nmn\r\n"),
        ["CLIENT_ERROR bad data chunk", "ERROR"]
    );
    // "abc\rX" read; the next line is whole.
    assert_eq!(
        stream(b"set b 0 0 3\r\nabc\rXversion\r\n"),
        ["CLIENT_ERROR bad data chunk", "<version>"]
    );
}

#[test]
fn bad_data_chunk_under_noreply_is_silent() {
    // memcached 1.6.18: nothing for the bad chunk, ERROR for the leftover.
    assert_eq!(
        stream(b"set b 0 0 3 noreply\r\nhello\r\n"),
        ["(silent)", "ERROR"]
    );
}

#[test]
fn data_waits_for_its_terminator() {
    assert_eq!(parse(b"set b 0 0 3\r\nabc"), Parsed::Incomplete);
    assert_eq!(parse(b"set b 0 0 3\r\nabc\r"), Parsed::Incomplete);
    // The too-large verdict does not wait for the data.
    assert!(matches!(
        parse(b"set b 0 0 2000000\r\n"),
        Parsed::Invalid(ProtocolError::Reply { .. })
    ));
}

// ------------------------------------------------------------------ line shape

#[test]
fn empty_and_blank_lines() {
    // memcached 1.6.18: ERROR for each.
    assert_reply(b"\r\n", ERROR);
    assert_reply(b"\n", ERROR);
    assert_reply(b"   \r\n", ERROR);
    assert_reply(b"\r\r\n", ERROR);
}

#[test]
fn lf_line_endings() {
    // memcached 1.6.18: command lines may end in `\n` alone ...
    assert_eq!(
        complete(b"set a 0 0 1\nx\r\n"),
        set(b"a", 0, 0, b"x", false)
    );
    assert_eq!(keys_of(&complete(b"get a\n")), vec![b"a".to_vec()]);
    // ... data blocks may not: `x\ng` read as data → bad data chunk, then
    // `et a` → ERROR.
    assert_eq!(
        stream(b"set a 0 0 1\nx\nget a\n"),
        ["CLIENT_ERROR bad data chunk", "ERROR"]
    );
}

#[test]
fn spaces_between_and_around_tokens() {
    // memcached 1.6.18: any number of spaces, leading or trailing.
    assert_eq!(keys_of(&complete(b"get a   \r\n")), vec![b"a".to_vec()]);
    assert_eq!(
        complete(b"set a 0 0 1   \r\nx\r\n"),
        set(b"a", 0, 0, b"x", false)
    );
    assert_eq!(
        complete(b"set   a   0  0   1\r\nx\r\n"),
        set(b"a", 0, 0, b"x", false)
    );
    assert_eq!(keys_of(&complete(b"get    a\r\n")), vec![b"a".to_vec()]);
    assert_eq!(keys_of(&complete(b"   get a\r\n")), vec![b"a".to_vec()]);
    // A tab is not a separator: `get\ta` is an unknown command.
    assert_reply(b"get\ta\r\n", ERROR);
}

#[test]
fn only_one_cr_is_dropped() {
    // memcached 1.6.18: `get a\r\r\n` looks up "a\r" (END);
    // `set a 0 0 1\r\r\n` has length "1\r", which strtol reads as 1.
    assert_eq!(keys_of(&complete(b"get a\r\r\n")), vec![b"a\r".to_vec()]);
    assert_eq!(
        complete(b"set a 0 0 1\r\r\nx\r\n"),
        set(b"a", 0, 0, b"x", false)
    );
}

#[test]
fn unknown_commands() {
    // memcached 1.6.18: ERROR, never silent, whatever follows.
    assert_reply(b"g\r\n", ERROR);
    assert_reply(b"GET a\r\n", ERROR);
    assert_reply(b"foo bar\r\n", ERROR);
    assert_reply(b"foo noreply\r\n", ERROR);
    assert_reply(b"quitx\r\n", ERROR);
    // Without -A, 1.6.18 names the reason (confirmed by the differential test).
    assert_reply(b"shutdown\r\n", b"ERROR: shutdown not enabled\r\n");
    assert_reply(b"shutdown graceful\r\n", b"ERROR: shutdown not enabled\r\n");
    assert_reply(b"SHUTDOWN\r\n", ERROR);
    // Lowercase http/ and HTTP/ not last: plain ERROR.
    assert_reply(b"foo http/1.1\r\n", ERROR);
    assert_reply(b"foo HTTP/1.1 x\r\n", ERROR);
    // Commands starting with a letter memcached dispatches on: ERROR.
    assert_reply(b"sett HTTP/1.1\r\n", ERROR);
}

#[test]
fn admin_commands_memcached_also_refuses() {
    // memcached 1.6.18 (default options, no -A), recorded live: plain ERROR
    // for these argument errors of admin commands (the other replies are in
    // `memcache_admin.rs`; `watch foo` is ERROR too, but after memcached's
    // pipelining check, so the server answers it: see `memcache_admin.rs`).
    for line in [
        &b"cache_memlimit\r\n"[..],
        b"cache_memlimit x\r\n",
        b"slabs\r\n",
        b"slabs foo\r\n",
        b"slabs automove\r\n",
        b"slabs automove 3\r\n",
        b"lru\r\n",
        b"lru foo\r\n",
        b"lru_crawler\r\n",
        b"lru_crawler foo\r\n",
        b"misbehave\r\n",
        b"debugtime\r\n",
    ] {
        assert_reply(line, ERROR);
    }
}

#[test]
fn http_request_line_closes() {
    // memcached 1.6.18 hangs up without a word.
    assert_closes(b"GET / HTTP/1.1\r\n");
    assert_closes(b"POST /x HTTP/1.0\r\n");
    // `get HTTP/1.1` is a get of key "HTTP/1.1" (END).
    assert_eq!(
        keys_of(&complete(b"get HTTP/1.1\r\n")),
        vec![b"HTTP/1.1".to_vec()]
    );
}

#[test]
fn token_counts() {
    // memcached 1.6.18: wrong token counts answer ERROR even with noreply,
    // and the data line then runs as a command.
    assert_eq!(
        stream(b"set a 0 0 1 noreply x\r\nx\r\n"),
        ["ERROR", "ERROR"]
    );
    assert_eq!(stream(b"set a 0 0\r\nx\r\n"), ["ERROR", "ERROR"]);
    assert_reply(b"cas a 0 0 1\r\n", ERROR);
    assert_reply(b"touch a\r\n", ERROR);
    assert_reply(b"incr a\r\n", ERROR);
    // 23 tokens: ERROR.
    let mut line = b"set a 0 0 1".to_vec();
    line.extend(b" x".repeat(18));
    line.extend(b"\r\n");
    assert_reply(&line, ERROR);
    let mut line = b"incr a 1".to_vec();
    line.extend(b" x".repeat(22));
    line.extend(b"\r\n");
    assert_reply(&line, ERROR);
    // memcached 1.6.18: `version` with 30 arguments still answers VERSION.
    let mut line = b"version".to_vec();
    line.extend(b" x".repeat(30));
    line.extend(b"\r\n");
    assert_eq!(complete(&line), Request::Version);
}

#[test]
fn an_extra_token_that_is_not_noreply_is_ignored() {
    // memcached 1.6.18: STORED / NOT_FOUND / NOT_FOUND, with replies.
    assert_eq!(
        complete(b"set a 0 0 1 junk\r\nx\r\n"),
        set(b"a", 0, 0, b"x", false)
    );
    assert!(matches!(
        complete(b"cas a 0 0 1 1 junk\r\nx\r\n"),
        Request::Storage {
            cas: 1,
            noreply: false,
            ..
        }
    ));
    assert!(matches!(
        complete(b"incr a 1 junk\r\n"),
        Request::Arith { noreply: false, .. }
    ));
}

#[test]
fn noreply_in_place_of_a_number() {
    // memcached 1.6.18: `set a 0 0 noreply` has 5 tokens (valid count), the
    // last is noreply, so the bad length is silent; `x` → ERROR.
    assert_eq!(stream(b"set a 0 0 noreply\r\nx\r\n"), ["(silent)", "ERROR"]);
    // Same for `incr a noreply` and `touch a noreply`: nothing at all.
    assert_reply(b"incr a noreply\r\n", SILENT);
    assert_reply(b"touch a noreply\r\n", SILENT);
}

// ------------------------------------------------------------------ cas / incr

#[test]
fn cas_unique_errors() {
    // memcached 1.6.18: CLIENT_ERROR bad command line format, data line ERROR.
    for token in ["abc", "-1"] {
        let input = format!("cas a 0 0 1 {token}\r\nx\r\n");
        assert_eq!(
            stream(input.as_bytes()),
            ["CLIENT_ERROR bad command line format", "ERROR"]
        );
    }
}

#[test]
fn incr_delta_errors() {
    // memcached 1.6.18.
    assert_reply(b"incr n abc\r\n", BAD_DELTA);
    assert_reply(b"incr n -1\r\n", BAD_DELTA);
    assert_reply(b"incr n 18446744073709551616\r\n", BAD_DELTA);
    assert_reply(b"incr n abc noreply\r\n", SILENT);
    // `-0` is a delta of 0 (NOT_FOUND for a missing key).
    assert!(matches!(
        complete(b"incr n -0\r\n"),
        Request::Arith { delta: 0, .. }
    ));
}

// -------------------------------------------------------------- gat / get args

#[test]
fn retrieval_without_keys() {
    // memcached 1.6.18: `get` and `get ` → ERROR; `gat` → ERROR;
    // `gat 10` → END (a lookup of no keys).
    assert_reply(b"get\r\n", ERROR);
    assert_reply(b"get \r\n", ERROR);
    assert_reply(b"gets\r\n", ERROR);
    assert_reply(b"gat\r\n", ERROR);
    match complete(b"gat 10\r\n") {
        Request::Retrieval { keys, exptime, .. } => {
            assert!(keys.is_empty());
            assert_eq!(exptime, 10);
        }
        other => panic!("{other:?}"),
    }
    // `gat 10 noreply` looks up the key "noreply" (END).
    assert_eq!(
        keys_of(&complete(b"gat 10 noreply\r\n")),
        vec![b"noreply".to_vec()]
    );
}

// ------------------------------------------------------------ over-long lines

/// `input` waits for more bytes, and memcached closes the connection if a
/// read leaves it so (more than 2048 bytes of a line that is not a
/// multi-get without their `\n`).
fn assert_closes_when_stalled(input: &[u8]) {
    assert_eq!(parse(input), Parsed::Incomplete, "{}", show_start(input));
    assert!(
        unterminated_line_closes(input, &ParseLimits::default()),
        "{}",
        show_start(input)
    );
}

/// `input` waits for more bytes, for as long as they take.
fn assert_waits(input: &[u8]) {
    assert_eq!(parse(input), Parsed::Incomplete, "{}", show_start(input));
    assert!(
        !unterminated_line_closes(input, &ParseLimits::default()),
        "{}",
        show_start(input)
    );
}

fn show_start(input: &[u8]) -> String {
    format!(
        "{:?} ({} bytes)",
        String::from_utf8_lossy(&input[..input.len().min(60)]),
        input.len()
    )
}

#[test]
fn long_lines_that_are_not_multigets_close() {
    // memcached 1.6.18: 2048 bytes without `\n` wait, 2049 close once a
    // read leaves them so (here: whatever follows arrives later); 2048 bytes
    // and then `\r\n` is still read as a line (ERROR).
    assert_waits(&[b'x'; 2048]);
    assert_closes_when_stalled(&[b'x'; 2049]);
    let mut line = vec![b'x'; 2048];
    line.extend(b"\r\n");
    assert_reply(&line, ERROR);
    // 2048 bytes and a `\r` that waits for its `\n`: 2049 bytes, closed.
    let mut line = vec![b'x'; 2048];
    line.push(b'\r');
    assert_closes_when_stalled(&line);
    // `set a 0 0 1` followed by 3000 spaces: closed.
    let mut line = b"set a 0 0 1".to_vec();
    line.extend([b' '; 3000]);
    assert_closes_when_stalled(&line);
    // gat is not a multiget for this rule: a 3 KiB gat line closes when it
    // trickles in.
    let keys: Vec<u8> = (0..400)
        .flat_map(|i| format!("key{i:05} ").into_bytes())
        .collect();
    assert_closes_when_stalled(&[&b"gat 0 "[..], &keys[..2500]].concat());
    // Nor are `get` without a space, `getx `, or a get after 101 spaces.
    assert_closes_when_stalled(&[&b"get"[..], &[b'x'; 2500]].concat());
    assert_closes_when_stalled(&[&b"getx "[..], &keys[..2500]].concat());
    assert_closes_when_stalled(&[&[b' '; 101][..], b"get ", &keys[..2500]].concat());
    assert_closes_when_stalled(&[&b"gets"[..], &[b'x'; 2100]].concat());
    // A command waiting for its data block is not a line.
    let mut set = b"set a 0 0 5000\r\n".to_vec();
    set.extend([b'x'; 3000]);
    assert_waits(&set);
}

#[test]
fn long_lines_read_whole_are_served() {
    // memcached 1.6.18 serves a line over 2048 bytes when its `\n` comes in
    // the same read: `mg k v` + 2100 spaces is EN, a 2049-byte unknown
    // command is ERROR, a 3 KiB gat line is a gat.
    let mut mg = b"mg k v".to_vec();
    mg.extend([b' '; 2100]);
    mg.extend(b"\r\n");
    match complete(&mg) {
        Request::Meta { command, key, .. } => {
            assert_eq!(command, MetaCommand::Get);
            assert_eq!(key, b"k");
        }
        other => panic!("{other:?}"),
    }
    let mut line = vec![b'x'; 2049];
    line.extend(b"\r\n");
    assert_reply(&line, ERROR);
    let keys: Vec<u8> = (0..400)
        .flat_map(|i| format!(" key{i:05}").into_bytes())
        .collect();
    let gat = [&b"gat 0"[..], &keys[..], b"\r\n"].concat();
    assert_eq!(keys_of(&complete(&gat)).len(), 400);
    let mut delete = b"delete k".to_vec();
    delete.extend([b' '; 3000]);
    delete.extend(b"\r\n");
    assert!(matches!(complete(&delete), Request::Delete { .. }));
}

#[test]
fn lines_past_the_read_buffer_close() {
    // memcached's 16 KiB read buffer: a line of 16,382 bytes and `\r\n` is
    // served, one byte more closes (`\n` alone: 16,383 served, 16,384
    // closed); without a `\n` the line closes once it fills the buffer.
    for (text, end, served) in [
        (16382, &b"\r\n"[..], true),
        (16383, b"\r\n", false),
        (16383, b"\n", true),
        (16384, b"\n", false),
    ] {
        let mut line = b"mg k v".to_vec();
        line.resize(text, b' ');
        line.extend(end);
        if served {
            assert!(matches!(complete(&line), Request::Meta { .. }));
        } else {
            assert_closes(&line);
        }
    }
    assert_eq!(READ_BUFFER_SIZE, 16384);
    assert_closes_when_stalled(&[b'x'; READ_BUFFER_SIZE - 1]);
    assert_closes(&[b'x'; READ_BUFFER_SIZE]);
    // Multi-gets have no such bound.
    let keys: Vec<u8> = (0..3000)
        .flat_map(|i| format!(" key{i:05}").into_bytes())
        .collect();
    let get = [&b"get"[..], &keys[..], b"\r\n"].concat();
    assert!(get.len() > READ_BUFFER_SIZE);
    assert_eq!(keys_of(&complete(&get)).len(), 3000);
    assert_waits(&get[..READ_BUFFER_SIZE + 1]);
    // A larger max_line_len lets more wait, and more be whole.
    let roomy = ParseLimits {
        max_line_len: 50_000,
        ..ParseLimits::default()
    };
    assert_eq!(roomy.max_whole_line(), 50_002);
    let mut line = b"mg k v".to_vec();
    line.resize(40_000, b' ');
    assert_eq!(parse_request(&line, &roomy), Parsed::Incomplete);
    assert!(!unterminated_line_closes(&line, &roomy));
    line.extend(b"\r\n");
    assert!(matches!(
        parse_request(&line, &roomy),
        Parsed::Complete { .. }
    ));
}

#[test]
fn long_multigets_are_fine() {
    // memcached 1.6.18: get/gets lines of any length (tried 1 MB of keys)
    // are served, also after up to 100 leading spaces.
    let keys: Vec<u8> = (0..400)
        .flat_map(|i| format!(" key{i:05}").into_bytes())
        .collect();
    for prefix in [&b"get"[..], b"gets", &[&[b' '; 100][..], b"get"].concat()] {
        let partial = [prefix, &keys[..2500]].concat();
        assert_waits(&partial);
        let full = [prefix, &keys[..], b"\r\n"].concat();
        assert_eq!(keys_of(&complete(&full)).len(), 400);
    }
}

// ------------------------------------------------------------------ meta

fn meta(input: &[u8]) -> (MetaCommand, Vec<u8>, Vec<u8>, Vec<u8>, MetaFlags) {
    match complete(input) {
        Request::Meta {
            command,
            key,
            tokens,
            data,
            flags,
        } => (command, key.to_vec(), tokens.to_vec(), data.to_vec(), flags),
        other => panic!("{input:?}: not a meta command: {other:?}"),
    }
}

#[test]
fn meta_noop_takes_anything() {
    assert_eq!(complete(b"mn\r\n"), Request::MetaNoop);
    assert_eq!(complete(b"mn x y\r\n"), Request::MetaNoop);
    // Unknown m? commands are unknown, as in memcached.
    for line in [&b"mx a\r\n"[..], b"mz\r\n"] {
        assert_reply(line, ERROR);
    }
}

#[test]
fn meta_debug_takes_a_key_and_b() {
    let (command, key, _, _, flags) = meta(b"me a\r\n");
    assert_eq!(
        (command, &key[..], flags.base64),
        (MetaCommand::Debug, &b"a"[..], false)
    );
    // Tokens other than a `b` right after the key are ignored.
    let (command, .., flags) = meta(b"me Zm9v b x y\r\n");
    assert_eq!((command, flags.base64), (MetaCommand::Debug, true));
    let (.., flags) = meta(b"me a x\r\n");
    assert!(!flags.base64);
    // memcached 1.6.18: no key, a key over 250 bytes or one that does not
    // decode under `b`.
    let long = format!("me {}\r\n", "a".repeat(251));
    for line in [&b"me\r\n"[..], b"me nokey b\r\n", long.as_bytes()] {
        assert_reply(line, b"CLIENT_ERROR bad command line format\r\n");
    }
}

#[test]
fn meta_get_flags() {
    let (command, key, tokens, data, flags) = meta(b"mg foo v f  t c k s O123 q u T30\r\n");
    assert_eq!(command, MetaCommand::Get);
    assert_eq!(key, b"foo");
    assert_eq!(tokens, b"v f  t c k s O123 q u T30");
    assert!(data.is_empty());
    assert!(flags.value && flags.quiet && flags.return_ttl && !flags.base64);
    assert_eq!(flags.ttl, Some(30));
    // Only the first byte of a token names the flag.
    let (.., flags) = meta(b"mg foo vv\r\n");
    assert!(flags.value);
    // No flags: an empty token region.
    let (_, _, tokens, _, flags) = meta(b"mg foo\r\n");
    assert!(tokens.is_empty() && !flags.value);
    // Flags that only other verbs use are accepted (and ignored).
    meta(b"mg a Mx C5 D9 J1 I F1 u\r\n");
}

#[test]
fn meta_errors_in_memcached_order() {
    // Observed from memcached 1.6.18.
    assert_reply(b"mg\r\n", ERROR);
    assert_reply(b"md\r\n", ERROR);
    assert_reply(b"ma\r\n", ERROR);
    let k251 = [&b"mg "[..], &[b'k'; 251], b" X X\r\n"].concat();
    assert_reply(&k251, BAD_FORMAT);
    assert_reply(
        b"mg a 1 2 3 4 5 6 7 8 9 0 A B G H K L Q W\r\n",
        b"CLIENT_ERROR options flags are too long\r\n",
    );
    assert_reply(
        b"md a 1 2 3 4 5 6 7 8 9 0 A B G H K L Q W\r\n",
        b"CLIENT_ERROR options flags too long\r\n",
    );
    // 17 flags are fine (the first is invalid).
    assert_reply(
        b"mg a 1 2 3 4 5 6 7 8 9 0 A B G H K L Q\r\n",
        b"CLIENT_ERROR invalid flag\r\n",
    );
    assert_reply(b"mg a v v\r\n", b"CLIENT_ERROR duplicate flag\r\n");
    assert_reply(b"mg a \x7f\r\n", b"CLIENT_ERROR duplicate flag\r\n");
    assert_reply(b"mg a E5\r\n", b"CLIENT_ERROR invalid flag\r\n");
    // Value errors are reported after every flag was read: the last wins,
    // but an unknown or repeated flag stops at once.
    let bad_token = b"CLIENT_ERROR bad token in command line format\r\n";
    assert_reply(b"mg a Tx\r\n", bad_token);
    assert_reply(b"mg a Tx X\r\n", b"CLIENT_ERROR invalid flag\r\n");
    assert_reply(
        b"mg a Tx Jx\r\n",
        b"CLIENT_ERROR invalid numeric initial value\r\n",
    );
    assert_reply(b"mg a Jx Tx\r\n", bad_token);
    assert_reply(
        b"mg a Dx\r\n",
        b"CLIENT_ERROR invalid numeric delta value\r\n",
    );
    assert_reply(b"mg a Fx\r\n", BAD_FORMAT);
    assert_reply(b"mg a Tx Fx\r\n", bad_token);
    assert_reply(
        b"mg a MEE\r\n",
        b"CLIENT_ERROR incorrect length for M token\r\n",
    );
    assert_reply(b"mg YWI b\r\n", b"CLIENT_ERROR error decoding key\r\n");
    // md and ma say the same thing about every flag error.
    for line in [
        &b"md a x\r\n"[..],
        b"md a Cx\r\n",
        b"ma a Dx\r\n",
        b"ma a 5\r\n",
    ] {
        assert_reply(line, b"CLIENT_ERROR invalid or duplicate flag\r\n");
    }
    assert_reply(
        b"ma a Mx\r\n",
        b"CLIENT_ERROR invalid mode for ma M token\r\n",
    );
    assert_reply(
        b"ma a Mi\r\n",
        b"CLIENT_ERROR invalid mode for ma M token\r\n",
    );
    // An opaque is at most 32 bytes, its `O` included; errors ignore `q`.
    let opaque33 = b"mg a q O12345678901234567890123456789012\r\n";
    assert_reply(opaque33, b"CLIENT_ERROR opaque token too long\r\n");
    meta(b"mg a O1234567890123456789012345678901\r\n");
}

#[test]
fn meta_anti_stampede_flags() {
    let (command, _, tokens, _, flags) = meta(b"mg a N30 R5 h l v\r\n");
    assert_eq!(command, MetaCommand::Get);
    assert_eq!(tokens, b"N30 R5 h l v");
    assert_eq!((flags.vivify, flags.recache), (Some(30), Some(5)));
    assert!(flags.access_info);
    let (command, .., flags) = meta(b"md a I T30 q\r\n");
    assert_eq!(command, MetaCommand::Delete);
    assert!(flags.invalidate && flags.quiet);
    assert_eq!(flags.ttl, Some(30));
    let (command, _, _, data, flags) = meta(b"ms a 2 I C5\r\nhi\r\n");
    assert_eq!(command, MetaCommand::Set);
    assert_eq!(data, b"hi");
    assert!(flags.invalidate);
    assert_eq!(flags.compare_cas, Some(5));
    assert_reply(
        b"mg a Rx\r\n",
        b"CLIENT_ERROR bad token in command line format\r\n",
    );
    assert_reply(
        b"mg a Nx\r\n",
        b"CLIENT_ERROR bad token in command line format\r\n",
    );
}

#[test]
fn meta_set_modes_and_data() {
    let (command, key, tokens, data, flags) = meta(b"ms foo 4 T10 F7 c k ME\r\nab\r\n\r\n");
    assert_eq!(command, MetaCommand::Set);
    assert_eq!(
        (&key[..], &tokens[..], &data[..]),
        (&b"foo"[..], &b"T10 F7 c k ME"[..], &b"ab\r\n"[..])
    );
    assert_eq!((flags.ttl, flags.client_flags), (Some(10), 7));
    assert_eq!(flags.set_mode, MetaSetMode::Add);
    for (mode, want) in [
        ("S", MetaSetMode::Set),
        ("E", MetaSetMode::Add),
        ("R", MetaSetMode::Replace),
        ("A", MetaSetMode::Append),
        ("P", MetaSetMode::Prepend),
    ] {
        let input = format!("ms a 1 M{mode}\r\nx\r\n");
        assert_eq!(meta(input.as_bytes()).4.set_mode, want);
    }
    let (.., flags) = meta(b"ms a 1 C99 q\r\nx\r\n");
    assert_eq!(flags.compare_cas, Some(99));
    assert!(flags.quiet);
    let (_, _, tokens, data, _) = meta(b"ms a 0\r\n\r\n");
    assert!(tokens.is_empty() && data.is_empty());
}

#[test]
fn meta_set_errors_and_what_they_swallow() {
    // Before the length is known: the data line is the next command.
    assert_eq!(
        stream(b"ms a\r\nhi\r\n"),
        ["CLIENT_ERROR bad command line format", "ERROR"]
    );
    assert_eq!(
        stream(b"ms a x\r\nhi\r\n"),
        ["CLIENT_ERROR bad command line format", "ERROR"]
    );
    assert_eq!(
        stream(b"ms a -1\r\nhi\r\n"),
        ["CLIENT_ERROR bad command line format", "ERROR"]
    );
    assert_eq!(
        stream(b"ms a 2 1 2 3 4 5 6 7 8 9 0 A B G H K L W\r\nhi\r\n"),
        ["CLIENT_ERROR options flags too long", "ERROR"]
    );
    // After: the data block goes with the error.
    assert_eq!(stream(b"ms a 2 X\r\nmn\r\n"), ["CLIENT_ERROR invalid flag"]);
    assert_eq!(
        stream(b"ms a 2 Mx\r\nhi\r\nmn\r\n"),
        ["CLIENT_ERROR invalid mode for ms M token", "<mn>"]
    );
    assert_eq!(
        stream(b"ms a 2 Ma\r\nhi\r\n"),
        ["CLIENT_ERROR invalid mode for ms M token"]
    );
    // An invalid mode is reported before a long opaque.
    assert_eq!(
        stream(b"ms a 2 Mx O12345678901234567890123456789012\r\nhi\r\n"),
        ["CLIENT_ERROR invalid mode for ms M token"]
    );
    assert_eq!(
        stream(b"ms a 2 F\r\nhi\r\n"),
        ["CLIENT_ERROR bad command line format"]
    );
    // Bad data chunk: length + 2 bytes consumed, even under q.
    assert_eq!(
        stream(b"ms a 2 q\r\nhiXX\r\n"),
        ["CLIENT_ERROR bad data chunk", "ERROR"]
    );
    // Too large: swallowed whole, before it arrives.
    let limits = ParseLimits::default();
    let fits = limits.max_data_len(1, 0);
    let line = format!("ms b {}\r\n", fits + 1);
    assert_eq!(
        rejected(line.as_bytes()),
        (TOO_LARGE, line.len() + fits + 3)
    );
    let line = format!("ms b {fits}\r\n");
    assert_eq!(parse(line.as_bytes()), Parsed::Incomplete);
    // Non-zero flags take 4 bytes more, as with set.
    let line = format!("ms b {fits} F1\r\n");
    assert_eq!(rejected(line.as_bytes()).0, TOO_LARGE);
}

#[test]
fn meta_base64_keys() {
    let (_, key, _, _, flags) = meta(b"mg YWJj b k v\r\n");
    // The key stays encoded in the request (it must point into the input).
    assert_eq!(key, b"YWJj");
    assert!(flags.base64);
    assert_eq!(base64::decode(&key).as_deref(), Some(&b"abc"[..]));
    // The size limit counts the decoded key.
    let limits = ParseLimits::default();
    let fits = limits.max_data_len(3, 0);
    let line = format!("ms YWJj {} b\r\n", fits + 1);
    assert_eq!(rejected(line.as_bytes()).0, TOO_LARGE);
    let line = format!("ms YWJj {fits} b\r\n");
    assert_eq!(parse(line.as_bytes()), Parsed::Incomplete);
}

#[test]
fn meta_arith_modes() {
    let (command, .., flags) = meta(b"ma n\r\n");
    assert_eq!(command, MetaCommand::Arith);
    assert_eq!(
        (flags.delta, flags.decrement, flags.vivify),
        (1, false, None)
    );
    for (mode, decrement) in [("I", false), ("+", false), ("D", true), ("-", true)] {
        let input = format!("ma n M{mode} D5 N0 J7\r\n");
        let (.., flags) = meta(input.as_bytes());
        assert_eq!(flags.decrement, decrement);
        assert_eq!((flags.delta, flags.initial, flags.vivify), (5, 7, Some(0)));
    }
    let (.., flags) = meta(b"ma n D18446744073709551615\r\n");
    assert_eq!(flags.delta, u64::MAX);
}

#[test]
fn meta_prefixes_are_incomplete() {
    for request in [
        &b"mn\r\n"[..],
        b"mg a v\r\n",
        b"ms a 3 T0\r\nabc\r\n",
        b"md a q\r\n",
        b"ma a N0 J5\r\n",
    ] {
        assert!(matches!(parse(request), Parsed::Complete { .. }));
        for cut in 0..request.len() {
            assert_eq!(
                parse(&request[..cut]),
                Parsed::Incomplete,
                "{request:?} cut {cut}"
            );
        }
    }
}

// --------------------------------------------------------- incremental input

#[test]
fn prefixes_of_requests_are_incomplete() {
    let requests: &[&[u8]] = &[
        b"get foo\r\n",
        b"gets a b c\r\n",
        b"gat 10 a\r\n",
        b"set a 5 0 3 noreply\r\nabc\r\n",
        b"cas a 0 0 1 99\r\nc\r\n",
        b"incr n 5\r\n",
        b"delete a 0 noreply\r\n",
        b"touch a 10\r\n",
        b"flush_all 10\r\n",
        b"version\r\n",
        b"verbosity 1\r\n",
        b"stats items\r\n",
        b"quit\r\n",
    ];
    for request in requests {
        let whole = parse(request);
        assert!(matches!(whole, Parsed::Complete { .. }), "{whole:?}");
        for cut in 0..request.len() {
            assert_eq!(
                parse(&request[..cut]),
                Parsed::Incomplete,
                "{request:?} cut {cut}"
            );
        }
    }
}

#[test]
fn pipelined_requests_parse_one_at_a_time() {
    let input = b"get a\r\nset b 0 0 1\r\nx\r\ndelete b\r\n";
    assert_eq!(stream(input), ["<get>", "<set>", "<delete>"]);
    match parse(input) {
        Parsed::Complete { consumed, .. } => assert_eq!(consumed, 7),
        other => panic!("{other:?}"),
    }
}

#[test]
fn request_slices_point_into_the_input() {
    // Sessions re-anchor the slices on the read buffer by address: every
    // slice, empty ones included, must lie inside the input.
    let inputs: &[&[u8]] = &[
        b"gat 10\r\n",
        b"set b 0 0 0\r\n\r\n",
        b"get a b\r\n",
        b"stats\r\n",
        b"stats items\r\n",
        b"mg a\r\n",
        b"mg a v\r\n",
        b"ms a 0\r\n\r\n",
        b"ma a\r\n",
    ];
    for input in inputs {
        let base = input.as_ptr() as usize;
        let end = base + input.len();
        complete(input).map(|s: &[u8]| {
            let at = s.as_ptr() as usize;
            assert!(at >= base && at + s.len() <= end, "{input:?}");
        });
    }
}

#[test]
fn reply_constants_match_the_parser() {
    assert_eq!(reply::CLIENT_ERROR_BAD_FORMAT, BAD_FORMAT);
    assert_eq!(reply::CLIENT_ERROR_BAD_DATA_CHUNK, BAD_CHUNK);
    assert_eq!(reply::CLIENT_ERROR_INVALID_EXPTIME, BAD_EXPTIME);
    assert_eq!(reply::CLIENT_ERROR_INVALID_DELTA, BAD_DELTA);
    assert_eq!(reply::CLIENT_ERROR_DELETE_USAGE, DELETE_USAGE);
    assert_eq!(reply::SERVER_ERROR_TOO_LARGE, TOO_LARGE);
    assert_eq!(reply::ERROR, ERROR);
}
