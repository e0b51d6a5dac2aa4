//! Metrics (feature `metrics`) and tracing events (feature `tracing`).
//!
//! This is the only module that names a metric or emits an event: the lock
//! path carries one-line calls into it, so its code stays readable and the
//! calls are easy to move when that code changes. With both features off
//! every function here is empty and compiles away.
//!
//! Rules kept here: labels stay low-cardinality (never the resource name),
//! and nothing logged or recorded carries a lock value or a credential
//! (instance names are `host:port/db`, built without credentials).
#![cfg_attr(
    not(all(feature = "metrics", feature = "tracing")),
    allow(unused_variables, unused_imports)
)]

use std::time::{Duration, Instant};

use redis::Value;

use crate::error::{InstanceError, InstanceErrorKind};
use crate::{Error, FencingToken, LossReason};

/// Metric names: the contract dashboards rely on.
#[cfg(feature = "metrics")]
mod names {
    pub(crate) const ACQUIRE_TOTAL: &str = "redfence_acquire_total";
    pub(crate) const ACQUIRE_ATTEMPTS_TOTAL: &str = "redfence_acquire_attempts_total";
    pub(crate) const ACQUIRE_DURATION: &str = "redfence_acquire_duration_seconds";
    pub(crate) const HOLD_DURATION: &str = "redfence_hold_duration_seconds";
    pub(crate) const EXTEND_TOTAL: &str = "redfence_extend_total";
    pub(crate) const LEASE_LOST_TOTAL: &str = "redfence_lease_lost_total";
    pub(crate) const FENCE_RAISE_TOTAL: &str = "redfence_fence_raise_total";
    pub(crate) const INSTANCE_ERRORS_TOTAL: &str = "redfence_instance_errors_total";
    pub(crate) const HELD_LOCKS: &str = "redfence_held_locks";
    pub(crate) const HELD_PERMITS: &str = "redfence_held_permits";
    pub(crate) const OWED_RELEASES: &str = "redfence_owed_releases";
    pub(crate) const OWED_RELEASES_DROPPED_TOTAL: &str = "redfence_owed_releases_dropped_total";
    pub(crate) const LEADER: &str = "redfence_leader";
    pub(crate) const CLOCK_OFFSET: &str = "redfence_instance_clock_offset_seconds";
    pub(crate) const LEADER_CHANGES_TOTAL: &str = "redfence_leader_changes_total";
}
#[cfg(feature = "metrics")]
use names::*;

/// Event targets, so that a filter can pick an area (`redfence::lease=warn`).
#[cfg(feature = "tracing")]
mod targets {
    pub(crate) const LOCK: &str = "redfence::lock";
    pub(crate) const LEASE: &str = "redfence::lease";
    pub(crate) const INSTANCE: &str = "redfence::instance";
    pub(crate) const ELECTION: &str = "redfence::election";
}

/// Registers the help text and unit of every redfence metric with the
/// recorder installed now.
///
/// Each client calls it when it is built; call it yourself if you install
/// the recorder after building the client. Calling it again is harmless.
///
/// Building a client also registers, at zero, every series whose labels
/// are known then (each `outcome` and `reason`, each instance's error
/// kinds and owed releases), so that `increase()` and `rate()` see the
/// first event of a process. A recorder installed after `build()` gets
/// them when the next client is built.
///
/// ```
/// # let recorder = metrics::NoopRecorder;
/// metrics::set_global_recorder(recorder).ok();
/// redfence::describe_metrics();
/// ```
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    for (kind, name, unit, help) in METRICS {
        match kind {
            Metric::Counter => describe_counter!(name, unit, help),
            Metric::Gauge => describe_gauge!(name, unit, help),
            Metric::Histogram => describe_histogram!(name, unit, help),
        }
    }
}

/// The kinds of series [`METRICS`] describes.
#[cfg(feature = "metrics")]
enum Metric {
    Counter,
    Gauge,
    Histogram,
}

/// Every series the crate records: kind, name, unit, description.
#[cfg(feature = "metrics")]
const METRICS: [(Metric, &str, metrics::Unit, &str); 15] = {
    use metrics::Unit;
    [
        (Metric::Counter, ACQUIRE_TOTAL, Unit::Count, "Lock calls by outcome: granted, contended, unavailable, no_validity, wrong_type, invalid, cancelled, access_denied, skipped."),
        (Metric::Counter, ACQUIRE_ATTEMPTS_TOTAL, Unit::Count, "Acquisition attempts (votes), retries included."),
        (Metric::Histogram, ACQUIRE_DURATION, Unit::Seconds, "Duration of whole lock calls, waits included, by outcome."),
        (Metric::Histogram, HOLD_DURATION, Unit::Seconds, "Time from a grant to its release or to the loss of its lease."),
        (Metric::Counter, EXTEND_TOTAL, Unit::Count, "Lease extension rounds (watchdog and manual) by outcome: ok, failed."),
        (Metric::Counter, LEASE_LOST_TOTAL, Unit::Count, "Leases lost while held, by reason: expired, not_held, extension_failed, extension_limit."),
        (Metric::Counter, FENCE_RAISE_TOTAL, Unit::Count, "Fence raise rounds that reached a quorum (the granting instances' counters disagreed)."),
        (Metric::Counter, INSTANCE_ERRORS_TOTAL, Unit::Count, "Failed exchanges with an instance, by instance (host:port/db) and kind."),
        (Metric::Gauge, HELD_LOCKS, Unit::Count, "Lock guards alive in this process."),
        (Metric::Gauge, HELD_PERMITS, Unit::Count, "Semaphore permits held in this process, by semaphore (also counted in redfence_held_locks)."),
        (Metric::Gauge, OWED_RELEASES, Unit::Count, "Releases queued for retry because their instance could not be reached, by instance."),
        (Metric::Counter, OWED_RELEASES_DROPPED_TOTAL, Unit::Count, "Owed releases given up because too many were queued for one instance."),
        (Metric::Gauge, CLOCK_OFFSET, Unit::Seconds, "An instance's clock minus the median of the instances' clocks, by instance, as of the \
         last Redlock::ping or Redlock::clock_offsets call."),
        (Metric::Gauge, LEADER, Unit::Count, "1 while this process leads the election, 0 otherwise, by election."),
        (Metric::Counter, LEADER_CHANGES_TOTAL, Unit::Count, "Times this process became leader or stopped leading, by election and change \
         (elected, lost, resigned)."),
    ]
};

/// Called when a client is built: descriptions reach the recorder that is
/// installed by then, and every series whose labels are known now is
/// registered at zero. A series that first appears at 1 hides its first
/// event from `increase()` and `rate()`: the first lost lease of a process
/// must show as a change from 0.
#[inline]
pub(crate) fn client_built<'a>(instances: impl Iterator<Item = &'a str>) {
    #[cfg(feature = "metrics")]
    {
        describe_metrics();
        register_at_zero(instances);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = instances;
}

/// The `outcome` labels of `redfence_acquire_total` and
/// `redfence_acquire_duration_seconds`.
#[cfg(feature = "metrics")]
const ACQUIRE_OUTCOMES: [&str; 9] = [
    "granted",
    "contended",
    "unavailable",
    "no_validity",
    "wrong_type",
    "invalid",
    "cancelled",
    "access_denied",
    "skipped",
];

/// The `reason` labels of `redfence_lease_lost_total`: every reason a held
/// lease can be lost for (a released one is not lost).
#[cfg(feature = "metrics")]
const LOSS_REASONS: [LossReason; 4] = [
    LossReason::Expired,
    LossReason::NotHeld,
    LossReason::ExtensionFailed,
    LossReason::ExtensionLimit,
];

/// Every `kind` of `redfence_instance_errors_total`.
#[cfg(feature = "metrics")]
const INSTANCE_ERROR_KINDS: [InstanceErrorKind; 9] = [
    InstanceErrorKind::Timeout,
    InstanceErrorKind::Connect,
    InstanceErrorKind::Auth,
    InstanceErrorKind::Tls,
    InstanceErrorKind::WrongType,
    InstanceErrorKind::Io,
    InstanceErrorKind::Server,
    InstanceErrorKind::Protocol,
    InstanceErrorKind::Overloaded,
];

/// Touches every series with labels known at build time, adding nothing:
/// recorders create a series on its first use, at zero. Series another
/// client of the process already counted keep their values.
#[cfg(feature = "metrics")]
fn register_at_zero<'a>(instances: impl Iterator<Item = &'a str>) {
    use metrics::{counter, gauge, histogram};
    for outcome in ACQUIRE_OUTCOMES {
        counter!(ACQUIRE_TOTAL, "outcome" => outcome).increment(0);
        // Registered without a value: a histogram with a count of 0.
        let _ = histogram!(ACQUIRE_DURATION, "outcome" => outcome);
    }
    counter!(ACQUIRE_ATTEMPTS_TOTAL).increment(0);
    let _ = histogram!(HOLD_DURATION);
    for outcome in ["ok", "failed"] {
        counter!(EXTEND_TOTAL, "outcome" => outcome).increment(0);
    }
    for reason in LOSS_REASONS {
        counter!(LEASE_LOST_TOTAL, "reason" => loss_label(reason)).increment(0);
    }
    counter!(FENCE_RAISE_TOTAL).increment(0);
    gauge!(HELD_LOCKS).increment(0.0);
    for instance in instances {
        register_instance(instance);
    }
}

/// A worker started for `instance` (a standalone instance when the client
/// is built, a cluster shard master when its position finds it): its
/// series, at zero, under the name its events will use.
#[inline]
pub(crate) fn instance_started(instance: &str) {
    #[cfg(feature = "metrics")]
    register_instance(instance);
    #[cfg(not(feature = "metrics"))]
    let _ = instance;
}

#[cfg(feature = "metrics")]
fn register_instance(instance: &str) {
    use metrics::{counter, gauge};
    for kind in INSTANCE_ERROR_KINDS {
        counter!(
            INSTANCE_ERRORS_TOTAL,
            "instance" => instance.to_string(),
            "kind" => kind_label(kind)
        )
        .increment(0);
    }
    gauge!(OWED_RELEASES, "instance" => instance.to_string()).increment(0.0);
    counter!(OWED_RELEASES_DROPPED_TOTAL, "instance" => instance.to_string()).increment(0);
}

/// The `outcome` label of a lock call that failed with `error`.
#[cfg(any(feature = "metrics", feature = "tracing"))]
fn error_outcome(error: &Error) -> &'static str {
    match error {
        Error::Contended { .. } => "contended",
        Error::Unavailable { .. } => "unavailable",
        Error::NoValidity { .. } => "no_validity",
        Error::WrongType { .. } => "wrong_type",
        Error::Cancelled { .. } => "cancelled",
        Error::Skipped { .. } => "skipped",
        Error::AccessDenied { .. } => "access_denied",
        Error::InvalidResource { .. }
        | Error::InvalidOptions { .. }
        | Error::InvalidConfig { .. } => "invalid",
        // A lock call never loses a lease; counted with the caller's
        // mistakes rather than given a label of its own.
        Error::Lost { .. } => "invalid",
    }
}

/// The `reason` label of a lost lease.
#[cfg(any(feature = "metrics", feature = "tracing"))]
fn loss_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Expired => "expired",
        LossReason::NotHeld => "not_held",
        LossReason::ExtensionFailed => "extension_failed",
        LossReason::ExtensionLimit => "extension_limit",
        LossReason::Released => "released",
    }
}

/// The `kind` label of an instance error.
#[cfg(any(feature = "metrics", feature = "tracing"))]
fn kind_label(kind: InstanceErrorKind) -> &'static str {
    match kind {
        InstanceErrorKind::Timeout => "timeout",
        InstanceErrorKind::Connect => "connect",
        InstanceErrorKind::Auth => "auth",
        InstanceErrorKind::Tls => "tls",
        InstanceErrorKind::WrongType => "wrong_type",
        InstanceErrorKind::Io => "io",
        InstanceErrorKind::Server => "server",
        InstanceErrorKind::Protocol => "protocol",
        InstanceErrorKind::Overloaded => "overloaded",
    }
}

/// One lock call: its span, and what is recorded when it ends.
pub(crate) struct LockCall {
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    started: Instant,
    #[cfg(feature = "tracing")]
    span: tracing::Span,
}

impl LockCall {
    #[inline]
    /// `resource` as the caller can name it in a log line (a name the call
    /// will refuse may be of any size: the caller shortens it).
    pub(crate) fn start(resource: &str, wait: Duration) -> Self {
        LockCall {
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            started: Instant::now(),
            #[cfg(feature = "tracing")]
            span: tracing::info_span!(
                target: targets::LOCK,
                "lock",
                resource,
                wait = ?wait,
                outcome = tracing::field::Empty,
                token = tracing::field::Empty,
                attempts = tracing::field::Empty,
            ),
        }
    }

    /// Runs the call's attempts inside its span, so their events carry it.
    #[inline]
    pub(crate) fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        #[cfg(feature = "tracing")]
        let out = self.span.in_scope(f);
        #[cfg(not(feature = "tracing"))]
        let out = f();
        out
    }

    /// Records the call's outcome: one count per call, whatever the number
    /// of attempts.
    #[inline]
    /// `result` is the grant's (first member's) token, or the error.
    pub(crate) fn finish(self, result: Result<FencingToken, &Error>, attempts: u32) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        {
            let outcome = match result {
                Ok(_) => "granted",
                Err(e) => error_outcome(e),
            };
            let elapsed = self.started.elapsed();
            #[cfg(feature = "metrics")]
            {
                metrics::counter!(ACQUIRE_TOTAL, "outcome" => outcome).increment(1);
                metrics::counter!(ACQUIRE_ATTEMPTS_TOTAL).increment(u64::from(attempts));
                metrics::histogram!(ACQUIRE_DURATION, "outcome" => outcome)
                    .record(elapsed.as_secs_f64());
            }
            #[cfg(feature = "tracing")]
            {
                let span = &self.span;
                span.record("outcome", outcome);
                span.record("attempts", attempts);
                if let Ok(token) = result {
                    // A set's first member's token; the others are in the
                    // "attempt granted" event.
                    span.record("token", token.get());
                }
                span.in_scope(|| {
                    tracing::debug!(
                        target: targets::LOCK,
                        outcome,
                        attempts,
                        elapsed = ?elapsed,
                        "lock call finished"
                    )
                });
            }
        }
    }
}

/// One acquisition attempt ended (granted or not).
#[inline]
/// `result` is the grant's tokens, or the error and how many instances
/// granted before the attempt failed.
pub(crate) fn attempt_finished(
    attempt: u32,
    elapsed: Duration,
    result: Result<&[FencingToken], (&Error, usize)>,
) {
    #[cfg(feature = "tracing")]
    match result {
        Ok(tokens) => tracing::debug!(
            target: targets::LOCK,
            attempt,
            elapsed = ?elapsed,
            tokens = ?tokens,
            "attempt granted"
        ),
        Err((error, granted)) => tracing::debug!(
            target: targets::LOCK,
            attempt,
            elapsed = ?elapsed,
            outcome = error_outcome(error),
            granted,
            error = %error,
            "attempt failed"
        ),
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (attempt, elapsed, result);
}

/// A fence raise round (for `members` resources of the grant) ended;
/// `reached_quorum` tells whether the grant could stand.
#[inline]
pub(crate) fn fence_raise_round(reached_quorum: bool, members: usize) {
    #[cfg(feature = "metrics")]
    if reached_quorum {
        metrics::counter!(FENCE_RAISE_TOTAL).increment(1);
    }
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: targets::LOCK,
        members,
        reached_quorum,
        "fence raise round"
    );
}

/// A guard was handed out.
#[inline]
pub(crate) fn guard_created() {
    #[cfg(feature = "metrics")]
    metrics::gauge!(HELD_LOCKS).increment(1.0);
}

/// A guard was dropped (released explicitly or not). Rust drops each guard
/// exactly once, so the gauge cannot drift.
#[inline]
pub(crate) fn guard_dropped() {
    #[cfg(feature = "metrics")]
    metrics::gauge!(HELD_LOCKS).decrement(1.0);
}

/// A permit of `semaphore` was handed out (its guard counts in
/// [`guard_created`] too). Labelled by semaphore: a program uses a few.
#[inline]
pub(crate) fn permit_created(semaphore: &str) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(HELD_PERMITS, "semaphore" => semaphore.to_string()).increment(1.0);
    #[cfg(not(feature = "metrics"))]
    let _ = semaphore;
}

/// A permit of `semaphore` was dropped, released or not.
#[inline]
pub(crate) fn permit_dropped(semaphore: &str) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(HELD_PERMITS, "semaphore" => semaphore.to_string()).decrement(1.0);
    #[cfg(not(feature = "metrics"))]
    let _ = semaphore;
}

/// A held lease was lost. Called once per lease, when it is marked lost.
#[inline]
/// `name` is the resource (or set), `token` its (first member's) token,
/// `held` the time since the grant.
pub(crate) fn lease_lost(name: &str, token: FencingToken, held: Duration, reason: LossReason) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(LEASE_LOST_TOTAL, "reason" => loss_label(reason)).increment(1);
        metrics::histogram!(HOLD_DURATION).record(held.as_secs_f64());
    }
    #[cfg(feature = "tracing")]
    tracing::warn!(
        target: targets::LEASE,
        resource = %name,
        token = token.get(),
        reason = loss_label(reason),
        held = ?held,
        "lease lost"
    );
}

/// A lease was released (once per lease). `was_lost`: its loss was
/// recorded already, with the hold time up to the loss.
#[inline]
pub(crate) fn lease_released(held: Duration, was_lost: bool) {
    #[cfg(feature = "metrics")]
    if !was_lost {
        metrics::histogram!(HOLD_DURATION).record(held.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (held, was_lost);
}

/// An extension round ended (the watchdog's or an explicit `extend`).
#[inline]
pub(crate) fn extend_finished(resource: &str, result: &Result<(), Error>) {
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    {
        // A guard released while its round was under way: not a failure.
        if let Err(Error::Lost {
            reason: LossReason::Released,
            ..
        }) = result
        {
            return;
        }
        #[cfg(feature = "metrics")]
        {
            let outcome = if result.is_ok() { "ok" } else { "failed" };
            metrics::counter!(EXTEND_TOTAL, "outcome" => outcome).increment(1);
        }
        #[cfg(feature = "tracing")]
        if let Err(error) = result {
            tracing::warn!(
                target: targets::LEASE,
                resource,
                error = %error,
                "lease extension round failed"
            );
        }
    }
}

/// An instance's clock offset from the others was measured, in seconds:
/// the gauge, and a warning when it is past `bound` (the caller judges:
/// `Some(bound)` past it, `None` within).
#[inline]
pub(crate) fn clock_offset(instance: &str, seconds: f64, past: Option<Duration>) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(CLOCK_OFFSET, "instance" => instance.to_string()).set(seconds);
    #[cfg(feature = "tracing")]
    if let Some(bound) = past {
        tracing::warn!(
            target: targets::INSTANCE,
            instance,
            offset_seconds = seconds,
            bound_seconds = bound.as_secs_f64(),
            "an instance clock is further off the others than fencing tokens assume"
        );
    }
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = (instance, seconds, past);
}

/// A request was refused because the instance's queue was full.
#[inline]
pub(crate) fn instance_overloaded(instance: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        INSTANCE_ERRORS_TOTAL,
        "instance" => instance.to_string(),
        "kind" => kind_label(InstanceErrorKind::Overloaded)
    )
    .increment(1);
}

#[cfg(feature = "metrics")]
fn count_instance_error(instance: &str, kind: InstanceErrorKind) {
    metrics::counter!(
        INSTANCE_ERRORS_TOTAL,
        "instance" => instance.to_string(),
        "kind" => kind_label(kind)
    )
    .increment(1);
}

/// What one instance's worker knows about its instance's health: whether
/// it is in a run of failures (so only the first is logged) and how many
/// owed releases it last reported. Lives in the worker thread.
pub(crate) struct InstanceHealth {
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    instance: String,
    #[cfg(feature = "tracing")]
    failing: std::cell::Cell<bool>,
    #[cfg(feature = "metrics")]
    owed: std::cell::Cell<usize>,
}

impl InstanceHealth {
    #[inline]
    pub(crate) fn new(instance: &str) -> Self {
        InstanceHealth {
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            instance: instance.to_string(),
            #[cfg(feature = "tracing")]
            failing: std::cell::Cell::new(false),
            #[cfg(feature = "metrics")]
            owed: std::cell::Cell::new(0),
        }
    }

    /// The results of one pipeline sent to the instance. A connection
    /// failure, I/O error or timeout fails the whole rest of a pipeline at
    /// once and counts once; each error reply counts once.
    #[inline]
    pub(crate) fn observe(&self, results: &[Result<Vec<Value>, InstanceError>]) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        {
            let failure = results.iter().find_map(|r| r.as_ref().err());
            #[cfg(feature = "metrics")]
            {
                if let Some(e) = failure {
                    count_instance_error(&self.instance, e.kind());
                }
                for values in results.iter().flatten() {
                    for v in values {
                        if let Value::ServerError(e) = v {
                            count_instance_error(
                                &self.instance,
                                InstanceErrorKind::from_code(e.code()),
                            );
                        }
                    }
                }
            }
            #[cfg(feature = "tracing")]
            match failure {
                Some(e) if !self.failing.replace(true) => tracing::warn!(
                    target: targets::INSTANCE,
                    instance = %self.instance,
                    kind = kind_label(e.kind()),
                    error = e.detail(),
                    "instance failing"
                ),
                None if results.iter().any(|r| r.is_ok()) && self.failing.replace(false) => {
                    tracing::info!(
                        target: targets::INSTANCE,
                        instance = %self.instance,
                        "instance answering again"
                    )
                }
                _ => {}
            }
        }
    }

    /// After a round of the worker: `queued` releases are owed to the
    /// instance, and `dropped` were just given up.
    #[inline]
    pub(crate) fn owed(&self, queued: usize, dropped: usize) {
        #[cfg(feature = "metrics")]
        {
            // Adjusted by the change rather than set, so that several
            // clients' workers for one instance add up.
            let before = self.owed.replace(queued);
            if queued != before {
                metrics::gauge!(OWED_RELEASES, "instance" => self.instance.clone())
                    .increment(queued as f64 - before as f64);
            }
            if dropped > 0 {
                metrics::counter!(OWED_RELEASES_DROPPED_TOTAL, "instance" => self.instance.clone())
                    .increment(dropped as u64);
            }
        }
        #[cfg(feature = "tracing")]
        if dropped > 0 {
            tracing::warn!(
                target: targets::INSTANCE,
                instance = %self.instance,
                dropped,
                still_owed = queued,
                "owed releases given up: too many queued for an unreachable instance"
            );
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for InstanceHealth {
    fn drop(&mut self) {
        // The worker stops: what it still owed is not retried any more.
        let before = self.owed.replace(0);
        if before > 0 {
            metrics::gauge!(OWED_RELEASES, "instance" => self.instance.clone())
                .decrement(before as f64);
        }
    }
}

/// An election was created: its series exist from now on, at zero.
#[inline]
pub(crate) fn election_created(election: &str) {
    #[cfg(feature = "metrics")]
    {
        let name = election.to_string();
        metrics::gauge!(LEADER, "election" => name.clone()).set(0.0);
        for change in ["elected", "lost", "resigned"] {
            metrics::counter!(LEADER_CHANGES_TOTAL, "election" => name.clone(), "change" => change)
                .absolute(0);
        }
    }
}

/// This process won a campaign.
#[inline]
pub(crate) fn leader_elected(election: &str, term: FencingToken) {
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!(LEADER, "election" => election.to_string()).set(1.0);
        metrics::counter!(LEADER_CHANGES_TOTAL, "election" => election.to_string(), "change" => "elected")
            .increment(1);
    }
    #[cfg(feature = "tracing")]
    tracing::info!(target: targets::ELECTION, election, term = term.get(), "elected");
}

/// This process stopped leading: `change` is "lost" or "resigned".
#[inline]
pub(crate) fn leader_ended(election: &str, term: FencingToken, change: &'static str) {
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!(LEADER, "election" => election.to_string()).set(0.0);
        metrics::counter!(LEADER_CHANGES_TOTAL, "election" => election.to_string(), "change" => change)
            .increment(1);
    }
    #[cfg(feature = "tracing")]
    if change == "lost" {
        tracing::warn!(target: targets::ELECTION, election, term = term.get(), "leadership lost");
    } else {
        tracing::info!(target: targets::ELECTION, election, term = term.get(), "resigned");
    }
}

/// An observer thread could not be started.
#[inline]
pub(crate) fn observer_failed(election: &str, error: &std::io::Error) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: targets::ELECTION, election, %error, "cannot start an observer thread");
}
