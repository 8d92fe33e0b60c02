//! Replays every input of the committed binary fuzz corpus
//! (`fuzz/corpus/memcache_binary/`) through the binary request parser as a
//! normal test, checking the same invariants as the fuzz target.

mod memcache_binary_support;

#[test]
fn corpus_inputs_keep_the_binary_parser_contract() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/memcache_binary");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.expect("corpus entry").path();
        if !path.is_file() {
            continue;
        }
        let data = std::fs::read(&path).expect("corpus file");
        let outcome =
            std::panic::catch_unwind(|| memcache_binary_support::invariants::check(&data));
        assert!(
            outcome.is_ok(),
            "corpus input {} broke the binary parser contract",
            path.display()
        );
        count += 1;
    }
    assert!(count > 0, "empty corpus at {}", dir.display());
}
