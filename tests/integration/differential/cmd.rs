//! A generated command: literal bytes and per-side CAS placeholders.

use std::collections::HashMap;
use std::fmt::Write as _;

use memshift_tests::escape;

use super::UNSEEN_CAS;

/// A piece of a command: literal bytes, or "this side's last CAS unique seen
/// for this key" (each side gets its own unique substituted).
#[derive(Clone, Debug)]
pub(super) enum Seg {
    Lit(Vec<u8>),
    Cas(Vec<u8>),
}

#[derive(Clone, Debug)]
pub(super) struct Cmd {
    pub(super) segs: Vec<Seg>,
}

impl Cmd {
    pub(super) fn lit(bytes: impl Into<Vec<u8>>) -> Cmd {
        Cmd {
            segs: vec![Seg::Lit(bytes.into())],
        }
    }

    pub(super) fn push(&mut self, bytes: impl AsRef<[u8]>) {
        match self.segs.last_mut() {
            Some(Seg::Lit(v)) => v.extend_from_slice(bytes.as_ref()),
            _ => self.segs.push(Seg::Lit(bytes.as_ref().to_vec())),
        }
    }

    pub(super) fn render(&self, cas: &HashMap<Vec<u8>, u64>) -> Vec<u8> {
        let mut out = Vec::new();
        for seg in &self.segs {
            match seg {
                Seg::Lit(b) => out.extend_from_slice(b),
                Seg::Cas(key) => match cas.get(key) {
                    Some(c) => out.extend_from_slice(c.to_string().as_bytes()),
                    None => out.extend_from_slice(UNSEEN_CAS.as_bytes()),
                },
            }
        }
        out
    }

    /// For reports: the command with CAS placeholders shown symbolically.
    pub(super) fn describe(&self) -> String {
        let mut s = String::new();
        for seg in &self.segs {
            match seg {
                Seg::Lit(b) => s.push_str(&escape(b, 160)),
                Seg::Cas(k) => {
                    let _ = write!(s, "<cas-of {}>", escape(k, 40));
                }
            }
        }
        s
    }
}
