#![no_main]
//! RESP2 reply parser: arbitrary bytes must keep the contract checked in
//! `invariants.rs` (shared with the corpus replay test).

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/resp_support/invariants.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| {
    invariants::check(data);
});
