//! The binary codec: what memcached 1.6.18 accepts, rejects and answers
//! (each case checked against a live 1.6.18 with a raw socket).

use bytes::BytesMut;
use memshift_protocol::memcache::binary::{
    parse, read_header, response, Command, Error, Header, Opcode, Request, Status, StoreMode,
    HEADER_LEN,
};
use memshift_protocol::memcache::ParseLimits;

fn req(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    req_with(opcode, key, extras, value, 0, None)
}

fn req_with(
    opcode: u8,
    key: &[u8],
    extras: &[u8],
    value: &[u8],
    cas: u64,
    body_len: Option<u32>,
) -> Vec<u8> {
    let header = Header {
        magic: 0x80,
        opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket: 0,
        body_len: body_len.unwrap_or((key.len() + extras.len() + value.len()) as u32),
        opaque: 0xdeadbeef,
        cas,
    };
    let mut out = header.encode().to_vec();
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

fn ok(buf: &[u8]) -> (Request<&[u8]>, usize) {
    parse(buf, &ParseLimits::default())
        .expect("valid request")
        .expect("complete request")
}

fn err(buf: &[u8]) -> Error {
    parse(buf, &ParseLimits::default()).expect_err("rejected request")
}

#[test]
fn get_family_reads_key_and_opaque() {
    for (op, with_key) in [(0x00, false), (0x09, false), (0x0c, true), (0x0d, true)] {
        let buf = req(op, b"foo", b"", b"");
        let (r, used) = ok(&buf);
        assert_eq!(used, buf.len());
        assert_eq!(r.key, b"foo");
        assert_eq!(r.header.opaque, 0xdeadbeef);
        assert_eq!(
            r.command,
            Command::Get {
                with_key,
                touch: None
            }
        );
        assert_eq!(r.quiet(), op == 0x09 || op == 0x0d);
    }
}

#[test]
fn set_reads_flags_exptime_value_and_cas() {
    let mut extras = 7u32.to_be_bytes().to_vec();
    extras.extend_from_slice(&30u32.to_be_bytes());
    let buf = req_with(0x11, b"k", &extras, b"hello", 42, None);
    let (r, used) = ok(&buf);
    assert_eq!(used, buf.len());
    assert_eq!(r.opcode, Opcode::SetQ);
    assert_eq!(r.header.cas, 42);
    assert_eq!(
        r.command,
        Command::Store {
            mode: StoreMode::Set,
            flags: 7,
            exptime: 30,
            value: &b"hello"[..]
        }
    );
}

#[test]
fn incomplete_until_every_byte_of_the_value() {
    let buf = req(0x01, b"k", &[0; 8], b"hello");
    for cut in 0..buf.len() {
        assert_eq!(
            parse(&buf[..cut], &ParseLimits::default()),
            Ok(None),
            "cut {cut}"
        );
    }
}

#[test]
fn arith_reads_delta_initial_and_expiration() {
    let mut extras = 3u64.to_be_bytes().to_vec();
    extras.extend_from_slice(&10u64.to_be_bytes());
    extras.extend_from_slice(&u32::MAX.to_be_bytes());
    let buf = req(0x06, b"n", &extras, b"");
    let (r, _) = ok(&buf);
    assert_eq!(
        r.command,
        Command::Arith {
            decrement: true,
            delta: 3,
            initial: 10,
            exptime: u32::MAX
        }
    );
}

#[test]
fn stat_and_touch_leave_extra_body_bytes_for_the_next_request() {
    // memcached consumes header + extras + key only.
    let buf = req_with(0x10, b"items", b"", b"", 0, Some(10));
    let (_, used) = ok(&buf);
    assert_eq!(used, HEADER_LEN + 5);
}

#[test]
fn bad_magic_closes_without_a_reply() {
    let mut buf = req(0x0a, b"", b"", b"");
    buf[0] = 0x81;
    let e = err(&buf);
    assert_eq!(e, Error::BadMagic(0x81));
    assert!(e.closes());
    assert_eq!(e.status(), None);
}

#[test]
fn key_longer_than_body_is_unknown_command_and_closes() {
    let buf = req_with(0x00, b"abc", b"", b"", 0, Some(1));
    let e = err(&buf);
    assert!(matches!(e, Error::BodyTooShort(_)));
    assert_eq!(e.status(), Some(Status::UnknownCommand));
    assert!(e.closes());
}

#[test]
fn long_key_and_wrong_lengths_are_invalid_arguments_and_close() {
    let e = err(&req(0x00, &[b'k'; 251], b"", b""));
    assert!(matches!(e, Error::KeyTooLong(_)));
    assert_eq!(e.status(), Some(Status::InvalidArguments));
    assert!(e.closes());
    for bad in [
        req(0x0b, b"k", b"", b""),      // version with a key
        req(0x00, b"k", b"xx", b""),    // get with extras
        req(0x05, b"c", &[0; 16], b""), // incr without expiration
        req(0x01, b"k", &[0; 4], b"v"), // set with short extras
        req(0x1c, b"k", b"", b""),      // touch without extras
        req(0x08, b"", &[0; 8], b""),   // flush with 8 bytes extras
    ] {
        let e = err(&bad);
        assert!(matches!(e, Error::InvalidArguments(_)), "{e:?}");
        assert!(e.closes());
    }
}

#[test]
fn unknown_opcode_swallows_the_body_after_extras_and_key() {
    // Verbosity is not served by 1.6.18.
    let e = err(&req(0x1b, b"", &[0, 0, 0, 1], b""));
    assert_eq!(e.status(), Some(Status::UnknownCommand));
    assert!(!e.closes());
    assert_eq!(e.consumed(), HEADER_LEN + 4);
    assert_eq!(e.swallow(), 4);
    let e = err(&req(0x55, b"kk", b"", b"vvv"));
    assert_eq!((e.consumed(), e.swallow()), (HEADER_LEN + 2, 5));
}

#[test]
fn too_large_value_is_swallowed_and_set_names_the_stale_key() {
    let limits = ParseLimits {
        max_item_size: 100,
        ..ParseLimits::default()
    };
    let buf = req(0x01, b"big", &[0; 8], &[b'x'; 64]);
    let e = parse(&buf[..HEADER_LEN + 11], &limits).expect_err("too large");
    assert_eq!(e.status(), Some(Status::TooLarge));
    assert_eq!((e.consumed(), e.swallow()), (HEADER_LEN + 11, 64));
    assert_eq!(e.stale_key(), Some(HEADER_LEN + 8..HEADER_LEN + 11));
    let add = req(0x02, b"big", &[0; 8], &[b'x'; 64]);
    assert_eq!(
        parse(&add, &limits).expect_err("too large").stale_key(),
        None
    );
    // 100 - 59 - 3 = 38 bytes fit.
    assert!(parse(&req(0x01, b"big", &[0; 8], &[b'x'; 38]), &limits).is_ok());
    assert!(parse(&req(0x01, b"big", &[0; 8], &[b'x'; 39]), &limits).is_err());
}

#[test]
fn read_header_waits_for_extras_and_key() {
    let buf = req(0x00, b"key", b"", b"");
    assert_eq!(read_header(&buf[..HEADER_LEN + 2]), Ok(None));
    assert!(read_header(&buf).expect("ok").is_some());
}

#[test]
fn responses_are_memcacheds_bytes() {
    let mut buf = BytesMut::new();
    response::put_error(&mut buf, 0x04, 0xdeadbeef, Status::KeyNotFound);
    let mut want = vec![
        0x81, 0x04, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0xde, 0xad, 0xbe, 0xef,
    ];
    want.extend_from_slice(&[0; 8]);
    want.extend_from_slice(b"Not found");
    assert_eq!(&buf[..], &want[..]);

    buf.clear();
    response::put_value(&mut buf, 0x0c, 1, 5, 7, b"k", b"val");
    let mut want = vec![0x81, 0x0c, 0, 1, 4, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 1];
    want.extend_from_slice(&5u64.to_be_bytes());
    want.extend_from_slice(&7u32.to_be_bytes());
    want.extend_from_slice(b"kval");
    assert_eq!(&buf[..], &want[..]);

    buf.clear();
    response::put_counter(&mut buf, 0x05, 0, 3, 15);
    assert_eq!(buf.len(), HEADER_LEN + 8);
    assert_eq!(&buf[HEADER_LEN..], &15u64.to_be_bytes());
}
