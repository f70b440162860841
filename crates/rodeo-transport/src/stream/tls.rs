//! TLS 1.3 on the stream transport's connections: every peer authenticated, every byte
//! encrypted (AES-GCM, in hardware where the CPU has it), for a partition whose network is not
//! private to it.
//!
//! The trust model is CURVE's (docs/transport.md): each partition makes its own CA when it
//! starts, signs one certificate with it (name [`PARTITION_NAME`], for servers and clients)
//! and forgets the CA's key. Every application gets the CA's certificate, the certificate and
//! its key over a private channel (the controller writes them to its stdin beside the CURVE
//! keys, [`TlsKeys::to_words`]). A router accepts a peer only if it presents a certificate of
//! the same CA (mutual TLS); a dealer accepts a router only on the same terms. A process of
//! another partition, or anything that is not TLS, fails the handshake: its connection is
//! closed and counted ([`super::StreamStats::tls_refused`]).

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};

/// The name in every partition certificate, and the name a dealer checks the router's by
/// (the partition, not the host: every application holds the same certificate).
pub const PARTITION_NAME: &str = "rodeo-partition";

/// The word the TLS part of a key line starts with (the format's version).
pub const TLS_WORDS_TAG: &str = "rodeo-tls-1";

/// Why TLS keys could not be made, read or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsKeyError {
    /// Making the CA or the certificate failed.
    #[error("TLS keys: cannot make the partition's certificate: {0}")]
    Generate(String),
    /// The words are not `rodeo-tls-1` and three hexadecimal fields.
    #[error(
        "TLS key words: expected \"{TLS_WORDS_TAG}\" and three hexadecimal fields, got {0} words"
    )]
    Format(usize),
    /// A field is not hexadecimal.
    #[error("TLS key words: the {0} is not hexadecimal")]
    Hex(&'static str),
    /// rustls refused the certificate or the key.
    #[error("TLS keys: {0} (were they made by this rodeo's `TlsKeys::generate`?)")]
    Config(String),
}

/// One partition's TLS material, DER-encoded: the CA's certificate (the only one trusted),
/// the partition's certificate and its private key (PKCS#8).
#[derive(Clone, PartialEq, Eq)]
pub struct TlsKeys {
    /// The CA's certificate.
    pub ca: Vec<u8>,
    /// The certificate every application presents, signed by the CA.
    pub cert: Vec<u8>,
    /// The certificate's private key (secret).
    pub key: Vec<u8>,
}

impl std::fmt::Debug for TlsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsKeys")
            .field("ca_bytes", &self.ca.len())
            .field("cert_bytes", &self.cert.len())
            .field("key", &"(secret)")
            .finish()
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn unhex(text: &str, what: &'static str) -> Result<Vec<u8>, TlsKeyError> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let b = text.as_bytes();
    if b.is_empty() || b.len() % 2 != 0 {
        return Err(TlsKeyError::Hex(what));
    }
    b.chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or(TlsKeyError::Hex(what))
}

impl TlsKeys {
    /// A new CA (ECDSA P-256), the partition's certificate signed by it, and its key. The CA's
    /// key is dropped here: no other certificate can be made for this partition.
    pub fn generate() -> Result<TlsKeys, TlsKeyError> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        };
        let e = |e: rcgen::Error| TlsKeyError::Generate(e.to_string());
        let ca_key = KeyPair::generate().map_err(e)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "rodeo partition CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let ca = ca_params.self_signed(&ca_key).map_err(e)?;
        let key = KeyPair::generate().map_err(e)?;
        let mut params = CertificateParams::new(vec![PARTITION_NAME.to_string()]).map_err(e)?;
        params
            .distinguished_name
            .push(DnType::CommonName, PARTITION_NAME);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &ca, &ca_key).map_err(e)?;
        Ok(TlsKeys {
            ca: ca.der().to_vec(),
            cert: cert.der().to_vec(),
            key: key.serialize_der(),
        })
    }

    /// The keys as words of a line (no newline): [`TLS_WORDS_TAG`], then the CA's
    /// certificate, the certificate and the key in hexadecimal. Secret: hand it over a private
    /// channel (a child's stdin), never on a command line.
    pub fn to_words(&self) -> String {
        format!(
            "{TLS_WORDS_TAG} {} {} {}",
            hex(&self.ca),
            hex(&self.cert),
            hex(&self.key)
        )
    }

    /// Reads [`TlsKeys::to_words`]'s words (already split); the certificates and the key are
    /// checked by building the connections' configurations ([`TlsKeys::context`]).
    pub fn from_words(words: &[&str]) -> Result<TlsKeys, TlsKeyError> {
        if words.len() != 4 || words[0] != TLS_WORDS_TAG {
            return Err(TlsKeyError::Format(words.len()));
        }
        let keys = TlsKeys {
            ca: unhex(words[1], "CA certificate")?,
            cert: unhex(words[2], "certificate")?,
            key: unhex(words[3], "key")?,
        };
        keys.context()?;
        Ok(keys)
    }

    /// The configurations of this partition's connections: TLS 1.3 only, each side
    /// authenticated by the partition's CA.
    pub fn context(&self) -> Result<TlsContext, TlsKeyError> {
        let e = |e: &dyn std::fmt::Display| TlsKeyError::Config(e.to_string());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.ca.clone()))
            .map_err(|x| e(&x))?;
        let roots = Arc::new(roots);
        let chain = vec![CertificateDer::from(self.cert.clone())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        let versions = [&rustls::version::TLS13];
        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|x| e(&x))?
            .with_root_certificates(roots.clone())
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(|x| e(&x))?;
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|x| e(&x))?;
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .map_err(|x| e(&x))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|x| e(&x))?;
        // Connections live for the run: no session to resume.
        server.send_tls13_tickets = 0;
        Ok(TlsContext {
            client: Arc::new(client),
            server: Arc::new(server),
        })
    }
}

/// The client and server configurations of one partition's connections (cheap to clone).
#[derive(Clone)]
pub struct TlsContext {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsContext(TLS 1.3, partition CA)")
    }
}

impl TlsContext {
    /// The TLS state of a connection this side opened (a dealer's).
    pub(super) fn client(&self) -> Result<Connection, rustls::Error> {
        let name = ServerName::try_from(PARTITION_NAME)
            .map_err(|_| rustls::Error::General("the partition name".into()))?;
        let mut c = ClientConnection::new(self.client.clone(), name)?;
        // The stream bounds what waits itself (conn.rs): one message, or the corked bytes.
        c.set_buffer_limit(None);
        Ok(c.into())
    }

    /// The TLS state of a connection this side accepted (a router's).
    pub(super) fn server(&self) -> Result<Connection, rustls::Error> {
        let mut c = ServerConnection::new(self.server.clone())?;
        c.set_buffer_limit(None);
        Ok(c.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_survive_their_words_and_bad_words_are_typed_errors() {
        let k = TlsKeys::generate().unwrap();
        let line = k.to_words();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(TlsKeys::from_words(&words).unwrap(), k);
        assert!(!format!("{k:?}").contains(&hex(&k.key)));
        assert_eq!(
            TlsKeys::from_words(&words[..3]),
            Err(TlsKeyError::Format(3))
        );
        let mut bad = words.clone();
        bad[3] = "0g";
        assert_eq!(TlsKeys::from_words(&bad), Err(TlsKeyError::Hex("key")));
        bad[3] = "abc";
        assert_eq!(TlsKeys::from_words(&bad), Err(TlsKeyError::Hex("key")));
        // Hexadecimal, but not a key rustls takes.
        bad[3] = "00ff";
        assert!(matches!(
            TlsKeys::from_words(&bad),
            Err(TlsKeyError::Config(_))
        ));
    }

    #[test]
    fn two_partitions_make_different_keys() {
        let a = TlsKeys::generate().unwrap();
        let b = TlsKeys::generate().unwrap();
        assert_ne!(a.ca, b.ca);
        assert_ne!(a.key, b.key);
        assert_eq!(
            unhex(&hex(&[0, 1, 0xab, 0xff]), "x").unwrap(),
            [0, 1, 0xab, 0xff]
        );
    }
}
