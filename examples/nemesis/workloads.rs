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

use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use redfence::{sql, Error, LockGuard, LockOptions, MultiGuard, Redlock};

use crate::args::Workload;
use crate::history::{Call, Claim, History, Hold, Run};
use crate::nemesis::Stalls;
use crate::{
    ELECTION, ELECTION_LEASE, EXTEND_MAX, INSTANCE_TIMEOUT, REGISTERS, RUN_HOLD, RUN_JITTER,
    RUN_JOB, RUN_TTL, RUN_WINDOW, TTL, WAIT,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What every client shares.
pub struct Ctx<'a> {
    pub history: &'a History,
    pub stalls: &'a Stalls,
    pub urls: Vec<String>,
    pub pg_url: String,
    pub unfenced: bool,
    /// Clients start no operation after this.
    pub until: Instant,
}

/// The identity client `id` locks with: the watcher tells whose a lock
/// key is by it.
pub fn identity(id: usize) -> String {
    format!("nemesis-c{id}")
}

/// The tables the workloads write: a counter per register, every accepted
/// write and every accepted act, in commit order.
pub const SCHEMA: &str = "
    CREATE TABLE counters (resource text PRIMARY KEY, value bigint NOT NULL);
    CREATE TABLE writes (id bigserial PRIMARY KEY, resource text NOT NULL,
        token bigint NOT NULL, client int NOT NULL, read bigint NOT NULL);
    CREATE TABLE acts (id bigserial PRIMARY KEY, term bigint NOT NULL, client int NOT NULL);";

struct Worker<'a> {
    ctx: &'a Ctx<'a>,
    id: usize,
    workload: Workload,
    locks: Redlock,
    db: Client,
    rng: StdRng,
}

/// Runs client `id` until the run's end. An error means it could not
/// start (no client, no database).
pub fn run(ctx: &Ctx<'_>, id: usize, workload: Workload, seed: u64) -> Result<(), BoxError> {
    let locks = Redlock::builder(ctx.urls.clone())
        .identity(identity(id))
        .instance_timeout(INSTANCE_TIMEOUT)
        .build()?;
    let db = Client::connect(&ctx.pg_url, NoTls)?;
    let rng = StdRng::seed_from_u64(seed.wrapping_add(id as u64 * 0x9e37_79b9));
    let mut worker = Worker {
        ctx,
        id,
        workload,
        locks,
        db,
        rng,
    };
    match workload {
        Workload::Register | Workload::Multi => worker.registers(),
        Workload::Election => worker.elections()?,
        Workload::RunOnce => worker.run_once(),
    }
    Ok(())
}

/// A single lock or a set, with what the workload needs of both.
enum Guard {
    One(LockGuard),
    Set(MultiGuard),
}

impl Guard {
    fn validity(&self) -> Duration {
        match self {
            Guard::One(g) => g.validity(),
            Guard::Set(g) => g.validity(),
        }
    }

    fn extend(&self, ttl: Duration) -> Result<(), Error> {
        match self {
            Guard::One(g) => g.extend(ttl),
            Guard::Set(g) => g.extend(ttl),
        }
    }

    fn tokens(&self) -> Vec<(String, u64)> {
        match self {
            Guard::One(g) => vec![(g.resource().to_string(), g.token().get())],
            Guard::Set(g) => g
                .resources()
                .filter_map(|r| g.token(r).map(|t| (r.to_string(), t.get())))
                .collect(),
        }
    }

    fn release(self) {
        // A release that fails (the lease was lost, instances down) is
        // what the faults are for: the history has what matters.
        let _ = match self {
            Guard::One(g) => g.release(),
            Guard::Set(g) => g.release(),
        };
    }
}

impl Worker<'_> {
    fn registers(&mut self) {
        while Instant::now() < self.ctx.until {
            self.ctx.history.count(|c| c.ops += 1);
            let resources = self.pick_registers();
            if let Err(e) = self.increment(&resources) {
                self.ctx.history.count(|c| c.database_errors += 1);
                eprintln!("client {}: {e}", self.id);
                self.reconnect();
            }
            self.pause(0, 100);
        }
    }

    fn pick_registers(&mut self) -> Vec<&'static str> {
        let k = if self.workload == Workload::Multi {
            2
        } else {
            1
        };
        let picked = sample(&mut self.rng, REGISTERS.len(), k);
        picked.iter().map(|i| REGISTERS[i]).collect()
    }

    /// One read-modify-write under the lock; `Err` only for the database.
    fn increment(&mut self, resources: &[&'static str]) -> Result<(), BoxError> {
        let stall = self.ctx.stalls.take();
        // A stalling holder has no watchdog: its lease runs out while it
        // stalls, as a paused process's would.
        // Some holders work in steps and extend the lease themselves before
        // each, as a batch job does; of the others, most have the watchdog.
        let steps = if self.rng.random_bool(0.6) {
            self.rng.random_range(1..=4)
        } else {
            0
        };
        let auto = !stall && steps == 0 && self.rng.random_bool(0.7);
        // Some callers try once and move on (`try_lock`).
        let wait = if self.rng.random_bool(0.3) {
            Duration::ZERO
        } else {
            WAIT
        };
        let options = LockOptions::new().ttl(TTL).wait(wait).auto_extend(auto);
        let start = Instant::now();
        let taken = if let [one] = resources {
            self.locks.lock_with(one, options).map(Guard::One)
        } else {
            self.locks.lock_all_with(resources, options).map(Guard::Set)
        };
        let guard = match taken {
            Ok(g) => g,
            Err(e) => {
                self.failed_call(resources, start, wait, TTL, &e);
                return Ok(());
            }
        };
        let granted = Instant::now();
        let mut hold = HoldNotes::new(&guard, start, granted, wait);
        let result = self.modify(&guard, &mut hold, stall, steps);
        hold.claim.note(guard.validity());
        hold.releasing = Instant::now();
        guard.release();
        hold.finish(self);
        result
    }

    fn modify(
        &mut self,
        guard: &Guard,
        hold: &mut HoldNotes,
        stall: bool,
        steps: u32,
    ) -> Result<(), BoxError> {
        let mut read = Vec::new();
        for (resource, token) in guard.tokens() {
            match self.fenced_read(&resource, token)? {
                Some(value) => read.push((resource, token, value)),
                None => {
                    self.ctx.history.count(|c| c.writes_refused += 1);
                    return Ok(());
                }
            }
        }
        self.pause(0, 150);
        self.work_in_steps(guard, hold, steps);
        hold.claim.note(guard.validity());
        if guard.validity().is_zero() {
            self.ctx.history.count(|c| c.lost_before_write += 1);
            return Ok(());
        }
        if stall {
            // Between the check and the write, as a GC pause would: past
            // the lease and every extension's TTL.
            self.ctx.history.count(|c| c.stalls += 1);
            thread::sleep(hold.key_life + Duration::from_millis(500));
        }
        for (resource, token, value) in read {
            if !self.fenced_write(&resource, token, value)? {
                self.ctx.history.count(|c| c.writes_refused += 1);
            }
        }
        Ok(())
    }

    /// Works in steps, extending before each by what the step needs
    /// (300 ms to 1.5 s) and, when too few instances answered, asking again
    /// at once for twice that and more.
    fn work_in_steps(&mut self, guard: &Guard, hold: &mut HoldNotes, steps: u32) {
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
        let result = guard.extend(ttl);
        hold.claim.note(guard.validity());
        result
    }

    /// The fenced read: the fence first (refused: `None`), then the value,
    /// in one transaction.
    fn fenced_read(&mut self, resource: &str, token: u64) -> Result<Option<i64>, BoxError> {
        let token = i64::try_from(token)?;
        let unfenced = self.ctx.unfenced;
        let mut tx = self.db.transaction()?;
        if !fence_passes(&mut tx, unfenced, resource, token)? {
            return Ok(None);
        }
        let row = tx.query_one(
            "SELECT value FROM counters WHERE resource = $1",
            &[&resource],
        )?;
        tx.commit()?;
        Ok(Some(row.get(0)))
    }

    /// The fenced write of `read + 1`; `false` when the fence refused it.
    fn fenced_write(&mut self, resource: &str, token: u64, read: i64) -> Result<bool, BoxError> {
        let token = i64::try_from(token)?;
        let client = self.id as i32;
        let unfenced = self.ctx.unfenced;
        let mut tx = self.db.transaction()?;
        if !fence_passes(&mut tx, unfenced, resource, token)? {
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

    fn elections(&mut self) -> Result<(), BoxError> {
        let election = self.locks.election(ELECTION)?.lease(ELECTION_LEASE);
        while Instant::now() < self.ctx.until {
            self.ctx.history.count(|c| c.ops += 1);
            let start = Instant::now();
            let leadership = match election.campaign_for(WAIT) {
                Ok(l) => l,
                Err(e) => {
                    let resource = format!("election:{ELECTION}");
                    self.failed_call(&[&resource], start, WAIT, ELECTION_LEASE, &e);
                    continue;
                }
            };
            let granted = Instant::now();
            let mut claim = Claim::new(granted);
            let term = leadership.term().get();
            let lead_for = Duration::from_millis(self.rng.random_range(300..=2500));
            while granted.elapsed() < lead_for && leadership.is_leader() {
                claim.note(leadership.validity());
                if let Err(e) = self.act(term) {
                    self.ctx.history.count(|c| c.database_errors += 1);
                    eprintln!("client {}: {e}", self.id);
                    self.reconnect();
                }
                self.pause(50, 150);
            }
            claim.note(leadership.validity());
            let releasing = Instant::now();
            let _ = leadership.resign();
            self.push_hold(Hold {
                client: self.id,
                workload: Workload::Election,
                tokens: vec![(format!("election:{ELECTION}"), term)],
                start,
                granted,
                claim_end: claim.end,
                releasing,
                end: Instant::now(),
                key_life: ELECTION_LEASE,
                wait: WAIT,
            });
        }
        Ok(())
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
            self.ctx.history.count(|c| c.ops += 1);
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
            Err(e) => return self.failed_call(&[RUN_JOB], start, Duration::ZERO, RUN_HOLD, &e),
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
        hold.key_life = RUN_HOLD;
        self.pause(50, 400);
        hold.claim.note(guard.validity());
        hold.releasing = Instant::now();
        guard.release();
        hold.finish(self);
    }

    fn failed_call(
        &self,
        resources: &[&str],
        start: Instant,
        wait: Duration,
        life: Duration,
        e: &Error,
    ) {
        self.ctx.history.count_error(e);
        self.ctx.history.calls.lock().push(Call {
            client: self.id,
            resources: resources.iter().map(|r| r.to_string()).collect(),
            start,
            end: Instant::now(),
            wait,
            key_life: life,
        });
    }

    fn push_hold(&self, hold: Hold) {
        self.ctx.history.count(|c| c.grants += 1);
        self.ctx.history.holds.lock().push(hold);
    }

    fn pause(&mut self, min_ms: u64, max_ms: u64) {
        let ms = self.rng.random_range(min_ms..=max_ms);
        thread::sleep(Duration::from_millis(ms));
    }

    /// A new database connection after an error; the old one may be
    /// broken. Bounded: a failure here is retried at the next error.
    fn reconnect(&mut self) {
        if let Ok(db) = Client::connect(&self.ctx.pg_url, NoTls) {
            self.db = db;
        }
    }
}

/// The recipe's first statement (`sql::ADVANCE_FENCE`): `false` when a
/// higher token was stored, and the transaction must stop. The unfenced
/// control run skips it.
fn fence_passes(
    tx: &mut postgres::Transaction<'_>,
    unfenced: bool,
    resource: &str,
    token: i64,
) -> Result<bool, BoxError> {
    Ok(unfenced
        || tx
            .query_opt(sql::ADVANCE_FENCE, &[&resource, &token])?
            .is_some())
}

/// A hold being recorded.
struct HoldNotes {
    tokens: Vec<(String, u64)>,
    start: Instant,
    granted: Instant,
    claim: Claim,
    releasing: Instant,
    key_life: Duration,
    wait: Duration,
}

impl HoldNotes {
    fn new(guard: &Guard, start: Instant, granted: Instant, wait: Duration) -> HoldNotes {
        let mut claim = Claim::new(granted);
        claim.note(guard.validity());
        HoldNotes {
            tokens: guard.tokens(),
            start,
            granted,
            claim,
            releasing: granted,
            key_life: TTL,
            wait,
        }
    }

    fn finish(self, worker: &Worker<'_>) {
        worker.push_hold(Hold {
            client: worker.id,
            workload: worker.workload,
            tokens: self.tokens,
            start: self.start,
            granted: self.granted,
            claim_end: self.claim.end,
            releasing: self.releasing,
            end: Instant::now(),
            key_life: self.key_life,
            wait: self.wait,
        });
    }
}
