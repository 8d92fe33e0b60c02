#![no_main]
//! Binary request parser: arbitrary bytes must never panic and must keep
//! the contract checked in `invariants.rs` (shared with the corpus replay
//! test).

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/memcache_binary_support/invariants.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| {
    invariants::check(data);
});
