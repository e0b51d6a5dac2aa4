//! TLS through redis-rs and rustls (feature `tls-rustls`): the crypto
//! provider, clients for `rediss://` instances, and errors an operator can
//! act on.

use std::sync::Once;

use redis::{ConnectionAddr, ConnectionInfo, RedisResult, TlsCertificates};
use rustls::pki_types::pem::PemObject;

/// Makes sure rustls has a process-level crypto provider. redis-rs builds a
/// rustls configuration per connection and rustls panics there ("no
/// process-level CryptoProvider available") when the process chose none.
/// If the program already installed one, that one stays.
pub(crate) fn ensure_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race with another installer is fine: any provider will do.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// A client for one instance: `rediss://` ones with the certificates given to
/// the builder, if any.
pub(crate) fn open_client(
    info: ConnectionInfo,
    certificates: Option<&TlsCertificates>,
) -> RedisResult<redis::Client> {
    ensure_crypto_provider();
    match certificates {
        Some(certs) if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) => {
            redis::Client::build_with_tls(info, certs.clone())
        }
        _ => redis::Client::open(info),
    }
}

/// Checks the certificates given to the builder the way redis-rs will use
/// them on every connection, so a file that cannot work is refused by
/// `build()` rather than by each connection attempt. The reason names the
/// part of `tls_certificates` at fault and never quotes a key.
pub(crate) fn check_certificates(certificates: &TlsCertificates) -> Result<(), String> {
    ensure_crypto_provider();
    let roots = root_store(certificates.root_cert.as_deref())?;
    let Some(client) = &certificates.client_tls else {
        return Ok(());
    };
    const CLIENT: &str = "the client certificate given to tls_certificates (client_tls)";
    let chain = certificates_in(&client.client_cert, CLIENT)?;
    let key =
        rustls::pki_types::PrivateKeyDer::from_pem_slice(&client.client_key).map_err(|e| {
            format!(
                "the client key given to tls_certificates (client_tls) {}",
                pem_problem(&e)
            )
        })?;
    rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| {
            // rustls names the problem (an unsupported key type, a key
            // that does not match the certificate), never the key itself.
            format!(
                "the client certificate and key given to tls_certificates (client_tls) cannot \
                 be used: {e}"
            )
        })?;
    Ok(())
}

/// The trust store of the CA certificate given (`root_cert`), empty
/// without one.
fn root_store(root: Option<&[u8]>) -> Result<rustls::RootCertStore, String> {
    const ROOT: &str = "the CA certificate given to tls_certificates (root_cert)";
    let mut roots = rustls::RootCertStore::empty();
    if let Some(root) = root {
        for cert in certificates_in(root, ROOT)? {
            roots
                .add(cert)
                .map_err(|e| format!("{ROOT} cannot be used: {e}"))?;
        }
    }
    Ok(roots)
}

/// The certificates of a PEM file, at least one; `what` names the file in
/// the reason.
fn certificates_in(
    pem: &[u8],
    what: &str,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} {}", pem_problem(&e)))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} holds no certificate (no -----BEGIN CERTIFICATE----- section)"
        ));
    }
    Ok(certs)
}

/// What is wrong with a PEM file, in words of our own: the parser's
/// messages may quote a line of it, and it may be a key.
fn pem_problem(err: &rustls::pki_types::pem::Error) -> &'static str {
    use rustls::pki_types::pem::Error as E;
    match err {
        E::NoItemsFound => "holds no section of the expected kind (-----BEGIN …)",
        E::MissingSectionEnd { .. } => "is not valid PEM: a section has no -----END line",
        E::IllegalSectionStart { .. } => "is not valid PEM: a -----BEGIN line is malformed",
        E::Base64Decode(_) => "is not valid PEM: bad base64 inside a section",
        _ => "is not valid PEM",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_problems_are_told_in_our_own_words() {
        use rustls::pki_types::pem::Error as E;
        let secret = b"-----BEGIN PRIVATE KEY----- secret".to_vec();
        for (err, words) in [
            (E::NoItemsFound, "holds no section of the expected kind"),
            (
                E::MissingSectionEnd {
                    end_marker: secret.clone(),
                },
                "a section has no -----END line",
            ),
            (
                E::IllegalSectionStart {
                    line: secret.clone(),
                },
                "a -----BEGIN line is malformed",
            ),
            (
                E::Base64Decode("secret".into()),
                "bad base64 inside a section",
            ),
            (E::SectionTooLarge, "is not valid PEM"),
        ] {
            let said = pem_problem(&err);
            assert!(said.contains(words), "{said}");
            assert!(!said.contains("secret"), "{said}");
        }
    }

    #[test]
    fn unusable_certificates_are_named_without_their_contents() {
        let garbage =
            b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n";
        let cert = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let bad_key = TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: cert.to_vec(),
                client_key: garbage.to_vec(),
            }),
            root_cert: None,
        };
        let why = check_certificates(&bad_key).unwrap_err();
        assert!(why.contains("tls_certificates (client_tls)"), "{why}");
        assert!(!why.contains("c2VjcmV0"), "{why}");
        let no_ca = TlsCertificates {
            client_tls: None,
            root_cert: Some(b"not a certificate".to_vec()),
        };
        let why = check_certificates(&no_ca).unwrap_err();
        assert!(why.contains("tls_certificates (root_cert)"), "{why}");
        let bad_ca = TlsCertificates {
            client_tls: None,
            root_cert: Some(cert.to_vec()),
        };
        let why = check_certificates(&bad_ca).unwrap_err();
        assert!(why.contains("cannot be used"), "{why}");
    }
}
