//! Behaviour of the legacy memcached distributions beyond the golden
//! vectors: errors, single server, balance, weights, arbitrary key bytes.

use memshift_ring::legacy::{
    Distribution, LegacyError, LegacyOptions, LegacyPlacement, LegacyServer, RendezvousKeys,
};

fn servers(n: usize) -> Vec<LegacyServer> {
    (0..n)
        .map(|i| LegacyServer::new(format!("10.1.0.{}:11211", i + 1), 1))
        .collect()
}

fn keys(n: u32) -> impl Iterator<Item = Vec<u8>> {
    (0..n).map(|i| format!("key:{i}").into_bytes())
}

fn loads(p: &LegacyPlacement, n: u32) -> Vec<u32> {
    let mut counts = vec![0u32; p.server_count()];
    for k in keys(n) {
        counts[p.locate(&k)] += 1;
    }
    counts
}

/// Every key of interesting shape: empty, every single byte, invalid UTF-8,
/// over the memcached limit, very long.
fn odd_keys() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = vec![Vec::new()];
    v.extend((0..=255u8).map(|b| vec![b]));
    v.push(b"\xff\xfe\x00\x01 \r\n".to_vec());
    v.push(b"\xc3(".to_vec());
    v.push("ключ €".as_bytes().to_vec());
    v.push(vec![0u8; 251]);
    v.push(vec![0xffu8; 300]);
    v.push((0..10_000u32).map(|i| (i % 251) as u8).collect());
    v
}

#[test]
fn empty_server_list_is_an_error() {
    for d in Distribution::ALL {
        let err = LegacyPlacement::new(d, &[]).unwrap_err();
        assert_eq!(err, LegacyError::Empty);
        assert!(err.to_string().contains("at least one server"));
    }
}

#[test]
fn single_server_is_always_index_0() {
    for d in Distribution::ALL {
        let p = LegacyPlacement::new(d, &servers(1)).unwrap();
        assert_eq!(p.server_count(), 1);
        for k in keys(2000).chain(odd_keys()) {
            assert_eq!(p.locate(&k), 0, "{d}");
        }
    }
    // A weight other than 1 on a single ketama server changes nothing.
    let p = LegacyPlacement::new(Distribution::Ketama, &[LegacyServer::new("a:1", 7)]).unwrap();
    assert_eq!(p.ketama_points(), Some(vec![160]));
    assert_eq!(p.locate(b"anything"), 0);
}

#[test]
fn any_key_bytes_give_a_valid_index() {
    let opts = [
        LegacyOptions::default(),
        LegacyOptions {
            rendezvous_keys: RendezvousKeys::Bytes,
        },
    ];
    for d in Distribution::ALL {
        for o in opts {
            let p = LegacyPlacement::with_options(d, &servers(5), o).unwrap();
            for k in odd_keys() {
                let i = p.locate(&k);
                assert!(i < 5);
                // Deterministic.
                assert_eq!(p.locate(&k), i);
                assert_eq!(p.locate_server(&k).addr, p.servers()[i].addr);
            }
        }
    }
}

#[test]
fn ketama_shares_follow_weights() {
    let weights = [1u32, 2, 3, 4];
    let list: Vec<LegacyServer> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| LegacyServer::new(format!("10.2.0.{}:11211", i + 1), w))
        .collect();
    let p = LegacyPlacement::new(Distribution::Ketama, &list).unwrap();
    // 160 points per unit of average weight, floor-rounded per server.
    assert_eq!(p.ketama_points(), Some(vec![64, 128, 192, 256]));
    let n = 200_000;
    let counts = loads(&p, n);
    let total: u32 = weights.iter().sum();
    for (i, &w) in weights.iter().enumerate() {
        let share = f64::from(counts[i]) / f64::from(n);
        let want = f64::from(w) / f64::from(total);
        assert!(
            (share / want - 1.0).abs() < 0.25,
            "server {i} (weight {w}): share {share:.3}, expected ~{want:.3}"
        );
    }
    // Monotone in weight.
    assert!(counts.windows(2).all(|c| c[0] < c[1]), "{counts:?}");
}

#[test]
fn ketama_equal_weights_are_roughly_balanced() {
    let p = LegacyPlacement::new(Distribution::Ketama, &servers(8)).unwrap();
    let counts = loads(&p, 200_000);
    let mean = 200_000.0 / 8.0;
    for c in &counts {
        assert!((f64::from(*c) / mean - 1.0).abs() < 0.25, "{counts:?}");
    }
}

#[test]
fn ketama_adding_a_server_moves_about_its_share() {
    let before = LegacyPlacement::new(Distribution::Ketama, &servers(4)).unwrap();
    let after = LegacyPlacement::new(Distribution::Ketama, &servers(5)).unwrap();
    let n = 50_000;
    let mut moved = 0;
    for k in keys(n) {
        let (a, b) = (before.locate(&k), after.locate(&k));
        if a != b {
            // Keys only move to the new server.
            assert_eq!(b, 4);
            moved += 1;
        }
    }
    let frac = f64::from(moved) / f64::from(n);
    assert!((0.12..0.28).contains(&frac), "moved {frac:.3}");
}

#[test]
fn ketama_point_strings_use_the_configured_host_text() {
    // Same servers, different spelling: different continuum.
    let a = LegacyPlacement::new(
        Distribution::Ketama,
        &[
            LegacyServer::new("127.0.0.1:11211", 1),
            LegacyServer::new("127.0.0.1:11212", 1),
        ],
    )
    .unwrap();
    let b = LegacyPlacement::new(
        Distribution::Ketama,
        &[
            LegacyServer::new("localhost:11211", 1),
            LegacyServer::new("localhost:11212", 1),
        ],
    )
    .unwrap();
    let differ = keys(1000).filter(|k| a.locate(k) != b.locate(k)).count();
    assert!(differ > 100, "{differ}");
    // No port means 11211.
    let c = LegacyPlacement::new(
        Distribution::Ketama,
        &[
            LegacyServer::new("127.0.0.1", 1),
            LegacyServer::new("127.0.0.1:11212", 1),
        ],
    )
    .unwrap();
    assert!(keys(1000).all(|k| a.locate(&k) == c.locate(&k)));
}

#[test]
fn modula_uses_all_servers_evenly() {
    for n in [2usize, 3, 5, 7] {
        let p = LegacyPlacement::new(Distribution::Modula, &servers(n)).unwrap();
        let counts = loads(&p, 70_000);
        let mean = 70_000.0 / n as f64;
        for c in &counts {
            assert!(*c > 0);
            assert!((f64::from(*c) / mean - 1.0).abs() < 0.1, "{n}: {counts:?}");
        }
    }
}

#[test]
fn modula_counts_duplicate_servers_twice() {
    // gomemcache: a server listed twice gets twice the share.
    let list = [
        LegacyServer::new("a:11211", 1),
        LegacyServer::new("b:11211", 1),
        LegacyServer::new("a:11211", 1),
    ];
    let p = LegacyPlacement::new(Distribution::Modula, &list).unwrap();
    let counts = loads(&p, 30_000);
    assert!(counts.iter().all(|&c| c > 8_000), "{counts:?}");
}

#[test]
fn rendezvous_is_balanced_and_order_independent() {
    let list = servers(6);
    let p = LegacyPlacement::new(Distribution::Rendezvous, &list).unwrap();
    let counts = loads(&p, 60_000);
    for c in &counts {
        assert!((f64::from(*c) / 10_000.0 - 1.0).abs() < 0.1, "{counts:?}");
    }
    let mut shuffled = list.clone();
    shuffled.rotate_left(2);
    shuffled.swap(0, 3);
    let q = LegacyPlacement::new(Distribution::Rendezvous, &shuffled).unwrap();
    for k in keys(5000) {
        assert_eq!(p.locate_server(&k).addr, q.locate_server(&k).addr);
    }
}

#[test]
fn rendezvous_removing_a_server_moves_only_its_keys() {
    let all = servers(5);
    let fewer: Vec<LegacyServer> = all[..4].to_vec();
    let p = LegacyPlacement::new(Distribution::Rendezvous, &all).unwrap();
    let q = LegacyPlacement::new(Distribution::Rendezvous, &fewer).unwrap();
    for k in keys(5000) {
        let i = p.locate(&k);
        if i < 4 {
            assert_eq!(q.locate(&k), i);
        }
    }
}

#[test]
fn rendezvous_node_name_normalisation() {
    // pymemcache turns "host" into "host:11211" and reprints the port, so
    // these spellings are the same nodes.
    let a = LegacyPlacement::new(
        Distribution::Rendezvous,
        &[
            LegacyServer::new("h1:11211", 1),
            LegacyServer::new("h2:0011212", 1),
        ],
    )
    .unwrap();
    let b = LegacyPlacement::new(
        Distribution::Rendezvous,
        &[LegacyServer::new("h1", 1), LegacyServer::new("h2:11212", 1)],
    )
    .unwrap();
    assert!(keys(2000).all(|k| a.locate(&k) == b.locate(&k)));
}

#[test]
fn weights_only_for_ketama() {
    let list = [
        LegacyServer::new("a:11211", 1),
        LegacyServer::new("b:11211", 2),
    ];
    assert!(LegacyPlacement::new(Distribution::Ketama, &list).is_ok());
    for d in [Distribution::Rendezvous, Distribution::Modula] {
        assert_eq!(
            LegacyPlacement::new(d, &list).unwrap_err(),
            LegacyError::WeightNotSupported {
                distribution: d,
                addr: "b:11211".into(),
                weight: 2
            }
        );
    }
}
