//! One member of the quorum: a standalone server, or a Redis Cluster that
//! votes as one.
//!
//! A cluster position spreads resources over its shards (each resource's
//! keys share the hash tag `{R}`, so one shard answers for one resource),
//! which is how a deployment grows past what one server per position can
//! do, and how cluster-mode managed Redis can be used at all.

use redis::ConnectionInfo;

use crate::address::sealed::{Invalid, Sealed};
use crate::address::IntoInstance;

/// One member of the quorum, given to
/// [`Redlock::builder`](crate::Redlock::builder): a standalone Redis server
/// (any [`IntoInstance`] address converts), or a Redis Cluster
/// ([`Position::cluster`], or a `redis+cluster://` URL) that votes once per
/// lock, like a standalone server.
///
/// ```no_run
/// use redfence::{Position, Redlock};
///
/// let locks = Redlock::builder([
///     // Seed nodes: the client discovers the shard masters from them.
///     Position::cluster(["redis://10.0.1.1:6379", "redis://10.0.1.2:6379"]),
///     // The URL form, for configuration files and the command line.
///     Position::from("redis+cluster://10.0.2.1:6379?addr=10.0.2.2:6379"),
///     // A standalone server still works.
///     Position::from("redis://10.0.3.1:6379"),
/// ])
/// .build()?;
/// let guard = locks.lock("invoice:42")?;
/// # drop(guard);
/// # Ok::<(), redfence::Error>(())
/// ```
///
/// The URL form is
/// `redis+cluster://[user:password@]host:port[?addr=host2:port2&addr=host3:port3]`
/// (`rediss+cluster://` for TLS): the host is the first seed node, and each
/// `addr` parameter another, reached with the same credentials and TLS
/// settings. Every seed is checked like a standalone URL when the client is
/// built; mistakes are reported without quoting the URL.
///
/// Its `Debug` form shows addresses only, never credentials.
pub struct Position {
    pub(crate) kind: Kind,
}

// One per position, once per client.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Kind {
    Standalone(Result<ConnectionInfo, Invalid>),
    Cluster(Result<Vec<ConnectionInfo>, Invalid>),
}

impl Position {
    /// A Redis Cluster, found through one or more seed nodes (`redis://` or
    /// `rediss://` URLs, with credentials, exactly as standalone URLs; or
    /// any other [`IntoInstance`] address). Any node of the cluster will
    /// do; give several, so the client can start while one of them is
    /// down.
    pub fn cluster<I>(seeds: I) -> Position
    where
        I: IntoIterator,
        I::Item: IntoInstance,
    {
        let seeds: Result<Vec<ConnectionInfo>, Invalid> =
            seeds.into_iter().map(Sealed::into_instance).collect();
        Position {
            kind: Kind::Cluster(seeds),
        }
    }

    /// True for a Redis Cluster position.
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    fn from_text(text: &str) -> Position {
        let trimmed = text.trim();
        let scheme = trimmed.split_once("://").map(|(s, _)| s);
        match scheme {
            Some("redis+cluster")
            | Some("rediss+cluster")
            | Some("valkey+cluster")
            | Some("valkeys+cluster") => Position {
                kind: Kind::Cluster(parse_cluster_url(trimmed)),
            },
            _ => Position {
                kind: Kind::Standalone(trimmed.into_instance()),
            },
        }
    }
}

impl std::fmt::Debug for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addr = |info: &ConnectionInfo| info.addr().to_string();
        match &self.kind {
            Kind::Standalone(Ok(info)) => f.debug_tuple("Standalone").field(&addr(info)).finish(),
            Kind::Cluster(Ok(seeds)) => f
                .debug_tuple("Cluster")
                .field(&seeds.iter().map(addr).collect::<Vec<_>>())
                .finish(),
            Kind::Standalone(Err(_)) | Kind::Cluster(Err(_)) => f.write_str("Invalid"),
        }
    }
}

impl From<&str> for Position {
    fn from(text: &str) -> Self {
        Position::from_text(text)
    }
}

impl From<String> for Position {
    fn from(text: String) -> Self {
        Position::from_text(&text)
    }
}

impl From<&String> for Position {
    fn from(text: &String) -> Self {
        Position::from_text(text)
    }
}

/// A slice of URLs (`&urls[..4]`, `urls.iter()`) yields `&&str`.
impl From<&&str> for Position {
    fn from(text: &&str) -> Self {
        Position::from_text(text)
    }
}

macro_rules! standalone_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Position {
            fn from(addr: $t) -> Self {
                Position { kind: Kind::Standalone(addr.into_instance()) }
            }
        }
    )*};
}
standalone_from!(ConnectionInfo, redis::ConnectionAddr, url::Url);

impl<T: Into<String>> From<(T, u16)> for Position {
    fn from(addr: (T, u16)) -> Self {
        Position {
            kind: Kind::Standalone(addr.into_instance()),
        }
    }
}

/// The seeds of a `redis+cluster://` URL: the URL's own host, then each
/// `addr` parameter, all with the URL's credentials and TLS.
fn parse_cluster_url(text: &str) -> Result<Vec<ConnectionInfo>, Invalid> {
    let (scheme, rest) = text.split_once("://").unwrap_or(("", text));
    let base = scheme.trim_end_matches("+cluster");
    let mut url = url::Url::parse(&format!("{base}://{rest}")).map_err(|e| {
        Invalid::Bad(format!(
            "not a valid cluster URL ({e}): expected \
             redis+cluster://[user:password@]host:port[?addr=host2:port2]"
        ))
    })?;
    let mut extra = Vec::new();
    let mut kept: Vec<(String, String)> = Vec::new();
    for (name, value) in url.query_pairs() {
        if name == "addr" {
            extra.push(value.into_owned());
        } else {
            kept.push((name.into_owned(), value.into_owned()));
        }
    }
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(&kept);
    }
    let db = url.path().trim_matches('/');
    if !db.is_empty() && db != "0" {
        return Err(Invalid::Bad(
            "a cluster has only database 0: leave the path out".to_string(),
        ));
    }
    let mut seeds = vec![url.clone().into_instance()?];
    for (k, addr) in extra.iter().enumerate() {
        let addr = addr.trim().trim_end_matches('/');
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| Invalid::Bad(format!("addr parameter #{} is not host:port", k + 1)))?;
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
            Invalid::Bad(format!(
                "addr parameter #{}: bad port, give a number from 1 to 65535",
                k + 1
            ))
        })?;
        let mut seed = url.clone();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        seed.set_host(Some(host))
            .map_err(|_| Invalid::Bad(format!("addr parameter #{}: bad host name", k + 1)))?;
        seed.set_port(Some(port))
            .map_err(|()| Invalid::Bad(format!("addr parameter #{}: bad port", k + 1)))?;
        seeds.push(seed.into_instance()?);
    }
    Ok(seeds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_of_urls_gives_positions() {
        let urls = ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"];
        let positions: Vec<Position> = urls[..2].iter().map(Position::from).collect();
        assert_eq!(positions.len(), 2);
        // What a user writes: a slice of the URLs, as in `Redlock::new(&urls[..3])`.
        let _ = crate::Redlock::builder(&urls[..2]);
    }

    fn seeds(text: &str) -> Vec<String> {
        match Position::from(text).kind {
            Kind::Cluster(Ok(seeds)) => seeds.iter().map(|s| s.addr().to_string()).collect(),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn cluster_urls_list_their_seeds() {
        assert_eq!(seeds("redis+cluster://h1:7000"), ["h1:7000"]);
        assert_eq!(
            seeds("redis+cluster://u:p@h1:7000?addr=h2:7001&addr=10.0.0.3:7002"),
            ["h1:7000", "h2:7001", "10.0.0.3:7002"]
        );
        let Kind::Cluster(Ok(s)) = Position::from("redis+cluster://u:pw@h1:1?addr=h2:2").kind
        else {
            panic!()
        };
        for seed in &s {
            assert_eq!(seed.redis_settings().username(), Some("u"));
            assert_eq!(seed.redis_settings().password(), Some("pw"));
        }
        assert!(Position::from("redis://h:1").kind_is_standalone());
        assert!(Position::cluster(["redis://h:1"]).is_cluster());
    }

    #[test]
    fn bad_cluster_urls_are_named_without_the_secret() {
        for (text, words) in [
            ("redis+cluster://:s3cret@h:1?addr=h2", "not host:port"),
            ("redis+cluster://:s3cret@h:1?addr=h2:0", "bad port"),
            ("redis+cluster://:s3cret@h:1?addr=h2:x", "bad port"),
            ("redis+cluster://:s3cret@h:1/2", "database 0"),
            ("redis+cluster://:s3cret@", "host"),
        ] {
            let Kind::Cluster(Err(Invalid::Bad(why))) = Position::from(text).kind else {
                panic!("{text} was accepted")
            };
            assert!(why.contains(words), "{text}: {why}");
            assert!(!why.contains("s3cret"), "{text}: {why}");
        }
    }

    #[test]
    fn debug_shows_addresses_never_credentials() {
        let shown = format!(
            "{:?} {:?} {:?}",
            Position::from("redis+cluster://u:s3cret@h1:1?addr=h2:2"),
            Position::from("redis://:s3cret@h:1"),
            Position::from("redis://:s3cret@h:bad"),
        );
        assert_eq!(
            shown,
            r#"Cluster(["h1:1", "h2:2"]) Standalone("h:1") Invalid"#
        );
    }

    impl Position {
        fn kind_is_standalone(&self) -> bool {
            matches!(self.kind, Kind::Standalone(Ok(_)))
        }
    }
}
