//! Instance addresses given to the builder: URLs are checked here, before
//! redis-rs converts them, so a mistake is named ("unknown scheme", "bad
//! port", …) rather than reported as "Redis URL did not parse". No message
//! quotes the URL: it may carry a password.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

/// An instance address that [`Redlock::builder`](crate::Redlock::builder)
/// accepts: a URL (`&str`, `String`, `&String` or `url::Url`) such as
/// `redis://[user][:password@]host[:port][/db]`, `rediss://…` for TLS or
/// `unix:///path/to/redis.sock`, a [`redis::ConnectionInfo`], a
/// [`redis::ConnectionAddr`], or a `(host, port)` pair.
///
/// URLs are checked before they are used: an unknown scheme, a missing
/// host, a bad port or database number is refused by
/// [`build`](crate::RedlockBuilder::build) with an
/// [`Error::InvalidConfig`](crate::Error::InvalidConfig) that says which,
/// without quoting the URL (it may hold a password).
///
/// The trait is sealed: convert other address types to a
/// [`redis::ConnectionInfo`] first.
pub trait IntoInstance: sealed::Sealed {}

pub(crate) mod sealed {
    use redis::ConnectionInfo;

    /// The conversion behind [`IntoInstance`](super::IntoInstance).
    pub trait Sealed {
        /// The connection info, or what is wrong with the address.
        fn into_instance(self) -> Result<ConnectionInfo, Invalid>;
    }

    /// Why an address cannot be used.
    #[derive(Debug)]
    pub enum Invalid {
        /// What is wrong with it, never quoting it.
        Bad(String),
        /// A TLS URL, and redfence was built without TLS.
        TlsUnsupported,
    }

    impl From<String> for Invalid {
        fn from(reason: String) -> Self {
            Invalid::Bad(reason)
        }
    }
}

use sealed::Invalid;

impl IntoInstance for &str {}
impl sealed::Sealed for &str {
    fn into_instance(self) -> Result<ConnectionInfo, Invalid> {
        parse_url(self)
    }
}

impl IntoInstance for String {}
impl sealed::Sealed for String {
    fn into_instance(self) -> Result<ConnectionInfo, Invalid> {
        parse_url(&self)
    }
}

impl IntoInstance for &String {}
impl sealed::Sealed for &String {
    fn into_instance(self) -> Result<ConnectionInfo, Invalid> {
        parse_url(self)
    }
}

impl IntoInstance for url::Url {}
impl sealed::Sealed for url::Url {
    fn into_instance(self) -> Result<ConnectionInfo, Invalid> {
        check_url(self)
    }
}

impl IntoInstance for ConnectionInfo {}
impl sealed::Sealed for ConnectionInfo {
    fn into_instance(self) -> Result<ConnectionInfo, Invalid> {
        Ok(self)
    }
}

impl IntoInstance for ConnectionAddr {}
impl sealed::Sealed for ConnectionAddr {
    fn into_instance(self) -> Result<ConnectionInfo, Invalid> {
        self.into_connection_info()
            .map_err(|e| redis_reason(&e).into())
    }
}

impl<T: Into<String>> IntoInstance for (T, u16) {}
impl<T: Into<String>> sealed::Sealed for (T, u16) {
    fn into_instance(self) -> Result<ConnectionInfo, Invalid> {
        if self.1 == 0 {
            return Err(Invalid::Bad(
                "bad port 0: give a number from 1 to 65535".to_string(),
            ));
        }
        self.into_connection_info()
            .map_err(|e| redis_reason(&e).into())
    }
}

/// The schemes redis-rs connects to over TCP, and over a Unix socket.
const TCP_SCHEMES: [&str; 4] = ["redis", "rediss", "valkey", "valkeys"];
const UNIX_SCHEMES: [&str; 3] = ["unix", "redis+unix", "valkey+unix"];
/// The schemes that mean TLS.
pub(crate) const TLS_SCHEMES: [&str; 2] = ["rediss", "valkeys"];

/// The form of an instance URL, for messages.
const FORM: &str = "redis://[user][:password@]host[:port][/db] (rediss:// for TLS)";

fn parse_url(text: &str) -> Result<ConnectionInfo, Invalid> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("the URL is empty: expected {FORM}").into());
    }
    let url = url::Url::parse(text).map_err(|e| match e {
        url::ParseError::RelativeUrlWithoutBase => {
            format!("not a URL (no scheme): expected {FORM}")
        }
        url::ParseError::InvalidPort => {
            "bad port: give a number from 1 to 65535 after the host".to_string()
        }
        url::ParseError::EmptyHost => "no host name".to_string(),
        // The url crate's messages are fixed texts ("invalid IPv6
        // address", …): they never quote the input.
        other => format!("not a valid URL: {other}"),
    })?;
    check_url(url)
}

/// Checks what redis-rs would refuse with an unspecific message, then
/// hands the URL to redis-rs.
fn check_url(url: url::Url) -> Result<ConnectionInfo, Invalid> {
    check_parts(&url)?;
    url.into_connection_info()
        .map_err(|e| redis_reason(&e).into())
}

fn check_parts(url: &url::Url) -> Result<(), Invalid> {
    let scheme = url.scheme();
    if TCP_SCHEMES.contains(&scheme) {
        match url.host_str() {
            None | Some("") => return Err(format!("no host name: expected {FORM}").into()),
            Some(_) => {}
        }
        if url.port() == Some(0) {
            return Err("bad port 0: give a number from 1 to 65535"
                .to_string()
                .into());
        }
        let db = url.path().trim_matches('/');
        if !db.is_empty() && db.parse::<u32>().is_err() {
            return Err(
                "bad database number: the path must be a number, as in redis://host:6379/0"
                    .to_string()
                    .into(),
            );
        }
        if TLS_SCHEMES.contains(&scheme) {
            if let Some(fragment) = url.fragment() {
                if fragment != "insecure" {
                    return Err(
                        "unknown URL fragment: only #insecure (no certificate checks) is \
                         supported"
                            .to_string()
                            .into(),
                    );
                }
            }
        }
        if TLS_SCHEMES.contains(&scheme) && !cfg!(feature = "tls-rustls") {
            return Err(Invalid::TlsUnsupported);
        }
    } else if !UNIX_SCHEMES.contains(&scheme) {
        if url.cannot_be_a_base() && url.path().parse::<u16>().is_ok() {
            // `host:port`: the host was read as a scheme.
            return Err(format!("not a URL (no scheme): expected {FORM}").into());
        }
        // A scheme is letters, digits, `+`, `-` and `.` before the first
        // colon: never a password. Long ones are cut all the same.
        let shown: String = scheme.chars().take(16).collect();
        return Err(format!(
            "unknown scheme {shown:?}: use redis:// (or rediss:// for TLS, unix:// for a \
             socket)"
        )
        .into());
    }
    Ok(())
}

/// A redis-rs conversion error, without its error kind. Its URL messages
/// name the part that is wrong, never a credential.
fn redis_reason(err: &redis::RedisError) -> String {
    let text = err.to_string();
    match text.split_once(" - ") {
        Some((what, _kind)) => what.to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::sealed::Sealed;
    use super::*;

    proptest::proptest! {
        /// Any text given as an instance URL converts or is refused with a
        /// reason: never a panic, and a refusal never repeats a password.
        #[test]
        fn any_url_text_converts_or_is_refused(
            scheme in "(redis|rediss|redis\\+unix|http|)",
            rest in "[ -~]{0,40}",
        ) {
            let text = format!("{scheme}://user:s3cr3t-pw@{rest}");
            if let Err(Invalid::Bad(why)) = parse_url(&text) {
                proptest::prop_assert!(!why.contains("s3cr3t-pw"), "{}", why);
            }
            let _ = parse_url(&rest);
        }
    }

    fn reason(text: &str) -> String {
        match text.into_instance() {
            Err(Invalid::Bad(why)) => why,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn good_urls_convert() {
        for url in [
            "redis://127.0.0.1",
            "redis://127.0.0.1:6379/3",
            "redis://:pw@localhost:7000/",
            "redis://user:pw@[::1]:7000/0?protocol=resp3",
            "valkey://h:1",
            "unix:///tmp/redis.sock",
        ] {
            url.into_instance()
                .unwrap_or_else(|e| panic!("{url}: {e:?}"));
        }
        ("localhost", 6379).into_instance().unwrap();
        String::from("redis://h").into_instance().unwrap();
    }

    #[test]
    fn mistakes_are_named_without_the_secret() {
        let cases = [
            ("http://:s3cret@h:80", "unknown scheme \"http\""),
            ("redis://:s3cret@h:notaport", "bad port"),
            ("redis://:s3cret@h:99999", "bad port"),
            ("redis://:s3cret@h:0", "bad port 0"),
            ("redis://:s3cret@h:6379/zero", "bad database number"),
            ("redis://:s3cret@", "host"),
            ("s3cret", "no scheme"),
            (":s3cret@h:6379", "no scheme"),
            ("h:6379", "no scheme"),
            ("admin:s3cret@h:6379", "unknown scheme \"admin\""),
            ("", "empty"),
            ("redis://:s3cret@h:6379/0?protocol=resp9", "protocol"),
        ];
        for (url, words) in cases {
            let why = reason(url);
            assert!(why.contains(words), "{url}: {why}");
            assert!(!why.contains("s3cret"), "{url}: {why}");
        }
        assert!(
            matches!(("h", 0).into_instance(), Err(Invalid::Bad(why)) if why.contains("bad port"))
        );
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn tls_fragments_other_than_insecure_are_refused() {
        "rediss://h/#insecure".into_instance().unwrap();
        assert!(reason("rediss://:s3cret@h/#nope").contains("#insecure"));
    }
}
