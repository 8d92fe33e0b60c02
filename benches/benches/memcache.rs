//! memcached text protocol: request parsing (server side), reply encoding,
//! and reply parsing (client side).
//!
//! Parse benches run the parser on a request at the front of a buffer, as a
//! session does per request; the request bytes are built once, outside the
//! timed loop. Encode benches reuse one `BytesMut` cleared per iteration, so
//! the figure excludes allocation.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use memshift_protocol::memcache::client::parse_reply;
use memshift_protocol::memcache::{parse_request, reply, ParseLimits, Parsed};

fn bench_parse(c: &mut Criterion, name: &str, request: &[u8]) {
    let limits = ParseLimits::default();
    // Sanity: the bench measures the success path.
    match parse_request(request, &limits) {
        Parsed::Complete { consumed, .. } => assert_eq!(consumed, request.len()),
        other => panic!("{name}: {other:?}"),
    }
    let mut group = c.benchmark_group("memcache_parse");
    group.throughput(Throughput::Bytes(request.len() as u64));
    group.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter(|| {
            let parsed = parse_request(black_box(request), black_box(&limits));
            black_box(matches!(parsed, Parsed::Complete { .. }))
        })
    });
    group.finish();
}

fn parse(c: &mut Criterion) {
    bench_parse(c, "get_single", b"get user:1234567890\r\n");

    let mut multiget = b"get".to_vec();
    for i in 0..100 {
        multiget.extend_from_slice(format!(" user:{i:010}").as_bytes());
    }
    multiget.extend_from_slice(b"\r\n");
    bench_parse(c, "get_100_keys", &multiget);

    let mut set = b"set user:1234567890 0 3600 1024\r\n".to_vec();
    set.extend_from_slice(&[b'v'; 1024]);
    set.extend_from_slice(b"\r\n");
    bench_parse(c, "set_1KiB", &set);
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("memcache_encode");
    for (name, size, cas) in [
        ("value_32B", 32usize, None),
        ("value_1KiB", 1024, None),
        ("value_1KiB_cas", 1024, Some(1234567890123u64)),
    ] {
        let data = vec![b'v'; size];
        let mut buf = BytesMut::with_capacity(4096);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                buf.clear();
                reply::value(
                    &mut buf,
                    black_box(b"user:1234567890"),
                    black_box(42),
                    black_box(&data),
                    black_box(cas),
                );
                black_box(buf.len())
            })
        });
    }
    group.finish();
}

fn client_parse(c: &mut Criterion) {
    let mut value = b"VALUE user:1234567890 42 1024\r\n".to_vec();
    value.extend_from_slice(&[b'v'; 1024]);
    value.extend_from_slice(b"\r\nEND\r\n");
    let mut group = c.benchmark_group("memcache_client_parse");
    group.throughput(Throughput::Bytes(value.len() as u64));
    group.bench_function("value_1KiB_and_end", |b| {
        b.iter(|| {
            let mut pos = 0;
            while let Ok(Some((reply, used))) = parse_reply(black_box(&value[pos..])) {
                black_box(&reply);
                pos += used;
            }
            pos
        })
    });
    group.finish();
}

criterion_group!(benches, parse, encode, client_parse);
criterion_main!(benches);
