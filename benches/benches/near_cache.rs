//! A near-cache hit as a session makes it: look the key up in this
//! thread's store (epoch, generation, expiry and key checked) and copy the
//! item's data out, over a store holding 100,000 items of 100 bytes read
//! with zipf 0.99 (the `compare.sh` near-cache scenario): the store's
//! memory is larger than the CPU's caches, so what a hit costs is mostly
//! the cache lines it touches.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use memshift_proxy::metrics::Metrics;
use memshift_proxy::near_cache::store::{fill, lookup, Hit, Limits, Lookup};
use memshift_proxy::near_cache::{self, Tracking};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use tokio::time::Instant;

const KEYS: usize = 100_000;
const READS: usize = 1 << 20;

/// Every key the same length, so the reads can sit in one array.
const KEY_LEN: usize = 10;

fn key(i: usize) -> Vec<u8> {
    format!("key:{i:06}").into_bytes()
}

fn hits(c: &mut Criterion) {
    near_cache::init(Arc::new(Metrics::new()), 1);
    let Some(near) = near_cache::get() else {
        return;
    };
    let tracking = Arc::new(Tracking::default());
    tracking.tracking_again();
    let limits = Limits {
        max_bytes: 1 << 30,
        max_ttl: Duration::from_secs(3600),
        admit_reads: 1,
        admit_window: Duration::from_secs(60),
        coalesce: false,
    };
    let data = Bytes::from(vec![b'x'; 100]);
    // Twice: a first fill bumps its key's epoch bucket (a new item), which
    // drops the entries of other keys in that bucket; the second finds
    // each item unchanged and bumps nothing.
    for i in (0..KEYS).chain(0..KEYS) {
        let k = key(i);
        if let Lookup::Miss(Some(ticket)) = lookup(near, &tracking, &k, &limits, Instant::now()) {
            let item = Hit {
                flags: 0,
                cas: i as u64,
                data: data.clone(),
            };
            fill(near, ticket, &k, &item, -1, &limits);
        }
    }
    // A session passes its request's arrival time; the items live an hour.
    let now = Instant::now();
    let mut rng = SmallRng::seed_from_u64(27);
    let Ok(zipf) = Zipf::new(KEYS as f64, 0.99) else {
        return;
    };
    // The keys read, one after another in one array: reading them is
    // sequential, so it is not what is measured.
    let reads: Vec<u8> = (0..READS)
        .flat_map(|_| key(zipf.sample(&mut rng) as usize - 1))
        .collect();
    let served = (0..READS)
        .filter(|i| {
            let k = reads
                .get(i * KEY_LEN..(i + 1) * KEY_LEN)
                .unwrap_or_default();
            matches!(lookup(near, &tracking, k, &limits, now), Lookup::Hit(_))
        })
        .count();
    // Keys sharing a fingerprint slot keep dropping each other (a few).
    assert!(
        served * 1000 >= READS * 999,
        "{served} of {READS} reads hit"
    );
    let mut next = 0;
    let mut out = Vec::with_capacity(256);
    c.bench_function("near_cache_hit_zipf_100k", |b| {
        b.iter(|| {
            let at = (next % READS) * KEY_LEN;
            let k = reads.get(at..at + KEY_LEN).unwrap_or_default();
            next += 1;
            if let Lookup::Hit(hit) = lookup(near, &tracking, k, &limits, now) {
                out.clear();
                out.extend_from_slice(hit.data());
            }
            black_box(&out);
        })
    });
}

criterion_group!(benches, hits);
criterion_main!(benches);
