//! What `memshift plan` found and recommends: one struct, printed as a
//! readable report or (`--json`) as one JSON object.

use std::fmt::{self, Write as _};

use serde::Serialize;

/// One memcached server's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ServerReport {
    pub addr: String,
    pub version: String,
    pub curr_items: u64,
    /// `limit_maxbytes` (`-m`).
    pub limit_bytes: u64,
    /// `bytes`: what the items take.
    pub item_bytes: u64,
    /// `total_malloced`: slab pages allocated.
    pub malloced_bytes: u64,
    pub slab_waste_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Bucket {
    pub bucket: &'static str,
    pub items: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PrefixReport {
    pub prefix: String,
    /// Estimated over the pool (sample scaled).
    pub items: u64,
    pub redis_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub servers: Vec<ServerReport>,
    /// Live items the walk listed: the population the estimate covers.
    pub items: u64,
    pub items_with_ttl: u64,
    pub expired_listed: u64,
    pub walk_seconds: f64,
    /// Sampled keys measured with `mg`.
    pub sampled: u64,
    pub memcached_item_bytes: u64,
    pub memcached_malloced_bytes: u64,
    pub memcached_limit_bytes: u64,
    pub memcached_slab_waste_bytes: u64,
    /// Formula: per-item sum extrapolated, plus the dicts' bucket arrays.
    pub estimated_redis_bytes: u64,
    /// Half-width of the 95% confidence interval of the sampling.
    pub estimated_ci95_bytes: u64,
    pub mean_item_bytes: f64,
    pub table_bytes: u64,
    /// The formula scaled by what a live Redis measured; null without one.
    pub calibrated_redis_bytes: Option<u64>,
    pub calibration_ratio: Option<f64>,
    pub calibration_items: u64,
    /// Why there is no calibrated figure.
    pub calibration_skipped: Option<String>,
    /// The figure the fleet is sized for (calibrated when there is one, plus the interval).
    pub sizing_bytes: u64,
    pub node_memory_bytes: u64,
    pub headroom_percent: f64,
    pub recommended_nodes: u64,
    pub maxmemory_bytes: u64,
    pub most_loaded_shard_share: f64,
    pub most_loaded_shard_key_share: f64,
    pub ttl_histogram: Vec<Bucket>,
    pub items_without_ttl: u64,
    pub last_access_histogram: Vec<Bucket>,
    pub prefix_delimiter: String,
    pub top_prefixes: Vec<PrefixReport>,
    /// Items (estimated over the pool) whose data exceeds memshift's
    /// `server.max_item_size` for their key: memshift serves them but a
    /// client cannot write them again as they are.
    pub unstorable_items: u64,
    pub unstorable_examples: Vec<String>,
}

/// `1.23 GiB`-style figures for people.
pub fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < units.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", units[unit])
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn histogram_line(o: &mut String, label: &str, items: u64, total: u64) {
    let share = percent(items, total);
    let _ = writeln!(o, "  {label:>8}  {items:>10} ({share:.1}%)");
}

impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut o = String::new();
        let _ = writeln!(o, "memcached pool ({} server(s))", self.servers.len());
        for s in &self.servers {
            let _ = writeln!(
                o,
                "  {} (memcached {}): {} items, {} of items in {} allocated, limit {}, slab waste {}",
                s.addr,
                s.version,
                s.curr_items,
                human(s.item_bytes),
                human(s.malloced_bytes),
                human(s.limit_bytes),
                human(s.slab_waste_bytes),
            );
        }
        let _ = writeln!(
            o,
            "  walk: {} live items listed ({} with a TTL, {} expired not yet reclaimed) in {:.1}s; {} sampled",
            self.items,
            self.items_with_ttl,
            self.expired_listed,
            self.walk_seconds,
            self.sampled
        );
        let _ = writeln!(
            o,
            "  memcached holds {} of items in {} of slabs (limit {}); slab rounding wastes {}",
            human(self.memcached_item_bytes),
            human(self.memcached_malloced_bytes),
            human(self.memcached_limit_bytes),
            human(self.memcached_slab_waste_bytes),
        );
        let _ = writeln!(o, "\nRedis estimate");
        let _ = writeln!(
            o,
            "  formula:    {} ± {} (95%), {:.0} B per item + {} of dict tables",
            human(self.estimated_redis_bytes),
            human(self.estimated_ci95_bytes),
            self.mean_item_bytes,
            human(self.table_bytes),
        );
        match (self.calibrated_redis_bytes, self.calibration_ratio) {
            (Some(c), Some(r)) => {
                let _ = writeln!(
                    o,
                    "  calibrated: {} ({} items measured with MEMORY USAGE: {:.3} x the formula)",
                    human(c),
                    self.calibration_items,
                    r
                );
            }
            _ => {
                let why = self.calibration_skipped.as_deref().unwrap_or("no Redis");
                let _ = writeln!(o, "  calibrated: none ({why})");
            }
        }
        let _ = writeln!(o, "\nRecommendation");
        let _ = writeln!(
            o,
            "  {} node(s) of {} with {:.0}% headroom: maxmemory {} each, for {} of data",
            self.recommended_nodes,
            human(self.node_memory_bytes),
            self.headroom_percent,
            human(self.maxmemory_bytes),
            human(self.sizing_bytes),
        );
        let _ = writeln!(
            o,
            "  ring spread over {} nodes: the most loaded holds {:.1}% of the bytes ({:.1}% of the keys; even: {:.1}%)",
            self.recommended_nodes,
            100.0 * self.most_loaded_shard_share,
            100.0 * self.most_loaded_shard_key_share,
            100.0 / self.recommended_nodes.max(1) as f64,
        );
        let _ = writeln!(
            o,
            "  memcached allocates {} for this data; Redis needs about {}",
            human(self.memcached_malloced_bytes),
            human(self.sizing_bytes),
        );
        let _ = writeln!(
            o,
            "\nTTL left (how fast an unwarmed Redis would fill: items that expire soon need no copy)"
        );
        histogram_line(&mut o, "none", self.items_without_ttl, self.items);
        for b in &self.ttl_histogram {
            histogram_line(&mut o, b.bucket, b.items, self.items);
        }
        let _ = writeln!(o, "\nLast access");
        for b in &self.last_access_histogram {
            histogram_line(&mut o, b.bucket, b.items, self.items);
        }
        let _ = writeln!(
            o,
            "\nLargest key prefixes (up to the first {:?}), by Redis bytes",
            self.prefix_delimiter
        );
        for p in &self.top_prefixes {
            let _ = writeln!(
                o,
                "  {:<24} {:>10} items  {}",
                p.prefix,
                p.items,
                human(p.redis_bytes)
            );
        }
        if self.unstorable_items == 0 {
            let _ = writeln!(o, "\nKeys memshift cannot store as they are: none");
        } else {
            let _ = writeln!(
                o,
                "\nKeys memshift cannot store as they are: about {} (data over server.max_item_size), e.g. {}",
                self.unstorable_items,
                self.unstorable_examples.join(", ")
            );
        }
        f.write_str(&o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(12 << 30), "12.00 GiB");
    }
}
