//! `direct` writes the bytes the text detour wrote: each case is rendered
//! through `cmd::Text` and re-encoded by `reply::encode` (the old path,
//! still every other request's), and through `direct::Direct`.

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::binary::{Opcode, StoreMode};
use memshift_protocol::memcache::{MetaCommand, MetaFlags, StorageCommand};
use memshift_protocol::resp::Frame as RespFrame;

use super::super::cmd::{Sink, Text};
use super::super::pending::{Kind, MetaOp};
use super::direct::Direct;
use super::{reply, store, Answer, Frame};
use crate::router::Backend;

/// What the command's render hands its sink.
enum Step<'a> {
    Item {
        flags: u32,
        cas: u64,
        data: &'a [u8],
    },
    End,
    Text(&'a [u8]),
    Meta(&'a MetaOp, &'a RespFrame),
}

fn run<S: Sink>(sink: &mut S, out: &mut BytesMut, steps: &[Step<'_>]) {
    for step in steps {
        match *step {
            Step::Item { flags, cas, data } => sink.item(out, b"key", flags, data, Some(cas)),
            Step::End => sink.end_items(out),
            Step::Text(text) => sink.text(out, |t| t.extend_from_slice(text)),
            Step::Meta(op, reply) => {
                sink.meta_reply(out, op, reply);
            }
        }
    }
}

/// The old path's bytes and the direct path's.
fn both(frame: &Frame, steps: &[Step<'_>]) -> (BytesMut, BytesMut) {
    let mut text = BytesMut::new();
    run(&mut Text, &mut text, steps);
    let mut old = BytesMut::new();
    reply::encode(&mut old, frame, &text);
    let mut new = BytesMut::new();
    let mut direct = Direct::new(frame, BytesMut::new());
    run(&mut direct, &mut new, steps);
    (old, new)
}

/// Equal, and empty exactly when `silent`.
fn assert_same(frame: &Frame, steps: &[Step<'_>], silent: bool) {
    let (old, new) = both(frame, steps);
    assert_eq!(old, new, "{frame:?}");
    assert_eq!(new.is_empty(), silent, "{frame:?}");
}

fn frame(opcode: Opcode, quiet: bool, key: &'static [u8], answer: Answer) -> Frame {
    Frame {
        seq: 0,
        opcode: opcode as u8,
        opaque: 0xdead_beef,
        quiet,
        key: Bytes::from_static(key),
        answer,
    }
}

/// The get family: (opcode, quiet, with_key).
const GETS: [(Opcode, bool, bool); 8] = [
    (Opcode::Get, false, false),
    (Opcode::GetQ, true, false),
    (Opcode::GetK, false, true),
    (Opcode::GetKQ, true, true),
    (Opcode::Gat, false, false),
    (Opcode::GatQ, true, false),
    (Opcode::GatK, false, true),
    (Opcode::GatKQ, true, true),
];

#[test]
fn get_hit_miss_and_failure() {
    let big = vec![b'x'; 70_000];
    for (opcode, quiet, with_key) in GETS {
        let key: &'static [u8] = if with_key { b"key" } else { b"" };
        let f = frame(opcode, quiet, key, Answer::Value { with_key });
        for (flags, cas, data) in [
            (0, 1, &b"v"[..]),
            (u32::MAX, u64::MAX, &b""[..]),
            (7, 123_456_789, &b"a b\r\nEND\r\n"[..]),
            (1, 2, &big[..]),
        ] {
            let hit = [Step::Item { flags, cas, data }, Step::End];
            assert_same(&f, &hit, false);
        }
        assert_same(&f, &[Step::End], quiet);
        let failure = [Step::Text(b"SERVER_ERROR backend timeout\r\n")];
        assert_same(&f, &failure, false);
    }
}

fn meta_op(kind: Kind, tokens: &'static [u8]) -> MetaOp {
    let command = match kind {
        Kind::Store(_) => MetaCommand::Set,
        _ => MetaCommand::Delete,
    };
    MetaOp {
        command,
        key: Bytes::from_static(b"key"),
        tokens: Bytes::from_static(tokens),
        flags: MetaFlags::default(),
        side: Backend::Redis,
        kind,
        new_cas: 0x0123_4567_89ab_cdef,
        data: Bytes::new(),
        shadow: None,
        now: 0,
    }
}

/// Every Redis reply a write may get (and ones that say nothing).
fn redis_replies() -> Vec<RespFrame> {
    let mut replies: Vec<RespFrame> = (-1..=3).map(RespFrame::Integer).collect();
    replies.push(RespFrame::Simple(Bytes::from_static(b"OK")));
    replies.push(RespFrame::Null);
    replies.push(RespFrame::Error(Bytes::from_static(b"ERR no")));
    replies.push(RespFrame::Bulk(Bytes::from_static(b"1")));
    replies
}

#[test]
fn stores_by_mode_cas_and_quiet() {
    let stores = [
        (
            Opcode::Set,
            Opcode::SetQ,
            StoreMode::Set,
            StorageCommand::Set,
        ),
        (
            Opcode::Add,
            Opcode::AddQ,
            StoreMode::Add,
            StorageCommand::Add,
        ),
        (
            Opcode::Replace,
            Opcode::ReplaceQ,
            StoreMode::Replace,
            StorageCommand::Replace,
        ),
    ];
    for (loud, quiet_op, mode, command) in stores {
        for cas in [0, 42] {
            // What binary_store sends: a CAS makes it a compare-and-swap.
            let (kind, tokens): (_, &'static [u8]) = match cas {
                0 => (Kind::Store(command), b"c F5 T0 MS"),
                _ => (Kind::Store(StorageCommand::Cas), b"c F5 T0 C42 MS"),
            };
            let op = meta_op(kind, tokens);
            for (opcode, quiet) in [(loud, false), (quiet_op, true)] {
                let f = frame(opcode, quiet, b"", store::answer(mode, cas));
                check_write(&f, &op);
            }
        }
    }
}

#[test]
fn concat_and_delete() {
    let not_stored = Answer::Store {
        not_stored: memshift_protocol::memcache::binary::Status::NotStored,
    };
    let cases: [(Opcode, Opcode, Answer, Kind, &'static [u8]); 4] = [
        (
            Opcode::Append,
            Opcode::AppendQ,
            not_stored,
            Kind::Store(StorageCommand::Append),
            b"c MA",
        ),
        (
            Opcode::Prepend,
            Opcode::PrependQ,
            not_stored,
            Kind::Store(StorageCommand::Prepend),
            b"c MP C9",
        ),
        (
            Opcode::Delete,
            Opcode::DeleteQ,
            Answer::Delete,
            Kind::Delete,
            b"",
        ),
        (
            Opcode::Delete,
            Opcode::DeleteQ,
            Answer::Delete,
            Kind::DeleteCas,
            b"C9",
        ),
    ];
    for (loud, quiet_op, answer, kind, tokens) in cases {
        let op = meta_op(kind, tokens);
        for (opcode, quiet) in [(loud, false), (quiet_op, true)] {
            check_write(&frame(opcode, quiet, b"", answer), &op);
        }
    }
}

/// Every reply, and the backend failures the render hands over as text.
fn check_write(f: &Frame, op: &MetaOp) {
    let mut outcomes = 0;
    for redis in redis_replies() {
        let (old, new) = both(f, &[Step::Meta(op, &redis)]);
        assert_eq!(old, new, "{f:?} {op:?} {redis:?}");
        outcomes += usize::from(super::super::cmd::write_outcome(op, &redis).is_some());
    }
    // Not only failures: some replies are answered directly.
    assert!(outcomes > 0, "{op:?}");
    for line in [
        &b"SERVER_ERROR backend unavailable\r\n"[..],
        b"NS\r\n",
        b"HD c5\r\n",
    ] {
        let (old, new) = both(f, &[Step::Text(line)]);
        assert_eq!(old, new, "{f:?} {line:?}");
    }
}
