//! Client side: byte-exact request encoding and reply parsing, then the same
//! against a live memcached (skipped with a message when it is not installed).
//! Reply formats in the unit tests are as memcached 1.6.18 sent them.

mod memcache_support;

use std::io::{Read, Write};

use bytes::BytesMut;
use memcache_support::Memcached;
use memshift_protocol::memcache::client::{self, *};
use memshift_protocol::memcache::{ArithCommand, RetrievalCommand, StorageCommand};

type Owned = Response<Vec<u8>>;

fn encoded(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut buf = BytesMut::new();
    f(&mut buf);
    buf.to_vec()
}

/// Every reply in `input`, which must end on a reply boundary.
fn replies(input: &[u8]) -> Vec<Owned> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < input.len() {
        let (reply, used) = parse_reply(&input[pos..])
            .expect("valid reply")
            .expect("complete reply");
        assert!(used > 0);
        out.push(reply.map(|b| b.to_vec()));
        pos += used;
    }
    out
}

fn value(key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) -> Owned {
    Response::Value {
        key: key.to_vec(),
        flags,
        data: data.to_vec(),
        cas,
    }
}

// ------------------------------------------------------------------ encoding

#[test]
fn encodes_retrievals() {
    assert_eq!(
        encoded(|b| client::get(b, [&b"a"[..], b"bb"]).unwrap()),
        b"get a bb\r\n"
    );
    assert_eq!(encoded(|b| client::gets(b, [b"a"]).unwrap()), b"gets a\r\n");
    assert_eq!(
        encoded(|b| client::gat(b, 100, [b"a"]).unwrap()),
        b"gat 100 a\r\n"
    );
    assert_eq!(
        encoded(|b| client::gats(b, -1, vec![b"a".to_vec(), b"b".to_vec()]).unwrap()),
        b"gats -1 a b\r\n"
    );
    assert_eq!(
        encoded(|b| client::retrieval(b, RetrievalCommand::Get, 5, [b"k"]).unwrap()),
        b"get k\r\n"
    );
}

#[test]
fn encodes_storage() {
    assert_eq!(
        encoded(|b| client::storage(b, StorageCommand::Set, b"k", 7, 100, b"abc", false).unwrap()),
        b"set k 7 100 3\r\nabc\r\n"
    );
    assert_eq!(
        encoded(|b| client::storage(b, StorageCommand::Add, b"k", 0, 0, b"", true).unwrap()),
        b"add k 0 0 0 noreply\r\n\r\n"
    );
    for (command, name) in [
        (StorageCommand::Replace, "replace"),
        (StorageCommand::Append, "append"),
        (StorageCommand::Prepend, "prepend"),
    ] {
        assert_eq!(
            encoded(|b| client::storage(b, command, b"k", u32::MAX, -1, b"x", false).unwrap()),
            format!("{name} k 4294967295 -1 1\r\nx\r\n").as_bytes()
        );
    }
    assert_eq!(
        encoded(|b| client::cas(b, b"k", 1, 2, b"xy", u64::MAX, true).unwrap()),
        b"cas k 1 2 2 18446744073709551615 noreply\r\nxy\r\n"
    );
}

#[test]
fn encodes_other_commands() {
    assert_eq!(
        encoded(|b| client::arith(b, ArithCommand::Incr, b"n", 5, false).unwrap()),
        b"incr n 5\r\n"
    );
    assert_eq!(
        encoded(|b| client::arith(b, ArithCommand::Decr, b"n", u64::MAX, true).unwrap()),
        b"decr n 18446744073709551615 noreply\r\n"
    );
    assert_eq!(
        encoded(|b| client::delete(b, b"k", true).unwrap()),
        b"delete k noreply\r\n"
    );
    assert_eq!(
        encoded(|b| client::touch(b, b"k", 10, false).unwrap()),
        b"touch k 10\r\n"
    );
    assert_eq!(
        encoded(|b| client::flush_all(b, None, false)),
        b"flush_all\r\n"
    );
    assert_eq!(
        encoded(|b| client::flush_all(b, Some(10), true)),
        b"flush_all 10 noreply\r\n"
    );
    assert_eq!(encoded(client::version), b"version\r\n");
    assert_eq!(
        encoded(|b| client::meta_get(b, b"k").unwrap()),
        b"mg k v f t\r\n"
    );
    assert_eq!(encoded(client::meta_noop), b"mn\r\n");
    assert_eq!(
        encoded(client::lru_crawler_metadump_all),
        b"lru_crawler metadump all\r\n"
    );
}

#[test]
fn rejects_keys_the_server_would_split() {
    let mut buf = BytesMut::from(&b"kept"[..]);
    assert_eq!(
        client::get(&mut buf, [&b"ok"[..], b"a b"]),
        Err(EncodeError::KeyHasSeparator)
    );
    assert_eq!(
        client::get(&mut buf, Vec::<&[u8]>::new()),
        Err(EncodeError::NoKeys)
    );
    assert_eq!(
        client::delete(&mut buf, b"a\nb", false),
        Err(EncodeError::KeyHasSeparator)
    );
    assert_eq!(
        client::delete(&mut buf, b"a\0b", false),
        Err(EncodeError::KeyHasSeparator)
    );
    assert_eq!(
        client::touch(&mut buf, b"", 0, false),
        Err(EncodeError::EmptyKey)
    );
    assert_eq!(
        client::storage(
            &mut buf,
            StorageCommand::Set,
            &[b'k'; 251],
            0,
            0,
            b"",
            false
        ),
        Err(EncodeError::KeyTooLong)
    );
    // Nothing half-written.
    assert_eq!(&buf[..], b"kept");
    // Control bytes are fine: memcached keeps them in keys.
    assert!(client::delete(&mut buf, b"a\tb\x01", false).is_ok());
}

// ------------------------------------------------------------- reply parsing

#[test]
fn parses_retrieval_replies() {
    // memcached 1.6.18: `get a` / `gets a` after `set a 5 0 3`.
    assert_eq!(
        replies(b"VALUE a 5 3\r\nabc\r\nEND\r\nVALUE a 5 3 3\r\nabc\r\nEND\r\n"),
        vec![
            value(b"a", 5, b"abc", None),
            Response::End,
            value(b"a", 5, b"abc", Some(3)),
            Response::End,
        ]
    );
    // Data holding \r\n is taken by length.
    assert_eq!(
        replies(b"VALUE k 0 4\r\n\r\n\r\n\r\n"),
        vec![value(b"k", 0, b"\r\n\r\n", None)]
    );
}

#[test]
fn parses_status_lines() {
    assert_eq!(
        replies(
            b"STORED\r\nNOT_STORED\r\nEXISTS\r\nNOT_FOUND\r\nDELETED\r\nTOUCHED\r\nOK\r\n\
              RESET\r\n15\r\n0\r\nVERSION 1.6.18\r\nSTAT pid 6462\r\nSTAT libevent 2.1.12-stable\r\n"
        ),
        vec![
            Response::Stored,
            Response::NotStored,
            Response::Exists,
            Response::NotFound,
            Response::Deleted,
            Response::Touched,
            Response::Ok,
            Response::Reset,
            Response::Number(15),
            Response::Number(0),
            Response::Version(b"1.6.18".to_vec()),
            Response::Stat {
                name: b"pid".to_vec(),
                value: b"6462".to_vec()
            },
            Response::Stat {
                name: b"libevent".to_vec(),
                value: b"2.1.12-stable".to_vec()
            },
        ]
    );
}

#[test]
fn parses_error_lines() {
    assert_eq!(
        replies(
            b"ERROR\r\nERROR cannot pipeline other commands before metadump\r\n\
              CLIENT_ERROR bad data chunk\r\nSERVER_ERROR object too large for cache\r\n\
              BUSY currently processing crawler request\r\n"
        ),
        vec![
            Response::Error { message: None },
            Response::Error {
                message: Some(b"cannot pipeline other commands before metadump".to_vec())
            },
            Response::ClientError(b"bad data chunk".to_vec()),
            Response::ServerError(b"object too large for cache".to_vec()),
            Response::Busy(b"currently processing crawler request".to_vec()),
        ]
    );
}

#[test]
fn parses_meta_replies() {
    // memcached 1.6.18: `mg plain v f t`, `mg plain v`, `mg plain f t`,
    // `mg plain`, `mg nokey v f t`, `ms a 2`, `md a`, `mn`.
    let got = replies(
        b"VA 3 f7 t98\r\nabc\r\nVA 3\r\nabc\r\nHD f7 t98\r\nHD\r\nEN\r\nHD\r\nNF\r\nMN\r\n",
    );
    assert_eq!(
        got[0],
        Response::MetaValue {
            flags: MetaFlags(b"f7 t98".to_vec()),
            data: b"abc".to_vec()
        }
    );
    if let Response::MetaValue { flags, .. } = &got[0] {
        assert_eq!(flags.client_flags(), Some(7));
        assert_eq!(flags.ttl(), Some(98));
        assert_eq!(flags.cas(), None);
    }
    assert_eq!(
        got[1],
        Response::MetaValue {
            flags: MetaFlags(Vec::new()),
            data: b"abc".to_vec()
        }
    );
    let statuses: Vec<MetaStatus> = got[2..]
        .iter()
        .map(|r| match r {
            Response::Meta { status, .. } => *status,
            other => panic!("{other:?}"),
        })
        .collect();
    use MetaStatus::*;
    assert_eq!(statuses, [Hit, Hit, Miss, Hit, NotFound, Noop]);
    let no_expiry = MetaFlags(&b"f0 t-1 c265 kplain"[..]);
    assert_eq!(no_expiry.ttl(), Some(-1));
    assert_eq!(no_expiry.cas(), Some(265));
    assert_eq!(no_expiry.get(b'k'), Some(&b"plain"[..]));
}

#[test]
fn parses_metadump_lines() {
    // memcached 1.6.18 `lru_crawler metadump all`: lines end in \n alone.
    let dump = b"key=plain exp=1795303143 la=1795303043 cas=265 fetch=no cls=1 size=71\n\
                 key=sp%2520x exp=-1 la=1795303043 cas=266 fetch=yes cls=1 size=66\n\
                 key=a%01%FFb exp=-1 la=1795303043 cas=267 fetch=no cls=1 size=64\n\
                 END\r\n";
    let got = replies(dump);
    assert_eq!(got.len(), 4);
    assert_eq!(
        got[0],
        Response::Metadump(MetadumpEntry {
            key: b"plain".to_vec(),
            exp: 1795303143,
            last_access: Some(1795303043),
            cas: Some(265),
            fetched: Some(false),
            class: Some(1),
            size: Some(71),
            flags: None,
        })
    );
    let mut key = Vec::new();
    let Response::Metadump(entry) = &got[1] else {
        panic!()
    };
    assert_eq!(entry.exp, -1);
    assert_eq!(entry.fetched, Some(true));
    entry.decoded_key(&mut key).unwrap();
    assert_eq!(key, b"sp%20x");
    let Response::Metadump(entry) = &got[2] else {
        panic!()
    };
    entry.decoded_key(&mut key).unwrap();
    assert_eq!(key, b"a\x01\xffb");
    assert_eq!(got[3], Response::End);
    // A later version's extra fields are kept or ignored.
    let (reply, _) = parse_reply(b"key=k exp=-1 la=1 cas=2 fetch=no cls=1 size=60 flags=7 new=x\n")
        .unwrap()
        .unwrap();
    let Response::Metadump(entry) = reply else {
        panic!()
    };
    assert_eq!(entry.flags, Some(7));
}

#[test]
fn decode_key_rejects_broken_escapes() {
    let mut out = Vec::new();
    assert_eq!(
        decode_key(b"a%2", &mut out),
        Err(ReplyError::BadKeyEncoding)
    );
    assert_eq!(
        decode_key(b"a%zz", &mut out),
        Err(ReplyError::BadKeyEncoding)
    );
    out.clear();
    assert_eq!(decode_key(b"%41%7e", &mut out), Ok(()));
    assert_eq!(out, b"A~");
}

#[test]
fn replies_arrive_in_pieces() {
    let stream: &[u8] =
        b"VALUE a 5 3 9\r\nabc\r\nEND\r\nVA 2 f1\r\nhi\r\nkey=a exp=-1 la=1 cas=2 fetch=no cls=1 size=3\nSTAT x y\r\n";
    let whole = replies(stream);
    let mut pos = 0;
    let mut got = Vec::new();
    while pos < stream.len() {
        let mut end = pos;
        let (reply, used) = loop {
            if let Some(done) = parse_reply(&stream[pos..end]).unwrap() {
                break done;
            }
            end += 1;
            assert!(end <= stream.len(), "never completed");
        };
        assert_eq!(pos + used, end, "complete exactly at the last byte");
        got.push(reply.map(|b| b.to_vec()));
        pos = end;
    }
    assert_eq!(got, whole);
}

#[test]
fn malformed_replies() {
    assert_eq!(parse_reply(b"WHAT\r\n"), Err(ReplyError::Unrecognized));
    assert_eq!(
        parse_reply(b"VALUE a x 3\r\n"),
        Err(ReplyError::Malformed("VALUE"))
    );
    assert_eq!(
        parse_reply(b"VALUE a 0 3 1 2\r\n"),
        Err(ReplyError::Malformed("VALUE"))
    );
    assert_eq!(
        parse_reply(b"VALUE a 4294967296 0\r\n"),
        Err(ReplyError::Malformed("VALUE"))
    );
    assert_eq!(
        parse_reply(b"VALUE a 0 3\r\nabcXY"),
        Err(ReplyError::BadDataTerminator)
    );
    assert_eq!(parse_reply(b"VA x\r\n"), Err(ReplyError::Malformed("VA")));
    assert_eq!(
        parse_reply(b"STAT x\r\n"),
        Err(ReplyError::Malformed("STAT"))
    );
    assert_eq!(parse_reply(b"END x\r\n"), Err(ReplyError::Unrecognized));
    assert_eq!(parse_reply(b"-5\r\n"), Err(ReplyError::Unrecognized));
    assert_eq!(
        parse_reply(b"key= exp=1\n"),
        Err(ReplyError::Malformed("metadump"))
    );
    assert_eq!(
        parse_reply(b"key=a la=1\n"),
        Err(ReplyError::Malformed("metadump"))
    );
    assert_eq!(
        parse_reply(&vec![b'x'; MAX_REPLY_LINE + 1]),
        Err(ReplyError::LineTooLong)
    );
    assert_eq!(parse_reply(&[b'x'; 100]), Ok(None));
}

// ---------------------------------------------------------- live memcached

/// Send `request` and read replies until `done` says the last one arrived.
fn exchange(
    conn: &mut std::net::TcpStream,
    request: &[u8],
    mut done: impl FnMut(&Owned) -> bool,
) -> Vec<Owned> {
    conn.write_all(request).unwrap();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        while let Some((reply, used)) = parse_reply(&buf).expect("reply parses") {
            let reply = reply.map(|b| b.to_vec());
            buf.drain(..used);
            let last = done(&reply);
            out.push(reply);
            if last {
                assert!(buf.is_empty(), "trailing bytes {buf:?}");
                return out;
            }
        }
        let n = conn.read(&mut chunk).expect("read");
        assert!(n > 0, "server closed; got {out:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn one(conn: &mut std::net::TcpStream, request: &[u8]) -> Owned {
    exchange(conn, request, |_| true).remove(0)
}

fn until_end(conn: &mut std::net::TcpStream, request: &[u8]) -> Vec<Owned> {
    exchange(conn, request, |r| *r == Response::End)
}

#[test]
fn live_storage_and_retrieval_round_trip() {
    let Some(server) = Memcached::start(&[]) else {
        return;
    };
    let mut conn = server.connect();
    let send = |f: &dyn Fn(&mut BytesMut)| encoded(f);

    let set =
        send(&|b| client::storage(b, StorageCommand::Set, b"k", 7, 0, b"abc", false).unwrap());
    assert_eq!(one(&mut conn, &set), Response::Stored);
    let add = send(&|b| client::storage(b, StorageCommand::Add, b"k", 0, 0, b"x", false).unwrap());
    assert_eq!(one(&mut conn, &add), Response::NotStored);
    let append =
        send(&|b| client::storage(b, StorageCommand::Append, b"k", 0, 0, b"d", false).unwrap());
    assert_eq!(one(&mut conn, &append), Response::Stored);
    let prepend =
        send(&|b| client::storage(b, StorageCommand::Prepend, b"k", 0, 0, b"_", false).unwrap());
    assert_eq!(one(&mut conn, &prepend), Response::Stored);
    let replace = send(&|b| {
        client::storage(b, StorageCommand::Replace, b"nokey", 0, 0, b"x", false).unwrap()
    });
    assert_eq!(one(&mut conn, &replace), Response::NotStored);

    let got = until_end(
        &mut conn,
        &send(&|b| client::gets(b, [&b"k"[..], b"nokey"]).unwrap()),
    );
    let [Response::Value {
        key,
        flags,
        data,
        cas: Some(cas),
    }, Response::End] = &got[..]
    else {
        panic!("{got:?}")
    };
    assert_eq!((&key[..], *flags, &data[..]), (&b"k"[..], 7, &b"_abcd"[..]));
    let cas_unique = *cas;

    let stale = send(&|b| client::cas(b, b"k", 0, 0, b"z", cas_unique + 1000, false).unwrap());
    assert_eq!(one(&mut conn, &stale), Response::Exists);
    let fresh = send(&|b| client::cas(b, b"k", 0, 0, b"z", cas_unique, false).unwrap());
    assert_eq!(one(&mut conn, &fresh), Response::Stored);

    // noreply: nothing comes back, the next reply is the version.
    let mut quiet =
        send(&|b| client::storage(b, StorageCommand::Set, b"q", 0, 0, b"1", true).unwrap());
    quiet.extend(send(&|b| client::delete(b, b"nokey", true).unwrap()));
    quiet.extend(send(&client::version));
    assert!(matches!(one(&mut conn, &quiet), Response::Version(v) if v.starts_with(b"1.")));

    let set_n =
        send(&|b| client::storage(b, StorageCommand::Set, b"n", 0, 0, b"10", false).unwrap());
    assert_eq!(one(&mut conn, &set_n), Response::Stored);
    let incr = send(&|b| client::arith(b, ArithCommand::Incr, b"n", 5, false).unwrap());
    assert_eq!(one(&mut conn, &incr), Response::Number(15));
    let decr = send(&|b| client::arith(b, ArithCommand::Decr, b"n", 100, false).unwrap());
    assert_eq!(one(&mut conn, &decr), Response::Number(0));

    let touch = send(&|b| client::touch(b, b"k", 100, false).unwrap());
    assert_eq!(one(&mut conn, &touch), Response::Touched);
    let got = until_end(&mut conn, &send(&|b| client::gat(b, 200, [b"k"]).unwrap()));
    assert_eq!(got, vec![value(b"k", 0, b"z", None), Response::End]);
    let got = until_end(&mut conn, &send(&|b| client::gats(b, 200, [b"k"]).unwrap()));
    assert!(matches!(&got[0], Response::Value { cas: Some(_), .. }));

    let delete = send(&|b| client::delete(b, b"k", false).unwrap());
    assert_eq!(one(&mut conn, &delete), Response::Deleted);
    assert_eq!(one(&mut conn, &delete), Response::NotFound);
    assert_eq!(
        one(&mut conn, &send(&|b| client::flush_all(b, None, false))),
        Response::Ok
    );
    let got = until_end(&mut conn, &send(&|b| client::get(b, [b"n"]).unwrap()));
    assert_eq!(got, vec![Response::End]);

    let stats = exchange(&mut conn, b"stats\r\n", |r| *r == Response::End);
    assert!(stats
        .iter()
        .any(|r| matches!(r, Response::Stat { name, .. } if name == b"pid")));
}

#[test]
fn live_meta_get_and_metadump() {
    let Some(server) = Memcached::start(&[]) else {
        return;
    };
    let mut conn = server.connect();
    let keys: [&[u8]; 3] = [b"plain", b"sp%20x", b"a\x01\xffb\t"];
    for key in keys {
        let set = encoded(|b| {
            client::storage(b, StorageCommand::Set, key, 7, 1000, b"abc", false).unwrap()
        });
        assert_eq!(one(&mut conn, &set), Response::Stored);
    }
    let never =
        encoded(|b| client::storage(b, StorageCommand::Set, b"never", 0, 0, b"v", false).unwrap());
    assert_eq!(one(&mut conn, &never), Response::Stored);

    let got = one(
        &mut conn,
        &encoded(|b| client::meta_get(b, b"plain").unwrap()),
    );
    let Response::MetaValue { flags, data } = got else {
        panic!("{got:?}")
    };
    assert_eq!(data, b"abc");
    assert_eq!(flags.client_flags(), Some(7));
    let ttl = flags.ttl().unwrap();
    assert!((990..=1000).contains(&ttl), "{ttl}");
    let got = one(
        &mut conn,
        &encoded(|b| client::meta_get(b, b"never").unwrap()),
    );
    let Response::MetaValue { flags, .. } = got else {
        panic!("{got:?}")
    };
    assert_eq!(flags.ttl(), Some(-1));
    let got = one(
        &mut conn,
        &encoded(|b| client::meta_get(b, b"nokey").unwrap()),
    );
    assert_eq!(
        got,
        Response::Meta {
            status: MetaStatus::Miss,
            flags: MetaFlags(Vec::new())
        }
    );
    assert_eq!(
        one(&mut conn, &encoded(client::meta_noop)),
        Response::Meta {
            status: MetaStatus::Noop,
            flags: MetaFlags(Vec::new())
        }
    );

    // The crawler may still be busy right after start: retry a little.
    let mut dump = Vec::new();
    for _ in 0..50 {
        let mut conn = server.connect();
        let got = exchange(&mut conn, &encoded(client::lru_crawler_metadump_all), |r| {
            matches!(r, Response::End | Response::Busy(_))
        });
        if matches!(got.last(), Some(Response::End)) {
            dump = got;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut found = Vec::new();
    for reply in &dump[..dump.len() - 1] {
        let Response::Metadump(entry) = reply else {
            panic!("{reply:?}")
        };
        let mut key = Vec::new();
        entry.decoded_key(&mut key).unwrap();
        if key == b"never" {
            assert_eq!(entry.exp, -1);
        } else {
            assert!(entry.exp > 0);
        }
        found.push(key);
    }
    found.sort();
    let mut expected: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
    expected.push(b"never".to_vec());
    expected.sort();
    assert_eq!(found, expected);
}

#[test]
fn live_error_replies_parse() {
    let Some(server) = Memcached::start(&[]) else {
        return;
    };
    let mut conn = server.connect();
    assert_eq!(
        one(&mut conn, b"bogus\r\n"),
        Response::Error { message: None }
    );
    // memcached reads "xy" as the data block's "\r\n": bad data chunk; the
    // leftover "z" is then a command of its own.
    let mut count = 0;
    let got = exchange(&mut conn, b"set k 0 0 1\r\nxyz\r\n", |_| {
        count += 1;
        count == 2
    });
    assert_eq!(
        got,
        vec![
            Response::ClientError(b"bad data chunk".to_vec()),
            Response::Error { message: None }
        ]
    );
    let mut big = b"set k 0 0 2000000\r\n".to_vec();
    big.resize(big.len() + 2_000_000, b'x');
    big.extend(b"\r\n");
    assert_eq!(
        one(&mut conn, &big),
        Response::ServerError(b"object too large for cache".to_vec())
    );
    assert_eq!(
        one(&mut conn, b"incr nokey abc\r\n"),
        Response::ClientError(b"invalid numeric delta argument".to_vec())
    );
}
