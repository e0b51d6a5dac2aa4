//! The lock client and the instance list, from the common options.

use std::path::Path;

use redfence::redis::{self, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use redfence::{InstanceError, Redlock};

use crate::cli::{Common, SERVERS_ENV, SERVERS_ENV_ALIAS};
use crate::exit::{cli_terms, Failure, CONFIG, USAGE};

/// The instance URLs given, without empty entries (a trailing comma):
/// `--servers`, else `REDFENCE_SERVERS`, else `REDFENCE_URLS`.
fn urls(common: &Common) -> Result<Vec<String>, Failure> {
    let alias;
    let given: &[String] = if common.servers.is_empty() && std::env::var_os(SERVERS_ENV).is_none() {
        alias = std::env::var(SERVERS_ENV_ALIAS)
            .map(|list| list.split(',').map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default();
        &alias
    } else {
        &common.servers
    };
    let urls: Vec<String> = given
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if urls.is_empty() {
        return Err(Failure::new(
            USAGE,
            format!("no instances: give --servers URL,... or set {SERVERS_ENV}"),
        ));
    }
    Ok(urls)
}

/// What the command line holds: the instances (checked by the library) and
/// the TLS certificates read from the files given.
pub struct Target {
    urls: Vec<String>,
    tls: Option<redis::TlsCertificates>,
}

impl Target {
    /// Reads the instance list and the TLS files, and checks what the
    /// library would report in its own terms (an even instance count, TLS
    /// files without a `rediss://` URL).
    pub fn from_options(common: &Common) -> Result<Target, Failure> {
        let urls = urls(common)?;
        if urls.len() % 2 == 0 && !common.allow_even_instances {
            return Err(Failure::new(
                CONFIG,
                format!(
                    "{} instances is an even number: it tolerates no more failures than {}; use \
                     an odd number, or --allow-even-instances",
                    urls.len(),
                    urls.len() - 1
                ),
            ));
        }
        let tls = tls_certificates(common)?;
        if tls.is_some() && !urls.iter().any(|u| is_tls_url(u)) {
            return Err(Failure::new(
                CONFIG,
                "--tls-ca-file, --tls-cert-file and --tls-key-file apply to rediss:// URLs, and \
                 no instance is one: the connections would not be encrypted",
            ));
        }
        Ok(Target { urls, tls })
    }

    /// A client over the instances (validates URLs, count and prefix).
    pub fn client(&self, common: &Common) -> Result<Redlock, Failure> {
        self.client_as(common, None)
    }

    /// [`client`](Self::client), showing `identity` to other clients
    /// (`hostname:pid` if `None`).
    pub fn client_as(&self, common: &Common, identity: Option<&str>) -> Result<Redlock, Failure> {
        let mut builder = Redlock::builder(&self.urls)
            .key_prefix(common.prefix.as_str())
            .instance_timeout(common.instance_timeout)
            .allow_even_instances(common.allow_even_instances);
        if let Some(identity) = identity {
            builder = builder.identity(identity);
        }
        if let Some(certs) = &self.tls {
            builder = builder.tls_certificates(certs.clone());
        }
        builder
            .build()
            .map_err(|e| Failure::from_lock_error(&e, CONFIG, CONFIG))
    }

    /// Each instance's name (`host:port/db`, or `cluster #i` for a
    /// `redis+cluster://` URL; no credentials) and a way to open redis-rs
    /// clients with the TLS settings, for commands that open their own
    /// connections. Call after [`client`](Self::client), which has
    /// validated the URLs.
    pub fn instances(&self) -> Result<Vec<(String, Instance)>, Failure> {
        self.urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let invalid = || {
                    Failure::new(
                        CONFIG,
                        format!("instance #{i} is not a valid Redis address"),
                    )
                };
                let (text, cluster) = match cluster_seed(url) {
                    Some(seed) => (seed, true),
                    None => (url.clone(), false),
                };
                let info = text
                    .as_str()
                    .into_connection_info()
                    .map_err(|_| invalid())?;
                let name = if cluster {
                    format!("cluster #{i}")
                } else {
                    name(&info)
                };
                let instance = Instance {
                    info,
                    tls: self.tls.clone(),
                    cluster,
                };
                instance.client(instance.info.clone()).map_err(|e| {
                    Failure::new(
                        CONFIG,
                        format!("instance #{i} ({name}): {}", describe(&name, &e)),
                    )
                })?;
                Ok((name, instance))
            })
            .collect()
    }
}

/// One instance for commands that open their own connections: a server,
/// or a cluster reached through its first seed node.
pub struct Instance {
    info: ConnectionInfo,
    tls: Option<redis::TlsCertificates>,
    /// A cluster: a key's reader follows the seed's `MOVED` to its shard.
    pub cluster: bool,
}

impl Instance {
    /// The seed's `host:port`.
    pub fn seed_addr(&self) -> Option<String> {
        match self.info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                Some(format!("{host}:{port}"))
            }
            _ => None,
        }
    }

    /// A client for the server (or the seed).
    pub fn seed(&self) -> redis::RedisResult<redis::Client> {
        self.client(self.info.clone())
    }

    /// A client for the node at `host:port` of this cluster, with the
    /// seed's credentials and TLS.
    pub fn node(&self, host: &str, port: u16) -> redis::RedisResult<redis::Client> {
        let addr = match self.info.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_string(), port),
        };
        self.client(self.info.clone().set_addr(addr))
    }

    fn client(&self, info: ConnectionInfo) -> redis::RedisResult<redis::Client> {
        match &self.tls {
            Some(certs) if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) => {
                redis::Client::build_with_tls(info, certs.clone())
            }
            _ => redis::Client::open(info),
        }
    }
}

/// The first seed of a `redis+cluster://` URL, as a plain `redis://` (or
/// `rediss://`) URL without the `addr` parameters.
fn cluster_seed(url: &str) -> Option<String> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let base = scheme.to_ascii_lowercase();
    let base = base.strip_suffix("+cluster")?;
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    Some(format!("{base}://{rest}"))
}

/// The position of a row of the library's ping report: `cluster #i shard
/// …` rows of one cluster share a position; every other row is its own.
pub fn ping_position(row: usize, name: &str) -> String {
    match name.strip_prefix("cluster #") {
        Some(rest) => format!("cluster #{}", rest.split(' ').next().unwrap_or_default()),
        None => format!("row {row}"),
    }
}

/// `host:port/db`, the way the library names instances.
pub fn name(info: &ConnectionInfo) -> String {
    format!("{}/{}", info.addr(), info.redis_settings().db())
}

/// An instance's error as `Kind: detail`, in the command line's terms: the
/// same words for the same failure in `run`, `status` and `ping`.
pub fn show_error(err: &InstanceError) -> String {
    format!("{:?}: {}", err.kind(), cli_terms(err.detail()))
}

/// A redis-rs error of a connection of our own, classified as the library
/// classifies its own.
pub fn describe(instance: &str, err: &redis::RedisError) -> String {
    show_error(&InstanceError::from_redis(instance, err))
}

fn is_tls_url(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    let scheme = scheme.to_ascii_lowercase();
    let scheme = scheme.strip_suffix("+cluster").unwrap_or(&scheme);
    scheme == "rediss" || scheme == "valkeys"
}

/// The certificates named by `--tls-ca-file`, `--tls-cert-file` and
/// `--tls-key-file`, if any was given. The files' contents never appear in
/// a message: a key is a secret.
fn tls_certificates(common: &Common) -> Result<Option<redis::TlsCertificates>, Failure> {
    let client_tls = match (&common.tls_cert_file, &common.tls_key_file) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read_pem(cert, "--tls-cert-file")?,
            client_key: read_pem(key, "--tls-key-file")?,
        }),
        (Some(_), None) => {
            return Err(Failure::new(
                CONFIG,
                "--tls-cert-file needs --tls-key-file (REDFENCE_TLS_KEY_FILE): the client \
                 certificate's private key",
            ))
        }
        (None, Some(_)) => {
            return Err(Failure::new(
                CONFIG,
                "--tls-key-file needs --tls-cert-file (REDFENCE_TLS_CERT_FILE): the client \
                 certificate that goes with the key",
            ))
        }
    };
    let root_cert = match &common.tls_ca_file {
        Some(path) => Some(read_pem(path, "--tls-ca-file")?),
        None => None,
    };
    if client_tls.is_none() && root_cert.is_none() {
        return Ok(None);
    }
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// A PEM file's contents; errors name the flag and the path, never the
/// contents.
fn read_pem(path: &Path, flag: &str) -> Result<Vec<u8>, Failure> {
    let bytes = std::fs::read(path).map_err(|e| {
        Failure::new(
            CONFIG,
            format!("{flag} {}: cannot read it: {e}", path.display()),
        )
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(Failure::new(
            CONFIG,
            format!(
                "{flag} {}: not a PEM file (no -----BEGIN line)",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}
