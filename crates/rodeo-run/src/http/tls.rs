//! HTTPS settings from PEM files: the server's certificate chain and key (`--tls-cert FILE
//! --tls-key FILE`), and a client's trusted roots (`rodeo ctl --ca FILE`, else the system's
//! bundle). rustls with ring's primitives: no OpenSSL.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Largest PEM file read (a chain of a few certificates is a few KiB).
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Where the system's trusted roots are looked for when no `--ca` is given (after
/// `SSL_CERT_FILE`).
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Why the TLS settings could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A file is larger than a PEM file of certificates or a key can be.
    #[error("{path} is larger than {MAX_PEM_BYTES} bytes: not a PEM certificate or key file")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A file holds no PEM block of the kind needed, or a broken one.
    #[error("{path}: {what} (expected PEM: -----BEGIN {expected}-----)")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
        /// The PEM label looked for.
        expected: &'static str,
    },
    /// rustls refused the certificate and key (a key that is not the certificate's, an
    /// unsupported algorithm, …).
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
    /// No `--ca` and no readable system bundle.
    #[error(
        "no trusted certificates: give --ca FILE (the CA that signed the server's \
         certificate), or install the system's CA bundle (tried SSL_CERT_FILE and {})",
        SYSTEM_BUNDLES.join(", ")
    )]
    NoRoots,
}

fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read as _;
    let read = |source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(TlsError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// The certificates of a PEM file, in order (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem(path)?;
    let pem = |what: String| TlsError::Pem {
        path: path.to_path_buf(),
        what,
        expected: "CERTIFICATE",
    };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(pem("no certificate in it".into()));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's TLS settings: the certificate chain of `cert` (the server's first) and the
/// private key of `key` (PKCS#8, PKCS#1 or SEC1), HTTP/1.1 offered by ALPN.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(cert)?;
    let bytes = read_pem(key)?;
    let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
        path: key.to_path_buf(),
        what: e.to_string(),
        expected: "PRIVATE KEY",
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client's TLS settings: the server's certificate must chain to a certificate of `ca`
/// (a private CA), or without it to one of the system's trusted roots, and name the host.
pub fn client_config(ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for c in certificates(path)? {
                roots.add(c)?;
            }
        }
        None => {
            let env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
            let found = env
                .into_iter()
                .chain(SYSTEM_BUNDLES.iter().map(PathBuf::from))
                .find_map(|p| certificates(&p).ok());
            let (added, _) = roots.add_parsable_certificates(found.ok_or(TlsError::NoRoots)?);
            if added == 0 {
                return Err(TlsError::NoRoots);
            }
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
