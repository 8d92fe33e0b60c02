//! Golden vectors: the placement contract (see the crate docs) frozen.
//!
//! These values were generated once from this implementation and must never
//! change: two proxies of a fleet, or two versions of memshift, must agree on
//! where every key lives. If this test fails, placement changed: that is a
//! data migration, not a refactor.

use memshift_ring::{hash_tag_slice, xxh3, Ring, RingConfig, ShardSpec};

const SHARDS: [&str; 3] = ["127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381"];

fn ring(hash_tag: Option<(u8, u8)>, order: &[usize]) -> Ring {
    let shards: Vec<ShardSpec> = order
        .iter()
        .map(|&i| ShardSpec::new(SHARDS[i], 1))
        .collect();
    Ring::new(
        &shards,
        RingConfig {
            vnodes: 160,
            seed: 0,
            hash_tag,
        },
    )
    .expect("golden ring")
}

/// (key, shard index without hash tag, shard index with hash tag `{}`,
/// ring hash with hash tag `{}`). Shard index is into [`SHARDS`].
#[rustfmt::skip]
const PLACEMENT: &[(&[u8], usize, usize, u64)] = &[
    (b"", 2, 2, 0x2d06800538d394c2),
    (b"a", 0, 0, 0xe6c632b61e964e1f),
    (b"foo", 0, 0, 0xab6e5f64077e7d8a),
    (b"bar", 1, 1, 0xd463c860a032d362),
    (b"user:1000", 0, 0, 0xfb6841b2068c0c9f),
    (b"session:4f2a9c1e0b7d", 1, 1, 0x9d393e07fb5fc1d6),
    (b"memshift", 2, 2, 0xc74bdb7f333338bc),
    (b"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", 1, 1, 0x9a137c08c1e55ede),
    (b"\xe3\x82\xad\xe3\x83\xbc", 0, 0, 0xa0f1fcd604ba014b),
    (b"key:0", 2, 2, 0xb464ee7b63344e80),
    (b"key:1", 1, 1, 0xbf2d6d6b8270d37a),
    (b"key:2", 2, 2, 0xcccb71f9abe54869),
    (b"key:3", 1, 1, 0x3feadf581ba2b548),
    (b"key:4", 1, 1, 0x53766f18db157522),
    (b"key:5", 2, 2, 0x3ac7cc074fc056b9),
    (b"key:6", 0, 0, 0x5c7a51f1b3bd7dfe),
    (b"key:7", 0, 0, 0xf99ed2552ba6d58b),
    (b"key:8", 0, 0, 0x8b1060ff37fbcc94),
    (b"key:9", 1, 1, 0x874d6a68b38376eb),
    (b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 2, 2, 0xd915419fe826136d),
    (b"\x00", 2, 2, 0xc44bdff4074eecdb),
    (b"\xff\xfe\xfd", 1, 1, 0x87cd1ec6b82714f2),
    (b"\r\n", 2, 2, 0xd0ab5d7d75a0c5b4),
    (b"key\x00with\x00nul", 0, 0, 0xda7bb2afd0065c7a),
    (b"\x80\x81{\x82}\x83", 2, 2, 0x5ff400dbe559898a),
    (b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f", 2, 2, 0x3523581fe96e4c05),
    (b"{user1000}.following", 2, 0, 0xb03c8988cdc1c874),
    (b"{user1000}.followers", 0, 0, 0xb03c8988cdc1c874),
    (b"foo{bar}baz", 0, 1, 0xd463c860a032d362),
    (b"{bar}", 2, 1, 0xd463c860a032d362),
    (b"x{bar}", 1, 1, 0xd463c860a032d362),
    (b"foo{}{bar}", 2, 2, 0xc183e6678835189c),
    (b"{}", 0, 0, 0x1349cde127705c16),
    (b"{", 1, 1, 0xc2346e20f5a5dd1e),
    (b"}", 0, 0, 0xb8c2a5400d473978),
    (b"foo{bar", 0, 0, 0x34c86ac8c5beb8b0),
    (b"foo}bar{", 2, 2, 0x67a55afb348b7caa),
    (b"}{bar}", 0, 1, 0xd463c860a032d362),
    (b"{{bar}}", 0, 2, 0xa3610095f98f8e10),
    (b"{a}{b}", 0, 0, 0xe6c632b61e964e1f),
    (b"{a}", 1, 0, 0xe6c632b61e964e1f),
    (b"a{a}a", 1, 0, 0xe6c632b61e964e1f),
    (b"prefix:{tenant:42}:suffix", 1, 2, 0x865e2a5252f94ca5),
    (b"{tenant:42}", 0, 2, 0x865e2a5252f94ca5),
    (b"object:{shard-7}:meta", 0, 0, 0x357207c405d78c6b),
    (b"tag{ }space", 1, 0, 0xfc1537fc103cb7cf),
    (b":1:views.decorators.cache.cache_page", 0, 0, 0x31b95f7a59c57260),
    (b"mc:item:1234567890", 0, 0, 0xca730f6e9217e17d),
    (b"user:1000:profile", 2, 2, 0x1a84625c2ea288c9),
    (b"user:1001:profile", 0, 0, 0x25c0a6012837d15a),
    (b"rate-limit:203.0.113.9", 1, 1, 0x405832b2e3a91ec0),
    (b"\xff{\xfe}", 0, 0, 0x6c197e51b9364ce3),
    (b"{\x00}", 1, 2, 0xc44bdff4074eecdb),
    (b"\x00{\x00", 1, 1, 0x8338bcb9c4a5ef3a),
    (b"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk{long-tag}", 2, 0, 0x39a9f772b4da8a0e),
];

/// Raw XXH3-64: (seed, input, hash). `("", seed 0)` is the reference XXH3
/// test vector; inputs over 240 bytes with a non-zero seed take the
/// derived-secret path.
#[rustfmt::skip]
const XXH3: &[(u64, &[u8], u64)] = &[
    (0x0, b"", 0x2d06800538d394c2),
    (0x0, b"a", 0xe6c632b61e964e1f),
    (0x0, b"foo", 0xab6e5f64077e7d8a),
    (0x0, b"127.0.0.1:6379-0", 0xf55fb651de63acf4),
    (0x0, b"127.0.0.1:6379-159", 0x8beae1d1264aa516),
    (0x2a, b"key:1", 0x5d4cd546cce82aa2),
    (0xdeadbeef, &[b'z'; 300], 0xe3a8ba1b47831d48),
    (0x0, &[b'z'; 300], 0x4d3f26454e4c3335),
];

#[test]
fn raw_xxh3() {
    for &(seed, input, want) in XXH3 {
        assert_eq!(
            xxh3(seed, input),
            want,
            "xxh3({seed:#x}, {:?})",
            input.escape_ascii().to_string()
        );
    }
}

#[test]
fn placement_is_frozen() {
    assert!(PLACEMENT.len() >= 50);
    let plain = ring(None, &[0, 1, 2]);
    let tagged = ring(Some((b'{', b'}')), &[0, 1, 2]);
    assert_eq!(
        plain.point_count(),
        480,
        "3 shards x 160 vnodes, no collisions"
    );
    for &(key, want_plain, want_tagged, want_hash) in PLACEMENT {
        let k = key.escape_ascii().to_string();
        assert_eq!(plain.locate(key), want_plain, "untagged placement of {k}");
        assert_eq!(tagged.locate(key), want_tagged, "tagged placement of {k}");
        assert_eq!(tagged.hash_key(key), want_hash, "tagged hash of {k}");
        assert_eq!(
            xxh3(0, hash_tag_slice(key, Some((b'{', b'}')))),
            want_hash,
            "hash_tag_slice of {k}"
        );
        assert_eq!(plain.hash_key(key), xxh3(0, key), "untagged hash of {k}");
    }
    println!("{} golden placements verified", PLACEMENT.len());
}

#[test]
fn shard_order_does_not_matter() {
    // Placement is a function of ids, not of the configured order.
    for order in [[2, 0, 1], [1, 2, 0], [2, 1, 0]] {
        let r = ring(Some((b'{', b'}')), &order);
        for &(key, _, want_tagged, _) in PLACEMENT {
            assert_eq!(
                r.locate_shard(key).id,
                SHARDS[want_tagged],
                "order {order:?}, key {:?}",
                key.escape_ascii().to_string()
            );
        }
    }
}

#[test]
fn point_derivation() {
    // The documented derivation: xxh3(seed, "<id>-<i>"), owner of the first
    // point >= hash. A key hashing exactly onto a shard's point lands there.
    let r = ring(None, &[0, 1, 2]);
    for (idx, id) in SHARDS.iter().enumerate() {
        for i in [0u32, 1, 77, 159] {
            let point = xxh3(0, format!("{id}-{i}").as_bytes());
            assert_eq!(r.locate_hash(point), idx, "{id}-{i}");
        }
    }
}
