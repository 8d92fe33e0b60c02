//! RESP2 codec: reply parsing and command encoding.
//!
//! Parse benches time only the parse loop over a buffer pre-filled with many
//! copies of the reply (refilled outside the timed region), so the figure is
//! per reply, including the zero-copy split and dropping the frame.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use memshift_protocol::resp::{encode_command, CommandWriter, ReplyParser};

fn bulk(payload: &[u8]) -> Vec<u8> {
    let mut v = format!("${}\r\n", payload.len()).into_bytes();
    v.extend_from_slice(payload);
    v.extend_from_slice(b"\r\n");
    v
}

fn bench_parse(c: &mut Criterion, name: &str, reply: &[u8]) {
    // Enough copies for a ~256 KiB buffer, like a busy connection's reads.
    let batch = (256 * 1024 / reply.len()).clamp(8, 4096) as u64;
    let template = reply.repeat(batch as usize);
    let mut group = c.benchmark_group("resp_parse");
    group.throughput(Throughput::Bytes(reply.len() as u64));
    group.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter_custom(|iters| {
            let mut parser = ReplyParser::new();
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(batch);
                let mut buf = BytesMut::from(&template[..n as usize * reply.len()]);
                let start = Instant::now();
                for _ in 0..n {
                    let frame = parser.parse(black_box(&mut buf));
                    black_box(frame.ok().flatten().is_some());
                }
                total += start.elapsed();
                assert!(buf.is_empty());
                left -= n;
            }
            total
        })
    });
    group.finish();
}

fn parse(c: &mut Criterion) {
    bench_parse(c, "bulk_5B", b"$5\r\nhello\r\n");
    bench_parse(c, "bulk_1KiB", &bulk(&[b'v'; 1024]));
    let mut mget = b"*100\r\n".to_vec();
    for i in 0..100 {
        if i % 10 == 9 {
            mget.extend_from_slice(b"$-1\r\n"); // some misses
        } else {
            mget.extend_from_slice(&bulk(format!("value-{i:04}-{}", "x".repeat(20)).as_bytes()));
        }
    }
    bench_parse(c, "mget_100_array", &mget);
    bench_parse(c, "simple_ok", b"+OK\r\n");
    bench_parse(c, "integer", b":1234567\r\n");

    // Floor for any zero-copy bulk parse: split_to + freeze + drop of the
    // resulting Bytes (one atomic increment, one decrement), no parsing.
    let template = b"$5\r\nhello\r\n".repeat(4096);
    c.bench_function("resp_parse/baseline_split_freeze_drop", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(4096);
                let mut buf = BytesMut::from(&template[..n as usize * 11]);
                let start = Instant::now();
                for _ in 0..n {
                    buf.advance(4);
                    let data = buf.split_to(5).freeze();
                    buf.advance(2);
                    black_box(&data);
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("resp_encode");
    let mut buf = BytesMut::with_capacity(64 * 1024);
    group.bench_function("set_key_value_ex_100", |b| {
        b.iter(|| {
            buf.clear();
            CommandWriter::new(&mut buf, 5)
                .arg(b"SET")
                .arg(black_box(b"user:1000:session"))
                .arg(black_box(b"some-cached-value-of-moderate-size"))
                .arg(b"EX")
                .arg_u64(black_box(100));
            black_box(buf.len())
        })
    });
    let keys: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("user:{i}:profile:v2").into_bytes())
        .collect();
    let key_refs: Vec<&[u8]> = std::iter::once(&b"MGET"[..])
        .chain(keys.iter().map(|k| k.as_slice()))
        .collect();
    group.bench_function("mget_100_keys", |b| {
        b.iter(|| {
            buf.clear();
            encode_command(&mut buf, black_box(&key_refs));
            black_box(buf.len())
        })
    });
    group.bench_function("mget_100_keys_writer", |b| {
        b.iter(|| {
            buf.clear();
            let mut w = CommandWriter::new(&mut buf, 101);
            w.arg(b"MGET");
            for k in black_box(&keys) {
                w.arg(k);
            }
            drop(w);
            black_box(buf.len())
        })
    });
    group.finish();
}

criterion_group!(benches, parse, encode);
criterion_main!(benches);
