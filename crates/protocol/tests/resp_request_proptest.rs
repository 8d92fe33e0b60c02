//! Property tests of the RESP request parser (server side): the fuzz
//! invariants on random bytes and on random well-formed requests, which
//! must parse to exactly their arguments.

#[path = "resp_request_support/invariants.rs"]
mod invariants;

use proptest::prelude::*;

proptest! {
    #[test]
    fn random_bytes_keep_the_invariants(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        invariants::check(&data);
    }

    #[test]
    fn resp_shaped_bytes_keep_the_invariants(
        parts in proptest::collection::vec(
            prop_oneof![
                Just(b"*".to_vec()), Just(b"$".to_vec()), Just(b"\r\n".to_vec()),
                Just(b"-1".to_vec()), Just(b"0".to_vec()), Just(b"3".to_vec()),
                Just(b"abc".to_vec()), Just(b" ".to_vec()), Just(b"'".to_vec()),
            ],
            0..64,
        )
    ) {
        invariants::check(&parts.concat());
    }

    #[test]
    fn well_formed_requests_parse_to_their_arguments(
        reqs in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8),
            1..6,
        )
    ) {
        let data: Vec<u8> = reqs.iter().flat_map(invariants::encode).collect();
        let (got, err) = invariants::feed(data.chunks(7), &invariants::limits());
        prop_assert_eq!(err, None);
        prop_assert_eq!(got, reqs);
    }
}
