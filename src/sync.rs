//! The locks, condition variables and atomics that the client's own
//! threads share where they race: the release notifications' waiter
//! registry (`transport/notify/`), a round's tally (`transport/round.rs`),
//! the watchdog's timer map (`lock/watchdog.rs`) and the lease state
//! (`lock/lease.rs`).
//!
//! A normal build gets parking_lot's and the standard library's types, as
//! before. Built with `--cfg loom` (tests only, docs/testing.md), the same
//! code runs on loom's, so that the `loom_checks` unit tests explore every
//! interleaving of those threads, up to a bound: the library's code is
//! checked, not a copy of it. The wrappers below give loom's std-style
//! types parking_lot's calling conventions (a guard without poisoning, a
//! wait that borrows the guard).
//!
//! What loom does not see: crossbeam-channel's operations (each is one
//! step to it, atomic, as the channel is linearizable; the checks call
//! only the non-blocking ones, a blocking one would hang the model), and
//! time (a timed wait waits until notified, so a lost notification is
//! reported as a deadlock instead of running out a deadline).

#[cfg(not(loom))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::thread;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::thread;
#[cfg(loom)]
pub(crate) use model::{Condvar, Mutex, MutexGuard};

#[cfg(loom)]
mod model {
    use std::ops::{Deref, DerefMut};
    use std::sync::{PoisonError, TryLockError};
    use std::time::{Duration, Instant};

    /// loom's mutex with parking_lot's `lock()` (a panic while it is held
    /// fails the check anyway: poisoning is ignored).
    #[derive(Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    /// Holds loom's guard, except while a [`Condvar`] wait has it.
    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)))
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            match self.0.try_lock() {
                Ok(guard) => Some(MutexGuard(Some(guard))),
                Err(TryLockError::Poisoned(poisoned)) => {
                    Some(MutexGuard(Some(poisoned.into_inner())))
                }
                Err(TryLockError::WouldBlock) => None,
            }
        }
    }

    const TAKEN: &str = "a guard is only taken inside Condvar::wait, which puts it back";

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_deref().expect(TAKEN)
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_deref_mut().expect(TAKEN)
        }
    }

    /// Never reports a timeout: loom does not model time.
    pub(crate) struct WaitTimeoutResult;

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            false
        }
    }

    /// loom's condition variable with parking_lot's calls; the timed
    /// waits wait until notified.
    #[derive(Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }

        fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let inner = guard.0.take().expect(TAKEN);
            let inner = self.0.wait(inner).unwrap_or_else(PoisonError::into_inner);
            guard.0 = Some(inner);
        }

        pub(crate) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _deadline: Instant,
        ) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult
        }

        pub(crate) fn wait_for<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _timeout: Duration,
        ) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

/// Runs `check` under every schedule of its threads that preempts a
/// thread at most three times (`LOOM_MAX_PREEMPTIONS` changes the bound):
/// the races these checks look for need two or three preemptions, and a
/// bound keeps the run within seconds.
#[cfg(all(test, loom))]
pub(crate) fn explore(check: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    if model.preemption_bound.is_none() {
        model.preemption_bound = Some(3);
    }
    model.check(check);
}
