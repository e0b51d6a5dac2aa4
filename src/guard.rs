//! The RAII guards of held locks: [`LockGuard`] for one resource,
//! [`MultiGuard`] for a set held together. Both are a lease plus what keeps
//! the client alive; they differ only in how they name their tokens.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::lock::lease::{self, Lease};
use crate::lock::shared::Shared;
use crate::telemetry;
use crate::{Error, FencingToken, LossReason};

/// A guard's one handle on its client: the state its calls need, and with
/// it the client's threads (workers, watchdog, subscribers), kept running
/// while a guard lives, even after the program dropped every clone of the
/// client. (A trait, so that guards need not know the client's type, which
/// knows theirs.)
pub(crate) trait ClientCore: Send + Sync {
    fn shared(&self) -> &Shared;
}

/// See [`ClientCore`].
pub(crate) type KeepAlive = Arc<dyn ClientCore>;

/// What both guards hold, and what they do alike.
struct Held {
    lease: Arc<Lease>,
    client: KeepAlive,
}

impl Held {
    fn new(lease: Arc<Lease>, client: KeepAlive) -> Self {
        telemetry::guard_created();
        Held { lease, client }
    }

    fn shared(&self) -> &Shared {
        self.client.shared()
    }

    fn ensure_held(&self) -> Result<(), Error> {
        match self.lease.refresh_loss() {
            None => Ok(()),
            Some(reason) => Err(self.lease.lost_error(reason)),
        }
    }

    fn extend(&self, ttl: Duration) -> Result<(), Error> {
        let shared = self.shared();
        shared.cfg.validate(&shared.cfg.defaults.ttl(ttl))?;
        lease::begin_extend(shared, &self.lease, ttl)?.finish(shared)
    }

    fn release(&self) -> Result<(), Error> {
        lease::release(self.shared(), &self.lease)
        // Drop finds the lease released and does nothing more.
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        lease::send_release(self.shared(), &self.lease, false);
        telemetry::guard_dropped();
    }
}

/// The methods both guards share, with the same meaning; for a set they
/// speak of the set as a whole.
macro_rules! lease_methods {
    () => {
        /// Time left during which the lock is guaranteed (TTL minus elapsed
        /// time and clock drift, from the last grant or extension); zero once
        /// it may have expired or was lost.
        pub fn validity(&self) -> Duration {
            self.held.lease.validity()
        }

        /// True while the lease is guaranteed: not lost, and within its
        /// validity. Turns false no later than the moment the lease may have
        /// expired on the instances.
        pub fn is_held(&self) -> bool {
            self.held.lease.refresh_loss().is_none()
        }

        /// `Ok(())` while the lease is held, [`Error::Lost`] otherwise. Call
        /// it before each write that the lock protects.
        pub fn ensure_held(&self) -> Result<(), Error> {
            self.held.ensure_held()
        }

        /// Blocks until the lease is lost, or `timeout` passes. Returns the
        /// reason, or `None` if the lease was still held at the timeout.
        pub fn wait_lost(&self, timeout: Duration) -> Option<LossReason> {
            self.held.lease.wait_lost(timeout)
        }

        /// A channel that receives one message when the lease is lost (at
        /// once if it already is). It disconnects without a message when the
        /// guard is released or dropped. Use it with
        /// `crossbeam_channel::select!` to stop work on loss.
        pub fn loss_signal(&self) -> Receiver<LossReason> {
            self.held.lease.subscribe()
        }

        /// Sets the lease to `ttl` from now on a quorum of instances (only
        /// where it still holds our value). Works with or without the
        /// watchdog; the watchdog keeps using the new TTL.
        ///
        /// Fails with [`Error::Lost`] if a quorum no longer holds the lease
        /// or its validity ran out, and with [`Error::Unavailable`] if too
        /// few instances answered (the lease stays held while its validity
        /// lasts).
        pub fn extend(&self, ttl: Duration) -> Result<(), Error> {
            self.held.extend(ttl)
        }

        /// Releases the lock on every instance and waits until a quorum
        /// confirmed it (at most the per-instance timeout).
        ///
        /// Returns [`Error::Lost`] if the lease was lost before, including
        /// when its validity ran out (the work done meanwhile was not
        /// protected, even if our keys were still there to delete; a newer
        /// holder's keys are left alone), or [`Error::Unavailable`] if too
        /// few instances answered: the release is still retried in the
        /// background until the lease would have expired anyway.
        pub fn release(self) -> Result<(), Error> {
            self.held.release()
        }
    };
}

/// Proof that a lock was granted, valid while [`is_held`](Self::is_held)
/// says so. Dropping it releases the lock without waiting for the answers;
/// [`release`](Self::release) waits and reports.
///
/// While the guard lives, the client's watchdog extends the lease (unless
/// [`LockOptions::auto_extend`](crate::LockOptions::auto_extend) is off). If
/// the lease cannot be kept, the guard says so: `is_held()` turns false,
/// [`ensure_held`](Self::ensure_held) returns [`Error::Lost`],
/// [`wait_lost`](Self::wait_lost) returns and [`loss_signal`](Self::loss_signal)
/// receives the reason. Check before each write, and send
/// [`token`](Self::token) with it.
///
/// ```no_run
/// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
/// let guard = locks.lock("report:daily")?;
/// for chunk in 0..10 {
///     guard.ensure_held()?; // stop as soon as the lease is gone
///     // store.write(chunk, guard.token())?;
/// #   let _ = chunk;
/// }
/// guard.release()?;
/// # Ok::<(), redfence::Error>(())
/// ```
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    held: Held,
}

impl LockGuard {
    pub(crate) fn new(lease: Arc<Lease>, client: KeepAlive) -> Self {
        LockGuard {
            held: Held::new(lease, client),
        }
    }

    /// The fencing token of this grant: higher than that of every earlier
    /// grant of the same resource.
    pub fn token(&self) -> FencingToken {
        self.held.lease.tokens[0]
    }

    /// The lease, for the coordination patterns built on the guard.
    pub(crate) fn lease(&self) -> &Lease {
        &self.held.lease
    }

    /// The locked resource.
    pub fn resource(&self) -> &str {
        &self.held.lease.target.members[0].resource
    }

    lease_methods!();
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.resource())
            .field("token", &self.token())
            .field("validity", &self.validity())
            .finish()
    }
}

/// Proof that a set of resources was granted together
/// ([`Redlock::lock_all`](crate::Redlock::lock_all)), valid while
/// [`is_held`](Self::is_held) says so. One lease covers the set: it is lost
/// as soon as any member may be lost, and released as a whole. Each member
/// has its own fencing token, from the same sequence as single locks of
/// that resource.
///
/// ```no_run
/// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
/// let guard = locks.lock_all(&["account:1", "account:2"])?;
/// let (from, to) = (guard.token("account:1"), guard.token("account:2"));
/// guard.ensure_held()?;
/// // store.transfer(("account:1", from), ("account:2", to), 100)?;
/// # let _ = (from, to);
/// guard.release()?;
/// # Ok::<(), redfence::Error>(())
/// ```
#[must_use = "if unused the locks are released immediately"]
#[clippy::has_significant_drop]
pub struct MultiGuard {
    held: Held,
}

impl MultiGuard {
    pub(crate) fn new(lease: Arc<Lease>, client: KeepAlive) -> Self {
        MultiGuard {
            held: Held::new(lease, client),
        }
    }

    /// The fencing token of `resource` in this grant (higher than that of
    /// every earlier grant of that resource, alone or in a set), or `None`
    /// if it is not a member.
    pub fn token(&self, resource: &str) -> Option<FencingToken> {
        let lease = &self.held.lease;
        let index = lease
            .target
            .members
            .iter()
            .position(|m| m.resource == resource)?;
        lease.tokens.get(index).copied()
    }

    /// The locked resources, in the order they were given.
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &str> {
        self.held
            .lease
            .target
            .members
            .iter()
            .map(|m| m.resource.as_str())
    }

    lease_methods!();
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lease = &self.held.lease;
        f.debug_struct("MultiGuard")
            .field("resources", &lease.target.name)
            .field("tokens", &lease.tokens)
            .field("validity", &self.validity())
            .finish()
    }
}

/// One permit of a [`Semaphore`](crate::Semaphore): one of its numbered
/// slots, held like a lock, with the slot's own fencing tokens. Dropping
/// it releases the permit; the watchdog keeps it alive meanwhile, as for a
/// [`LockGuard`].
///
/// Tokens increase per slot: a store that keeps, per slot, the newest
/// token it saw refuses a late write from an earlier holder of that slot.
///
/// ```no_run
/// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
/// let permit = locks.semaphore("heavy-batch", 2).acquire()?;
/// permit.ensure_held()?;
/// // store.write(permit.slot(), permit.token(), ...)?;
/// permit.release()?;
/// # Ok::<(), redfence::Error>(())
/// ```
#[must_use = "if unused the permit is released immediately"]
#[clippy::has_significant_drop]
pub struct Permit {
    held: Held,
    slot: u32,
    semaphore: String,
}

impl Permit {
    pub(crate) fn new(lease: Arc<Lease>, client: KeepAlive, semaphore: &str, slot: u32) -> Self {
        telemetry::permit_created(semaphore);
        client.shared().permit_taken(semaphore, slot);
        Permit {
            held: Held::new(lease, client),
            slot,
            semaphore: semaphore.to_string(),
        }
    }

    /// The semaphore's name.
    pub fn semaphore(&self) -> &str {
        &self.semaphore
    }

    /// Which of the semaphore's slots this permit holds, from 0 to
    /// `permits - 1`.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The fencing token of this grant of the slot: greater than every
    /// token the slot was granted with before.
    pub fn token(&self) -> FencingToken {
        self.held.lease.tokens[0]
    }

    lease_methods!();
}

impl Drop for Permit {
    fn drop(&mut self) {
        telemetry::permit_dropped(&self.semaphore);
        self.held.shared().permit_gone(&self.semaphore, self.slot);
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.semaphore)
            .field("slot", &self.slot)
            .field("token", &self.token())
            .finish_non_exhaustive()
    }
}

/// A read of an [`RwLock`](crate::RwLock): shared with other readers,
/// exclusive of writers. Held, kept alive and released like a
/// [`LockGuard`].
#[must_use = "if unused the read is released immediately"]
#[clippy::has_significant_drop]
pub struct ReadGuard {
    held: Held,
}

/// A write of an [`RwLock`](crate::RwLock): exclusive of every reader
/// and writer. Held, kept alive and released like a [`LockGuard`].
#[must_use = "if unused the write is released immediately"]
#[clippy::has_significant_drop]
pub struct WriteGuard {
    held: Held,
}

macro_rules! rw_guard {
    ($guard:ident, $what:literal) => {
        impl $guard {
            pub(crate) fn new(lease: Arc<Lease>, client: KeepAlive) -> Self {
                $guard {
                    held: Held::new(lease, client),
                }
            }

            #[doc = concat!("The fencing token of this ", $what, ": from the lock's one counter, ")]
            /// bumped by every read and write, so a write's token is greater than
            /// every token granted on the lock before it.
            pub fn token(&self) -> FencingToken {
                self.held.lease.tokens[0]
            }

            lease_methods!();
        }

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($guard))
                    .field("token", &self.token())
                    .finish_non_exhaustive()
            }
        }
    };
}

rw_guard!(ReadGuard, "read");
rw_guard!(WriteGuard, "write");
