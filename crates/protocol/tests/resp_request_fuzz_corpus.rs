//! Replays the `resp_request` fuzz corpus
//! (`crates/protocol/fuzz/corpus/resp_request/`) through the fuzz target's
//! invariants, so regressions show up in a plain `cargo test`.

#[path = "resp_request_support/invariants.rs"]
mod invariants;

#[test]
fn replay_resp_request_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/resp_request");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    assert!(entries.len() >= 20, "corpus too small at {}", dir.display());
    let mut requests = 0;
    let mut errors = 0;
    for path in &entries {
        let data = std::fs::read(path).expect("read corpus file");
        let result = std::panic::catch_unwind(|| invariants::check(&data));
        assert!(result.is_ok(), "corpus file {} fails", path.display());
        let (reqs, err) = invariants::feed([&data[..]], &invariants::limits());
        requests += reqs.len();
        errors += usize::from(err.is_some());
    }
    // The corpus reaches both complete requests and every kind of refusal.
    assert!(
        requests > 0 && errors > 0,
        "{requests} requests, {errors} errors"
    );
    println!(
        "replayed {} corpus files: {requests} requests, {errors} refused",
        entries.len()
    );
}
