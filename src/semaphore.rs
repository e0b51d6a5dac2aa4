//! Counting semaphores with fenced permits: at most `permits` holders at
//! once, each on its own numbered slot, each slot a lock of its own with
//! its own fencing tokens.
//!
//! An acquisition attempt is one round when a slot is free: the client
//! guesses a slot (one a release woke it for, else one none of its own
//! permits or calls holds) and takes it as a lock is taken, where the
//! instance records the caller's count (`lua/permit_acquire.lua`, which
//! runs `lua/acquire.lua` on the slot's keys). Refused, a listing round
//! (`lua/semaphore_slots.lua`) says which slots are free on a quorum, or
//! which other count is recorded, and the free slots are tried in turn.
//! Everything a lock guarantees holds per slot, because a slot is a lock;
//! `tests/model_semaphore.rs` checks how the slots and the count compose.

use std::time::{Duration, Instant};

use redis::Value;

use crate::client::Redlock;
use crate::guard::Permit;
use crate::lock::acquire::{self, Failure, Grant, Lifetime};
use crate::lock::call::Step;
use crate::lock::shared::Shared;
use crate::protocol::keys::{self, Keys, Kind, Target};
use crate::protocol::majority::Quorum;
use crate::protocol::scripts;
use crate::transport::notify::Tag;
use crate::transport::outgoing::Outgoing;
use crate::transport::round::{error_reply, unexpected, Tally, Vote};
use crate::{Error, LockOptions};

/// Most permits one semaphore may have: every attempt lists every slot.
pub const MAX_PERMITS: u32 = 1024;

impl Redlock {
    /// A handle on the counting semaphore `name` with `permits` permits:
    /// at most that many holders at once, across every client. Cheap; it
    /// checks nothing until used (a bad name or count fails each call).
    ///
    /// Every caller must name a semaphore with the same count: each grant
    /// records it on the instances, and a call with another count fails
    /// with [`Error::InvalidOptions`]. The record expires once the
    /// semaphore went unused for the counter idle time; to change the
    /// count meanwhile, [`Semaphore::recount`].
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// let payments = locks.semaphore("payments-api", 3);
    /// let permit = payments.acquire()?; // one of 3, waiting if all are taken
    /// println!("slot {} with token {}", permit.slot(), permit.token());
    /// permit.release()?;
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore {
            client: self.clone(),
            name: name.to_string(),
            permits,
        }
    }
}

/// A counting semaphore over the instances (see
/// [`Redlock::semaphore`]). Clones share the client.
#[derive(Clone)]
pub struct Semaphore {
    client: Redlock,
    name: String,
    permits: u32,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish()
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes a permit with the client's default options, waiting (up to
    /// the default wait) while all are taken.
    pub fn acquire(&self) -> Result<Permit, Error> {
        self.acquire_with(self.client.shared().cfg.defaults)
    }

    /// Takes a permit if one is free now; [`Error::Contended`] otherwise.
    pub fn try_acquire(&self) -> Result<Permit, Error> {
        self.acquire_with(self.client.shared().cfg.defaults.wait(Duration::ZERO))
    }

    /// Takes a permit, waiting at most `wait` for one.
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Permit, Error> {
        self.acquire_with(self.client.shared().cfg.defaults.wait(wait))
    }

    /// Takes a permit, waiting at most until `deadline`.
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Permit, Error> {
        self.try_acquire_for(deadline.saturating_duration_since(Instant::now()))
    }

    /// Takes a permit with these options (TTL, wait, watchdog,
    /// cancellation), as [`Redlock::lock_with`] takes a lock. While every
    /// permit is taken, the call waits for a release of any of them.
    pub fn acquire_with(&self, options: LockOptions) -> Result<Permit, Error> {
        let shared = self.client.shared();
        let step = PermitStep::new(shared, &self.name, self.permits);
        let lease = self.client.acquire_by(&self.name, step, options)?;
        // A permit's, made by `Target::permit`, the only target a permit
        // step makes.
        let slot = match lease.target.kind {
            Kind::Permit { slot, .. } => slot,
            Kind::Lock | Kind::Set | Kind::Rw(_) | Kind::Fair(_) => 0,
        };
        Ok(Permit::new(
            lease,
            self.client.keep_alive(),
            &self.name,
            slot,
        ))
    }
}

impl Semaphore {
    /// Revokes the holder of every slot held on a quorum, as
    /// [`Redlock::force_release`] does for a lock: for an operator, after a
    /// holder of a permit crashed with a long TTL. Each slot is a lock of
    /// its own: its holder's value is read, then deleted where it is still
    /// there, and nothing else (a delete landing late cannot take a later
    /// holder's permit). The counters stay. Returns each revoked slot with
    /// its holder, in slot order.
    ///
    /// Not for a holder that is still working (it believes it holds its
    /// permit until its next extension fails). Fails with
    /// [`Error::Unavailable`] when fewer than a quorum answered for a slot
    /// (the slots before it were revoked), [`Error::InvalidOptions`] for a
    /// bad count.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// for (slot, holder) in locks.semaphore("payments-api", 3).force_release()? {
    ///     println!("slot {slot}: revoked {:?}", holder.identity);
    /// }
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn force_release(&self) -> Result<Vec<(u32, crate::Holder)>, Error> {
        let shared = self.client.shared();
        let step = PermitStep::new(shared, &self.name, self.permits)?;
        let mut revoked = Vec::new();
        for slot in 0..self.permits {
            let target = Target::permit(&step.prefix, &step.name, slot);
            let keys = &target.members[0].keys;
            if let Some(holder) = crate::holder::force_release(shared, &target.name, keys)? {
                revoked.push((slot, holder));
            }
        }
        Ok(revoked)
    }
}

impl Semaphore {
    /// Makes this handle's count the semaphore's count, on every instance
    /// where no permit of the old or the new count is held: to change the
    /// count, or to repair records split by callers that raced with
    /// different counts on a new name. A record also expires by itself
    /// once the semaphore went unused for the counter idle time
    /// ([`RedlockBuilder::fence_idle_expiry`](crate::RedlockBuilder::fence_idle_expiry)).
    ///
    /// Safe at any time: a record changes only where no slot is held, so
    /// a permit granted under the old count keeps resting on a quorum of
    /// records of that count, and no caller of the new count is granted
    /// beside it (`tests/model_semaphore.rs`). Callers that still use the
    /// old count are refused ([`Error::InvalidOptions`]) once the new one
    /// is recorded on a quorum. Fails with [`Error::Contended`] when
    /// permits are held on too many instances for a quorum to take the
    /// count: release them ([`force_release`](Self::force_release) for a
    /// crashed holder's) and call it again; [`Error::Unavailable`] when
    /// fewer than a quorum answered.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// locks.semaphore("payments-api", 5).recount()?; // was 3
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn recount(&self) -> Result<(), Error> {
        let shared = self.client.shared();
        let step = PermitStep::new(shared, &self.name, self.permits)?;
        let mut slots = self.permits;
        loop {
            let tally = step.recount_round(shared, slots);
            let quorum = shared.instances.quorum();
            if quorum.reached(tally.yes.len()) {
                return Ok(());
            }
            let larger = tally.no.iter().filter_map(|(_, no)| match no {
                NotRecounted::Larger(count) => Some(*count),
                NotRecounted::Held(_) => None,
            });
            match larger.max().filter(|count| *count > slots) {
                // Another count with more slots: look at them all.
                Some(count) => slots = count.min(MAX_PERMITS),
                None => return Err(step.not_recounted(&tally, quorum)),
            }
        }
    }
}

/// Why an instance did not take a recount.
enum NotRecounted {
    /// Its record holds this count, with more slots than were listed.
    Larger(u32),
    /// This slot is held there.
    Held(u32),
}

/// The attempts of one permit acquisition.
struct PermitStep {
    prefix: String,
    name: String,
    permits: u32,
    /// The counter idle time, which the count record lives unused.
    idle: Duration,
    /// The slot the last successful attempt took.
    taken: Option<u32>,
    /// The slots whose release woke this call: the next attempt tries
    /// them first, so that the calls of one client woken by releases of
    /// different slots go for different slots, not all for a random one.
    released: Vec<u32>,
}

impl PermitStep {
    fn new(shared: &Shared, name: &str, permits: u32) -> Result<Self, Error> {
        keys::validate_resource(name)?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::InvalidOptions {
                reason: format!(
                    "semaphore {name:?}: {permits} permits, the range is 1 to {MAX_PERMITS}"
                ),
            });
        }
        Ok(PermitStep {
            prefix: shared.cfg.prefix.clone(),
            name: name.to_string(),
            permits,
            idle: shared.cfg.fence_idle,
            taken: None,
            released: Vec::new(),
        })
    }

    /// Slot `slot`, as this step's acquires and its permit's lease name
    /// it: with the count its acquires check and its extensions keep.
    fn target(&self, slot: u32) -> Target {
        Target::counted_permit(&self.prefix, &self.name, slot, self.permits, self.idle)
    }

    /// The slot to try before any listing, claimed for this call (given
    /// back after the attempt: a permit then holds it): one whose release
    /// woke this call, else the first from a random one on that no permit
    /// or call of this client holds, so that its calls spread over the
    /// slots, as the calls of other clients do by chance. `None` when this
    /// client holds or takes every slot.
    fn guess(&self, shared: &Shared) -> Option<u32> {
        let start = (uuid::Uuid::new_v4().as_u128() % u128::from(self.permits)) as u32;
        let rotation = (0..self.permits).map(|i| (start + i) % self.permits);
        let released = self.released.iter().copied();
        shared.claim_slot(&self.name, released.chain(rotation))
    }

    /// One slot, taken as a lock where the record holds this count.
    fn take(&mut self, shared: &Shared, slot: u32, life: Lifetime) -> Result<Grant, Failure> {
        let target = self.target(slot);
        let grant = acquire::attempt(shared, &target, life)?;
        self.taken = Some(slot);
        Ok(grant)
    }

    /// The listing round: the slots free on a quorum of instances, those
    /// a release named first, the others in a random rotation so that
    /// callers spread over them.
    fn free_slots(&self, shared: &Shared) -> Result<Vec<u32>, Failure> {
        let record_ttl = shared.cfg.fence_idle;
        let packed = scripts::semaphore_slots(&self.prefix, &self.name, self.permits, record_ttl);
        let slot = Keys::permit(&self.prefix, &self.name, 0).slot;
        let deadline = shared.round_deadline();
        let tally = shared
            .instances
            .round(&Outgoing::to_slot(slot, (packed, 1)), deadline, classify)
            .wait(deadline);
        let quorum = shared.instances.quorum();
        if !quorum.reached(tally.yes.len()) {
            if let Some((_, recorded)) = tally.no.first() {
                return Err(self.mismatch(recorded).into());
            }
            if tally.has_wrong_type() {
                let errors = tally.failed;
                return Err(Error::WrongType {
                    resource: self.name.clone(),
                    errors,
                }
                .into());
            }
            let granted = tally.yes.len();
            return Err(
                Error::unavailable(&self.name, quorum.size(), granted, tally.failed).into(),
            );
        }
        let mut free_on = vec![0usize; self.permits as usize];
        for (_, slots) in &tally.yes {
            for slot in slots.iter().filter(|s| **s < self.permits) {
                free_on[*slot as usize] += 1;
            }
        }
        let start = (uuid::Uuid::new_v4().as_u128() % u128::from(self.permits)) as u32;
        let rotation = (0..self.permits).map(|i| (start + i) % self.permits);
        let released = self.released.iter().copied();
        Ok(released
            .chain(rotation.filter(|slot| !self.released.contains(slot)))
            .filter(|slot| *slot < self.permits && quorum.reached(free_on[*slot as usize]))
            .collect())
    }

    /// [`take`](Self::take), with a refusal by a holder (no instance
    /// granted) as `Ok(Err(holder))`: the caller tries another slot.
    fn take_unless_held(
        &mut self,
        shared: &Shared,
        slot: u32,
        life: Lifetime,
    ) -> Result<Result<Grant, Option<String>>, Failure> {
        match self.take(shared, slot, life) {
            Ok(grant) => Ok(Ok(grant)),
            Err(Failure {
                error: Error::Contended { holder, .. },
                granted: 0,
                ..
            }) => Ok(Err(holder)),
            Err(failure) => Err(failure),
        }
    }

    /// `lua/semaphore_recount.lua` on every instance, looking at the first
    /// `slots` slots.
    fn recount_round(&self, shared: &Shared, slots: u32) -> Tally<(), NotRecounted> {
        let (prefix, name, idle) = (&self.prefix, &self.name, shared.cfg.fence_idle);
        let packed = scripts::semaphore_recount(prefix, name, self.permits, slots, idle);
        let slot = Keys::permit(prefix, name, 0).slot;
        let deadline = shared.round_deadline();
        shared
            .instances
            .round(
                &Outgoing::to_slot(slot, (packed, 1)),
                deadline,
                classify_recount,
            )
            .wait(deadline)
    }

    /// Why a recount without a quorum failed.
    fn not_recounted(&self, tally: &Tally<(), NotRecounted>, quorum: Quorum) -> Error {
        let held = tally.no.iter().find_map(|(_, no)| match no {
            NotRecounted::Held(slot) => Some(*slot),
            NotRecounted::Larger(_) => None,
        });
        match held {
            Some(slot) if !quorum.ruled_out(tally.failed.len()) => Error::Contended {
                resource: format!("{}#{slot}", self.name),
                attempts: 1,
                holder: None,
            },
            _ => Error::unavailable(
                &self.name,
                quorum.size(),
                tally.yes.len(),
                tally.failed.clone(),
            ),
        }
    }

    fn mismatch(&self, recorded: &str) -> Error {
        let record = keys::permits_record(&self.prefix, &self.name);
        Error::InvalidOptions {
            reason: format!(
                "semaphore {:?} has {recorded} permits on the instances, this call asked for {}; \
                 every caller must use one count (to change it, call Semaphore::recount or \
                 `redfence unlock --permits N --recount`, or wait until {record} expires, \
                 unused for the counter idle time)",
                self.name, self.permits
            ),
        }
    }

    fn contended(&self, holder: Option<String>) -> Failure {
        Failure::from(Error::Contended {
            resource: self.name.clone(),
            attempts: 0,
            holder,
        })
    }
}

impl Step for PermitStep {
    fn name(&self) -> &str {
        &self.name
    }

    fn channels(&self) -> Vec<String> {
        vec![keys::semaphore_channel(&self.prefix, &self.name)]
    }

    /// One round when a slot is free: the guessed slot at once. Refused
    /// (held, or another count recorded), the listing round says which
    /// slots are free, or why none may be taken, and they are tried in turn.
    /// A refusal names the holder of the first slot refused.
    fn attempt(&mut self, shared: &Shared, life: Lifetime) -> Result<Grant, Failure> {
        let guess = self.guess(shared);
        // No slot to guess: this client's own permits and calls hold them.
        let mut holder = guess.is_none().then(|| shared.cfg.identity.clone());
        if let Some(slot) = guess {
            let taken = self.take(shared, slot, life);
            shared.permit_gone(&self.name, slot);
            match taken {
                Ok(grant) => return Ok(grant),
                // Split too: some instances may record another count,
                // which the listing round tells.
                Err(Failure {
                    error: Error::Contended { holder: h, .. },
                    ..
                }) => holder = h.or(holder),
                Err(failure) => return Err(failure),
            }
        }
        let listed = self.free_slots(shared)?;
        for slot in listed.into_iter().filter(|slot| Some(*slot) != guess) {
            match self.take_unless_held(shared, slot, life)? {
                Ok(grant) => return Ok(grant),
                Err(h) => holder = holder.or(h),
            }
        }
        Err(self.contended(holder))
    }

    fn into_target(self) -> Target {
        self.target(self.taken.unwrap_or(0))
    }

    fn woken_by(&mut self, tags: &[Tag]) {
        self.released.clear();
        for slot in tags.iter().filter_map(|tag| released_slot(tag)) {
            if !self.released.contains(&slot) {
                self.released.push(slot);
            }
        }
    }

    fn took(&self, tag: &[u8]) -> bool {
        self.taken.is_some() && released_slot(tag) == self.taken
    }
}

/// The slot a permit's release announcement (`slot:token`) names.
fn released_slot(tag: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(tag).ok()?;
    text.split_once(':')?.0.parse().ok()
}

fn classify(values: &[Value]) -> Vote<Vec<u32>, String> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    if let [Value::Array(items)] = values {
        match items.as_slice() {
            [Value::Int(1), slots @ ..] => {
                let free = slots
                    .iter()
                    .filter_map(|v| match v {
                        Value::Int(slot) => u32::try_from(*slot).ok(),
                        _ => None,
                    })
                    .collect();
                return Vote::Yes(free);
            }
            [Value::Int(0), Value::BulkString(recorded)] => {
                return Vote::No(String::from_utf8_lossy(recorded).into_owned());
            }
            _ => {}
        }
    }
    unexpected("semaphore slots", values)
}

/// `{1}` took the count; `{0, recorded}` a larger count is recorded;
/// `{2, slot}` that slot is held.
fn classify_recount(values: &[Value]) -> Vote<(), NotRecounted> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    if let [Value::Array(items)] = values {
        let number = |v: &Value| match v {
            Value::Int(n) => u32::try_from(*n).ok(),
            Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        };
        match items.as_slice() {
            [Value::Int(1)] => return Vote::Yes(()),
            [Value::Int(0), recorded] => {
                if let Some(count) = number(recorded) {
                    return Vote::No(NotRecounted::Larger(count));
                }
            }
            [Value::Int(2), slot] => {
                if let Some(slot) = number(slot) {
                    return Vote::No(NotRecounted::Held(slot));
                }
            }
            _ => {}
        }
    }
    unexpected("semaphore recount", values)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any reply to the free-slot script classifies: never a panic.
        #[test]
        fn any_slots_reply_classifies(values in crate::arbitrary::replies()) {
            let _ = classify(&values);
            let _ = classify_recount(&values);
        }
    }
}
