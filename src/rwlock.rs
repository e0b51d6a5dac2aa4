//! Reader-writer locks over the instances: many readers at once, or one
//! writer, with fencing tokens from one counter per lock.
//!
//! A read or a write is taken like a lock, by `lua/rw_acquire.lua` on a
//! quorum, and kept, extended and released by the same lease machinery as
//! a lock (`lua/rw_extend.lua`, `lua/rw_release.lua`). The rules of the
//! scripts are checked by `tests/model_rwlock.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Redlock;
use crate::guard::{ReadGuard, WriteGuard};
use crate::lock::lease::Lease;
use crate::protocol::keys::{self, Access, Keys, Kind, RwCall, RwKeys, Target};
use crate::protocol::scripts;
use crate::transport::outgoing::Outgoing;
use crate::{Error, LockOptions};

impl Redlock {
    /// A handle on the reader-writer lock `name`: any number of readers at
    /// once, or one writer. Cheap; it checks nothing until used.
    ///
    /// A writer waits for the readers to finish, and readers that come
    /// while a writer waits queue behind it, so writers are not starved.
    /// Every grant, read or write, takes a fencing token from one counter:
    /// a writer's token is greater than the token of every guard granted
    /// on the lock before it.
    ///
    /// The names of reader-writer locks, locks and semaphores are separate:
    /// `rw_lock("x")` and `lock("x")` are different locks.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// let config = locks.rw_lock("pricing-config");
    /// {
    ///     let reading = config.read()?;       // shared with other readers
    ///     println!("read under token {}", reading.token());
    /// }
    /// let writing = config.write()?;          // alone
    /// // store.reload(writing.token(), ...)?;
    /// writing.release()?;
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn rw_lock(&self, name: &str) -> RwLock {
        RwLock {
            client: self.clone(),
            name: name.to_string(),
        }
    }
}

/// A reader-writer lock over the instances (see [`Redlock::rw_lock`]).
/// Clones share the client.
#[derive(Clone)]
pub struct RwLock {
    client: Redlock,
    name: String,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock").field("name", &self.name).finish()
    }
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads, waiting (up to the client's default wait) while a writer
    /// holds the lock or waits for it.
    pub fn read(&self) -> Result<ReadGuard, Error> {
        self.read_with(self.defaults())
    }

    /// Reads if no writer holds the lock or waits; [`Error::Contended`]
    /// otherwise.
    pub fn try_read(&self) -> Result<ReadGuard, Error> {
        self.read_with(self.defaults().wait(Duration::ZERO))
    }

    /// Reads, waiting at most `wait`.
    pub fn try_read_for(&self, wait: Duration) -> Result<ReadGuard, Error> {
        self.read_with(self.defaults().wait(wait))
    }

    /// Reads, waiting at most until `deadline`.
    pub fn try_read_until(&self, deadline: Instant) -> Result<ReadGuard, Error> {
        self.try_read_for(deadline.saturating_duration_since(Instant::now()))
    }

    /// Reads with these options (TTL, wait, watchdog, cancellation).
    /// `hold_at_least` is refused: it is for locks.
    pub fn read_with(&self, options: LockOptions) -> Result<ReadGuard, Error> {
        let lease = self.acquire(false, options)?;
        let keep = self.client.keep_alive();
        Ok(ReadGuard::new(lease, keep))
    }

    /// Writes, waiting (up to the client's default wait) while a writer
    /// or any reader holds the lock.
    pub fn write(&self) -> Result<WriteGuard, Error> {
        self.write_with(self.defaults())
    }

    /// Writes if nobody holds the lock; [`Error::Contended`] otherwise.
    pub fn try_write(&self) -> Result<WriteGuard, Error> {
        self.write_with(self.defaults().wait(Duration::ZERO))
    }

    /// Writes, waiting at most `wait`.
    pub fn try_write_for(&self, wait: Duration) -> Result<WriteGuard, Error> {
        self.write_with(self.defaults().wait(wait))
    }

    /// Writes, waiting at most until `deadline`.
    pub fn try_write_until(&self, deadline: Instant) -> Result<WriteGuard, Error> {
        self.try_write_for(deadline.saturating_duration_since(Instant::now()))
    }

    /// Writes with these options (TTL, wait, watchdog, cancellation).
    /// `hold_at_least` is refused: it is for locks.
    pub fn write_with(&self, options: LockOptions) -> Result<WriteGuard, Error> {
        let lease = self.acquire(true, options)?;
        let keep = self.client.keep_alive();
        Ok(WriteGuard::new(lease, keep))
    }

    /// Revokes the writer and every reader that hold this lock on a
    /// quorum, as [`Redlock::force_release`] does for a lock: for an
    /// operator, after a holder crashed with a long TTL. Their values are
    /// read, then deleted where they still are, and nothing else: a delete
    /// landing late cannot take a later holder's grant. The counter stays,
    /// so the next grant's token is above theirs. Returns whom it revoked.
    ///
    /// Not for holders still working (each believes it holds until its next
    /// extension fails). Fails with [`Error::Unavailable`] when fewer than a
    /// quorum answered, [`Error::WrongType`] for a key of another type.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// let revoked = locks.rw_lock("catalog").force_release()?;
    /// if let Some(writer) = revoked.writer {
    ///     println!("revoked the writer {:?}", writer.identity);
    /// }
    /// println!("and {} readers", revoked.readers.len());
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn force_release(&self) -> Result<crate::RwHolders, Error> {
        let shared = self.client.shared();
        keys::validate_resource(&self.name)?;
        let prefix = &shared.cfg.prefix;
        let (keys, rw) = (
            Keys::rw(prefix, &self.name),
            RwKeys::new(prefix, &self.name),
        );
        crate::holder::rw_force_release(shared, &self.name, &keys, &rw)
    }

    fn defaults(&self) -> LockOptions {
        self.client.shared().cfg.defaults
    }

    fn acquire(&self, write: bool, options: LockOptions) -> Result<Arc<Lease>, Error> {
        let target = if options.get_hold_at_least() > Duration::ZERO {
            Err(Error::InvalidOptions {
                reason: "hold_at_least applies to locks, not to reader-writer locks".to_string(),
            })
        } else {
            let access = if write {
                let wait_until = Instant::now() + options.get_wait();
                Access::Write { wait_until }
            } else {
                Access::Read
            };
            Target::rw(&self.client.shared().cfg.prefix, &self.name, access)
        };
        // What a writer needs to take back its wait (see `withdraw`).
        let writer = target.as_ref().ok().and_then(|t| match &t.kind {
            Kind::Rw(rw) if matches!(rw.access, Access::Write { .. }) => {
                Some((t.members[0].keys.clone(), rw.clone()))
            }
            _ => None,
        });
        let result = self.client.acquire_by(&self.name, target, options);
        if let (Err(_), Some((keys, rw))) = (&result, writer) {
            self.withdraw(&keys, &rw, options.get_ttl());
        }
        result
    }

    /// A writer's call that ended without a grant takes back the wait it
    /// may have marked on the instances, so readers are not kept out for
    /// the rest of a TTL (`lua/rw_withdraw.lua`), and wakes them. Sent
    /// without waiting: until the mark would have expired anyway.
    fn withdraw(&self, keys: &Keys, rw: &RwCall, ttl: Duration) {
        let shared = self.client.shared();
        let pack = |sharded| scripts::rw_withdraw(keys, rw, sharded);
        let on_cluster = || pack(true);
        let out = Outgoing::to_slot(keys.slot, pack(false)).on_cluster(&on_cluster);
        shared
            .instances
            .send_persistent(&out, Instant::now() + ttl, None, |_| true);
    }
}
