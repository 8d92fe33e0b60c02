//! Ring lookup with realistic keys (~20-40 bytes), against the raw xxh3 cost.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use memshift_ring::{xxh3, Ring, RingConfig, ShardSpec};

fn keys() -> Vec<Vec<u8>> {
    // 4096 distinct keys, 20-40 bytes, cycled so lookups hit varied buckets.
    (0..4096u64)
        .map(|n| {
            let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let k = match n % 4 {
                0 => format!("user:{n}:session:{:08x}", h as u32),
                1 => format!("product:{:012x}:price", h >> 16),
                2 => format!("cache:v2:page:/catalog/{n}"),
                _ => format!(
                    "rl:{}.{}.{}.{}:{}",
                    h & 255,
                    (h >> 8) & 255,
                    (h >> 16) & 255,
                    (h >> 24) & 255,
                    n % 60
                ),
            };
            k.into_bytes()
        })
        .collect()
}

fn ring(shards: usize, vnodes: u32) -> Ring {
    let specs: Vec<ShardSpec> = (0..shards)
        .map(|i| ShardSpec::new(format!("10.0.0.{}:6379", i + 1), 1))
        .collect();
    Ring::new(
        &specs,
        RingConfig {
            vnodes,
            seed: 0,
            hash_tag: None,
        },
    )
    .expect("ring")
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let avg = keys.iter().map(|k| k.len()).sum::<usize>() as f64 / keys.len() as f64;
    eprintln!("ring bench: {} keys, average {avg:.1} bytes", keys.len());
    let mut group = c.benchmark_group("ring");

    let mut i = 0usize;
    group.bench_function("xxh3_only", |b| {
        b.iter(|| {
            i = (i + 1) & 4095;
            xxh3(0, black_box(&keys[i]))
        })
    });
    for (shards, vnodes) in [(3, 160), (10, 160), (10, 2560)] {
        let r = ring(shards, vnodes);
        group.bench_function(format!("locate_{shards}x{vnodes}"), |b| {
            b.iter(|| {
                i = (i + 1) & 4095;
                r.locate(black_box(&keys[i]))
            })
        });
    }
    let tagged = Ring::new(
        ring(10, 160).shards(),
        RingConfig {
            vnodes: 160,
            seed: 0,
            hash_tag: Some((b'{', b'}')),
        },
    )
    .expect("ring");
    group.bench_function("locate_10x160_hash_tag_on", |b| {
        b.iter(|| {
            i = (i + 1) & 4095;
            tagged.locate(black_box(&keys[i]))
        })
    });
    group.bench_function("build_10x160", |b| b.iter(|| ring(10, 160)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
