//! A held lease: its state, and the extend and release operations that the
//! guard and the watchdog share.

use std::time::{Duration, Instant};

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use redis::Value;

use crate::lock::acquire::Grant;
use crate::lock::moment::Moment;
use crate::lock::shared::Shared;
use crate::protocol::keys::{Kind, Target};
use crate::protocol::native;
use crate::protocol::scripts;
use crate::sync::{Condvar, Mutex, MutexGuard};
use crate::telemetry;
use crate::transport::instance::Sink;
use crate::transport::notify::UNTAGGED;
use crate::transport::outgoing::Outgoing;
use crate::transport::round::{yes_no, Round, Vote};
use crate::{Error, FencingToken, LockOptions, LossReason};

/// A lease's renewal state, as the watchdog reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Renewal {
    /// What extensions ask for.
    pub ttl: Duration,
    /// How long the last grant or extension is believed (see
    /// [`Lease::believed`]).
    pub believed: Duration,
    /// On the lease clock (`moment.rs`), as every validity here.
    pub valid_until: Moment,
    pub extensions: u32,
    /// Extension rounds failed since the last success.
    pub failed_rounds: u32,
}

pub(crate) struct Lease {
    /// The resource, or the set of resources held together.
    pub target: Target,
    pub value: String,
    /// One per member, in the target's order.
    pub tokens: Vec<FencingToken>,
    pub auto_extend: bool,
    pub acquired_at: Moment,
    /// The TTL the lease was acquired with: the only one its extensions
    /// are sent with natively (`native.rs`).
    native_ttl: Duration,
    /// A release before this keeps the keys until then
    /// ([`LockOptions::hold_at_least`]); `None` without a hold.
    pub hold_until: Option<Moment>,
    /// How long the keys were set to live by the acquire (`Lifetime`).
    keys_ttl: Duration,
    /// The election this lease is the leadership of, if any: its loss is
    /// then a loss of leadership too (telemetry).
    pub election: std::sync::OnceLock<String>,
    state: Mutex<State>,
    changed: Condvar,
    /// Serialises extension rounds, so two of them cannot race to set the
    /// validity.
    extending: Mutex<()>,
}

/// What changes while a lease lives; read and decided on under one lock,
/// only in this file.
struct State {
    valid_until: Moment,
    /// The TTL extensions ask for: the acquisition's, or the last one a
    /// caller's `extend()` asked for.
    ttl: Duration,
    released: bool,
    lost: Option<LossReason>,
    extensions: u32,
    failed_rounds: u32,
    /// Reason given when the validity runs out without an extension.
    expiry_reason: LossReason,
    /// A native extension was sent: it may still land, late, and set the
    /// keys' expiry to `native_ttl` from then.
    native_sent: bool,
    listeners: Vec<Sender<LossReason>>,
}

impl Lease {
    pub(crate) fn new(target: Target, grant: Grant, options: &LockOptions) -> Self {
        let now = Moment::now();
        Lease {
            target,
            value: grant.value,
            tokens: grant.tokens,
            auto_extend: options.get_auto_extend(),
            acquired_at: now,
            native_ttl: options.get_ttl(),
            keys_ttl: grant.keys_ttl,
            hold_until: Some(options.get_hold_at_least())
                .filter(|hold| !hold.is_zero())
                .and_then(|hold| now.checked_add(hold)),
            election: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                valid_until: grant.valid_until,
                ttl: options.get_ttl(),
                released: false,
                lost: None,
                extensions: 0,
                failed_rounds: 0,
                expiry_reason: LossReason::Expired,
                native_sent: false,
                listeners: Vec::new(),
            }),
            changed: Condvar::new(),
            extending: Mutex::new(()),
        }
    }

    /// Brings the lease's loss up to date and returns it: why the lease is
    /// not held, if it is not. A lease whose validity has passed is marked
    /// expired here, so every observer agrees from then on.
    pub(crate) fn refresh_loss(&self) -> Option<LossReason> {
        let mut st = self.state.lock();
        self.loss_locked(&mut st, Moment::now())
    }

    /// What the watchdog schedules a lease by, copied under one lock;
    /// `None` once the lease is released or lost.
    pub(crate) fn renewal(&self) -> Option<Renewal> {
        let st = self.state.lock();
        if st.released || st.lost.is_some() {
            return None;
        }
        Some(self.renewal_locked(&st))
    }

    fn renewal_locked(&self, st: &State) -> Renewal {
        Renewal {
            ttl: st.ttl,
            believed: self.believed(st, st.ttl),
            valid_until: st.valid_until,
            extensions: st.extensions,
            failed_rounds: st.failed_rounds,
        }
    }

    /// No more extensions are allowed (a limit was reached): the expiry of
    /// the validity is then reported as [`LossReason::ExtensionLimit`].
    pub(crate) fn stop_extending(&self) {
        self.state.lock().expiry_reason = LossReason::ExtensionLimit;
    }

    /// Marks the lease lost with `reason` if `decide` says so, judged on
    /// its state under the same lock, so that no extension can succeed in
    /// between. Returns whether it did.
    pub(crate) fn mark_lost_if(
        &self,
        reason: LossReason,
        decide: impl FnOnce(&Renewal) -> bool,
    ) -> bool {
        let mut st = self.state.lock();
        if st.released || st.lost.is_some() {
            return false;
        }
        if !decide(&self.renewal_locked(&st)) {
            return false;
        }
        self.mark_lost_locked(&mut st, reason);
        true
    }

    fn loss_locked(&self, st: &mut State, now: Moment) -> Option<LossReason> {
        if st.released {
            return Some(LossReason::Released);
        }
        if st.lost.is_none() && now >= st.valid_until {
            let reason = st.expiry_reason;
            self.mark_lost_locked(st, reason);
        }
        st.lost
    }

    /// How long a round asking `asked` is believed: a native extension
    /// sent before may still land and set the expiry to `native_ttl` from
    /// then, so a longer round is believed only that far. The watchdog
    /// renews a third of this after a round, not of what it asked.
    fn believed(&self, st: &State, asked: Duration) -> Duration {
        if st.native_sent {
            asked.min(self.native_ttl)
        } else {
            asked
        }
    }

    pub(crate) fn validity(&self) -> Duration {
        let st = self.state.lock();
        if st.released || st.lost.is_some() {
            return Duration::ZERO;
        }
        st.valid_until.saturating_duration_since(Moment::now())
    }

    fn mark_lost_locked(&self, st: &mut State, reason: LossReason) {
        if st.lost.is_some() || st.released {
            return;
        }
        st.lost = Some(reason);
        telemetry::lease_lost(
            &self.target.name,
            self.tokens[0],
            self.acquired_at.elapsed(),
            reason,
        );
        if let Some(election) = self.election.get() {
            telemetry::leader_ended(election, self.tokens[0], "lost");
        }
        for tx in st.listeners.drain(..) {
            // Each listener has room for its one message.
            let _ = tx.try_send(reason);
        }
        self.changed.notify_all();
    }

    pub(crate) fn lost_error(&self, reason: LossReason) -> Error {
        Error::Lost {
            resource: self.target.name.clone(),
            reason,
        }
    }

    /// Blocks until the lease is lost or `timeout` passes. The timeout is
    /// the caller's wait (`Instant`); the validity is on the lease clock.
    pub(crate) fn wait_lost(&self, timeout: Duration) -> Option<LossReason> {
        let deadline = Instant::now().checked_add(timeout);
        let mut st = self.state.lock();
        loop {
            let now = Moment::now();
            if let Some(reason) = self.loss_locked(&mut st, now) {
                return Some(reason);
            }
            let to_expiry = st.valid_until.saturating_duration_since(now);
            let wait = match deadline {
                Some(d) if d <= Instant::now() => return None,
                Some(d) => d.saturating_duration_since(Instant::now()).min(to_expiry),
                None => to_expiry,
            };
            self.changed.wait_for(&mut st, wait);
        }
    }

    /// A channel that receives the reason once, when the lease is lost. It
    /// disconnects without a message when the guard is released.
    pub(crate) fn subscribe(&self) -> Receiver<LossReason> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut st = self.state.lock();
        match self.loss_locked(&mut st, Moment::now()) {
            Some(LossReason::Released) => {}
            Some(reason) => {
                let _ = tx.send(reason);
            }
            None => st.listeners.push(tx),
        }
        rx
    }
}

/// Queues a release on every instance and marks the lease released. Once
/// this returns, no extension can be queued any more; one sent before that
/// lands after the release finds no key of ours and does nothing
/// (`lua/extend.lua` never creates a key). With `wait`, returns the round
/// that counts the answers.
pub(crate) fn send_release(
    shared: &Shared,
    lease: &Lease,
    wait: bool,
) -> Option<Arc<Round<(), ()>>> {
    let mut st = lease.state.lock();
    if st.released {
        return None;
    }
    // Before the hold is over, the keys stay until then (where they are
    // still ours) and nothing is announced.
    let hold = lease
        .hold_until
        .map(|until| until.saturating_duration_since(Moment::now()))
        .filter(|rest| *rest >= Duration::from_millis(1));
    // The void key, where a key was not ours, lives as long as the keys
    // could: the acquire may still land (the TTL, or TTL + hold).
    let ttl = st.ttl.max(lease.keys_ttl);
    let pack_for = |target: &Target, sharded: bool| match hold {
        Some(rest) => (scripts::release_hold(target, &lease.value, ttl, rest), 1),
        None => {
            let announcement = announcement(lease);
            scripts::release_and_announce(target, &lease.value, ttl, &announcement, sharded)
        }
    };
    let native = (hold.is_none() && shared.instances.releases_natively())
        .then(|| native::release(&lease.target, &lease.value, ttl, &announcement(lease)))
        .flatten();
    let part = |t: &Target| pack_for(t, true);
    let on_cluster = || pack_for(&lease.target, true);
    let out = Outgoing::about(&lease.target, pack_for(&lease.target, false), &part)
        .or_native(native)
        .on_cluster(&on_cluster);
    // A lease past its validity that nobody observed yet is lost, exactly
    // as if the watchdog had got there first.
    let was_lost = lease.loss_locked(&mut st, Moment::now()).is_some();
    telemetry::lease_released(lease.acquired_at.elapsed(), was_lost);
    st.released = true;
    st.listeners.clear();
    lease.changed.notify_all();
    // Worth delivering until the key would have expired anyway: a TTL
    // from now, or from the hold's end (the keys outlive it by a TTL).
    let deadline = Instant::now() + hold.unwrap_or(Duration::ZERO) + st.ttl;
    let round = wait.then(|| Round::new_for(&shared.instances, released));
    let sink = round.clone().map(|r| -> Sink { r });
    shared
        .instances
        .send_persistent(&out, deadline, sink.as_ref(), |_| true);
    round
}

/// A release's vote: its first reply, the release itself. The announcement
/// that follows it in the same request only wakes waiters: refused (a user
/// without `+publish`), it leaves them to find the lock free at their next
/// re-check, and the release stands (the doctor reports the permission).
fn released(values: &[Value]) -> Vote<(), ()> {
    yes_no(values.get(..1).unwrap_or(values))
}

/// Undoes a grant nobody will use (its call was cancelled while the
/// attempt was under way) exactly as a failed attempt is undone: a
/// compare-and-delete that also voids the attempt on every instance, hold
/// or no hold, since nobody runs the work a hold protects. Announced, so
/// that waiters refused by it try again at once.
pub(crate) fn undo(shared: &Shared, lease: &Lease) {
    let mut st = lease.state.lock();
    if st.released {
        return;
    }
    st.released = true;
    st.listeners.clear();
    lease.changed.notify_all();
    let ttl = st.ttl.max(lease.keys_ttl);
    drop(st);
    let pack = |target: &Target, sharded: bool| {
        scripts::undo_and_announce(target, &lease.value, ttl, &announcement(lease), sharded)
    };
    let part = |t: &Target| pack(t, true);
    let on_cluster = || pack(&lease.target, true);
    let out =
        Outgoing::about(&lease.target, pack(&lease.target, false), &part).on_cluster(&on_cluster);
    // The keys live at most this long (`Lifetime`): no use after.
    let until = Instant::now() + lease.keys_ttl.saturating_sub(lease.acquired_at.elapsed());
    shared
        .instances
        .send_persistent(&out, until, None, |_| true);
}

/// What a release of `lease` announces: a permit's `slot:token`, which no
/// other release of its semaphore announces, so that releases of several
/// slots wake as many waiters (`transport/notify`); a fair lock's
/// `fair:token`, so that each waiter counts each release once however
/// many instances announce it (`fair.rs`); a lock's `1`, since one release
/// frees one lock.
fn announcement(lease: &Lease) -> Vec<u8> {
    match (&lease.target.kind, lease.tokens.first()) {
        (Kind::Permit { slot, .. }, Some(token)) => format!("{slot}:{token}").into_bytes(),
        (Kind::Fair(_), Some(token)) => {
            let mut tag = crate::protocol::keys::FAIR_TAG.to_vec();
            tag.extend_from_slice(token.to_string().as_bytes());
            tag
        }
        _ => UNTAGGED.to_vec(),
    }
}

/// Releases and reports whether a quorum confirmed it.
pub(crate) fn release(shared: &Shared, lease: &Lease) -> Result<(), Error> {
    // A lease whose validity ran out is reported lost even if its keys were
    // still there to delete: the work done under it was not protected.
    let lost_before = lease.refresh_loss();
    let Some(round) = send_release(shared, lease, true) else {
        return Err(lease.lost_error(LossReason::Released));
    };
    let tally = round.wait(shared.round_deadline());
    let quorum = shared.instances.quorum();
    if let Some(reason) = lost_before {
        return Err(lease.lost_error(reason));
    }
    if quorum.reached(tally.yes.len()) {
        return Ok(());
    }
    if quorum.ruled_out(tally.no.len()) {
        return Err(lease.lost_error(LossReason::NotHeld));
    }
    Err(Error::unavailable(
        &lease.target.name,
        quorum.size(),
        tally.yes.len(),
        tally.failed,
    ))
}

/// An extension round that has been sent and awaits its answers.
pub(crate) struct PendingExtend<'a> {
    lease: &'a Lease,
    _serial: MutexGuard<'a, ()>,
    /// For the round's deadline.
    start: Instant,
    /// The same start on the lease clock: the new validity counts from it.
    began: Moment,
    ttl: Duration,
    round: Arc<Round<(), ()>>,
}

/// Sends an extension round (a caller's explicit extend), after any round
/// under way, unless the lease is already gone.
pub(crate) fn begin_extend<'a>(
    shared: &Shared,
    lease: &'a Lease,
    ttl: Duration,
) -> Result<PendingExtend<'a>, Error> {
    send_extend(shared, lease, ttl, lease.extending.lock())
}

/// Sends an extension round unless one is under way (the watchdog, which
/// comes back later) or the lease is already gone.
pub(crate) fn try_begin_extend<'a>(
    shared: &Shared,
    lease: &'a Lease,
    ttl: Duration,
) -> Result<Option<PendingExtend<'a>>, Error> {
    match lease.extending.try_lock() {
        Some(serial) => send_extend(shared, lease, ttl, serial).map(Some),
        None => Ok(None),
    }
}

fn send_extend<'a>(
    shared: &Shared,
    lease: &'a Lease,
    ttl: Duration,
    serial: MutexGuard<'a, ()>,
) -> Result<PendingExtend<'a>, Error> {
    let start = Instant::now();
    let began = Moment::now();
    let pack = |target: &Target| (scripts::extend(target, &lease.value, ttl), 1);
    let mut st = lease.state.lock();
    if let Some(reason) = lease.loss_locked(&mut st, began) {
        return Err(lease.lost_error(reason));
    }
    // SET … IFEQ … PX sets the expiry it is given, where the script only
    // moves it later: sent only with the lease's own TTL, and only while
    // nothing believes the lease for longer than that from now, so that it
    // cuts no belief whenever it lands; never for a lease with a hold,
    // whose release sets the keys to live to the hold's end, which a late
    // one would cut short (`tests/model_lease.rs`).
    let native = (ttl == lease.native_ttl
        && lease.hold_until.is_none()
        && st.valid_until <= began + ttl
        && shared.instances.extends_natively())
    .then(|| native::extend(&lease.target, &lease.value, ttl))
    .flatten();
    st.native_sent |= native.is_some();
    let out = Outgoing::about(&lease.target, pack(&lease.target), &pack).or_native(native);
    let round = shared
        .instances
        .round(&out, start + shared.cfg.instance_timeout, yes_no);
    drop(st);
    Ok(PendingExtend {
        lease,
        _serial: serial,
        start,
        began,
        ttl,
        round,
    })
}

impl PendingExtend<'_> {
    /// Counts the answers. Success needs a quorum before the new validity,
    /// measured from the start of this round, runs out.
    pub(crate) fn finish(self, shared: &Shared) -> Result<(), Error> {
        let lease = self.lease;
        let result = self.count(shared);
        telemetry::extend_finished(&lease.target.name, &result);
        result
    }

    fn count(self, shared: &Shared) -> Result<(), Error> {
        let deadline = self.start + shared.cfg.instance_timeout;
        let tally = self.round.wait(deadline);
        let lease = self.lease;
        let quorum = shared.instances.quorum();
        let now = Moment::now();
        let mut st = lease.state.lock();
        let believed = lease.believed(&st, self.ttl);
        let validity = believed.saturating_sub(shared.cfg.drift(believed));
        let new_valid = self.began + validity;
        if let Some(reason) = lease.loss_locked(&mut st, now) {
            return Err(lease.lost_error(reason));
        }
        if quorum.reached(tally.yes.len()) && now < new_valid {
            st.valid_until = new_valid;
            st.ttl = self.ttl;
            st.extensions += 1;
            st.failed_rounds = 0;
            lease.changed.notify_all();
            return Ok(());
        }
        // Instances that applied this round, now or when it lands later,
        // only ever moved an expiry later (`PEXPIRE … GT`): the validity
        // we had still stands.
        st.failed_rounds += 1;
        if quorum.ruled_out(tally.no.len()) {
            lease.mark_lost_locked(&mut st, LossReason::NotHeld);
            return Err(lease.lost_error(LossReason::NotHeld));
        }
        if let Some(reason) = lease.loss_locked(&mut st, now) {
            return Err(lease.lost_error(reason));
        }
        Err(Error::unavailable(
            &lease.target.name,
            quorum.size(),
            tally.yes.len(),
            tally.failed,
        ))
    }
}

/// Schedule exploration of the lease state (`--cfg loom`, src/sync.rs):
/// the watchdog thread marks a lease lost while its guard's thread
/// subscribes to the loss or waits for it.
#[cfg(all(test, loom))]
mod loom_checks {
    use super::*;
    use crate::sync::{explore, thread};

    /// A lease valid for an hour (loom does not model time: only a loss
    /// marked by another thread ends it).
    fn lease() -> Arc<Lease> {
        let grant = Grant {
            value: "v".to_string(),
            tokens: vec![FencingToken::new(1)],
            valid_until: Moment::now() + Duration::from_secs(3600),
            keys_ttl: Duration::from_secs(3600),
        };
        let target = Target::one("redfence", "r").expect("a valid resource name");
        Arc::new(Lease::new(target, grant, &LockOptions::new()))
    }

    /// The watchdog thread marking `lease` lost after failed extensions.
    fn lose(lease: &Arc<Lease>) -> thread::JoinHandle<bool> {
        let lease = Arc::clone(lease);
        thread::spawn(move || lease.mark_lost_if(LossReason::ExtensionFailed, |_| true))
    }

    /// A listener subscribing while the lease is lost hears the loss once,
    /// whichever comes first.
    #[test]
    fn loom_checks_a_listener_subscribing_as_the_lease_is_lost_hears_it_once() {
        explore(|| {
            let lease = lease();
            let watchdog = lose(&lease);
            let heard = lease.subscribe();
            assert!(watchdog.join().expect("watchdog"), "marked lost");
            assert_eq!(heard.try_recv().ok(), Some(LossReason::ExtensionFailed));
            assert!(heard.try_recv().is_err(), "the loss was heard twice");
        });
    }

    /// A caller waiting for the loss is woken by it (a lost notification
    /// would be a deadlock here).
    #[test]
    fn loom_checks_a_wait_for_the_loss_is_woken_by_it() {
        explore(|| {
            let lease = lease();
            let watchdog = lose(&lease);
            let reason = lease.wait_lost(Duration::from_secs(3600));
            assert_eq!(reason, Some(LossReason::ExtensionFailed));
            assert!(watchdog.join().expect("watchdog"));
        });
    }
}
