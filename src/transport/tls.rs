//! TLS through redis-rs and rustls (feature `tls-rustls`): the crypto
//! provider, clients for `rediss://` instances, and errors an operator can
//! act on.

use std::sync::Once;

use redis::{ConnectionAddr, ConnectionInfo, RedisError, RedisResult, TlsCertificates};
use rustls::{AlertDescription, CertificateError};

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
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    ensure_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    if let Some(root) = &certificates.root_cert {
        let certs = CertificateDer::pem_slice_iter(root)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                format!(
                    "the CA certificate given to tls_certificates (root_cert) {}",
                    pem_problem(&e)
                )
            })?;
        if certs.is_empty() {
            return Err(
                "the CA certificate given to tls_certificates (root_cert) holds no \
                 certificate (no -----BEGIN CERTIFICATE----- section)"
                    .to_string(),
            );
        }
        for cert in certs {
            roots.add(cert).map_err(|e| {
                format!(
                    "the CA certificate given to tls_certificates (root_cert) cannot be used: {e}"
                )
            })?;
        }
    }
    let Some(client) = &certificates.client_tls else {
        return Ok(());
    };
    let chain = CertificateDer::pem_slice_iter(&client.client_cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "the client certificate given to tls_certificates (client_tls) {}",
                pem_problem(&e)
            )
        })?;
    if chain.is_empty() {
        return Err(
            "the client certificate given to tls_certificates (client_tls) holds no \
             certificate (no -----BEGIN CERTIFICATE----- section)"
                .to_string(),
        );
    }
    let key = PrivateKeyDer::from_pem_slice(&client.client_key).map_err(|e| {
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

/// What went wrong in the TLS layer, in words that say what to check, or
/// `None` if `err` is not a TLS failure.
pub(crate) fn describe(err: &RedisError) -> Option<String> {
    let tls = find_rustls_error(err)?;
    let why = match tls {
        rustls::Error::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer => "the server's certificate is not trusted (unknown \
                 issuer): give the CA that signed it to tls_certificates (root_cert), or install \
                 it in the trust store"
                .to_string(),
            CertificateError::BadSignature => "the server's certificate is not trusted (not \
                 signed by the CA it names): give the CA that signed it to tls_certificates \
                 (root_cert)"
                .to_string(),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "the server's certificate is not valid for this host name: connect with a name \
                 (or IP address) the certificate lists"
                    .to_string()
            }
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is expired or not yet valid: renew it, or check this \
                 machine's clock"
                    .to_string()
            }
            other => format!("the server's certificate was rejected ({other:?})"),
        },
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure),
        ) => format!(
            "the server refused the connection ({alert:?}): it requires a client certificate; \
             give one to tls_certificates (client_tls), signed by a CA the server trusts"
        ),
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::DecryptError),
        ) => format!(
            "the server did not accept our client certificate ({alert:?}): check that it is \
             valid and signed by a CA the server trusts"
        ),
        rustls::Error::InvalidMessage(_) => {
            "the server did not answer in TLS: check that this port serves TLS (rediss://), or \
             use redis:// for a plain-text port"
                .to_string()
        }
        other => format!("handshake failed: {other}"),
    };
    Some(format!("TLS: {why}"))
}

/// The rustls error under a redis error: redis-rs keeps it either directly
/// or inside the `io::Error` that the TLS stream returned.
fn find_rustls_error(err: &RedisError) -> Option<&rustls::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let inner: &(dyn std::error::Error + 'static) = std::error::Error::source(err)?;
    let inner: &(dyn std::error::Error + 'static) = match inner.downcast_ref::<Shared>() {
        Some(shared) => &**shared,
        None => inner,
    };
    if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    inner
        .downcast_ref::<std::io::Error>()?
        .get_ref()?
        .downcast_ref::<rustls::Error>()
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

    fn io_wrapped(tls: rustls::Error) -> RedisError {
        RedisError::from(std::io::Error::new(std::io::ErrorKind::InvalidData, tls))
    }

    #[test]
    fn describes_what_to_check() {
        let unknown = io_wrapped(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        assert!(describe(&unknown).unwrap().contains("not trusted"));
        let name = io_wrapped(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName,
        ));
        assert!(describe(&name).unwrap().contains("host name"));
        let required = io_wrapped(rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired,
        ));
        assert!(describe(&required)
            .unwrap()
            .contains("requires a client certificate"));
        let direct = RedisError::from(rustls::Error::InvalidCertificate(CertificateError::Expired));
        assert!(describe(&direct).unwrap().contains("expired"));
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

    #[test]
    fn other_errors_are_not_tls() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(describe(&refused), None);
    }
}
