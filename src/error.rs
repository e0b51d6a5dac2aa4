//! Errors returned by redfence, and the per-instance errors they carry.

use std::fmt;
use std::time::Duration;

/// Everything that can go wrong when locking, extending or releasing.
///
/// Each variant says which situation the caller is in, so a `match` can
/// decide what to do: retry later ([`Error::Contended`]), alert an operator
/// ([`Error::Unavailable`], [`Error::WrongType`]), stop working on the
/// resource ([`Error::Lost`]) or fix the program ([`Error::InvalidResource`],
/// [`Error::InvalidOptions`], [`Error::InvalidConfig`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// Another client holds the lock on enough instances that no quorum is
    /// possible. Returned by `try_lock`, or by `lock` once its wait budget is
    /// spent.
    Contended {
        /// The resource that was asked for.
        resource: String,
        /// How many acquisition attempts were made.
        attempts: u32,
        /// The current holder's identity
        /// ([`RedlockBuilder::identity`](crate::RedlockBuilder::identity)),
        /// where more than half of the answers the last attempt had when
        /// it was decided (failures included) named the same one; `None`
        /// otherwise (or for a holder that predates identities). Never the
        /// secret part of its value.
        holder: Option<String>,
    },
    /// Too few instances answered for a quorum to be reached or ruled out.
    /// Each failing instance's error is listed.
    Unavailable {
        /// The resource that was asked for (empty for client-wide checks).
        resource: String,
        /// Instances that must agree (N/2 + 1).
        quorum: usize,
        /// Instances that agreed.
        granted: usize,
        /// One entry per instance that failed or did not answer in time.
        errors: Vec<InstanceError>,
    },
    /// A quorum of instances refused the client's credentials or an ACL
    /// permission it needs: a configuration error, not an outage. Returned
    /// at once, never retried; each instance's error names what it refused
    /// (for a missing permission, the command, key or channel, and the
    /// `acl_rules` that grant it). Fix the password or the ACL user.
    AccessDenied {
        /// The resource that was asked for.
        resource: String,
        /// One entry per instance that failed, refusals included.
        errors: Vec<InstanceError>,
    },
    /// A quorum was reached, but so late that no validity was left of the
    /// TTL once clock drift is accounted for. The keys were released.
    NoValidity {
        /// The resource that was asked for.
        resource: String,
        /// Time the attempt took.
        elapsed: Duration,
        /// The TTL that was asked for.
        ttl: Duration,
    },
    /// The lease is no longer held: it expired, was taken over, or could
    /// not be extended. Work done under it must stop: a fenced store
    /// refuses a write carrying its fencing token only once a newer holder
    /// has reached that store with a higher token (written, or raised the
    /// fence); until then a late write is still accepted.
    Lost {
        /// The resource whose lease was lost.
        resource: String,
        /// Why the lease counts as lost.
        reason: LossReason,
    },
    /// The call was cancelled through its [`Cancel`](crate::Cancel)
    /// handle before it got the lock; nothing is held.
    Cancelled {
        /// The resource that was asked for.
        resource: String,
    },
    /// A fair lock's waiter ([`Redlock::fair_lock`](crate::Redlock::fair_lock))
    /// was dropped from the queue by a quorum of instances: its heartbeat
    /// did not come within the heartbeat TTL (the process was paused, or
    /// cut off from the instances), so the waiters behind it went ahead.
    /// It lost its place; nothing is held. Asking again queues it at the
    /// end.
    Skipped {
        /// The fair lock that was asked for.
        resource: String,
    },
    /// A key where redfence keeps a lock or a fencing counter holds a value
    /// of another type. Somebody else writes to redfence's keys: fix that
    /// (or choose another key prefix) rather than retrying.
    WrongType {
        /// The resource that was asked for.
        resource: String,
        /// The instances that reported the wrong type.
        errors: Vec<InstanceError>,
    },
    /// The resource name cannot be used (empty, or too long).
    InvalidResource {
        /// What is wrong with it.
        reason: String,
    },
    /// The [`LockOptions`](crate::LockOptions) of a call cannot be used with
    /// this client (for example a TTL too short for its timeouts).
    InvalidOptions {
        /// What is wrong with them.
        reason: String,
    },
    /// The client configuration given to the builder cannot work.
    InvalidConfig {
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    /// True when trying again later may succeed: contention, unavailable
    /// instances or an attempt that ran out of validity.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Contended { .. } | Error::Unavailable { .. } | Error::NoValidity { .. }
        )
    }

    /// Too few instances granted: `granted` of the `quorum` needed, with
    /// the error of each instance that failed or did not answer. When a
    /// quorum of them refused our credentials or a permission, that is
    /// [`Error::AccessDenied`]: waiting would not fix it.
    pub(crate) fn unavailable(
        resource: impl Into<String>,
        quorum: usize,
        granted: usize,
        errors: Vec<InstanceError>,
    ) -> Self {
        let refused = errors
            .iter()
            .filter(|e| e.kind() == InstanceErrorKind::Auth)
            .count();
        if refused >= quorum {
            return Error::AccessDenied {
                resource: resource.into(),
                errors,
            };
        }
        Error::Unavailable {
            resource: resource.into(),
            quorum,
            granted,
            errors,
        }
    }

    /// This error, with the attempts of the call counted in, if it says
    /// how many there were.
    pub(crate) fn with_attempts(self, attempts: u32) -> Self {
        match self {
            Error::Contended {
                resource, holder, ..
            } => Error::Contended {
                resource,
                attempts,
                holder,
            },
            other => other,
        }
    }

    pub(crate) fn invalid_options(reason: impl Into<String>) -> Self {
        Error::InvalidOptions {
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid_config(reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Contended {
                resource,
                attempts,
                holder,
            } => {
                write!(f, "lock on {resource:?} is held by ")?;
                match holder {
                    Some(holder) => write!(f, "{holder:?}")?,
                    None => f.write_str("another client")?,
                }
                write!(f, " ({attempts} attempt(s))")
            }
            Error::Unavailable {
                resource,
                quorum,
                granted,
                errors,
            } => {
                write!(
                    f,
                    "no quorum for {resource:?}: {granted} instance(s) granted before the \
                     outcome was decided, {quorum} needed (too many failed or did not answer)"
                )?;
                write_errors(f, errors)
            }
            Error::NoValidity {
                resource,
                elapsed,
                ttl,
            } => write!(
                f,
                "lock on {resource:?} took {elapsed:?}, leaving no validity of its {ttl:?} TTL"
            ),
            Error::Lost { resource, reason } => {
                write!(f, "lease on {resource:?} is lost: {reason}")
            }
            Error::AccessDenied { resource, errors } => {
                write!(
                    f,
                    "access for {resource:?} refused by a quorum of instances: check the \
                     password and the ACL user (acl_rules)"
                )?;
                write_errors(f, errors)
            }
            Error::Cancelled { resource } => {
                write!(
                    f,
                    "lock call on {resource:?} was cancelled; nothing is held"
                )
            }
            Error::Skipped { resource } => write!(
                f,
                "waiter for fair lock {resource:?} lost its place in the queue: its heartbeat \
                 stopped for longer than the heartbeat TTL; nothing is held"
            ),
            Error::WrongType { resource, errors } => {
                write!(f, "redfence keys of {resource:?} hold a foreign value")?;
                write_errors(f, errors)
            }
            Error::InvalidResource { reason } => write!(f, "invalid resource name: {reason}"),
            Error::InvalidOptions { reason } => write!(f, "invalid lock options: {reason}"),
            Error::InvalidConfig { reason } => write!(f, "invalid configuration: {reason}"),
        }
    }
}

fn write_errors(f: &mut fmt::Formatter<'_>, errors: &[InstanceError]) -> fmt::Result {
    for (i, e) in errors.iter().enumerate() {
        f.write_str(if i == 0 { ": " } else { "; " })?;
        write!(f, "{e}")?;
    }
    Ok(())
}

impl std::error::Error for Error {
    /// The first instance's error, for the errors that list them
    /// ([`Unavailable`](Error::Unavailable),
    /// [`AccessDenied`](Error::AccessDenied),
    /// [`WrongType`](Error::WrongType)).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Unavailable { errors, .. }
            | Error::AccessDenied { errors, .. }
            | Error::WrongType { errors, .. } => errors
                .first()
                .map(|e| e as &(dyn std::error::Error + 'static)),
            _ => None,
        }
    }
}

/// Why a lease counts as lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// Its validity ran out without a successful extension.
    Expired,
    /// A quorum of instances no longer holds our value (expired there, or
    /// deleted behind our back).
    NotHeld,
    /// The watchdog's extension rounds failed the allowed number of times.
    ExtensionFailed,
    /// The configured cap on extensions or on the lease lifetime was reached.
    ExtensionLimit,
    /// The guard was already released.
    Released,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "its validity ran out",
            LossReason::NotHeld => "a quorum of instances no longer holds it",
            LossReason::ExtensionFailed => "extensions failed too many times",
            LossReason::ExtensionLimit => "the extension limit was reached",
            LossReason::Released => "it was released",
        })
    }
}

/// What went wrong on one instance.
///
/// The same failure gets the same kind (and the same words in
/// [`InstanceError::detail`]) whichever call met it: a lock round, a
/// [`ping`](crate::Redlock::ping), or a tool classifying its own
/// connections' errors with [`InstanceError::from_redis`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InstanceErrorKind {
    /// Timed out: no reply within the per-instance timeout, or no
    /// connection within the time allowed for setting one up.
    Timeout,
    /// The connection could not be established: refused (nothing listens
    /// at that address, or a firewall rejects it), or the host or network
    /// is unreachable.
    Connect,
    /// The instance refused our credentials, or its ACL does not allow a
    /// command, key or channel redfence needs (the detail names it).
    Auth,
    /// The TLS connection could not be set up: the server's certificate is
    /// not trusted or not valid for the host name, or the server wants a
    /// client certificate it did not get (the detail says which).
    Tls,
    /// A key held a value of another type.
    WrongType,
    /// The connection failed while a command was under way: reset or
    /// closed by the instance (or something between us).
    Io,
    /// The instance answered with an error.
    Server,
    /// The instance answered something redfence did not expect.
    Protocol,
    /// Too many requests were queued for this instance.
    Overloaded,
}

impl InstanceErrorKind {
    /// The kind of an error reply, from its code (its first word).
    pub(crate) fn from_code(code: &str) -> Self {
        match code {
            "WRONGTYPE" => InstanceErrorKind::WrongType,
            "NOAUTH" | "WRONGPASS" | "NOPERM" => InstanceErrorKind::Auth,
            _ => InstanceErrorKind::Server,
        }
    }
}

/// The ACL rule a `NOPERM` refusal of a command asks for: `'evalsha'
/// command` gives `+evalsha` (`'script|load'`, `+script|load`).
fn missing_rule(detail: &str) -> Option<String> {
    if !detail.starts_with("NOPERM") {
        return None;
    }
    let (_, rest) = detail.split_once('\'')?;
    let (command, after) = rest.split_once('\'')?;
    let valid = !command.is_empty()
        && command
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '|' || c == '-' || c == '_');
    (valid && after.trim_start().starts_with("command"))
        .then(|| format!("+{}", command.to_ascii_lowercase()))
}

/// How Redis 7.0 starts the error of a script whose call its ACL refused.
const SCRIPT_ACL_REFUSAL: &str = "The user executing the script can't";

/// The error of one instance, as part of [`Error::Unavailable`] or
/// [`Error::WrongType`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceError {
    instance: String,
    kind: InstanceErrorKind,
    detail: String,
}

impl InstanceError {
    pub(crate) fn new(
        instance: impl Into<String>,
        kind: InstanceErrorKind,
        detail: impl Into<String>,
    ) -> Self {
        let mut detail = detail.into();
        let mut kind = kind;
        if kind == InstanceErrorKind::Server && detail.contains(SCRIPT_ACL_REFUSAL) {
            // Redis 7.0 reports an ACL refusal inside a script as a plain
            // ERR that does not name the command.
            kind = InstanceErrorKind::Auth;
            detail = format!(
                "{detail} (the ACL user may not run a command or touch a key the redfence \
                 scripts use: allow redfence::acl_rules)"
            );
        }
        // Once: an error passed on (renamed for its instance) is built again.
        if kind == InstanceErrorKind::Auth && !detail.contains("(missing ACL rule ") {
            if let Some(rule) = missing_rule(&detail) {
                detail = format!("{detail} (missing ACL rule {rule}: see redfence::acl_rules)");
            }
        }
        InstanceError {
            instance: instance.into(),
            kind,
            detail,
        }
    }

    /// Classifies an error of redis-rs the way redfence classifies the
    /// errors of its own connections, with the same kind and words: for
    /// tools that open connections of their own next to a client (the
    /// `redfence status` command does). `instance` names the instance in
    /// messages: give a `host:port/db`, never a URL with credentials.
    ///
    /// A refused connection is [`Connect`](InstanceErrorKind::Connect)
    /// ("connection refused"), a reset or closed one
    /// [`Io`](InstanceErrorKind::Io) ("connection reset by the instance",
    /// "connection closed by the instance"), a timeout
    /// [`Timeout`](InstanceErrorKind::Timeout), a failed handshake
    /// [`Tls`](InstanceErrorKind::Tls) with what to check.
    pub fn from_redis(instance: &str, err: &redis::RedisError) -> Self {
        use redis::ErrorKind as K;
        #[cfg(feature = "tls-rustls")]
        if let Some(detail) = crate::tls_error::describe(err) {
            return InstanceError::new(instance, InstanceErrorKind::Tls, detail);
        }
        // A refusal inside a pipeline (the scripts loaded on connect) is
        // the server's own error, not "Pipeline failure: [(Index 0, …)]".
        if let Some(first) = err
            .clone()
            .into_server_errors()
            .and_then(|items| items.first().map(|(_, e)| e.clone()))
        {
            let detail = first.details().map_or_else(
                || first.code().to_string(),
                |d| format!("{} {d}", first.code()),
            );
            return InstanceError::new(
                instance,
                InstanceErrorKind::from_code(first.code()),
                detail,
            );
        }
        if err.kind() == K::AuthenticationFailed || err.code() == Some("WRONGPASS") {
            return InstanceError::new(
                instance,
                InstanceErrorKind::Auth,
                "wrong user name or password, or the user is disabled: the server refused the \
                 credentials in the URL",
            );
        }
        if err.code() == Some("NOAUTH") {
            return InstanceError::new(
                instance,
                InstanceErrorKind::Auth,
                "the server requires a password and the URL gives none (NOAUTH)",
            );
        }
        if err.code() == Some("NOPERM") {
            return InstanceError::new(instance, InstanceErrorKind::Auth, err.to_string());
        }
        if err.code() == Some("WRONGTYPE") {
            return InstanceError::new(instance, InstanceErrorKind::WrongType, err.to_string());
        }
        if let Some((kind, detail)) = io_error(err).and_then(classify_io) {
            return InstanceError::new(instance, kind, detail);
        }
        let kind = if err.is_timeout() {
            InstanceErrorKind::Timeout
        } else if err.is_connection_refusal() {
            InstanceErrorKind::Connect
        } else if err.is_io_error() || err.is_connection_dropped() {
            InstanceErrorKind::Io
        } else {
            InstanceErrorKind::Server
        };
        InstanceError::new(instance, kind, err.to_string())
    }

    /// The instance, as `host:port/db` (never with credentials).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// What kind of failure it was.
    pub fn kind(&self) -> InstanceErrorKind {
        self.kind
    }

    /// The underlying message.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for InstanceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?}): {}", self.instance, self.kind, self.detail)
    }
}

impl std::error::Error for InstanceError {}

/// What a timeout says, wherever it is met.
pub(crate) const NO_ANSWER: &str = "no answer within the per-instance timeout";

/// The I/O error under a redis error, if there is one.
fn io_error(err: &redis::RedisError) -> Option<&std::io::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let inner: &(dyn std::error::Error + 'static) = std::error::Error::source(err)?;
    match inner.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref::<std::io::Error>(),
        None => inner.downcast_ref::<std::io::Error>(),
    }
}

/// The kind and words of a network failure; `None` for other I/O errors,
/// which keep their own message.
fn classify_io(err: &std::io::Error) -> Option<(InstanceErrorKind, String)> {
    use std::io::ErrorKind as E;
    use InstanceErrorKind::{Connect, Io, Timeout};
    Some(match err.kind() {
        E::TimedOut | E::WouldBlock => (Timeout, NO_ANSWER.to_string()),
        E::ConnectionRefused => (Connect, "connection refused".to_string()),
        E::HostUnreachable => (Connect, "host unreachable".to_string()),
        E::NetworkUnreachable => (Connect, "network unreachable".to_string()),
        E::ConnectionReset | E::ConnectionAborted => {
            (Io, "connection reset by the instance".to_string())
        }
        E::BrokenPipe | E::UnexpectedEof | E::NotConnected => {
            (Io, "connection closed by the instance".to_string())
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn classified(kind: io::ErrorKind) -> InstanceError {
        let err = redis::RedisError::from(io::Error::from(kind));
        InstanceError::from_redis("h:1/0", &err)
    }

    #[test]
    fn an_error_listing_instances_has_the_first_as_its_source() {
        use std::error::Error as _;
        let first = InstanceError::new("a:1/0", InstanceErrorKind::Timeout, NO_ANSWER);
        let e = Error::unavailable("r", 2, 0, vec![first.clone()]);
        let source = e.source().expect("a source");
        assert_eq!(source.to_string(), first.to_string());
        let cancelled = Error::Cancelled {
            resource: "r".to_string(),
        };
        assert!(cancelled.source().is_none());
    }

    #[test]
    fn a_refused_command_names_the_rule_that_allows_it() {
        let e = InstanceError::new(
            "a:1/0",
            InstanceErrorKind::Auth,
            "NOPERM User app has no permissions to run the 'evalsha' command",
        );
        assert!(
            e.detail()
                .ends_with("(missing ACL rule +evalsha: see redfence::acl_rules)"),
            "{e}"
        );
        let sub = InstanceError::new(
            "a:1/0",
            InstanceErrorKind::Auth,
            "NOPERM this user has no permissions to run the 'script|load' command",
        );
        assert!(sub.detail().contains("+script|load"), "{sub}");
        // Built again for its instance, it names the rule once.
        let again = InstanceError::new("b:2/0", InstanceErrorKind::Auth, e.detail());
        assert_eq!(
            again.detail().matches("missing ACL rule").count(),
            1,
            "{again}"
        );
        let key = InstanceError::new(
            "a:1/0",
            InstanceErrorKind::Auth,
            "NOPERM No permissions to access a key",
        );
        assert!(!key.detail().contains("missing ACL rule"), "{key}");
    }

    #[test]
    fn messages_list_every_instance_and_say_why_a_lease_was_lost() {
        let unavailable = Error::Unavailable {
            resource: "r".into(),
            quorum: 2,
            granted: 1,
            errors: vec![
                InstanceError::new("a:1/0", InstanceErrorKind::Timeout, "timed out"),
                InstanceError::new("b:1/0", InstanceErrorKind::Connect, "connection refused"),
            ],
        };
        let text = unavailable.to_string();
        assert!(
            text.starts_with(
                "no quorum for \"r\": 1 instance(s) granted before the outcome was decided, 2 \
                 needed (too many failed or did not answer): "
            ),
            "{text}"
        );
        assert_eq!(text.matches("; ").count(), 1, "{text}");
        assert!(text.find("a:1/0") < text.find("b:1/0"), "{text}");
        for (reason, says) in [
            (LossReason::Expired, "its validity ran out"),
            (
                LossReason::NotHeld,
                "a quorum of instances no longer holds it",
            ),
            (
                LossReason::ExtensionFailed,
                "extensions failed too many times",
            ),
            (
                LossReason::ExtensionLimit,
                "the extension limit was reached",
            ),
            (LossReason::Released, "it was released"),
        ] {
            let lost = Error::Lost {
                resource: "r".into(),
                reason,
            };
            assert_eq!(lost.to_string(), format!("lease on \"r\" is lost: {says}"));
        }
    }

    #[test]
    fn network_failures_are_named_the_same_everywhere() {
        let refused = classified(io::ErrorKind::ConnectionRefused);
        assert_eq!(refused.kind(), InstanceErrorKind::Connect);
        assert_eq!(refused.detail(), "connection refused");
        let reset = classified(io::ErrorKind::ConnectionReset);
        assert_eq!(reset.kind(), InstanceErrorKind::Io);
        assert_eq!(reset.detail(), "connection reset by the instance");
        let closed = classified(io::ErrorKind::UnexpectedEof);
        assert_eq!(closed.kind(), InstanceErrorKind::Io);
        assert_eq!(closed.detail(), "connection closed by the instance");
        for kind in [io::ErrorKind::TimedOut, io::ErrorKind::WouldBlock] {
            let timeout = classified(kind);
            assert_eq!(timeout.kind(), InstanceErrorKind::Timeout);
            assert_eq!(timeout.detail(), NO_ANSWER);
        }
        assert_eq!(refused.to_string(), "h:1/0 (Connect): connection refused");
        for (kind, words) in [
            (io::ErrorKind::HostUnreachable, "host unreachable"),
            (io::ErrorKind::NetworkUnreachable, "network unreachable"),
        ] {
            let unreachable = classified(kind);
            assert_eq!(unreachable.kind(), InstanceErrorKind::Connect);
            assert_eq!(unreachable.detail(), words);
        }
    }
}
