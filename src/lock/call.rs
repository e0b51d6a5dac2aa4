//! One lock call, whatever it asks for (a lock, a set, a semaphore's
//! permit, a fair lock's place in line): the retry loop from the first
//! attempt to the lease the watchdog keeps, and the [`Step`] each kind of
//! acquisition plugs into it. The public types above only build a step and
//! wrap the lease in a guard.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lock::acquire::{self, Grant, Lifetime};
use crate::lock::lease::{self, Lease};
use crate::lock::retry::Waiting;
use crate::lock::shared::Shared;
use crate::lock::watchdog::Watchdog;
use crate::protocol::keys::Target;
use crate::telemetry;
use crate::transport::notify::{Notifier, Tag};
use crate::{Error, LockOptions};

/// What a call needs of its client: the shared state, the release
/// notifications it waits on, the watchdog it hands its lease to.
pub(crate) struct Caller<'a> {
    pub shared: &'a Shared,
    pub notifier: &'a Notifier,
    pub watchdog: &'a Watchdog,
}

/// One kind of acquisition attempt, repeated by the retry loop: a lock
/// (one resource or a set) or a semaphore's permit.
pub(crate) trait Step {
    /// How errors and telemetry name what is asked for.
    fn name(&self) -> &str;
    /// The channels whose release announcements may free it.
    fn channels(&self) -> Vec<String>;
    /// One attempt.
    fn attempt(&mut self, shared: &Shared, life: Lifetime) -> Result<Grant, acquire::Failure>;
    /// What the last successful attempt took.
    fn into_target(self) -> Target;
    /// Before an attempt: the releases announced with a tag (a permit's,
    /// `slot:token`) that this call was woken for.
    fn woken_by(&mut self, _tags: &[Tag]) {}
    /// After a grant: whether it took what `tag`'s release freed (one
    /// not taken is handed to another waiter).
    fn took(&self, _tag: &[u8]) -> bool {
        false
    }
    /// Its callers queue on the instances (a fair lock): none waits behind
    /// this client's other calls before asking.
    fn queues_on_instances(&self) -> bool {
        false
    }
    /// Its waits observe every release on its channels (a fair lock's
    /// waiters each count the line moving up), rather than take turns
    /// with this client's other calls.
    fn observes_releases(&self) -> bool {
        false
    }
    /// Before an attempt: the last wait ended with a release announced.
    fn released(&mut self) {}
}

impl Step for Target {
    fn name(&self) -> &str {
        &self.name
    }

    fn channels(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.keys.channel.clone())
            .collect()
    }

    fn attempt(&mut self, shared: &Shared, life: Lifetime) -> Result<Grant, acquire::Failure> {
        acquire::attempt(shared, self, life)
    }

    fn into_target(self) -> Target {
        self
    }
}

/// One lock call of any kind, as one telemetry span and count, whether its
/// input was valid or not.
pub(crate) fn acquire_by<S: Step>(
    caller: &Caller<'_>,
    name: &str,
    step: Result<S, Error>,
    options: LockOptions,
) -> Result<Arc<Lease>, Error> {
    // A name the call will refuse may be of any size: not worth a log line.
    let label = if name.len() <= crate::MAX_RESOURCE_LEN {
        name
    } else {
        "(too long)"
    };
    let call = telemetry::LockCall::start(label, options.get_wait());
    let mut made = 0;
    let result = call.in_scope(|| step.and_then(|s| attempts(caller, s, options, &mut made)));
    call.finish(result.as_ref().map(|lease| lease.tokens[0]), made);
    result
}

/// The retry loop of every lock call: attempts, waits for releases,
/// pauses; then hands the lease to the watchdog.
fn attempts<S: Step>(
    caller: &Caller<'_>,
    mut step: S,
    options: LockOptions,
    attempts: &mut u32,
) -> Result<Arc<Lease>, Error> {
    let shared = caller.shared;
    shared.cfg.validate(&options)?;
    shared.warmup.wait();
    let deadline = Instant::now() + options.get_wait();
    let cancel = options.get_cancel();
    let channels = step.channels();
    let channels = channels.iter().map(String::as_str).collect();
    let mut waiting = Waiting::new(shared, caller.notifier, channels, deadline, cancel);
    waiting.observe_releases(step.observes_releases());
    let life = Lifetime::of(options.get_ttl(), options.get_hold_at_least(), |d| {
        shared.cfg.drift(d)
    });
    let cancelled = |name: &str| Error::Cancelled {
        resource: name.to_string(),
    };
    if options.get_wait() > Duration::ZERO && !step.queues_on_instances() {
        waiting.queue_behind_others();
    }
    loop {
        if waiting.cancelled() {
            return Err(cancelled(step.name()));
        }
        *attempts += 1;
        step.woken_by(waiting.before_attempt());
        if waiting.woken() {
            step.released();
        }
        let attempt_start = Instant::now();
        let result = step.attempt(shared, life);
        telemetry::attempt_finished(
            *attempts,
            attempt_start.elapsed(),
            result
                .as_ref()
                .map(|grant| grant.tokens.as_slice())
                .map_err(|failure| (&failure.error, failure.granted)),
        );
        let failure = match result {
            Ok(grant) => {
                let cancelled = waiting.granted(|tag| step.took(tag));
                return take_grant(caller, cancelled, step.into_target(), grant, &options);
            }
            Err(failure) => failure,
        };
        if waiting.cancelled() {
            return Err(cancelled(step.name()));
        }
        let error = failure.error.with_attempts(*attempts);
        waiting.before_retry(error, failure.granted, attempt_start)?;
    }
}

/// A grant becomes a lease the watchdog keeps; one granted while the
/// call was being cancelled is undone at once, as a failed attempt is
/// (its hold, if any, too: nobody runs the work it protects).
fn take_grant(
    caller: &Caller<'_>,
    cancelled: bool,
    target: Target,
    grant: Grant,
    options: &LockOptions,
) -> Result<Arc<Lease>, Error> {
    let lease = Arc::new(Lease::new(target, grant, options));
    if cancelled {
        lease::undo(caller.shared, &lease);
        let resource = lease.target.name.clone();
        return Err(Error::Cancelled { resource });
    }
    caller.watchdog.watch(&lease);
    Ok(lease)
}
