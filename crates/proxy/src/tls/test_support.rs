//! A throwaway CA for the TLS tests.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

pub(super) struct Ca {
    pub(super) issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub(super) fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    /// (cert PEM, key PEM, cert DER)
    pub(super) fn leaf(&self, san: &str) -> (String, String, Vec<u8>) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![san.to_string()])
            .unwrap()
            .signed_by(&key, &*self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }
}

pub(super) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
