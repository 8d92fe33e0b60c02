//! Hash tags (twemproxy semantics): with `hash_tag = Some((open, close))`,
//! only the bytes between the first `open` and the first `close` after it
//! are hashed, when that span is non-empty; otherwise the whole key is.

use memshift_ring::{hash_tag_slice, xxh3, Ring, RingConfig, ShardSpec};

const BRACES: Option<(u8, u8)> = Some((b'{', b'}'));

#[test]
fn slice_rules() {
    let cases: &[(&[u8], &[u8])] = &[
        (b"{user1000}.following", b"user1000"),
        (b"foo{bar}baz", b"bar"),
        (b"{a}{b}", b"a"),              // first tag wins
        (b"{{bar}}", b"{bar"),          // first open, first close after it
        (b"}{bar}", b"bar"),            // a close before the open is ignored
        (b"foo{}{bar}", b"foo{}{bar}"), // empty tag: whole key
        (b"{}", b"{}"),
        (b"foo{bar", b"foo{bar"), // unclosed: whole key
        (b"foo}bar{", b"foo}bar{"),
        (b"{", b"{"),
        (b"", b""),
        (b"plain", b"plain"),
        (b"\xff{\x00\r\n}\xfe", b"\x00\r\n"), // binary tags are fine
    ];
    for &(key, want) in cases {
        assert_eq!(
            hash_tag_slice(key, BRACES),
            want,
            "{:?}",
            key.escape_ascii().to_string()
        );
        assert_eq!(hash_tag_slice(key, None), key, "no tag configured");
    }
    // Same open and close byte, and other pairs.
    assert_eq!(hash_tag_slice(b"a$tag$b", Some((b'$', b'$'))), b"tag");
    assert_eq!(hash_tag_slice(b"a$$b", Some((b'$', b'$'))), b"a$$b");
    assert_eq!(hash_tag_slice(b"user:[42]:x", Some((b'[', b']'))), b"42");
    assert_eq!(
        hash_tag_slice(b"user:{42}:x", Some((b'[', b']'))),
        b"user:{42}:x"
    );
}

#[test]
fn tagged_keys_colocate() {
    let shards: Vec<ShardSpec> = (0..10)
        .map(|i| ShardSpec::new(format!("shard-{i}"), 1))
        .collect();
    let ring = Ring::new(
        &shards,
        RingConfig {
            vnodes: 160,
            seed: 7,
            hash_tag: BRACES,
        },
    )
    .expect("ring");
    let untagged = Ring::new(
        &shards,
        RingConfig {
            hash_tag: None,
            ..ring.config()
        },
    )
    .expect("ring");
    let mut spread_without_tags = std::collections::BTreeSet::new();
    for user in 0..200 {
        let home = ring.locate(format!("{user}").as_bytes());
        for field in ["profile", "followers", "following", "sessions", "x{y}"] {
            let key = format!("app:{{{user}}}:{field}");
            assert_eq!(ring.locate(key.as_bytes()), home, "{key}");
            assert_eq!(
                ring.hash_key(key.as_bytes()),
                xxh3(7, format!("{user}").as_bytes())
            );
            spread_without_tags.insert(untagged.locate(key.as_bytes()));
        }
    }
    // Without the tag setting, the same keys scatter over the shards.
    assert_eq!(spread_without_tags.len(), 10);
}
