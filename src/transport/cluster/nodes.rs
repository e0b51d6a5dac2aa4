//! Cluster nodes as the router sees them: the slot map a node reports,
//! and the connection settings of a node announced by address.

use redis::{ConnectionAddr, ConnectionInfo, Value};

use super::ShardSettings;
use crate::transport::connection::{connect, open_client};

/// `CLUSTER SLOTS` of one node: each range's first and last slot and its
/// master's `host:port`. A master announced without an address (`""` or
/// `?`) is the node asked.
pub(super) fn read_slots(
    info: ConnectionInfo,
    settings: &ShardSettings,
) -> redis::RedisResult<Vec<(u16, u16, String)>> {
    let asked = node_addr(&info);
    let client = open_client(info, &settings.tls)?;
    let mut conn = connect(&client, settings.connect_timeout)?;
    conn.set_read_timeout(Some(settings.connect_timeout))?;
    conn.set_write_timeout(Some(settings.connect_timeout))?;
    let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn)?;
    Ok(parse_slots(&reply, asked.as_deref()))
}

fn parse_slots(reply: &Value, asked: Option<&str>) -> Vec<(u16, u16, String)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => continue,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let addr = if host.is_empty() || host == "?" {
            match asked.and_then(|a| a.rsplit_once(':')) {
                Some((h, _)) => format!("{h}:{port}"),
                None => continue,
            }
        } else if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        out.push((start, end, addr));
    }
    out
}

/// The seed's settings (credentials, TLS, protocol) for the node at
/// `addr` (`host:port`, IPv6 hosts in brackets).
pub(super) fn node_info(template: &ConnectionInfo, addr: &str) -> Option<ConnectionInfo> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port: u16 = port.parse().ok()?;
    let node = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    Some(template.clone().set_addr(node))
}

fn node_addr(info: &ConnectionInfo) -> Option<String> {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some(if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any reply to CLUSTER SLOTS parses to slot ranges or none: never
        /// a panic.
        #[test]
        fn any_slots_reply_parses(reply in crate::arbitrary::reply()) {
            let _ = parse_slots(&reply, Some("127.0.0.1"));
            let _ = parse_slots(&reply, None);
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn slot_ranges_are_read_with_their_masters() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("10.0.0.4"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7001), bulk("id2")]),
            ]),
            Value::Array(vec![
                Value::Int(1),
                Value::Int(2),
                Value::Array(vec![bulk("::1"), Value::Int(7002)]),
            ]),
            Value::Nil,
        ]);
        assert_eq!(
            parse_slots(&reply, Some("seed:7001")),
            [
                (0, 5460, "10.0.0.1:7000".to_string()),
                (5461, 16383, "seed:7001".to_string()),
                (1, 2, "[::1]:7002".to_string()),
            ]
        );
        assert!(parse_slots(&Value::Nil, None).is_empty());
    }

    #[test]
    fn nodes_keep_the_seeds_settings() {
        let seed: ConnectionInfo =
            redis::IntoConnectionInfo::into_connection_info("redis://user:pw@seed:1/0").unwrap();
        let node = node_info(&seed, "[::1]:7002").unwrap();
        assert_eq!(node.addr(), &ConnectionAddr::Tcp("::1".into(), 7002));
        assert_eq!(node.redis_settings().password(), Some("pw"));
        assert_eq!(node_addr(&node).as_deref(), Some("[::1]:7002"));
        assert!(node_info(&seed, "noport").is_none());
    }
}
