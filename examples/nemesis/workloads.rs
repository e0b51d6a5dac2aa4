//! The clients: each a `Redlock` of its own (its own workers, watchdog and
//! connections, through the proxies) and a PostgreSQL connection, doing
//! what users do, through the public API only, and recording it.
//!
//! - `register` and `multi`: lock one hot resource (or, `multi`, a set of
//!   two overlapping ones), read its counter and write it back + 1 through
//!   the fenced-write recipe (`redfence::sql`), with manual extensions of
//!   random lengths in between and, when the client-pause nemesis asks, a
//!   stall past the lease between the last check and the write.
//! - `election`: campaign, act as leader (a fenced write per act) while
//!   `is_leader()`, resign.
//! - `run-once`: every window, all clients try the job at once with
//!   `hold_at_least`, as the cron recipe does; the winner runs it.
//! - `semaphore`: take a permit of the semaphore (`PERMITS` of them) and
//!   do the register's read-modify-write on the counter of the permit's
//!   slot, fenced by the slot's token, extensions and stalls alike.
//! - `rw`: read or write the reader-writer lock's document. A write is
//!   the register's read-modify-write; a read reads the document twice
//!   (the same value, or a write came between), with the steps and stalls
//!   of a write in between. The store fences both (`RW_READ_FENCE`,
//!   `RW_WRITE_FENCE`).
//!
//! - `operator`, `cancel`, `fenced-kv`, `fenced-rw`, `clocks`: the operations no user
//!   workload above makes (forced unlocks, cancelled calls, the Redis
//!   fenced store, clock readings and the doctor): see `ops.rs`.
//!
//! Calls that take the defaults (`TTL`, `WAIT`, the watchdog: the
//! client's `default_options`) go, at random, through each of the short
//! forms (`lock`, `try_lock`, `try_lock_for`, `try_lock_until`, and the
//! same of sets — `lock_all`, `try_lock_all`, `try_lock_all_for`,
//! `try_lock_all_until` —, permits, reads and writes), so that every public way in
//! is exercised (`.ci/bench_coverage.py` checks that none is left out).
//!
//! A `semaphore` or `rw` client runs `THREADS` threads on its one
//! `Redlock`, as a program's pool of workers does: with a client or two
//! per workload, that is enough callers to fill the permits, and readers
//! to share.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use redfence::{
    crossbeam_channel, sql, Cancel, Election, Error, FairJoin, FencingToken, JoinObserver,
    Leadership, LockGuard, LockOptions, MultiGuard, Permit, ReadGuard, Redlock, WriteGuard,
};

use crate::args::Workload;
use crate::history::{Call, Claim, FairCall, FairOutcome, History, Hold, Mode, Run};
use crate::nemesis::{Clocks, Stalls};
use crate::{
    slot_resource, ELECTION, ELECTION_LEASE, EXTEND_MAX, INSTANCE_TIMEOUT, PERMITS, REGISTERS,
    RUN_HOLD, RUN_JITTER, RUN_JOB, RUN_KEY_LIFE, RUN_TTL, RUN_WINDOW, RW_LOCK, SEMAPHORE, THREADS,
    TTL, WAIT,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long the client-pause nemesis pauses a fair waiter after its
/// join: past the heartbeat TTL (`redfence::FAIR_HEARTBEAT`), so that it
/// is dropped and told so, and short of the call's wait.
pub const WAITER_PAUSE: Duration = Duration::from_millis(1500);

/// The share of `rw` (and `fenced-rw`) operations that write.
pub const RW_WRITES: f64 = 0.35;

/// What every client shares.
pub struct Ctx<'a> {
    pub history: &'a History,
    /// Shared with the fair lock's join observer, which outlives a borrow.
    pub stalls: Arc<Stalls>,
    pub urls: Vec<String>,
    pub pg_url: String,
    pub unfenced: bool,
    /// Clients start no operation after this.
    pub until: Instant,
    /// The clock offsets the clock nemesis applied (the `clocks` workload).
    pub clocks: &'a Clocks,
    /// The fenced storage server (`fenced_get`/`fenced_set`), not a lock
    /// instance: no fault touches it.
    pub store_url: String,
}

/// The identity client `id` locks with: the watcher tells whose a lock
/// key is by it.
pub fn identity(id: usize) -> String {
    format!("nemesis-c{id}")
}

/// The tables the workloads write: a counter per register, per semaphore
/// slot and for the reader-writer lock's document, every accepted write,
/// every accepted act and every read of the document accepted twice, in
/// commit order; and the document's fence.
pub const SCHEMA: &str = "
    CREATE TABLE counters (resource text PRIMARY KEY, value bigint NOT NULL);
    CREATE TABLE writes (id bigserial PRIMARY KEY, resource text NOT NULL,
        token bigint NOT NULL, client int NOT NULL, read bigint NOT NULL);
    CREATE TABLE acts (id bigserial PRIMARY KEY, term bigint NOT NULL, client int NOT NULL);
    CREATE TABLE rw_fences (resource text PRIMARY KEY, seen bigint NOT NULL,
        written bigint NOT NULL);
    CREATE TABLE reads (id bigserial PRIMARY KEY, resource text NOT NULL,
        token bigint NOT NULL, client int NOT NULL, first bigint NOT NULL,
        second bigint NOT NULL);";

/// A reader-writer lock's fence has two tokens: `seen`, the highest of any
/// guard that touched the data, and `written`, the highest of a write. A
/// write passes while no guard with a higher token touched the data (a
/// read granted after it, or a later write), and raises both; its
/// read-modify-write claims the fence when reading, as `sql` says. Like
/// `sql::ADVANCE_FENCE`, the `UPDATE` locks the row and checks its newest
/// version, at READ COMMITTED.
pub const RW_WRITE_FENCE: &str = "UPDATE rw_fences SET seen = $2, written = $2 \
     WHERE resource = $1 AND seen <= $2 RETURNING seen";
/// A read passes while no write with a higher token has claimed the data,
/// and raises `seen`, so that a write with a lower token (a writer whose
/// lease ran out before this read was granted) is refused after it.
/// Readers never refuse each other.
pub const RW_READ_FENCE: &str = "UPDATE rw_fences SET seen = GREATEST(seen, $2) \
     WHERE resource = $1 AND written <= $2 RETURNING seen";

pub struct Worker<'a> {
    pub ctx: &'a Ctx<'a>,
    pub id: usize,
    pub workload: Workload,
    pub locks: Redlock,
    pub db: Client,
    pub rng: StdRng,
    /// Which of its client's threads this is (0 first).
    pub thread: usize,
    /// The fenced storage server, once connected (`ops.rs`).
    pub store: Option<redfence::redis::Connection>,
}

/// Runs client `id` until the run's end: one thread, or `THREADS` on the
/// client for `semaphore` and `rw`. An error means it could not start (no
/// client, no database).
pub fn run(ctx: &Ctx<'_>, id: usize, workload: Workload, seed: u64) -> Result<(), BoxError> {
    let locks = Redlock::builder(ctx.urls.clone())
        .identity(identity(id))
        .instance_timeout(INSTANCE_TIMEOUT)
        .default_options(defaults())
        .build()?;
    let threads = match workload {
        Workload::Semaphore
        | Workload::Rw
        | Workload::Operator
        | Workload::FencedKv
        | Workload::FencedRw => THREADS,
        _ => 1,
    };
    let mut workers = Vec::with_capacity(threads);
    for t in 0..threads {
        let seed = seed
            .wrapping_add(id as u64 * 0x9e37_79b9)
            .wrapping_add(t as u64 * 0x85eb_ca6b);
        workers.push(Worker {
            ctx,
            id,
            workload,
            locks: locks.clone(),
            db: Client::connect(&ctx.pg_url, NoTls)?,
            rng: StdRng::seed_from_u64(seed),
            thread: t,
            store: None,
        });
    }
    drop(locks);
    let mut last = workers.pop().expect("one worker at least");
    thread::scope(|s| {
        let others: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(t, mut w)| {
                thread::Builder::new()
                    .name(format!("nemesis-client-{id}.{}", t + 1))
                    .spawn_scoped(s, move || w.work())
            })
            .collect();
        let mut result = last.work();
        for other in others {
            let joined = match other {
                Ok(handle) => handle.join().unwrap_or_else(|_| Err("panicked".into())),
                Err(e) => Err(e.into()),
            };
            result = result.and(joined);
        }
        result
    })
}

/// The options every client's short forms (`lock`, `try_lock_for`, ...)
/// take: the registers' lease and wait, with the watchdog.
pub fn defaults() -> LockOptions {
    LockOptions::new().ttl(TTL).wait(WAIT).auto_extend(true)
}

/// What one operation asks for.
pub enum Ask {
    /// One register, or a set of them.
    Registers(Vec<&'static str>),
    /// A permit of the semaphore.
    Permit,
    /// A read, or a write, of the reader-writer lock.
    Read,
    Write,
}

impl Ask {
    /// The resources whose keys the call's attempts may write: for a
    /// permit, every slot.
    pub fn resources(&self) -> Vec<String> {
        match self {
            Ask::Registers(list) => list.iter().map(|r| r.to_string()).collect(),
            Ask::Permit => (0..PERMITS).map(slot_resource).collect(),
            Ask::Read | Ask::Write => vec![RW_LOCK.to_string()],
        }
    }
}

/// Which form of a lock call to make: `*_with(options)`, or a short form
/// that takes the client's defaults (`lock`, `try_lock`, `try_lock_for`,
/// `try_lock_until`, and the same of sets, permits, reads and writes).
#[derive(Clone, Copy)]
enum Form {
    With,
    Plain,
    Try,
    For(Duration),
    Until(Instant),
}

/// Which fence the store checks a guard's token against.
#[derive(Clone, Copy)]
enum Fence {
    /// `sql::ADVANCE_FENCE`: locks, sets, permits (per slot).
    Lock,
    RwRead,
    RwWrite,
}

/// A guard of any kind, with what the workloads need of each.
pub enum Guard {
    One(LockGuard),
    Set(MultiGuard),
    Permit(Permit),
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Guard {
    pub fn validity(&self) -> Duration {
        match self {
            Guard::One(g) => g.validity(),
            Guard::Set(g) => g.validity(),
            Guard::Permit(g) => g.validity(),
            Guard::Read(g) => g.validity(),
            Guard::Write(g) => g.validity(),
        }
    }

    /// The guard's token (a set has one per member: `None`).
    pub fn token(&self) -> Option<FencingToken> {
        match self {
            Guard::One(g) => Some(g.token()),
            Guard::Set(_) => None,
            Guard::Permit(g) => Some(g.token()),
            Guard::Read(g) => Some(g.token()),
            Guard::Write(g) => Some(g.token()),
        }
    }

    fn extend(&self, ttl: Duration) -> Result<(), Error> {
        match self {
            Guard::One(g) => g.extend(ttl),
            Guard::Set(g) => g.extend(ttl),
            Guard::Permit(g) => g.extend(ttl),
            Guard::Read(g) => g.extend(ttl),
            Guard::Write(g) => g.extend(ttl),
        }
    }

    /// Each resource the guard stands for, with its token: a permit's is
    /// the slot it says it holds.
    pub fn tokens(&self) -> Vec<(String, u64)> {
        match self {
            Guard::One(g) => vec![(g.resource().to_string(), g.token().get())],
            Guard::Set(g) => g
                .resources()
                .filter_map(|r| g.token(r).map(|t| (r.to_string(), t.get())))
                .collect(),
            Guard::Permit(g) => vec![(slot_resource(g.slot()), g.token().get())],
            Guard::Read(g) => vec![(RW_LOCK.to_string(), g.token().get())],
            Guard::Write(g) => vec![(RW_LOCK.to_string(), g.token().get())],
        }
    }

    fn mode(&self) -> Mode {
        match self {
            Guard::One(_) | Guard::Set(_) => Mode::Exclusive,
            Guard::Permit(g) => Mode::Permit { slot: g.slot() },
            Guard::Read(_) => Mode::Read,
            Guard::Write(_) => Mode::Write,
        }
    }

    fn fence(&self) -> Fence {
        match self {
            Guard::Read(_) => Fence::RwRead,
            Guard::Write(_) => Fence::RwWrite,
            _ => Fence::Lock,
        }
    }

    pub fn release(self) {
        // A release that fails (the lease was lost, instances down) is
        // what the faults are for: the history has what matters.
        let _ = match self {
            Guard::One(g) => g.release(),
            Guard::Set(g) => g.release(),
            Guard::Permit(g) => g.release(),
            Guard::Read(g) => g.release(),
            Guard::Write(g) => g.release(),
        };
    }
}

impl Worker<'_> {
    fn work(&mut self) -> Result<(), BoxError> {
        match self.workload {
            Workload::Election => self.elections()?,
            Workload::RunOnce => self.run_once(),
            Workload::Operator => self.operator(),
            Workload::Cancel => self.cancels(),
            Workload::FencedKv => self.fenced_kv(),
            Workload::FencedRw => self.fenced_rw(),
            Workload::Clocks => self.clocks()?,
            _ => self.holds(),
        }
        Ok(())
    }

    /// `register`, `multi`, `semaphore`, `rw`: one guarded operation after
    /// another.
    fn holds(&mut self) {
        while Instant::now() < self.ctx.until {
            self.ctx.history.op(self.workload);
            let ask = self.pick();
            if let Err(e) = self.increment(ask) {
                self.ctx.history.count(|c| c.database_errors += 1);
                eprintln!("client {}: {e}", self.id);
                self.reconnect();
            }
            self.pause(0, 100);
        }
    }

    fn pick(&mut self) -> Ask {
        let k = match self.workload {
            Workload::Semaphore => return Ask::Permit,
            Workload::Rw if self.rng.random_bool(RW_WRITES) => return Ask::Write,
            Workload::Rw => return Ask::Read,
            Workload::Multi => 2,
            _ => 1,
        };
        let picked = sample(&mut self.rng, REGISTERS.len(), k);
        Ask::Registers(picked.iter().map(|i| REGISTERS[i]).collect())
    }

    /// The call for `ask`: with `options`, or, when they are the client's
    /// defaults (but perhaps the wait), one of the short forms at random.
    pub fn take(&mut self, ask: &Ask, options: LockOptions) -> Result<Guard, Error> {
        let wait = options.get_wait();
        let short = options.get_ttl() == TTL
            && options.get_auto_extend()
            && options.get_hold_at_least().is_zero()
            && options.get_cancel().is_none()
            && (wait.is_zero() || wait == WAIT);
        let form = if !short {
            Form::With
        } else {
            match self.rng.random_range(0..4) {
                0 => Form::With,
                _ if wait.is_zero() => Form::Try,
                1 => Form::Plain,
                2 => Form::For(wait),
                _ => Form::Until(Instant::now() + wait),
            }
        };
        self.take_as(ask, options, form)
    }

    fn take_as(&self, ask: &Ask, options: LockOptions, form: Form) -> Result<Guard, Error> {
        match ask {
            Ask::Registers(list) => match list.as_slice() {
                [one] => self.take_one(one, options, form).map(Guard::One),
                all => match form {
                    Form::With => self.locks.lock_all_with(all, options),
                    Form::Plain => self.locks.lock_all(all),
                    Form::Try => self.locks.try_lock_all(all),
                    Form::For(wait) => self.locks.try_lock_all_for(all, wait),
                    Form::Until(at) => self.locks.try_lock_all_until(all, at),
                }
                .map(Guard::Set),
            },
            Ask::Permit => {
                let s = self.locks.semaphore(SEMAPHORE, PERMITS);
                match form {
                    Form::With => s.acquire_with(options),
                    Form::Plain => s.acquire(),
                    Form::Try => s.try_acquire(),
                    Form::For(wait) => s.try_acquire_for(wait),
                    Form::Until(at) => s.try_acquire_until(at),
                }
                .map(Guard::Permit)
            }
            Ask::Read => {
                let rw = self.locks.rw_lock(RW_LOCK);
                match form {
                    Form::With => rw.read_with(options),
                    Form::Plain => rw.read(),
                    Form::Try => rw.try_read(),
                    Form::For(wait) => rw.try_read_for(wait),
                    Form::Until(at) => rw.try_read_until(at),
                }
                .map(Guard::Read)
            }
            Ask::Write => {
                let rw = self.locks.rw_lock(RW_LOCK);
                match form {
                    Form::With => rw.write_with(options),
                    Form::Plain => rw.write(),
                    Form::Try => rw.try_write(),
                    Form::For(wait) => rw.try_write_for(wait),
                    Form::Until(at) => rw.try_write_until(at),
                }
                .map(Guard::Write)
            }
        }
    }

    fn take_one(&self, one: &str, options: LockOptions, form: Form) -> Result<LockGuard, Error> {
        if self.workload == Workload::Fair {
            return self.take_fair(one, options, form);
        }
        match form {
            Form::With => self.locks.lock_with(one, options),
            Form::Plain => self.locks.lock(one),
            Form::Try => self.locks.try_lock(one),
            Form::For(wait) => self.locks.try_lock_for(one, wait),
            Form::Until(at) => self.locks.try_lock_until(one, at),
        }
    }

    /// A fair lock call, recorded with its place in line (`FairCall`).
    /// When the client-pause nemesis asks, the call pauses right after its
    /// join, past its heartbeat TTL: a waiter whose process stopped, which
    /// the waiters behind it must wait out.
    fn take_fair(&self, one: &str, options: LockOptions, form: Form) -> Result<LockGuard, Error> {
        type Seen = Option<(FairJoin, Option<(Instant, Instant)>)>;
        let seen: Arc<parking_lot::Mutex<Seen>> = Arc::default();
        let (note, stalls) = (Arc::clone(&seen), Arc::clone(&self.ctx.stalls));
        let observer: JoinObserver = Arc::new(move |join: FairJoin| {
            let paused = stalls.take_waiter().then(|| {
                let from = Instant::now();
                thread::sleep(WAITER_PAUSE);
                (from, Instant::now())
            });
            *note.lock() = Some((join, paused));
        });
        let fair = self.locks.fair_lock(one).observed(observer);
        let start = Instant::now();
        let result = match form {
            Form::With => fair.lock_with(options),
            Form::Plain => fair.lock(),
            Form::Try => fair.try_lock(),
            Form::For(wait) => fair.try_lock_for(wait),
            Form::Until(at) => fair.try_lock_until(at),
        };
        let end = Instant::now();
        let seen = seen.lock().take();
        let paused = seen.and_then(|(_, p)| p);
        if paused.is_some() {
            self.ctx.history.count(|c| c.waiter_pauses += 1);
        }
        self.ctx.history.fair.lock().push(FairCall {
            client: self.id,
            resource: one.to_string(),
            start,
            end,
            join: seen.map(|(j, _)| (j.ticket, j.started, j.joined)),
            outcome: FairOutcome::of(&result.as_ref().map(|_| ())),
            token: result.as_ref().ok().map(|g| g.token().get()),
            paused,
        });
        result
    }

    /// One read-modify-write under the guard (a read: two reads); `Err`
    /// only for the database.
    pub fn increment(&mut self, ask: Ask) -> Result<(), BoxError> {
        // Some holders work in steps and extend the lease themselves before
        // each, as a batch job does; of the others, most have the watchdog.
        let steps = if self.rng.random_bool(0.6) {
            self.rng.random_range(1..=4)
        } else {
            0
        };
        let auto = steps == 0 && self.rng.random_bool(0.7);
        // Some callers try once and move on (`try_lock`).
        let wait = if self.rng.random_bool(0.3) {
            Duration::ZERO
        } else {
            WAIT
        };
        let options = LockOptions::new().ttl(TTL).wait(wait).auto_extend(auto);
        let start = Instant::now();
        let guard = match self.take(&ask, options) {
            Ok(g) => g,
            Err(e) => {
                self.failed_call(&ask.resources(), start, wait, TTL, &e);
                return Ok(());
            }
        };
        let granted = Instant::now();
        // A requested stall goes to the next holder granted without a
        // watchdog: its lease runs out while it stalls, as a paused
        // process's would. (Taken at the grant, not at the call: a call
        // that fails, as many do for a permit, would waste it.)
        let stall = !auto && self.ctx.stalls.take();
        let mut hold = HoldNotes::new(&guard, start, granted, wait);
        let result = if let Guard::Read(_) = guard {
            self.read_twice(&guard, &mut hold, stall, steps)
        } else {
            self.modify(&guard, &mut hold, stall, steps)
        };
        hold.release(guard, self);
        result
    }

    fn modify(
        &mut self,
        guard: &Guard,
        hold: &mut HoldNotes,
        stall: bool,
        steps: u32,
    ) -> Result<(), BoxError> {
        let fence = guard.fence();
        let mut read = Vec::new();
        for (resource, token) in guard.tokens() {
            match self.fenced_read(fence, &resource, token)? {
                Some(value) => read.push((resource, token, value)),
                None => {
                    self.ctx.history.count(|c| c.writes_refused += 1);
                    return Ok(());
                }
            }
        }
        if !self.work_then_check(guard, hold, stall, steps) {
            return Ok(());
        }
        for (resource, token, value) in read {
            if !self.fenced_write(fence, &resource, token, value)? {
                self.ctx.history.count(|c| c.writes_refused += 1);
            }
        }
        Ok(())
    }

    /// The holder's work between its first reads and what follows: a
    /// pause, the steps, a look at the validity (false once it ran out:
    /// nothing more to do), then the stall if asked for, between the check
    /// and the write as a GC pause would: past the lease and every
    /// extension's TTL.
    pub fn work_then_check(
        &mut self,
        guard: &Guard,
        hold: &mut HoldNotes,
        stall: bool,
        steps: u32,
    ) -> bool {
        self.pause(0, 150);
        self.work_in_steps(guard, hold, steps);
        hold.claim.note(guard.validity());
        if guard.validity().is_zero() {
            self.ctx.history.count(|c| c.lost_before_write += 1);
            return false;
        }
        if stall {
            self.ctx.history.count(|c| c.stalls += 1);
            thread::sleep(hold.key_life + Duration::from_millis(500));
        }
        true
    }

    /// A reader's work: read the document, work as a writer does (steps,
    /// a stall), check, read it again and record both values, each read
    /// fenced. Between two accepted reads no write can have been accepted
    /// unless it had the read's token.
    fn read_twice(
        &mut self,
        guard: &Guard,
        hold: &mut HoldNotes,
        stall: bool,
        steps: u32,
    ) -> Result<(), BoxError> {
        let Some((resource, token)) = guard.tokens().pop() else {
            return Ok(());
        };
        let Some(first) = self.fenced_read(Fence::RwRead, &resource, token)? else {
            self.ctx.history.count(|c| c.reads_refused += 1);
            return Ok(());
        };
        if !self.work_then_check(guard, hold, stall, steps) {
            return Ok(());
        }
        let token = i64::try_from(token)?;
        let (client, unfenced) = (self.id as i32, self.ctx.unfenced);
        let mut tx = self.db.transaction()?;
        if !fence_passes(&mut tx, unfenced, Fence::RwRead, &resource, token)? {
            self.ctx.history.count(|c| c.reads_refused += 1);
            return Ok(());
        }
        let second: i64 = tx
            .query_one(
                "SELECT value FROM counters WHERE resource = $1",
                &[&resource],
            )?
            .get(0);
        tx.execute(
            "INSERT INTO reads (resource, token, client, first, second) \
             VALUES ($1, $2, $3, $4, $5)",
            &[&resource, &token, &client, &first, &second],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Works in steps, extending before each by what the step needs
    /// (300 ms to 1.5 s) and, when too few instances answered, asking again
    /// at once for twice that and more.
    pub fn work_in_steps(&mut self, guard: &Guard, hold: &mut HoldNotes, steps: u32) {
        for _ in 0..steps {
            let ms = self
                .rng
                .random_range(300..=EXTEND_MAX.as_millis() as u64 / 2);
            let extended = match self.extend(guard, hold, ms) {
                Err(Error::Unavailable { .. }) => {
                    let more = (2 * ms + 500).min(EXTEND_MAX.as_millis() as u64);
                    self.extend(guard, hold, more)
                }
                other => other,
            };
            if matches!(extended, Err(Error::Lost { .. })) {
                return;
            }
            let work = (guard.validity() * 7 / 10).min(Duration::from_secs(2));
            let ms = self.rng.random_range(0..=work.as_millis() as u64);
            thread::sleep(Duration::from_millis(ms));
        }
    }

    fn extend(&mut self, guard: &Guard, hold: &mut HoldNotes, ms: u64) -> Result<(), Error> {
        let ttl = Duration::from_millis(ms);
        hold.key_life = hold.key_life.max(ttl);
        self.ctx.history.count(|c| c.extends += 1);
        // A look just before: what the extension adds was confirmed after
        // it (the checker dates confirmations by the notes around them).
        hold.claim.note(guard.validity());
        let result = guard.extend(ttl);
        hold.claim.note(guard.validity());
        result
    }

    /// The fenced read: the fence first (refused: `None`), then the value,
    /// in one transaction. A counter not there yet (a slot the run did not
    /// expect) starts at 0.
    fn fenced_read(
        &mut self,
        fence: Fence,
        resource: &str,
        token: u64,
    ) -> Result<Option<i64>, BoxError> {
        let token = i64::try_from(token)?;
        let unfenced = self.ctx.unfenced;
        let mut tx = self.db.transaction()?;
        if !fence_passes(&mut tx, unfenced, fence, resource, token)? {
            return Ok(None);
        }
        tx.execute(
            "INSERT INTO counters (resource, value) VALUES ($1, 0) ON CONFLICT DO NOTHING",
            &[&resource],
        )?;
        let row = tx.query_one(
            "SELECT value FROM counters WHERE resource = $1",
            &[&resource],
        )?;
        tx.commit()?;
        Ok(Some(row.get(0)))
    }

    /// The fenced write of `read + 1`; `false` when the fence refused it.
    fn fenced_write(
        &mut self,
        fence: Fence,
        resource: &str,
        token: u64,
        read: i64,
    ) -> Result<bool, BoxError> {
        let token = i64::try_from(token)?;
        let client = self.id as i32;
        let unfenced = self.ctx.unfenced;
        let mut tx = self.db.transaction()?;
        if !fence_passes(&mut tx, unfenced, fence, resource, token)? {
            return Ok(false);
        }
        tx.execute(
            "UPDATE counters SET value = $2 WHERE resource = $1",
            &[&resource, &(read + 1)],
        )?;
        tx.execute(
            "INSERT INTO writes (resource, token, client, read) VALUES ($1, $2, $3, $4)",
            &[&resource, &token, &client, &read],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// Campaigns through every way in (`campaign_for`, `try_campaign`,
    /// `campaign`, `run`), leads, resigns. Those that wait without a bound
    /// end at the run's end: a shutdown cancels them, as a service's would.
    fn elections(&mut self) -> Result<(), BoxError> {
        let shutdown = Cancel::new();
        let (done, finished) = crossbeam_channel::bounded::<()>(0);
        let until = self.ctx.until;
        thread::scope(|s| {
            let canceller = shutdown.clone();
            let timer = s.spawn(move || {
                // Returns at the run's end, or at once when campaigns end.
                let _ = finished.recv_deadline(until);
                canceller.cancel();
            });
            let result = self.campaigns(&shutdown);
            drop(done);
            let _ = timer.join();
            result
        })
    }

    fn campaigns(&mut self, shutdown: &Cancel) -> Result<(), BoxError> {
        let election = self
            .locks
            .election(ELECTION)?
            .lease(ELECTION_LEASE)
            .cancel(shutdown);
        let events = election.observe();
        let resource = format!("election:{ELECTION}");
        while Instant::now() < self.ctx.until {
            self.ctx.history.op(self.workload);
            let start = Instant::now();
            // `campaign` and `run` wait until elected or cancelled.
            let unbounded = self.ctx.until.saturating_duration_since(start) + WAIT;
            let (result, wait) = match self.rng.random_range(0..8) {
                0 => (self.run_term(&election, start, unbounded), unbounded),
                1 | 2 => (election.try_campaign().map(Some), Duration::ZERO),
                3 => (election.campaign().map(Some), unbounded),
                _ => (election.campaign_for(WAIT).map(Some), WAIT),
            };
            match result {
                Ok(Some(leadership)) => {
                    let led = self.lead(&election, &leadership);
                    let term = leadership.term().get();
                    let _ = leadership.resign();
                    self.push_term(term, start, led, wait);
                }
                Ok(None) => {}
                Err(e) => {
                    self.failed_call(
                        std::slice::from_ref(&resource),
                        start,
                        wait,
                        ELECTION_LEASE,
                        &e,
                    );
                    self.pause(20, 100);
                }
            }
        }
        // The observer saw the terms come and go: a count, not judged.
        let seen = events.try_iter().count() as u64;
        self.ctx.history.count(|c| c.probes += seen);
        Ok(())
    }

    /// One term through `Election::run`: campaign until elected, lead,
    /// and stop after that term. `Ok(None)`: recorded here.
    fn run_term(
        &mut self,
        election: &Election,
        start: Instant,
        wait: Duration,
    ) -> Result<Option<Leadership>, Error> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
        let mut led: Option<(u64, Led)> = None;
        let result = election.run(&stopped, |leadership| {
            // Checked once this term ends: one term only.
            let _ = stop.try_send(());
            led = Some((leadership.term().get(), self.lead(election, leadership)));
            Ok::<(), Error>(())
        });
        // `run` resigned before returning: the term ended by now.
        match (led, result) {
            (Some((term, led)), _) => {
                self.push_term(term, start, led, wait);
                Ok(None)
            }
            (None, Err(e)) => Err(e),
            (None, Ok(())) => Ok(None),
        }
    }

    /// Leads while `is_leader()` for a while: a fenced act now and then,
    /// and once a look at who the instances say leads.
    fn lead(&mut self, election: &Election, leadership: &Leadership) -> Led {
        let granted = Instant::now();
        let mut claim = Claim::new(granted);
        let term = leadership.term().get();
        let lead_for = Duration::from_millis(self.rng.random_range(300..=2500));
        let mut asked = false;
        while granted.elapsed() < lead_for && leadership.is_leader() {
            claim.note(leadership.validity());
            if !asked {
                asked = true;
                // Not judged: under faults the instances may not agree yet.
                let _ = election.leader();
                self.ctx.history.count(|c| c.probes += 1);
            }
            if let Err(e) = self.act(term) {
                self.ctx.history.count(|c| c.database_errors += 1);
                eprintln!("client {}: {e}", self.id);
                self.reconnect();
            }
            self.pause(50, 150);
        }
        claim.note(leadership.validity());
        Led {
            granted,
            claim,
            releasing: Instant::now(),
        }
    }

    fn push_term(&self, term: u64, start: Instant, led: Led, wait: Duration) {
        let Led {
            granted,
            claim,
            releasing,
        } = led;
        self.push_hold(Hold {
            client: self.id,
            workload: Workload::Election,
            mode: Mode::Exclusive,
            tokens: vec![(format!("election:{ELECTION}"), term)],
            start,
            granted,
            claim_end: claim.end,
            releasing,
            end: Instant::now(),
            key_life: ELECTION_LEASE,
            wait,
            cancelled: None,
            notes: claim.notes,
        });
    }

    /// One act of a leader: a fenced write under its term.
    fn act(&mut self, term: u64) -> Result<(), BoxError> {
        let term = i64::try_from(term)?;
        let client = self.id as i32;
        let mut tx = self.db.transaction()?;
        let fence = format!("election:{ELECTION}");
        if tx
            .query_opt(sql::ADVANCE_FENCE, &[&fence, &term])?
            .is_none()
        {
            self.ctx.history.count(|c| c.writes_refused += 1);
            return Ok(());
        }
        tx.execute(
            "INSERT INTO acts (term, client) VALUES ($1, $2)",
            &[&term, &client],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn run_once(&mut self) {
        let epoch = self.ctx.history.epoch;
        loop {
            let window = epoch.elapsed().as_millis() as u64 / RUN_WINDOW.as_millis() as u64 + 1;
            let jitter =
                Duration::from_millis(self.rng.random_range(0..=RUN_JITTER.as_millis() as u64));
            let fire = epoch + RUN_WINDOW * window as u32 + jitter;
            if fire >= self.ctx.until {
                return;
            }
            thread::sleep(fire.saturating_duration_since(Instant::now()));
            self.ctx.history.op(self.workload);
            self.run_job(window);
        }
    }

    fn run_job(&mut self, window: u64) {
        let options = LockOptions::new()
            .ttl(RUN_TTL)
            .hold_at_least(RUN_HOLD)
            .wait(Duration::ZERO);
        let start = Instant::now();
        let guard = match self.locks.lock_with(RUN_JOB, options) {
            Ok(g) => Guard::One(g),
            Err(e) => {
                let resources = [RUN_JOB.to_string()];
                return self.failed_call(&resources, start, Duration::ZERO, RUN_KEY_LIFE, &e);
            }
        };
        let granted = Instant::now();
        let tokens = guard.tokens();
        let token = tokens.first().map_or(0, |t| t.1);
        self.ctx.history.runs.lock().push(Run {
            window,
            client: self.id,
            token,
            granted,
        });
        let mut hold = HoldNotes::new(&guard, start, granted, Duration::ZERO);
        hold.key_life = RUN_KEY_LIFE;
        self.pause(50, 400);
        hold.release(guard, self);
    }

    pub fn failed_call(
        &self,
        resources: &[String],
        start: Instant,
        wait: Duration,
        life: Duration,
        e: &Error,
    ) {
        let error = self.ctx.history.count_error(e);
        if error == "other" {
            eprintln!("client {} ({}): {e}", self.id, self.workload.name());
        }
        self.ctx.history.calls.lock().push(Call {
            client: self.id,
            workload: self.workload,
            resources: resources.to_vec(),
            start,
            end: Instant::now(),
            wait,
            key_life: life,
            error,
            cancelled: None,
        });
    }

    pub fn push_hold(&self, hold: Hold) {
        self.ctx.history.count(|c| c.grants += 1);
        self.ctx.history.holds.lock().push(hold);
    }

    pub fn pause(&mut self, min_ms: u64, max_ms: u64) {
        let ms = self.rng.random_range(min_ms..=max_ms);
        thread::sleep(Duration::from_millis(ms));
    }

    /// A new database connection after an error; the old one may be
    /// broken. Bounded: a failure here is retried at the next error.
    pub fn reconnect(&mut self) {
        if let Ok(db) = Client::connect(&self.ctx.pg_url, NoTls) {
            self.db = db;
        }
    }
}

/// A term as its leader saw it: from the campaign's return to the
/// resignation.
struct Led {
    granted: Instant,
    claim: Claim,
    releasing: Instant,
}

/// The recipe's first statement (`sql::ADVANCE_FENCE`, or the
/// reader-writer lock's fence): `false` when a higher token was stored,
/// and the transaction must stop. The unfenced control run skips it.
fn fence_passes(
    tx: &mut postgres::Transaction<'_>,
    unfenced: bool,
    fence: Fence,
    resource: &str,
    token: i64,
) -> Result<bool, BoxError> {
    let statement = match fence {
        Fence::Lock => sql::ADVANCE_FENCE,
        Fence::RwRead => RW_READ_FENCE,
        Fence::RwWrite => RW_WRITE_FENCE,
    };
    Ok(unfenced || tx.query_opt(statement, &[&resource, &token])?.is_some())
}

/// A hold being recorded.
pub struct HoldNotes {
    pub mode: Mode,
    pub tokens: Vec<(String, u64)>,
    pub start: Instant,
    pub granted: Instant,
    pub claim: Claim,
    pub releasing: Instant,
    pub key_life: Duration,
    pub wait: Duration,
    pub cancelled: Option<Instant>,
}

impl HoldNotes {
    pub fn new(guard: &Guard, start: Instant, granted: Instant, wait: Duration) -> HoldNotes {
        let mut claim = Claim::new(granted);
        claim.note(guard.validity());
        HoldNotes {
            mode: guard.mode(),
            tokens: guard.tokens(),
            start,
            granted,
            claim,
            releasing: granted,
            key_life: TTL,
            wait,
            cancelled: None,
        }
    }

    /// The holder's last look at its validity, then its release, recorded.
    pub fn release(mut self, guard: Guard, worker: &Worker<'_>) {
        self.claim.note(guard.validity());
        self.releasing = Instant::now();
        guard.release();
        self.finish(worker);
    }

    pub fn finish(self, worker: &Worker<'_>) {
        worker.push_hold(Hold {
            client: worker.id,
            workload: worker.workload,
            mode: self.mode,
            tokens: self.tokens,
            start: self.start,
            granted: self.granted,
            claim_end: self.claim.end,
            releasing: self.releasing,
            end: Instant::now(),
            key_life: self.key_life,
            wait: self.wait,
            cancelled: self.cancelled,
            notes: self.claim.notes,
        });
    }
}
