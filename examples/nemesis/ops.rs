//! The workloads of what users do around their locks, besides holding
//! them, under the same faults as the rest:
//!
//! - `operator`: two threads on one client. One takes `OP_LOCK` and either
//!   works (a fenced read-modify-write on the storage server, steps,
//!   stalls: a live holder) or dies holding it (`mem::forget`, no
//!   watchdog, a long lease: a dead holder); or, as often as not, a
//!   permit of the semaphore, a read or a write of the reader-writer lock,
//!   live (the `semaphore` and `rw` workloads' fenced work) or dead. The
//!   other, an operator, revokes: the lock (it looks first, `holder`, then
//!   `force_release`, then takes the lock and writes with the newer
//!   token: a live holder revoked mid-work must be refused by the store
//!   from then on), every held slot of the semaphore
//!   (`Semaphore::force_release`), or the writer and readers of the
//!   reader-writer lock (`RwLock::force_release`), whoever's they are.
//! - `cancel`: locks, sets, permits, reads and writes, with and without
//!   `hold_at_least`, each cancelled by another thread at a random moment.
//! - `fenced-kv`: read-modify-writes of counters on the storage server
//!   through `fenced_get` and `fenced_set`, under locks of the same names.
//! - `fenced-rw`: the reader-writer lock's writers do that on its storage
//!   key, its readers read it with `fenced_get_shared`.
//! - `clocks`: `clock_offsets()`, `doctor()` and `ping()` whenever the
//!   clock nemesis steps a clock, and in between.
//!
//! Everything is recorded for the checker (`checker.rs`) and `.ci/judge.py`.

use std::thread;
use std::time::{Duration, Instant};

use rand::seq::index::sample;
use rand::Rng;
use redfence::crossbeam_channel::{self, RecvTimeoutError};
use redfence::redis;
use redfence::{
    fenced_get, fenced_get_shared, fenced_set, Cancel, Error, FencingToken, Holder, LockOptions,
    Redlock,
};

use crate::history::{Call, ClockCheck, KvKind, KvOp, Unlock, UnlockOutcome, UnlockRole};
use crate::workloads::{Ask, Guard, HoldNotes, Worker, RW_WRITES};
use crate::{slot_resource, MAX_KEY_LIFE, PERMITS, REGISTERS, RW_LOCK, SEMAPHORE, TTL, WAIT};

/// The lock the operator revokes, and the storage key it guards.
pub const OP_LOCK: &str = "op-lock";
/// A dead holder's lease: long, as a crashed job's often is, so that only
/// the operator frees it early (within `MAX_KEY_LIFE`, which the checks
/// assume).
pub const DEAD_TTL: Duration = MAX_KEY_LIFE;
/// The `fenced-kv` counters, each under the lock of the same name.
pub const KV_KEYS: [&str; 2] = ["kv-0", "kv-1"];
/// How long a cancelled call may wait: longer than any cancel comes.
pub const CANCEL_WAIT: Duration = Duration::from_secs(4);
/// The latest a cancel comes after the call began.
pub const CANCEL_AFTER_MAX: Duration = Duration::from_millis(1500);
/// Between clock checks while no clock moves.
const CLOCK_IDLE: Duration = Duration::from_millis(700);

/// The client an identity names (`workloads::identity`).
pub fn client_of(identity: &str) -> Option<usize> {
    identity.strip_prefix("nemesis-c")?.parse().ok()
}

/// The longest a hold-at-least grant's keys live from its acquire: the
/// TTL, the hold and the drift allowance over it (1 % and 2 ms).
pub fn key_life_with_hold(ttl: Duration, hold: Duration) -> Duration {
    ttl + hold * 101 / 100 + Duration::from_millis(2)
}

impl Worker<'_> {
    /// `operator`: thread 0 holds `OP_LOCK`, a permit of the semaphore, or
    /// a read or a write of the reader-writer lock, live or dead; thread 1
    /// revokes whoever holds one of them.
    pub fn operator(&mut self) {
        while Instant::now() < self.ctx.until {
            self.ctx.history.op(self.workload);
            if self.thread == 0 {
                match self.rng.random_range(0..6) {
                    0..=2 => self.op_hold(),
                    3 => self.op_hold_other(Ask::Permit),
                    4 => self.op_hold_other(Ask::Read),
                    _ => self.op_hold_other(Ask::Write),
                }
            } else {
                self.pause(100, 1200);
                match self.rng.random_range(0..4) {
                    0 | 1 => self.op_unlock(),
                    2 => self.unlock_permits(),
                    _ => self.unlock_rw(),
                }
            }
        }
    }

    fn op_hold(&mut self) {
        let dead = self.rng.random_bool(0.35);
        // A dead holder's process is gone: no watchdog extends its lease.
        let (ttl, auto) = if dead {
            (DEAD_TTL, false)
        } else {
            (TTL, self.rng.random_bool(0.5))
        };
        let options = LockOptions::new().ttl(ttl).wait(WAIT).auto_extend(auto);
        let start = Instant::now();
        let guard = match self.locks.lock_with(OP_LOCK, options) {
            Ok(g) => Guard::One(g),
            Err(e) => {
                self.failed_call(&[OP_LOCK.to_string()], start, WAIT, ttl, &e);
                return self.pause(0, 100);
            }
        };
        if dead {
            return self.die_holding(guard, start);
        }
        let mut hold = HoldNotes::new(&guard, start, Instant::now(), WAIT);
        let steps = self.rng.random_range(0..=3);
        let stall = !auto && self.ctx.stalls.take();
        self.kv_modify(&guard, &mut hold, OP_LOCK, stall, steps);
        hold.release(guard, self);
    }

    /// A permit, a read or a write the operator may revoke: 35 % of the
    /// time a dead holder's, else a live one doing the `semaphore` or `rw`
    /// workload's fenced work in PostgreSQL.
    fn op_hold_other(&mut self, ask: Ask) {
        if !self.rng.random_bool(0.35) {
            if let Err(e) = self.increment(ask) {
                self.ctx.history.count(|c| c.database_errors += 1);
                eprintln!("client {}: {e}", self.id);
                self.reconnect();
            }
            return;
        }
        let options = LockOptions::new()
            .ttl(DEAD_TTL)
            .wait(WAIT)
            .auto_extend(false);
        let start = Instant::now();
        match self.take(&ask, options) {
            Ok(guard) => self.die_holding(guard, start),
            Err(e) => {
                self.failed_call(&ask.resources(), start, WAIT, DEAD_TTL, &e);
                self.pause(0, 100);
            }
        }
    }

    /// A holder whose process dies: no release, no clean-up, its keys
    /// live out their lease (`DEAD_TTL`) unless an operator revokes them.
    fn die_holding(&mut self, guard: Guard, start: Instant) {
        let mut hold = HoldNotes::new(&guard, start, Instant::now(), WAIT);
        hold.key_life = DEAD_TTL;
        self.pause(0, 200);
        hold.claim.note(guard.validity());
        hold.releasing = Instant::now();
        std::mem::forget(guard);
        hold.finish(self);
    }

    /// A look, a forced release, and, when it revoked a holder, a newer
    /// holder's fenced write.
    fn op_unlock(&mut self) {
        // What an operator looks at first (`redfence holder`): not judged,
        // the unlock reads the holder again.
        let _ = self.locks.holder(OP_LOCK);
        self.ctx.history.count(|c| c.probes += 1);
        let start = Instant::now();
        let result = self.locks.force_release(OP_LOCK);
        let times = (start, Instant::now());
        let outcome = match &result {
            Ok(Some(h)) => revoked(h),
            Ok(None) => UnlockOutcome::Free,
            Err(_) => UnlockOutcome::Failed,
        };
        self.record_unlock(OP_LOCK.to_string(), UnlockRole::Lock, times, outcome);
        if matches!(outcome, UnlockOutcome::Revoked { .. }) {
            self.newer_write();
        }
    }

    /// `Semaphore::force_release`: a record per slot, revoked or free. On
    /// an error (it names the slot that failed), the slots up to that one
    /// may have been revoked (what the earlier ones returned is lost), the
    /// later ones were not tried.
    fn unlock_permits(&mut self) {
        let semaphore = self.locks.semaphore(SEMAPHORE, PERMITS);
        let start = Instant::now();
        let result = semaphore.force_release();
        let times = (start, Instant::now());
        let slots: Vec<(u32, UnlockOutcome)> = match &result {
            Ok(list) => (0..PERMITS)
                .map(|slot| match list.iter().find(|(s, _)| *s == slot) {
                    Some((_, h)) => (slot, revoked(h)),
                    None => (slot, UnlockOutcome::Free),
                })
                .collect(),
            Err(e) => (0..=failed_slot(e).unwrap_or(PERMITS - 1))
                .map(|slot| (slot, UnlockOutcome::Failed))
                .collect(),
        };
        for (slot, outcome) in slots {
            self.record_unlock(slot_resource(slot), UnlockRole::Permit, times, outcome);
        }
        // The operator's other tool on a semaphore: a recount to the same
        // count, under the same faults. It changes the record only where
        // no slot is held, and to the count every caller uses, so nothing
        // the checker judges moves; its errors are counted with the rest
        // (anything but refused or unavailable shows as `other_errors`).
        if let Err(e) = semaphore.recount() {
            self.ctx.history.count_error(&e);
        }
    }

    /// `RwLock::force_release`: a record per writer and reader it revoked;
    /// one for the whole lock when it revoked none or failed.
    fn unlock_rw(&mut self) {
        let rw = self.locks.rw_lock(RW_LOCK);
        let start = Instant::now();
        let result = rw.force_release();
        let times = (start, Instant::now());
        let mut records = Vec::new();
        match &result {
            Ok(holders) => {
                let writer = holders.writer.iter().map(|h| (UnlockRole::Writer, h));
                let readers = holders.readers.iter().map(|h| (UnlockRole::Reader, h));
                records.extend(writer.chain(readers).map(|(r, h)| (r, revoked(h))));
                if records.is_empty() {
                    records.push((UnlockRole::Rw, UnlockOutcome::Free));
                }
            }
            Err(_) => records.push((UnlockRole::Rw, UnlockOutcome::Failed)),
        }
        for (role, outcome) in records {
            self.record_unlock(RW_LOCK.to_string(), role, times, outcome);
        }
    }

    fn record_unlock(
        &self,
        resource: String,
        role: UnlockRole,
        (start, end): (Instant, Instant),
        outcome: UnlockOutcome,
    ) {
        self.ctx.history.count(|c| match outcome {
            UnlockOutcome::Revoked { .. } | UnlockOutcome::RevokedUnknown => c.unlocks_revoked += 1,
            UnlockOutcome::Free => c.unlocks_free += 1,
            UnlockOutcome::Failed => c.unlocks_failed += 1,
        });
        self.ctx.history.unlocks.lock().push(Unlock {
            client: self.id,
            resource,
            role,
            start,
            end,
            outcome,
        });
    }

    /// The lock taken after a revocation, and a write with its token: a
    /// revoked holder still working is refused from then on.
    fn newer_write(&mut self) {
        let options = LockOptions::new().ttl(TTL).wait(WAIT);
        let start = Instant::now();
        let guard = match self.locks.lock_with(OP_LOCK, options) {
            Ok(g) => Guard::One(g),
            Err(e) => return self.failed_call(&[OP_LOCK.to_string()], start, WAIT, TTL, &e),
        };
        let mut hold = HoldNotes::new(&guard, start, Instant::now(), WAIT);
        self.kv_modify(&guard, &mut hold, OP_LOCK, false, 0);
        hold.release(guard, self);
    }

    /// `fenced-kv`: a counter's read-modify-write under its lock, with the
    /// register's extensions, watchdog or not, and stalls.
    pub fn fenced_kv(&mut self) {
        while Instant::now() < self.ctx.until {
            self.ctx.history.op(self.workload);
            let key = KV_KEYS[self.rng.random_range(0..KV_KEYS.len())];
            let (steps, auto, wait) = self.kv_shape();
            let options = LockOptions::new().ttl(TTL).wait(wait).auto_extend(auto);
            let start = Instant::now();
            match self.locks.lock_with(key, options) {
                Ok(g) => self.kv_guarded(Guard::One(g), (start, wait), key, steps, auto),
                Err(e) => self.failed_call(&[key.to_string()], start, wait, TTL, &e),
            }
            self.pause(0, 100);
        }
    }

    /// `fenced-rw`: on `RW_LOCK`, write (the read-modify-write of the
    /// storage key of the same name with `fenced_get` and `fenced_set`)
    /// or read it twice with `fenced_get_shared`, with the register's
    /// steps, watchdog or not, stalls and short forms.
    pub fn fenced_rw(&mut self) {
        while Instant::now() < self.ctx.until {
            self.ctx.history.op(self.workload);
            let ask = if self.rng.random_bool(RW_WRITES) {
                Ask::Write
            } else {
                Ask::Read
            };
            let (steps, auto, wait) = self.kv_shape();
            let options = LockOptions::new().ttl(TTL).wait(wait).auto_extend(auto);
            let start = Instant::now();
            match self.take(&ask, options) {
                Ok(guard) => self.kv_guarded(guard, (start, wait), RW_LOCK, steps, auto),
                Err(e) => self.failed_call(&ask.resources(), start, wait, TTL, &e),
            }
            self.pause(0, 100);
        }
    }

    /// Steps (half the time 1–3), the watchdog (most of those without
    /// steps), and the wait (none 30 % of the time).
    fn kv_shape(&mut self) -> (u32, bool, Duration) {
        let steps = if self.rng.random_bool(0.5) {
            self.rng.random_range(1..=3)
        } else {
            0
        };
        let auto = steps == 0 && self.rng.random_bool(0.7);
        let wait = if self.rng.random_bool(0.3) {
            Duration::ZERO
        } else {
            WAIT
        };
        (steps, auto, wait)
    }

    /// The work under a guard on the storage server (a read guard's two
    /// shared reads, else a read-modify-write), its release, its record.
    fn kv_guarded(
        &mut self,
        guard: Guard,
        (start, wait): (Instant, Duration),
        key: &str,
        steps: u32,
        auto: bool,
    ) {
        let stall = !auto && self.ctx.stalls.take();
        let mut hold = HoldNotes::new(&guard, start, Instant::now(), wait);
        if let Guard::Read(_) = guard {
            self.kv_read_shared(&guard, &mut hold, key, stall, steps);
        } else {
            self.kv_modify(&guard, &mut hold, key, stall, steps);
        }
        hold.release(guard, self);
    }

    /// The fenced read-modify-write of `key`: read with the guard's
    /// token, work, check the validity, stall if asked, write read + 1.
    fn kv_modify(
        &mut self,
        guard: &Guard,
        hold: &mut HoldNotes,
        key: &str,
        stall: bool,
        steps: u32,
    ) {
        let Some(token) = guard.token() else { return };
        let Some(read) = self.kv_op(key, token, KvKind::Get, 0) else {
            return;
        };
        if self.work_then_check(guard, hold, stall, steps) {
            self.kv_op(key, token, KvKind::Set, read + 1);
        }
    }

    /// A reader's work: `fenced_get_shared`, the steps, the check, a stall
    /// if asked, and `fenced_get_shared` again.
    fn kv_read_shared(
        &mut self,
        guard: &Guard,
        hold: &mut HoldNotes,
        key: &str,
        stall: bool,
        steps: u32,
    ) {
        let Some(token) = guard.token() else { return };
        if self.kv_op(key, token, KvKind::GetShared, 0).is_none() {
            return;
        }
        if self.work_then_check(guard, hold, stall, steps) {
            self.kv_op(key, token, KvKind::GetShared, 0);
        }
    }

    /// One call on the storage server, recorded: `fenced_get`,
    /// `fenced_get_shared`, or `fenced_set` of `value`. The value read
    /// (absent: 0) or written when accepted.
    fn kv_op(&mut self, key: &str, token: FencingToken, op: KvKind, value: i64) -> Option<i64> {
        let start = Instant::now();
        let (accepted, seen) = match self.store() {
            Some(conn) => kv_call(conn, key, token, op, value),
            None => (None, value),
        };
        let end = Instant::now();
        if accepted.is_none() {
            // A broken connection: the next operation opens a new one.
            self.store = None;
        }
        self.ctx.history.count(|c| {
            c.kv_ops += 1;
            c.kv_refused += u64::from(accepted == Some(false));
        });
        self.ctx.history.kv.lock().push(KvOp {
            client: self.id,
            key: key.to_string(),
            token: token.get(),
            op,
            start,
            end,
            accepted,
            value: seen,
        });
        (accepted == Some(true)).then_some(seen)
    }

    /// The storage connection, opened when first needed.
    fn store(&mut self) -> Option<&mut redis::Connection> {
        if self.store.is_none() {
            let client = redis::Client::open(self.ctx.store_url.as_str()).ok()?;
            self.store = client.get_connection().ok();
        }
        self.store.as_mut()
    }

    /// `cancel`: one call of a random kind, with or without a hold,
    /// cancelled by another thread at a random moment.
    pub fn cancels(&mut self) {
        while Instant::now() < self.ctx.until {
            self.ctx.history.op(self.workload);
            let ask = match self.rng.random_range(0..5) {
                0 | 1 => {
                    let k = self.rng.random_range(1..=2);
                    let picked = sample(&mut self.rng, REGISTERS.len(), k);
                    Ask::Registers(picked.iter().map(|i| REGISTERS[i]).collect())
                }
                2 => Ask::Permit,
                3 => Ask::Read,
                _ => Ask::Write,
            };
            let hold = if self.rng.random_bool(0.5) {
                Duration::from_millis(self.rng.random_range(300..=1200))
            } else {
                Duration::ZERO
            };
            self.cancel_one(ask, hold);
            self.pause(0, 100);
        }
    }

    fn cancel_one(&mut self, ask: Ask, hold: Duration) {
        let options = LockOptions::new()
            .ttl(TTL)
            .wait(CANCEL_WAIT)
            .hold_at_least(hold);
        let after = Duration::from_millis(
            self.rng
                .random_range(0..=CANCEL_AFTER_MAX.as_millis() as u64),
        );
        let (start, result, cancelled) = self.call_cancelled_after(&ask, options, after);
        self.ctx
            .history
            .count(|c| c.cancels += u64::from(cancelled.is_some()));
        let guard = match result {
            Ok(g) => g,
            Err(e) => {
                // Undone as a failed attempt, hold or no hold. Its keys
                // were set for the TTL and the hold: until the clean-up
                // lands (late under the `late` nemesis, or never if it is
                // lost) they may live that long, the documented price
                // (docs/coordination.md); the orphan check judges that.
                let error = self.ctx.history.count_error(&e);
                self.ctx.history.calls.lock().push(Call {
                    client: self.id,
                    workload: self.workload,
                    resources: ask.resources(),
                    start,
                    end: Instant::now(),
                    wait: CANCEL_WAIT,
                    key_life: key_life_with_hold(TTL, hold),
                    error,
                    cancelled,
                });
                return;
            }
        };
        let mut notes = HoldNotes::new(&guard, start, Instant::now(), CANCEL_WAIT);
        notes.key_life = key_life_with_hold(TTL, hold);
        notes.cancelled = cancelled;
        self.pause(20, 300);
        notes.release(guard, self);
    }

    /// Makes the call while another thread cancels it `after` its start
    /// (unless it returned first): its start, result and when the cancel
    /// was made.
    fn call_cancelled_after(
        &mut self,
        ask: &Ask,
        options: LockOptions,
        after: Duration,
    ) -> (Instant, Result<Guard, Error>, Option<Instant>) {
        let cancel = Cancel::new();
        let options = options.cancel(&cancel);
        let (done, returned) = crossbeam_channel::bounded::<()>(0);
        thread::scope(|s| {
            let canceller = s.spawn(move || match returned.recv_timeout(after) {
                Err(RecvTimeoutError::Timeout) => {
                    let at = Instant::now();
                    cancel.cancel();
                    Some(at)
                }
                // The call returned first: nothing to cancel.
                _ => None,
            });
            let start = Instant::now();
            let result = self.take(ask, options);
            drop(done);
            let cancelled = canceller.join().ok().flatten();
            (start, result, cancelled)
        })
    }

    /// `clocks`: a check whenever a clock step settles, and every
    /// `CLOCK_IDLE` while none does; every third a doctor's, the others
    /// `clock_offsets()`, and a `ping()` now and then.
    pub fn clocks(&mut self) -> Result<(), crate::BoxError> {
        // An operator's tool has a client of its own.
        let probe = Redlock::new(self.ctx.urls.clone())?;
        let mut seen = self.ctx.clocks.now().generation;
        let mut n: u64 = 0;
        while Instant::now() < self.ctx.until {
            let state = self.ctx.clocks.wait_past(seen, CLOCK_IDLE);
            seen = state.generation;
            if state.changing {
                continue;
            }
            self.ctx.history.op(self.workload);
            self.clock_check(&probe, n % 3 == 2);
            if n.is_multiple_of(5) {
                let _ = probe.ping();
                self.ctx.history.count(|c| c.probes += 1);
            }
            n += 1;
        }
        Ok(())
    }

    /// One check, recorded only if no clock moved during the call.
    fn clock_check(&mut self, probe: &Redlock, doctor: bool) {
        let before = self.ctx.clocks.now();
        let start = Instant::now();
        let (offsets, severities) = if doctor {
            (
                Vec::new(),
                clock_severities(&probe.doctor(), before.offsets_ms.len()),
            )
        } else {
            let offsets = probe
                .clock_offsets()
                .into_iter()
                .map(|(_, o)| o.map(|o| (o.micros(), o.uncertainty().as_micros() as u64)));
            (offsets.collect(), Vec::new())
        };
        let end = Instant::now();
        // A doctor's rows that are not one per instance cannot be told
        // apart (`clock_severities`): not judged either.
        let unreadable = doctor && severities.is_empty();
        if unreadable || before.changing || self.ctx.clocks.now() != before {
            return self.ctx.history.count(|c| c.clock_checks_skipped += 1);
        }
        self.ctx.history.count(|c| c.clock_checks += 1);
        self.ctx.history.clock_checks.lock().push(ClockCheck {
            client: self.id,
            start,
            end,
            applied_ms: before.offsets_ms,
            offsets,
            doctor: severities,
        });
    }
}

/// What a call on the storage server answered: accepted (`Some(true)`),
/// refused as stale (`Some(false)`) or no answer (`None`), and the value
/// read (absent: 0) or written.
fn kv_call(
    conn: &mut redis::Connection,
    key: &str,
    token: FencingToken,
    op: KvKind,
    value: i64,
) -> (Option<bool>, i64) {
    let read = match op {
        KvKind::Set => {
            return match fenced_set(conn, key, token, value) {
                Ok(written) => (Some(written), value),
                Err(_) => (None, value),
            }
        }
        KvKind::Get => fenced_get(conn, key, token),
        KvKind::GetShared => fenced_get_shared(conn, key, token),
    };
    match read {
        Ok(v) => (Some(true), v.and_then(|s| s.parse().ok()).unwrap_or(0)),
        Err(e) if e.code() == Some("STALE") => (Some(false), 0),
        Err(_) => (None, 0),
    }
}

/// An unlock's outcome for a holder it returned: the client its identity
/// names.
fn revoked(holder: &Holder) -> UnlockOutcome {
    match holder.identity.as_deref().and_then(client_of) {
        Some(holder) => UnlockOutcome::Revoked { holder },
        None => UnlockOutcome::RevokedUnknown,
    }
}

/// The slot a semaphore's failed forced release names (`name#slot`).
fn failed_slot(e: &Error) -> Option<u32> {
    let resource = match e {
        Error::Unavailable { resource, .. } | Error::WrongType { resource, .. } => resource,
        _ => return None,
    };
    let slot: u32 = resource.rsplit_once('#')?.1.parse().ok()?;
    (slot < PERMITS).then_some(slot)
}

/// Each instance's `clock` finding's severity (`none` without one), in the
/// order the instances were given: a standalone server's rows come in that
/// order, one each.
fn clock_severities(report: &redfence::DoctorReport, instances: usize) -> Vec<String> {
    if report.instances.len() != instances {
        return Vec::new();
    }
    report
        .instances
        .iter()
        .map(|row| {
            row.findings
                .iter()
                .find(|f| f.check == "clock")
                .map_or("none".to_string(), |f| f.severity.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::identity;

    #[test]
    fn identities_name_their_clients() {
        assert_eq!(client_of(&identity(7)), Some(7));
        assert_eq!(client_of("someone-else"), None);
    }
}
