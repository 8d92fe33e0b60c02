//! Golden vectors for the legacy memcached distributions, recorded from the
//! real client libraries (libmemcached, pymemcache, gomemcache, and
//! spymemcached as a cross-check) storing keys on real memcached servers and
//! reading every server back. `tests/golden/generate.sh` regenerates them;
//! this test only reads the committed files (no Python/Go/C/Java needed).
//!
//! Fixture format: `#` comments, `distribution <name>`, optional
//! `rendezvous_keys str|bytes`, `server <addr> <weight>` lines in order, then
//! `<key hex> <server index> <stored|chooser>` lines.

use std::path::{Path, PathBuf};

use memshift_ring::legacy::{
    Distribution, LegacyOptions, LegacyPlacement, LegacyServer, RendezvousKeys,
};

struct Fixture {
    distribution: Distribution,
    options: LegacyOptions,
    servers: Vec<LegacyServer>,
    /// (key, expected server index, stored through the library?)
    keys: Vec<(Vec<u8>, usize, bool)>,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/legacy")
}

fn unhex(s: &str) -> Vec<u8> {
    let pairs = s.as_bytes().chunks_exact(2);
    assert!(pairs.remainder().is_empty(), "odd hex {s:?}");
    pairs
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex key"))
        .collect()
}

fn load(name: &str) -> Fixture {
    let path = fixture_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run tests/golden/generate.sh)", path.display()));
    let mut distribution = None;
    let mut options = LegacyOptions::default();
    let mut servers = Vec::new();
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["distribution", d] => distribution = Some(d.parse().expect("distribution")),
            ["rendezvous_keys", "str"] => options.rendezvous_keys = RendezvousKeys::Str,
            ["rendezvous_keys", "bytes"] => options.rendezvous_keys = RendezvousKeys::Bytes,
            ["server", addr, weight] => {
                servers.push(LegacyServer::new(*addr, weight.parse().expect("weight")))
            }
            [key, idx, how] if *how == "stored" || *how == "chooser" => {
                keys.push((unhex(key), idx.parse().expect("index"), *how == "stored"))
            }
            _ => panic!("{name}:{}: unexpected line {line:?}", n + 1),
        }
    }
    Fixture {
        distribution: distribution.unwrap_or_else(|| panic!("{name}: no distribution line")),
        options,
        servers,
        keys,
    }
}

/// Keys whose placement disagrees with the fixture: (key, expected, got).
fn mismatches(f: &Fixture, p: &LegacyPlacement) -> Vec<(Vec<u8>, usize, usize)> {
    f.keys
        .iter()
        .filter_map(|(k, want, _)| {
            let got = p.locate(k);
            (got != *want).then(|| (k.clone(), *want, got))
        })
        .collect()
}

fn check(name: &str) -> (Fixture, LegacyPlacement) {
    let f = load(name);
    let p = LegacyPlacement::with_options(f.distribution, &f.servers, f.options)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(p.server_count(), f.servers.len());
    let stored = f.keys.iter().filter(|k| k.2).count();
    assert!(stored >= 1000, "{name}: only {stored} stored keys");
    let bad = mismatches(&f, &p);
    assert!(
        bad.is_empty(),
        "{name}: {} of {} keys placed differently from the real client, e.g. {:?}",
        bad.len(),
        f.keys.len(),
        bad.iter()
            .take(5)
            .map(|(k, w, g)| (String::from_utf8_lossy(k).into_owned(), *w, *g))
            .collect::<Vec<_>>()
    );
    // Every server received keys, so the vectors exercise every server.
    for i in 0..f.servers.len() {
        assert!(
            f.keys.iter().any(|k| k.1 == i),
            "{name}: server {i} got no key"
        );
    }
    (f, p)
}

#[test]
fn every_fixture_is_checked() {
    let mut on_disk: Vec<String> = std::fs::read_dir(fixture_dir())
        .expect("fixture dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "add new fixtures to ALL");
}

const ALL: [&str; 10] = [
    "ketama_4.txt",
    "ketama_weighted_4.txt",
    "ketama_weighted_3.txt",
    "ketama_25.txt",
    "spymemcached_ketama_4.txt",
    "rendezvous_3.txt",
    "rendezvous_5.txt",
    "rendezvous_bytes_3.txt",
    "modula_3.txt",
    "modula_5.txt",
];

/// libmemcached, equal weights, a mix of default-port (`host-N` point
/// strings) and other-port (`host:port-N`) servers, one named `localhost`.
#[test]
fn ketama_libmemcached_equal_weights() {
    let (f, p) = check("ketama_4.txt");
    assert_eq!(f.distribution, Distribution::Ketama);
    assert_eq!(p.ketama_points(), Some(vec![160; 4]));
}

/// libmemcached with weights 1, 2, 3, 5 (56, 116, 172, 288 points).
#[test]
fn ketama_libmemcached_weighted() {
    let (_, p) = check("ketama_weighted_4.txt");
    assert_eq!(p.ketama_points(), Some(vec![56, 116, 172, 288]));
    let (_, p) = check("ketama_weighted_3.txt");
    assert_eq!(p.ketama_points(), Some(vec![104, 104, 264]));
}

/// 25 equal servers: libmemcached's float rounding gives 156 points each.
#[test]
fn ketama_libmemcached_25_servers_float_rounding() {
    let (_, p) = check("ketama_25.txt");
    assert_eq!(p.ketama_points(), Some(vec![156; 25]));
}

/// spymemcached's KetamaNodeLocator agrees for IP literals on non-11211
/// ports.
#[test]
fn ketama_matches_spymemcached_for_ip_literals_off_default_port() {
    check("spymemcached_ketama_4.txt");
}

#[test]
fn rendezvous_pymemcache_str_keys() {
    let (f, _) = check("rendezvous_3.txt");
    assert_eq!(f.options.rendezvous_keys, RendezvousKeys::Str);
    check("rendezvous_5.txt");
}

/// `bytes` keys hash their Python repr; treating them as `str` keys would
/// misplace most of them.
#[test]
fn rendezvous_pymemcache_bytes_keys() {
    let (f, _) = check("rendezvous_bytes_3.txt");
    assert_eq!(f.options.rendezvous_keys, RendezvousKeys::Bytes);
    let as_str = LegacyPlacement::new(Distribution::Rendezvous, &f.servers).unwrap();
    let wrong = mismatches(&f, &as_str).len();
    assert!(
        wrong > f.keys.len() / 2,
        "str semantics misplace only {wrong} of {} bytes keys",
        f.keys.len()
    );
}

/// The order of the server list does not matter to rendezvous.
#[test]
fn rendezvous_fixture_order_independent() {
    let f = load("rendezvous_5.txt");
    let mut rev = f.servers.clone();
    rev.reverse();
    let p = LegacyPlacement::new(Distribution::Rendezvous, &rev).unwrap();
    for (k, want, _) in &f.keys {
        assert_eq!(rev[p.locate(k)].addr, f.servers[*want].addr);
    }
}

#[test]
fn modula_gomemcache() {
    check("modula_3.txt");
    let (f, _) = check("modula_5.txt");
    // Includes keys over 250 bytes (PickServer only): 256-byte truncation.
    assert!(f.keys.iter().any(|k| k.0.len() > 256 && !k.2));
}
