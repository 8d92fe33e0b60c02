//! The key walk: `lru_crawler metadump all` of each server, read at most
//! `--rate` entries per second, kept as a uniform sample of `--sample` keys
//! (reservoir sampling: memory is bounded by the sample, not the pool),
//! with the TTL and last-access histograms of every listed item.

use std::time::{Duration, Instant};

use bytes::Bytes;
use memshift_shadow::pool::{metadump_paced, DumpEntry, PoolSettings};

use super::PlanError;

const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Upper bounds (seconds) of the TTL histogram's buckets; the last bucket
/// holds longer TTLs, and items without one are counted apart.
pub const TTL_BOUNDS: [(u64, &str); 7] = [
    (60, "<= 1m"),
    (600, "<= 10m"),
    (3_600, "<= 1h"),
    (6 * 3_600, "<= 6h"),
    (86_400, "<= 1d"),
    (7 * 86_400, "<= 7d"),
    (u64::MAX, "> 7d"),
];

/// Upper bounds (seconds since the last access) of the idle histogram.
pub const IDLE_BOUNDS: [(u64, &str); 5] = [
    (60, "<= 1m"),
    (3_600, "<= 1h"),
    (86_400, "<= 1d"),
    (7 * 86_400, "<= 7d"),
    (u64::MAX, "> 7d"),
];

/// One sampled key, as the walk saw it.
#[derive(Debug, Clone)]
pub struct Sampled {
    pub server: usize,
    pub key: Bytes,
}

/// What the walk of the whole pool found.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    /// Live items listed (expired ones are not counted).
    pub items: u64,
    /// Listed but already expired (memcached reclaims them lazily).
    pub expired: u64,
    pub with_ttl: u64,
    /// memcached's bytes for the live items (metadump `size=`).
    pub memcached_bytes: u64,
    /// Items per [`TTL_BOUNDS`] bucket.
    pub ttl_histogram: [u64; 7],
    /// Items per [`IDLE_BOUNDS`] bucket (metadump `la=`).
    pub idle_histogram: [u64; 5],
    pub sample: Vec<Sampled>,
    pub seconds: f64,
}

/// A small PRNG for the reservoir (splitmix64): no cryptographic needs.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        z % n.max(1)
    }
}

impl Walk {
    /// Count one listed entry and offer it to the reservoir.
    fn add(
        &mut self,
        server: usize,
        entry: DumpEntry,
        now: i64,
        capacity: usize,
        rng: &mut SplitMix,
    ) {
        if entry.exp >= 0 && entry.exp <= now {
            self.expired += 1;
            return;
        }
        self.items += 1;
        self.memcached_bytes += entry.size.unwrap_or(0);
        match u64::try_from(entry.exp - now) {
            Ok(ttl) if entry.exp >= 0 => {
                self.with_ttl += 1;
                self.ttl_histogram[bucket(&TTL_BOUNDS, ttl)] += 1;
            }
            _ => {}
        }
        if let Some(la) = entry.last_access {
            let idle = u64::try_from(now).unwrap_or(0).saturating_sub(la);
            self.idle_histogram[bucket(&IDLE_BOUNDS, idle)] += 1;
        }
        let sampled = Sampled {
            server,
            key: entry.key,
        };
        // Algorithm R: item i (from 1) replaces a random slot with
        // probability capacity / i.
        if self.sample.len() < capacity {
            self.sample.push(sampled);
        } else {
            let slot = rng.below(self.items) as usize;
            if let Some(s) = self.sample.get_mut(slot) {
                *s = sampled;
            }
        }
    }
}

fn bucket(bounds: &[(u64, &str)], value: u64) -> usize {
    bounds
        .iter()
        .position(|(limit, _)| value <= *limit)
        .unwrap_or(bounds.len() - 1)
}

/// Walk every server of the pool in turn; a progress line on stderr every
/// second.
pub async fn walk(
    servers: &[String],
    capacity: usize,
    rate: Option<u64>,
    seed: u64,
) -> Result<Walk, PlanError> {
    let started = Instant::now();
    let mut walk = Walk::default();
    let mut rng = SplitMix(seed);
    let mut settings = PoolSettings::new(super::pool::DEADLINE);
    settings.connect_timeout = super::pool::DEADLINE;
    let mut last_progress = Instant::now();
    for (server, addr) in servers.iter().enumerate() {
        let now = i64::try_from(memshift_shadow::unix_now()).unwrap_or(i64::MAX);
        metadump_paced(addr, settings, rate, |entry| {
            walk.add(server, entry, now, capacity, &mut rng);
            if last_progress.elapsed() >= PROGRESS_EVERY {
                last_progress = Instant::now();
                let secs = started.elapsed().as_secs_f64().max(0.001);
                eprint!(
                    "\rplan: walking {addr} ({}/{}): {} items listed, {:.0} items/s   ",
                    server + 1,
                    servers.len(),
                    walk.items + walk.expired,
                    (walk.items + walk.expired) as f64 / secs
                );
            }
        })
        .await
        .map_err(|e| PlanError::Walk {
            addr: addr.clone(),
            reason: e.to_string(),
        })?;
    }
    walk.seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "\rplan: walked {} server(s) in {:.1}s: {} live items listed, {} expired              ",
        servers.len(),
        walk.seconds,
        walk.items,
        walk.expired
    );
    Ok(walk)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, exp: i64, la: u64) -> DumpEntry {
        DumpEntry {
            key: Bytes::copy_from_slice(key.as_bytes()),
            exp,
            size: Some(100),
            flags: None,
            last_access: Some(la),
            cas: None,
        }
    }

    #[test]
    fn histograms_and_expired() {
        let mut w = Walk::default();
        let mut rng = SplitMix(1);
        let now = 1_000_000;
        w.add(0, entry("a", -1, 999_990), now, 10, &mut rng);
        w.add(0, entry("b", now + 3_000, 990_000), now, 10, &mut rng);
        w.add(0, entry("c", now - 1, 999_000), now, 10, &mut rng);
        w.add(0, entry("d", now + 30 * 86_400, 0), now, 10, &mut rng);
        assert_eq!((w.items, w.expired, w.with_ttl), (3, 1, 2));
        assert_eq!(w.ttl_histogram, [0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(w.idle_histogram, [1, 0, 1, 0, 1]);
        assert_eq!(w.memcached_bytes, 300);
        assert_eq!(w.sample.len(), 3);
    }

    /// The reservoir is uniform: over 100,000 items, a 1,000-key sample
    /// holds about as many from the first half as from the second.
    #[test]
    fn reservoir_is_bounded_and_uniform() {
        let mut w = Walk::default();
        let mut rng = SplitMix(42);
        for i in 0..100_000 {
            w.add(0, entry(&format!("k{i}"), -1, 0), 0, 1_000, &mut rng);
        }
        assert_eq!(w.sample.len(), 1_000);
        let first_half = w
            .sample
            .iter()
            .filter(|s| {
                std::str::from_utf8(&s.key[1..])
                    .ok()
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n < 50_000)
            })
            .count();
        assert!((400..=600).contains(&first_half), "{first_half}");
    }
}
