//! A private CA and a server certificate signed by it, made at test time (rcgen), for the
//! HTTPS tests: nothing secret is kept in the repository.

use std::path::{Path, PathBuf};

/// PEM files in a test's directory.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA's certificate (what a client trusts: `rodeo ctl --ca`).
    pub ca: PathBuf,
    /// The server's certificate, signed by the CA (`--tls-cert`).
    pub cert: PathBuf,
    /// The server's private key (`--tls-key`).
    pub key: PathBuf,
}

/// Makes a CA and a server certificate for `names` (IP addresses or DNS names) in `dir`.
pub fn make_pki(dir: &Path, names: &[&str]) -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "rodeo test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let key = KeyPair::generate().expect("server key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("server parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, "rodeo test server");
    let cert = params
        .signed_by(&key, &ca, &ca_key)
        .expect("server certificate");
    let pki = TestPki {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    std::fs::write(&pki.ca, ca.pem()).expect("write ca.pem");
    std::fs::write(&pki.cert, cert.pem()).expect("write server.pem");
    std::fs::write(&pki.key, key.serialize_pem()).expect("write server.key");
    pki
}
