//! Client side of the text protocol, for talking to a legacy memcached pool.
//!
//! Implemented by the protocol work.
