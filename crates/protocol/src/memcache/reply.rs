//! Reply encoding, straight into the caller's buffer.
//!
//! Implemented by the protocol work; signatures fixed here.
