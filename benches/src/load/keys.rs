//! Key choice: uniform or Zipf over `key:0 .. key:N-1`, and the get/set mix.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    Uniform,
    /// Zipf with exponent s: key i (from 0) is drawn with weight 1/(i+1)^s.
    Zipf(f64),
}

impl Dist {
    pub fn parse(v: &str) -> Result<Dist, String> {
        match v.split_once(':') {
            None if v == "uniform" => Ok(Dist::Uniform),
            None if v == "zipf" => Ok(Dist::Zipf(0.99)),
            Some(("zipf", s)) => match s.parse::<f64>() {
                Ok(s) if s.is_finite() && s >= 0.0 => Ok(Dist::Zipf(s)),
                _ => Err(format!("zipf exponent must be >= 0, got {s:?}")),
            },
            _ => Err(format!("uniform or zipf[:s], got {v:?}")),
        }
    }
}

impl std::fmt::Display for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dist::Uniform => write!(f, "uniform"),
            Dist::Zipf(s) => write!(f, "zipf:{s}"),
        }
    }
}

/// Per-connection generator (no shared state, no locks on the hot path).
pub struct KeyGen {
    rng: SmallRng,
    n: u64,
    zipf: Option<Zipf<f64>>,
    /// A get when `rng < get_threshold` out of 2^32.
    get_threshold: u64,
}

impl KeyGen {
    pub fn new(seed: u64, n: u64, dist: Dist, get_weight: u32, set_weight: u32) -> KeyGen {
        let zipf = match dist {
            Dist::Uniform => None,
            // n >= 1 and s >= 0 are checked by the parser, so this cannot fail;
            // fall back to uniform rather than panic all the same.
            Dist::Zipf(s) => Zipf::new(n as f64, s).ok(),
        };
        let total = u64::from(get_weight) + u64::from(set_weight);
        KeyGen {
            rng: SmallRng::seed_from_u64(seed),
            n,
            zipf,
            get_threshold: (u64::from(get_weight) << 32) / total.max(1),
        }
    }

    pub fn key(&mut self) -> u64 {
        match &self.zipf {
            // Zipf samples are ranks in [1, n].
            Some(z) => (z.sample(&mut self.rng) as u64).clamp(1, self.n) - 1,
            None => self.rng.random_range(0..self.n),
        }
    }

    pub fn is_get(&mut self) -> bool {
        u64::from(self.rng.random::<u32>()) < self.get_threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_and_ranges() {
        let mut g = KeyGen::new(7, 1000, Dist::Uniform, 90, 10);
        let gets = (0..100_000).filter(|_| g.is_get()).count();
        assert!((88_000..92_000).contains(&gets), "{gets}");
        assert!((0..10_000).all(|_| g.key() < 1000));
        let mut z = KeyGen::new(7, 1000, Dist::Zipf(0.99), 100, 0);
        let hot = (0..10_000).filter(|_| z.key() < 10).count();
        assert!(hot > 2000, "zipf should favour the first keys: {hot}");
        assert!(z.is_get());
        let mut s = KeyGen::new(7, 10, Dist::Uniform, 0, 1);
        assert!(!s.is_get());
        assert_eq!(Dist::parse("zipf").unwrap(), Dist::Zipf(0.99));
        assert!(Dist::parse("zipf:-1").is_err());
    }
}
