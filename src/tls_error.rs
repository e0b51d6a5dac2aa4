//! What went wrong in the TLS layer (feature `tls-rustls`), in words an
//! operator can act on. Part of the vocabulary every layer speaks: the
//! errors (`error.rs`) describe a failed handshake with it, whichever layer
//! met it (docs/architecture.md).

use redis::RedisError;
use rustls::{AlertDescription, CertificateError};

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
    fn other_errors_are_not_tls() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(describe(&refused), None);
    }
}
