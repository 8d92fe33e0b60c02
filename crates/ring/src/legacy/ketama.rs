//! libmemcached's weighted ketama continuum (see the module docs of
//! [`crate::legacy`] for the algorithm and its sources).

use std::fmt::Write as _;

use super::hash::{md5, md5_hash32, md5_word};
use super::LegacyError;

/// libmemcached `MEMCACHED_DEFAULT_PORT`: omitted from the point strings.
pub const DEFAULT_PORT: u16 = 11211;
/// libmemcached `MEMCACHED_POINTS_PER_SERVER_KETAMA`: points per server at
/// average weight (before libmemcached's float rounding).
pub const POINTS_PER_SERVER: u32 = 160;
/// Points taken from one MD5 digest.
pub const POINTS_PER_HASH: u32 = 4;

/// A server as the continuum sees it: libmemcached's `hostname` and `port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KetamaHost {
    pub host: String,
    pub port: u16,
    pub weight: u32,
}

/// Split a configured address the way the host/port pair reaches
/// libmemcached (`memcached_server_add_with_weight(host, port, weight)`, as
/// pylibmc and PHP `Memcached::addServer` call it):
///
/// * `host:port` -> (`host`, `port`), split at the last `:`;
/// * `host` -> (`host`, 11211);
/// * `[v6addr]:port` / `[v6addr]` -> (`v6addr`, port or 11211);
/// * `/path/to/socket` or memshift's `unix:/path/to/socket` ->
///   (`/path/to/socket`, 0), a unix socket, as libmemcached sees the path
///   an application gives it.
pub fn parse_host_port(addr: &str) -> Result<(String, u16), LegacyError> {
    let invalid = |reason: &'static str| LegacyError::InvalidAddr {
        addr: addr.to_string(),
        reason,
    };
    if addr.is_empty() {
        return Err(invalid("empty address"));
    }
    let unix = addr.strip_prefix("unix:").unwrap_or(addr);
    if unix.starts_with('/') {
        return Ok((unix.to_string(), 0));
    }
    if let Some(rest) = addr.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(invalid("unterminated '[' in IPv6 address"));
        };
        if host.is_empty() {
            return Err(invalid("empty host"));
        }
        return match after {
            "" => Ok((host.to_string(), DEFAULT_PORT)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((
                    host.to_string(),
                    parse_port(port).ok_or_else(|| invalid("bad port"))?,
                )),
                None => Err(invalid("expected ':port' after ']'")),
            },
        };
    }
    match addr.rsplit_once(':') {
        None => Ok((addr.to_string(), DEFAULT_PORT)),
        Some((host, _)) if host.contains(':') => {
            Err(invalid("IPv6 addresses must be written as [addr]:port"))
        }
        Some(("", _)) => Err(invalid("empty host")),
        Some((host, port)) => Ok((
            host.to_string(),
            parse_port(port).ok_or_else(|| invalid("bad port"))?,
        )),
    }
}

/// A decimal TCP port, 1..=65535.
pub fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u16>().ok().filter(|&p| p != 0)
}

/// Number of MD5 digests (4 points each) libmemcached gives server `weight`
/// out of `total_weight` over `server_count` servers, computed exactly as
/// `update_continuum` does: in `float`,
/// `floor(weight/total * 160 / 4 * server_count + 1e-10f)`.
///
/// The float arithmetic is part of the placement: with 25 equal servers
/// `1/25 * 160 / 4 * 25` is 39.999996 in `float`, so libmemcached gives each
/// 39 digests (156 points), not 40.
pub fn digests_for(weight: u32, total_weight: u64, server_count: u32) -> u32 {
    let pct = weight as f32 / total_weight as f32;
    let x = pct * POINTS_PER_SERVER as f32 / POINTS_PER_HASH as f32 * server_count as f32
        + 0.000_000_000_1_f32;
    // `as` saturates; x <= 40 * server_count anyway.
    x.floor() as u32
}

/// The point string of digest `i` of a server: `host-i` when the port is
/// 11211, else `host:port-i`.
pub fn point_string(out: &mut String, host: &str, port: u16, i: u32) {
    out.clear();
    out.push_str(host);
    if port != DEFAULT_PORT {
        // Writing to a String cannot fail.
        let _ = write!(out, ":{port}");
    }
    let _ = write!(out, "-{i}");
}

/// The sorted continuum.
#[derive(Debug, Clone)]
pub struct Continuum {
    /// Point values, ascending; equal values ordered by server index.
    points: Vec<u32>,
    /// `owners[i]`: index of the server owning `points[i]`.
    owners: Vec<u32>,
}

impl Continuum {
    pub fn new(hosts: &[KetamaHost]) -> Continuum {
        let n = hosts.len() as u32;
        let total: u64 = hosts.iter().map(|h| u64::from(h.weight)).sum();
        Self::build(hosts, |h| digests_for(h.weight, total, n))
    }

    fn build(hosts: &[KetamaHost], digests: impl Fn(&KetamaHost) -> u32) -> Continuum {
        let mut all: Vec<(u32, u32)> = Vec::with_capacity(hosts.len() * POINTS_PER_SERVER as usize);
        let mut name = String::new();
        for (idx, h) in hosts.iter().enumerate() {
            for i in 0..digests(h) {
                point_string(&mut name, &h.host, h.port, i);
                let digest = md5(name.as_bytes());
                for w in 0..POINTS_PER_HASH as usize {
                    all.push((md5_word(&digest, w), idx as u32));
                }
            }
        }
        // libmemcached sorts by (value, server index) and its lookup is a
        // lower bound, so on equal values the lowest server index wins.
        all.sort_unstable();
        Continuum {
            points: all.iter().map(|p| p.0).collect(),
            owners: all.iter().map(|p| p.1).collect(),
        }
    }

    /// Server index owning `hash`: the first point `>= hash`, wrapping to the
    /// first point past the end.
    #[inline]
    pub fn locate_hash(&self, hash: u32) -> usize {
        let i = self.points.partition_point(|&p| p < hash);
        let i = if i >= self.points.len() { 0 } else { i };
        self.owners.get(i).map_or(0, |&o| o as usize)
    }

    #[inline]
    pub fn locate(&self, key: &[u8]) -> usize {
        self.locate_hash(md5_hash32(key))
    }

    /// Points owned by each of `server_count` servers.
    pub fn points_per_server(&self, server_count: usize) -> Vec<usize> {
        let mut counts = vec![0; server_count];
        for &o in &self.owners {
            if let Some(c) = counts.get_mut(o as usize) {
                *c += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_strings() {
        let mut s = String::new();
        point_string(&mut s, "10.0.0.1", 11211, 0);
        assert_eq!(s, "10.0.0.1-0");
        point_string(&mut s, "10.0.0.1", 11212, 39);
        assert_eq!(s, "10.0.0.1:11212-39");
        point_string(&mut s, "cache-a.example", 11211, 7);
        assert_eq!(s, "cache-a.example-7");
    }

    #[test]
    fn host_port_parsing() {
        let ok = |a: &str| parse_host_port(a).unwrap();
        assert_eq!(ok("10.0.0.1:11212"), ("10.0.0.1".into(), 11212));
        assert_eq!(ok("cache-a"), ("cache-a".into(), 11211));
        assert_eq!(ok("[::1]:11213"), ("::1".into(), 11213));
        assert_eq!(ok("[::1]"), ("::1".into(), 11211));
        assert_eq!(ok("/run/mc.sock"), ("/run/mc.sock".into(), 0));
        assert_eq!(ok("unix:/run/mc.sock"), ("/run/mc.sock".into(), 0));
        for bad in [
            "", ":11211", "h:", "h:0", "h:65536", "h:x", "::1", "[::1", "[::1]x", "[]:1",
        ] {
            assert!(parse_host_port(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn digest_counts_follow_libmemcached_float_math() {
        // Equal weights: 40 digests, except where float rounding lands just
        // below 40 (these counts are what libmemcached 1.1.4 computes; the
        // 25-server case is pinned by the golden vectors too).
        let short: Vec<u32> = (1..=64)
            .filter(|&n| digests_for(1, u64::from(n), n) != 40)
            .collect();
        assert_eq!(short, vec![25, 47, 50, 55, 61]);
        assert_eq!(digests_for(1, 25, 25), 39);
        // Weights 1, 2, 3, 5 over four servers.
        let w = [1u32, 2, 3, 5];
        let got: Vec<u32> = w.iter().map(|&x| digests_for(x, 11, 4)).collect();
        assert_eq!(got, vec![14, 29, 43, 72]);
    }

    /// The 25-server golden vectors (libmemcached 1.1.4) tell 156 points
    /// per server from 160: a continuum with 40 digests each misplaces keys.
    #[test]
    fn float_rounding_is_visible_in_the_golden_vectors() {
        let text = include_str!("../../tests/fixtures/legacy/ketama_25.txt");
        let mut hosts = Vec::new();
        let mut keys = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["server", addr, w] => {
                    let (host, port) = parse_host_port(addr).unwrap();
                    let weight = w.parse().unwrap();
                    hosts.push(KetamaHost { host, port, weight });
                }
                [k, i, _] => {
                    let key: Vec<u8> = (0..k.len() / 2)
                        .map(|j| u8::from_str_radix(&k[2 * j..2 * j + 2], 16).unwrap())
                        .collect();
                    keys.push((key, i.parse::<usize>().unwrap()));
                }
                _ => {}
            }
        }
        assert_eq!(hosts.len(), 25);
        let real = Continuum::new(&hosts);
        let naive = Continuum::build(&hosts, |_| 40);
        assert!(keys.iter().all(|(k, i)| real.locate(k) == *i));
        let wrong = keys.iter().filter(|(k, i)| naive.locate(k) != *i).count();
        assert!(wrong > 5, "160-point continuum misplaces only {wrong} keys");
    }

    #[test]
    fn lookup_wraps_and_breaks_ties_by_lowest_index() {
        let c = Continuum {
            points: vec![10, 20, 20, 30],
            owners: vec![2, 0, 1, 2],
        };
        assert_eq!(c.locate_hash(0), 2);
        assert_eq!(c.locate_hash(10), 2);
        assert_eq!(c.locate_hash(11), 0);
        assert_eq!(c.locate_hash(20), 0);
        assert_eq!(c.locate_hash(30), 2);
        assert_eq!(c.locate_hash(31), 2);
        assert_eq!(c.locate_hash(u32::MAX), 2);
        let empty = Continuum {
            points: vec![],
            owners: vec![],
        };
        assert_eq!(empty.locate_hash(5), 0);
    }
}
