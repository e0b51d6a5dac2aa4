//! Certificates for TLS test servers, made with the `openssl` command at
//! start-up: a CA, a server certificate for 127.0.0.1 and localhost, and a
//! client certificate, all signed by that CA.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

const NOT_FOUND: &str =
    "openssl not found: install it with `sudo apt-get install -y openssl` (Debian/Ubuntu); \
     TLS test servers need it to make their certificates";

/// Extensions of the three certificates: what rustls and OpenSSL check.
const CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = redfence test
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
";

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A throw-away certificate authority with one server and one client
/// certificate (ECDSA P-256, valid for a week), in its own temporary
/// directory, removed on drop.
///
/// Servers started with [`ServerOptions::tls`](super::ServerOptions::tls)
/// get one (a [`RedisServers`](super::RedisServers) shares one among its
/// servers, so one set of client certificates fits them all). A second
/// `TestPki` is a CA the servers do not trust, for testing refusals.
#[derive(Debug)]
pub struct TestPki {
    dir: PathBuf,
    ca_cert: Vec<u8>,
    client_cert: Vec<u8>,
    client_key: Vec<u8>,
}

impl TestPki {
    /// Makes the CA and the certificates with the `openssl` command.
    ///
    /// Fails with [`io::ErrorKind::NotFound`] if `openssl` is not on `PATH`.
    pub fn generate() -> io::Result<TestPki> {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("redfence-pki-{}-{n}", std::process::id()));
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
        match make_certificates(&dir) {
            Ok(()) => {}
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        }
        let read = |name: &str| fs::read(dir.join(name));
        let pki = TestPki {
            ca_cert: read("ca.crt")?,
            client_cert: read("client.crt")?,
            client_key: read("client.key")?,
            dir,
        };
        Ok(pki)
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_cert
    }

    /// The client certificate, PEM.
    pub fn client_cert_pem(&self) -> &[u8] {
        &self.client_cert
    }

    /// The client certificate's private key, PEM (PKCS#8).
    pub fn client_key_pem(&self) -> &[u8] {
        &self.client_key
    }

    /// Certificates for a client of servers using this CA: it trusts the
    /// CA, and presents the client certificate if `with_client_cert`.
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn certificates(&self, with_client_cert: bool) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: with_client_cert.then(|| redis::ClientTlsConfig {
                client_cert: self.client_cert.clone(),
                client_key: self.client_key.clone(),
            }),
            root_cert: Some(self.ca_cert.clone()),
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn make_certificates(dir: &Path) -> io::Result<()> {
    // A name of its own, so another test CA is a stranger, not an impostor.
    let ca_subject = format!("/CN=redfence test CA {}", uuid::Uuid::new_v4().simple());
    fs::write(dir.join("openssl.cnf"), CONFIG)?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        dir,
        &[
            &[
                "req",
                "-x509",
                "-config",
                "openssl.cnf",
                "-extensions",
                "ca",
            ],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "7",
                "-subj",
                &ca_subject,
            ],
        ],
    )?;
    for (name, cn, serial) in [
        ("server", "localhost", "2"),
        ("client", "redfence test client", "3"),
    ] {
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let crt = format!("{name}.crt");
        let subj = format!("/CN={cn}");
        openssl(
            dir,
            &[
                &["req", "-new", "-config", "openssl.cnf"],
                &ec[..],
                &["-keyout", &key, "-out", &csr, "-subj", &subj],
            ],
        )?;
        openssl(
            dir,
            &[&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                serial,
                "-days",
                "7",
                "-extfile",
                "openssl.cnf",
                "-extensions",
                name,
                "-out",
                &crt,
            ]],
        )?;
    }
    Ok(())
}

fn openssl(dir: &Path, args: &[&[&str]]) -> io::Result<()> {
    let args: Vec<&str> = args.concat();
    let out = Command::new("openssl")
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => io::Error::new(io::ErrorKind::NotFound, NOT_FOUND),
            _ => io::Error::new(e.kind(), format!("could not run openssl: {e}")),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "`openssl {}` failed with {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
