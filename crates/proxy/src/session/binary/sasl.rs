//! SASL (PLAIN) for binary connections; see docs/binary.md.
//!
//! Off unless `[server] sasl = true`; then, as memcached with `-S`, a
//! binary connection must authenticate before anything but the SASL
//! opcodes and Version (else `Auth Error`, and the connection closes).
//! With SASL off, the SASL opcodes are `Unknown command` (memcached).

use bytes::Bytes;
use memshift_protocol::memcache::binary::Status;

use super::super::Session;
use super::Answer;

impl Session {
    pub(super) fn sasl_list_mechs(&mut self, opcode: u8, opaque: u32) {
        let answer = if self.proxy.sasl.is_some() {
            Answer::Body(b"PLAIN")
        } else {
            Answer::Error(Status::UnknownCommand)
        };
        self.push_local(opcode, opaque, answer);
    }

    /// SASL Auth (or Step, which PLAIN never needs: a step is a failed
    /// auth, as memcached's when no auth was started).
    pub(super) fn sasl_auth(
        &mut self,
        opcode: u8,
        opaque: u32,
        mechanism: &[u8],
        data: &Bytes,
        step: bool,
    ) {
        let Some(credentials) = self.proxy.sasl.clone() else {
            return self.push_local(opcode, opaque, Answer::Error(Status::UnknownCommand));
        };
        let ok = !step && mechanism == b"PLAIN" && credentials.check_plain(data);
        if ok {
            self.binary.authenticated = true;
            self.push_local(opcode, opaque, Answer::Body(b"Authenticated"));
        } else {
            self.push_local(opcode, opaque, Answer::Error(Status::AuthError));
        }
    }
}
