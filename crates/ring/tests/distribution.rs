//! Balance, movement and weight figures over 1,000,000 sample keys.
//! Each test prints its measured figure (run with `--nocapture`).
//!
//! These are fixed inputs, so the figures are deterministic; but note that a
//! vnode ring's balance depends on the shard ids and seed (the share of a
//! shard with V points has a relative spread of about 1/sqrt(V)):
//! `balance_spread_across_seeds` shows the distribution, not just one draw.

use memshift_ring::{placement_diff, Ring, RingConfig, ShardSpec};

const KEYS: u32 = 1_000_000;

fn keys() -> Vec<Vec<u8>> {
    (0..KEYS).map(|n| format!("key:{n}").into_bytes()).collect()
}

fn shards(n: usize) -> Vec<ShardSpec> {
    (0..n)
        .map(|i| ShardSpec::new(format!("10.0.0.{}:6379", i + 1), 1))
        .collect()
}

fn config(vnodes: u32) -> RingConfig {
    RingConfig {
        vnodes,
        seed: 0,
        hash_tag: None,
    }
}

fn loads(ring: &Ring, keys: &[Vec<u8>]) -> Vec<u64> {
    let mut load = vec![0u64; ring.shard_count()];
    for k in keys {
        load[ring.locate(k)] += 1;
    }
    load
}

/// (max/mean, min/mean)
fn spread(load: &[u64]) -> (f64, f64) {
    let mean = load.iter().sum::<u64>() as f64 / load.len() as f64;
    let max = load.iter().copied().max().unwrap_or(0) as f64;
    let min = load.iter().copied().min().unwrap_or(0) as f64;
    (max / mean, min / mean)
}

#[test]
fn balance_10_shards_160_vnodes() {
    let keys = keys();
    let ring = Ring::new(&shards(10), config(160)).expect("ring");
    let load = loads(&ring, &keys);
    let (max, min) = spread(&load);
    println!("balance: 10 shards x 160 vnodes, {KEYS} keys: max/mean = {max:.4}, min/mean = {min:.4}, loads {load:?}");
    assert!(max <= 1.10, "max/mean {max:.4}");
}

#[test]
fn vnodes_for_5_percent_balance() {
    let keys = keys();
    let mut first = None;
    for vnodes in [160, 320, 640, 1280, 2560] {
        let ring = Ring::new(&shards(10), config(vnodes)).expect("ring");
        let (max, _) = spread(&loads(&ring, &keys));
        println!("balance: 10 shards x {vnodes} vnodes: max/mean = {max:.4}");
        if max <= 1.05 && first.is_none() {
            first = Some(vnodes);
        }
        if vnodes == 2560 {
            assert!(max <= 1.05, "2560 vnodes: max/mean {max:.4}");
        }
    }
    println!("balance: first vnode count (doubling from 160) with max/mean <= 1.05: {first:?}");
    assert_eq!(first, Some(640));
}

/// The same figure over 40 seeds, from exact ring ownership (no sampling
/// noise): what a fleet should expect, whatever its shard ids.
#[test]
fn balance_spread_across_seeds() {
    let ids = shards(10);
    let mut summary = Vec::new();
    for vnodes in [160u32, 640, 2560] {
        let mut maxes: Vec<f64> = (0..40u64)
            .map(|seed| {
                let ring = Ring::new(
                    &ids,
                    RingConfig {
                        seed,
                        ..config(vnodes)
                    },
                )
                .expect("ring");
                let own = ring.ownership();
                own.iter().copied().fold(0.0, f64::max) * own.len() as f64
            })
            .collect();
        maxes.sort_by(f64::total_cmp);
        let (median, p90, worst) = (maxes[20], maxes[36], maxes[39]);
        println!(
            "balance over 40 seeds: {vnodes} vnodes: max/mean median {median:.3}, p90 {p90:.3}, worst {worst:.3}"
        );
        summary.push((vnodes, median, p90));
    }
    // Loose statistical bounds (deterministic inputs); see the printout.
    assert!(summary[0].1 <= 1.16, "{summary:?}");
    assert!(summary[2].2 <= 1.06, "{summary:?}");
}

#[test]
fn adding_a_shard_moves_only_onto_it() {
    let keys = keys();
    let old = Ring::new(&shards(10), config(160)).expect("ring");
    let new_shards = shards(11);
    let new = Ring::new(&new_shards, config(160)).expect("ring");
    let d = placement_diff(&old, &new, keys.iter().map(|k| k.as_slice()));
    let frac = d.moved_fraction();
    println!(
        "movement: 10 -> 11 shards moves {frac:.4} of keys (ideal {:.4}, bound {:.4})",
        1.0 / 11.0,
        1.1 / 11.0
    );
    assert!(frac <= 1.1 / 11.0, "moved {frac:.4}");
    assert!(frac > 0.0);
    assert!(
        d.flows.keys().all(|&(_, to)| to == 10),
        "every move goes to the new shard"
    );
    assert_eq!(
        d.moved, d.new_load[10],
        "and everything on the new shard moved there"
    );

    // Shards are matched by id: inserting the new shard first (shifting every
    // index) describes the same movement.
    let mut reordered = vec![new_shards[10].clone()];
    reordered.extend_from_slice(&new_shards[..10]);
    let new2 = Ring::new(&reordered, config(160)).expect("ring");
    let d2 = placement_diff(&old, &new2, keys.iter().map(|k| k.as_slice()));
    assert_eq!(d2.moved, d.moved);
    assert!(d2.flows.keys().all(|&(_, to)| to == 0));
}

#[test]
fn removing_a_shard_moves_only_its_keys() {
    let keys = keys();
    let all = shards(10);
    let old = Ring::new(&all, config(160)).expect("ring");
    let mut fewer = all.clone();
    let removed = fewer.remove(3);
    let new = Ring::new(&fewer, config(160)).expect("ring");
    let d = placement_diff(&old, &new, keys.iter().map(|k| k.as_slice()));
    println!(
        "movement: removing {} moves {:.4} of keys (its share was {:.4}), spread over {} shards",
        removed.id,
        d.moved_fraction(),
        d.old_load[3] as f64 / d.total as f64,
        d.flows.len()
    );
    assert_eq!(
        d.moved, d.old_load[3],
        "exactly the removed shard's keys move"
    );
    assert!(d.flows.keys().all(|&(from, _)| from == 3));
    assert_eq!(d.flows.len(), 9, "its keys spread over all survivors");
}

#[test]
fn weights_scale_load() {
    let keys = keys();
    // Ten shards, the third with weight 2: compare with the mean weight-1 shard.
    let mut ten = shards(10);
    ten[2].weight = 2;
    let ring = Ring::new(&ten, config(160)).expect("ring");
    let load = loads(&ring, &keys);
    let ones: Vec<u64> = load
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 2)
        .map(|(_, &l)| l)
        .collect();
    let mean_one = ones.iter().sum::<u64>() as f64 / ones.len() as f64;
    let ratio10 = load[2] as f64 / mean_one;
    let (lo, hi) = (
        load[2] as f64 / *ones.iter().max().unwrap_or(&1) as f64,
        load[2] as f64 / *ones.iter().min().unwrap_or(&1) as f64,
    );
    println!(
        "weights: 10 shards, one of weight 2: {ratio10:.3}x the mean weight-1 shard (vs individual weight-1 shards {lo:.3}..{hi:.3})"
    );
    assert!((1.8..=2.2).contains(&ratio10), "ratio {ratio10:.3}");

    // Two shards, weights 1 and 2.
    let two = [
        ShardSpec::new("10.0.0.1:6379", 1),
        ShardSpec::new("10.0.0.2:6379", 2),
    ];
    let ring = Ring::new(&two, config(160)).expect("ring");
    let load = loads(&ring, &keys);
    let ratio2 = load[1] as f64 / load[0] as f64;
    println!("weights: weight 2 vs weight 1 (two shards): {ratio2:.3}x, loads {load:?}");
    assert!((1.8..=2.2).contains(&ratio2), "ratio {ratio2:.3}");
}
