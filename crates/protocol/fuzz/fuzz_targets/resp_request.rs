#![no_main]
//! RESP request parser (server side): arbitrary bytes must keep the
//! contract checked in `invariants.rs` (shared with the corpus replay test).

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/resp_request_support/invariants.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| {
    invariants::check(data);
});
