//! Replays the minimized `resp_parse` fuzz corpus
//! (`crates/protocol/fuzz/corpus/resp_parse/`) through the fuzz target's
//! invariants, so regressions show up in a plain `cargo test`.

#[path = "resp_support/invariants.rs"]
mod invariants;

use invariants::{check, feed};

#[test]
fn replay_resp_parse_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/resp_parse");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "empty corpus at {}", dir.display());
    let mut frames = 0;
    for path in &entries {
        let data = std::fs::read(path).expect("read corpus file");
        let result = std::panic::catch_unwind(|| check(&data));
        assert!(result.is_ok(), "corpus file {} fails", path.display());
        frames += feed([&data[..]]).0.len();
    }
    println!("replayed {} corpus files, {frames} frames", entries.len());
}
