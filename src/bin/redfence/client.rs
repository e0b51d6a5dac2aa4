//! The lock client and the instance list, from the common options.

use redfence::redis::{ConnectionInfo, IntoConnectionInfo};
use redfence::Redlock;

use crate::cli::Common;
use crate::exit::{Failure, CONFIG, USAGE};

/// The instance URLs given, without empty entries (a trailing comma).
fn urls(common: &Common) -> Result<Vec<&str>, Failure> {
    let urls: Vec<&str> = common
        .servers
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    if urls.is_empty() {
        return Err(Failure::new(
            USAGE,
            "no instances: give --servers URL,... or set REDFENCE_URLS",
        ));
    }
    Ok(urls)
}

/// A client over the given instances (validates URLs, count and prefix).
pub fn build(common: &Common) -> Result<Redlock, Failure> {
    build_as(common, None)
}

/// [`build`], showing `identity` to other clients (hostname:pid if `None`).
pub fn build_as(common: &Common, identity: Option<&str>) -> Result<Redlock, Failure> {
    let mut builder = Redlock::builder(urls(common)?)
        .key_prefix(common.prefix.as_str())
        .instance_timeout(common.instance_timeout);
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    builder
        .build()
        .map_err(|e| Failure::from_lock_error(&e, CONFIG, CONFIG))
}

/// Each instance's name (`host:port/db`, no credentials) and connection
/// info, for commands that open their own connections. Call after
/// [`build`], which has validated the URLs.
pub fn instances(common: &Common) -> Result<Vec<(String, ConnectionInfo)>, Failure> {
    urls(common)?
        .into_iter()
        .enumerate()
        .map(|(i, url)| {
            let info = url.into_connection_info().map_err(|_| {
                Failure::new(
                    CONFIG,
                    format!("instance #{i} is not a valid Redis address"),
                )
            })?;
            Ok((name(&info), info))
        })
        .collect()
}

/// `host:port/db`, the way the library names instances.
pub fn name(info: &ConnectionInfo) -> String {
    format!("{}/{}", info.addr(), info.redis_settings().db())
}
