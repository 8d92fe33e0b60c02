//! `memshift ring`: where sample keys land on the configured Redis ring
//! and, for a planned `--add`/`--remove`, how many would move and where.
//! Placement and the move count come from [`memshift_ring::placement_diff`];
//! this module builds the rings from the config and prints the report.

use std::fmt::{self, Write as _};

use crate::config::{check_backend_addr, Config, ShardConfig};

/// A planned change to the Redis shard list, for `memshift ring`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingChange {
    /// A new shard at this address, weight 1.
    Add(String),
    /// The shard with this address (or name).
    Remove(String),
}

impl fmt::Display for RingChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingChange::Add(a) => write!(f, "--add {a}"),
            RingChange::Remove(a) => write!(f, "--remove {a}"),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RingPlanError {
    #[error("--keys must be at least 1")]
    NoKeys,
    #[error("--add {addr}: bad address: {reason}")]
    BadAddress { addr: String, reason: String },
    #[error("--add {0}: already a shard in the config")]
    AlreadyPresent(String),
    #[error("--remove {0}: no shard with that address or name in the config")]
    NotPresent(String),
    #[error("--remove {0}: it is the only shard; a ring needs at least one")]
    LastShard(String),
    #[error("cannot build the ring: {0}")]
    Ring(#[from] memshift_ring::RingError),
}

/// One shard's share of the sample keys.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardShare {
    pub id: String,
    pub weight: u32,
    /// Sample keys this shard owns.
    pub keys: usize,
    /// Its weight's share of the total weight, in percent: what a perfect
    /// ring would give it.
    pub expected_percent: f64,
}

/// What `memshift ring` computes; `Display` is the printed report.
#[derive(Debug, Clone, PartialEq)]
pub struct RingPlan {
    /// Number of sample keys: "key:0" .. "key:{keys-1}".
    pub keys: usize,
    pub before: Vec<ShardShare>,
    pub change: Option<RingMove>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RingMove {
    pub change: RingChange,
    pub after: Vec<ShardShare>,
    /// Keys whose shard changes.
    pub moved: usize,
    /// `matrix[i][j]`: keys moving from `before[i]` to `after[j]`. Keys that
    /// stay on their shard are not counted, so the total is `moved`.
    pub matrix: Vec<Vec<usize>>,
    /// What a perfectly balanced ring would move, in percent: the added
    /// shard's expected share after, or the removed shard's before.
    pub ideal_percent: f64,
}

impl RingPlan {
    pub fn moved_percent(&self) -> Option<f64> {
        self.change.as_ref().map(|m| percent(m.moved, self.keys))
    }
}

/// The `n`th sample key. Deterministic, so runs compare across machines.
pub fn sample_key(buf: &mut String, n: usize) {
    buf.clear();
    let _ = write!(buf, "key:{n}");
}

/// Places `keys` sample keys on the configured ring and, with a change, on
/// the changed ring too. Pure: no I/O.
pub fn plan_ring(
    cfg: &Config,
    keys: usize,
    change: Option<&RingChange>,
) -> Result<RingPlan, RingPlanError> {
    if keys == 0 {
        return Err(RingPlanError::NoKeys);
    }
    let shards = &cfg.redis.shards;
    let ring_cfg = cfg.ring_config();
    let ring = memshift_ring::Ring::new(&cfg.ring_shards(), ring_cfg)?;

    // (the change, the shard list after it, the ideal share that moves in %)
    let changed: Option<(&RingChange, Vec<ShardConfig>, f64)> = match change {
        None => None,
        Some(RingChange::Add(addr)) => {
            // Sentinel shards: what is added is a master name.
            let sentinel = shards.iter().any(|s| s.master.is_some());
            if !sentinel {
                check_backend_addr(addr).map_err(|reason| RingPlanError::BadAddress {
                    addr: addr.clone(),
                    reason,
                })?;
            }
            if shards.iter().any(|s| s.addr == *addr || s.id() == addr) {
                return Err(RingPlanError::AlreadyPresent(addr.clone()));
            }
            let mut after = shards.clone();
            after.push(ShardConfig {
                addr: if sentinel {
                    String::new()
                } else {
                    addr.clone()
                },
                weight: 1,
                name: None,
                master: sentinel.then(|| addr.clone()),
            });
            let min = percent_of_weight(1, &after);
            change.map(|c| (c, after, min))
        }
        Some(RingChange::Remove(what)) => {
            let idx = shards
                .iter()
                .position(|s| s.addr == *what || s.id() == what)
                .ok_or_else(|| RingPlanError::NotPresent(what.clone()))?;
            if shards.len() == 1 {
                return Err(RingPlanError::LastShard(what.clone()));
            }
            let min = percent_of_weight(shards[idx].weight, shards);
            let mut after = shards.clone();
            after.remove(idx);
            change.map(|c| (c, after, min))
        }
    };
    let new_ring = match &changed {
        Some((_, after, _)) => {
            let specs: Vec<_> = after
                .iter()
                .map(|s| memshift_ring::ShardSpec {
                    id: s.id().to_owned(),
                    weight: s.weight,
                })
                .collect();
            Some(memshift_ring::Ring::new(&specs, ring_cfg)?)
        }
        None => None,
    };

    // Without a change the ring is diffed against itself: only its loads count.
    let diff = memshift_ring::placement_diff(
        &ring,
        new_ring.as_ref().unwrap_or(&ring),
        (0..keys).map(|n| {
            let mut key = String::new();
            sample_key(&mut key, n);
            key
        }),
    );
    let after_len = changed.as_ref().map_or(0, |(_, a, _)| a.len());
    let mut matrix = vec![vec![0usize; after_len]; shards.len()];
    for (&(from, to), &n) in &diff.flows {
        if let Some(cell) = matrix.get_mut(from).and_then(|row| row.get_mut(to)) {
            *cell = count(n);
        }
    }
    let before_counts: Vec<usize> = diff.old_load.iter().map(|&n| count(n)).collect();
    let after_counts: Vec<usize> = diff.new_load.iter().map(|&n| count(n)).collect();
    let moved = count(diff.moved);

    let shares = |list: &[ShardConfig], counts: &[usize]| -> Vec<ShardShare> {
        list.iter()
            .zip(counts)
            .map(|(s, &k)| ShardShare {
                id: s.id().to_owned(),
                weight: s.weight,
                keys: k,
                expected_percent: percent_of_weight(s.weight, list),
            })
            .collect()
    };
    Ok(RingPlan {
        keys,
        before: shares(shards, &before_counts),
        change: changed.map(|(change, after, ideal_percent)| RingMove {
            change: change.clone(),
            after: shares(&after, &after_counts),
            moved,
            matrix,
            ideal_percent,
        }),
    })
}

/// Sample counts never exceed `keys`, a `usize`.
fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn percent_of_weight(weight: u32, list: &[ShardConfig]) -> f64 {
    let total: u64 = list.iter().map(|s| u64::from(s.weight)).sum();
    if total == 0 {
        0.0
    } else {
        f64::from(weight) * 100.0 / total as f64
    }
}

impl fmt::Display for RingPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} sample keys (\"key:0\" .. \"key:{}\")",
            self.keys,
            self.keys - 1
        )?;
        writeln!(f)?;
        writeln!(f, "current ring ({} shards):", self.before.len())?;
        share_table(f, &self.before, self.keys)?;
        let Some(m) = &self.change else {
            return Ok(());
        };
        writeln!(f)?;
        writeln!(f, "after {} ({} shards):", m.change, m.after.len())?;
        share_table(f, &m.after, self.keys)?;
        writeln!(f)?;
        writeln!(
            f,
            "keys that move: {} of {} ({:.2}%; a perfectly balanced ring would move {:.2}%)",
            m.moved,
            self.keys,
            percent(m.moved, self.keys),
            m.ideal_percent
        )?;
        if m.moved == 0 {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(f, "moves (rows: from, columns: to):")?;
        let from_w = self
            .before
            .iter()
            .map(|s| s.id.len())
            .chain([4])
            .max()
            .unwrap_or(4);
        let col_w: Vec<usize> = m.after.iter().map(|s| s.id.len().max(6)).collect();
        write!(f, "  {:from_w$}", "from")?;
        for (s, w) in m.after.iter().zip(&col_w) {
            write!(f, "  {:>w$}", s.id)?;
        }
        writeln!(f)?;
        for (i, row) in m.matrix.iter().enumerate() {
            if row.iter().all(|&n| n == 0) {
                continue;
            }
            write!(f, "  {:from_w$}", self.before[i].id)?;
            for (n, w) in row.iter().zip(&col_w) {
                let cell = if *n == 0 {
                    "-".to_owned()
                } else {
                    n.to_string()
                };
                write!(f, "  {cell:>w$}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

fn share_table(f: &mut fmt::Formatter<'_>, shares: &[ShardShare], total: usize) -> fmt::Result {
    let id_w = shares
        .iter()
        .map(|s| s.id.len())
        .chain([5])
        .max()
        .unwrap_or(5);
    writeln!(
        f,
        "  {:id_w$}  {:>6}  {:>10}  {:>7}  {:>8}",
        "shard", "weight", "keys", "share", "expected"
    )?;
    for s in shares {
        writeln!(
            f,
            "  {:id_w$}  {:>6}  {:>10}  {:>6.2}%  {:>7.2}%",
            s.id,
            s.weight,
            s.keys,
            percent(s.keys, total),
            s.expected_percent
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(shards: &str) -> Config {
        Config::from_toml_str(&format!(
            "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [{shards}]\n"
        ))
        .unwrap()
    }

    #[test]
    fn sample_keys_are_documented_form() {
        let mut k = String::new();
        sample_key(&mut k, 0);
        assert_eq!(k, "key:0");
        sample_key(&mut k, 99_999);
        assert_eq!(k, "key:99999");
    }

    #[test]
    fn plan_counts_every_key_once() {
        let c = cfg(r#""a:1", "b:1", { addr = "c:1", weight = 2 }"#);
        let plan = plan_ring(&c, 20_000, None).unwrap();
        assert_eq!(plan.keys, 20_000);
        assert!(plan.change.is_none());
        assert_eq!(plan.before.iter().map(|s| s.keys).sum::<usize>(), 20_000);
        let ids: Vec<_> = plan.before.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a:1", "b:1", "c:1"]);
        assert_eq!(plan.before[2].expected_percent, 50.0);
        assert_eq!(plan.before[0].expected_percent, 25.0);
        // Each shard gets a share near its weight's.
        for s in &plan.before {
            let share = percent(s.keys, plan.keys);
            assert!((share - s.expected_percent).abs() < 10.0, "{s:?}");
        }
        // Deterministic.
        assert_eq!(plan_ring(&c, 20_000, None).unwrap(), plan);
    }

    #[test]
    fn plan_for_an_added_shard_moves_keys_only_onto_it() {
        let c = cfg(r#""a:1", "b:1", "c:1""#);
        let change = RingChange::Add("d:1".into());
        let plan = plan_ring(&c, 20_000, Some(&change)).unwrap();
        let m = plan.change.as_ref().unwrap();
        assert_eq!(m.change, change);
        assert_eq!(m.after.len(), 4);
        assert_eq!(m.after[3].id, "d:1");
        assert_eq!(m.ideal_percent, 25.0);
        // Consistent hashing: only keys landing on the new shard move.
        assert_eq!(m.moved, m.after[3].keys);
        let total: usize = m.matrix.iter().flatten().sum();
        assert_eq!(total, m.moved);
        for row in &m.matrix {
            assert_eq!(&row[..3], &[0, 0, 0]);
        }
        assert!(m.moved > 0 && m.moved < plan.keys / 2, "{}", m.moved);
        let pct = plan.moved_percent().unwrap();
        assert!((pct - percent(m.moved, plan.keys)).abs() < 1e-9);
    }

    #[test]
    fn sentinel_shards_are_planned_by_master_name() {
        let c = Config::from_toml_str(
            "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nsentinels = [\"a:1\"]\n\
             shards = [{ master = \"s1\" }, { master = \"s2\", weight = 2 }]\n",
        )
        .unwrap();
        let change = RingChange::Add("s3".into());
        let plan = plan_ring(&c, 20_000, Some(&change)).unwrap();
        let ids: Vec<_> = plan.before.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["s1", "s2"]);
        let m = plan.change.as_ref().unwrap();
        assert_eq!(m.after[2].id, "s3");
        assert_eq!(m.moved, m.after[2].keys);
        let again = RingChange::Add("s2".into());
        assert!(plan_ring(&c, 100, Some(&again)).is_err());
    }

    #[test]
    fn plan_for_a_removed_shard_moves_only_its_keys() {
        let c = cfg(r#""a:1", { addr = "b:1", name = "bee" }, "c:1""#);
        // By name or by address.
        for what in ["bee", "b:1"] {
            let plan = plan_ring(&c, 10_000, Some(&RingChange::Remove(what.into()))).unwrap();
            let m = plan.change.as_ref().unwrap();
            let ids: Vec<_> = m.after.iter().map(|s| s.id.as_str()).collect();
            assert_eq!(ids, ["a:1", "c:1"]);
            assert_eq!(m.moved, plan.before[1].keys);
            assert_eq!(m.matrix[0].iter().sum::<usize>(), 0);
            assert_eq!(m.matrix[2].iter().sum::<usize>(), 0);
            assert_eq!(m.matrix[1].iter().sum::<usize>(), m.moved);
            assert!((m.ideal_percent - 100.0 / 3.0).abs() < 1e-9);
        }
    }

    #[test]
    fn plan_rejects_bad_changes() {
        let c = cfg(r#""a:1", "b:1""#);
        let plan = |ch: RingChange| plan_ring(&c, 100, Some(&ch)).unwrap_err();
        assert_eq!(
            plan(RingChange::Remove("z:1".into())),
            RingPlanError::NotPresent("z:1".into())
        );
        assert_eq!(
            plan(RingChange::Add("a:1".into())),
            RingPlanError::AlreadyPresent("a:1".into())
        );
        assert!(matches!(
            plan(RingChange::Add("nope".into())),
            RingPlanError::BadAddress { .. }
        ));
        assert_eq!(plan_ring(&c, 0, None).unwrap_err(), RingPlanError::NoKeys);
        let one = cfg(r#""a:1""#);
        assert_eq!(
            plan_ring(&one, 10, Some(&RingChange::Remove("a:1".into()))).unwrap_err(),
            RingPlanError::LastShard("a:1".into())
        );
        let msg = RingPlanError::NotPresent("z:1".into()).to_string();
        assert!(
            msg.contains("--remove z:1") && msg.contains("no shard"),
            "{msg}"
        );
    }

    #[test]
    fn report_shows_shares_and_moves() {
        let c = cfg(r#""a:1", "b:1""#);
        let text = plan_ring(&c, 1000, Some(&RingChange::Add("c:1".into())))
            .unwrap()
            .to_string();
        for part in [
            "1000 sample keys",
            "\"key:999\"",
            "current ring (2 shards)",
            "after --add c:1 (3 shards)",
            "keys that move:",
            "moves (rows: from, columns: to)",
            "a:1",
            "c:1",
            "expected",
        ] {
            assert!(text.contains(part), "missing {part:?} in:\n{text}");
        }
        let text = plan_ring(&c, 1000, None).unwrap().to_string();
        assert!(!text.contains("keys that move"), "{text}");
    }
}
