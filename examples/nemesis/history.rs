//! What the run did, as it is recorded: every hold from its lock call to
//! its release with every validity its holder was told, every lock call,
//! every fault with what it did to each instance, every run-once job,
//! every lock key seen on an instance. All times are instants of the one
//! monotonic clock of this process, so holds of different clients compare
//! directly; `record.rs` turns them into the seconds the checker judges
//! and `history.jsonl` stores.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::args::Workload;
use crate::nemesis::Nemesis;

/// What kind of guard a hold was, as the checker judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A lock, a set or a leadership: one holder per resource.
    Exclusive,
    /// A semaphore's permit on the slot it said (`Permit::slot`): one
    /// holder per slot, and at most the count at once.
    Permit { slot: u32 },
    /// A reader-writer lock's read: shared with other reads.
    Read,
    /// A reader-writer lock's write: alone.
    Write,
}

/// One guard (lock, set, leadership, permit, read, write), from the call
/// that returned it to its release.
#[derive(Debug, Clone)]
pub struct Hold {
    pub client: usize,
    pub workload: Workload,
    pub mode: Mode,
    /// Each resource held, with its fencing token.
    pub tokens: Vec<(String, u64)>,
    /// The lock call began.
    pub start: Instant,
    /// The lock call returned the guard.
    pub granted: Instant,
    /// The latest instant the holder was told it holds: the largest
    /// `now + validity()` it read while `validity()` was positive.
    pub claim_end: Instant,
    /// The holder began to release: it no longer acts as the holder.
    pub releasing: Instant,
    /// The release returned (the guard is gone).
    pub end: Instant,
    /// The longest TTL (or hold) any request of this guard asked for: how
    /// long its keys may live after their last write.
    pub key_life: Duration,
    /// How long the lock call was allowed to wait.
    pub wait: Duration,
    /// When another thread cancelled the call (`Cancel::cancel`) while it
    /// was in flight, if it did.
    pub cancelled: Option<Instant>,
    /// Every look at `validity()` while it was positive: when, and the
    /// end it promised. A promise later than the one before means a grant
    /// or an extension was confirmed in between: the checker needs when,
    /// to tell which part of a belief rests on data a fault lost.
    pub notes: Vec<(Instant, Instant)>,
}

/// What a holder believes, as it reads it: call [`Claim::note`] with
/// `validity()` each time the holder checks.
#[derive(Debug, Clone)]
pub struct Claim {
    pub end: Instant,
    pub notes: Vec<(Instant, Instant)>,
}

impl Claim {
    pub fn new(granted: Instant) -> Claim {
        Claim {
            end: granted,
            notes: Vec::new(),
        }
    }

    /// Records that the holder was just told it holds for `validity` more.
    pub fn note(&mut self, validity: Duration) {
        if !validity.is_zero() {
            let now = Instant::now();
            self.end = self.end.max(now + validity);
            self.notes.push((now, now + validity));
        }
    }
}

/// A lock call that did not return a guard (refused, unavailable, lost to
/// a fault): what the liveness and orphan checks need.
#[derive(Debug, Clone)]
pub struct Call {
    pub client: usize,
    pub workload: Workload,
    /// Every resource whose keys its attempts may have written (a
    /// permit call: every slot).
    pub resources: Vec<String>,
    pub start: Instant,
    pub end: Instant,
    pub wait: Duration,
    pub key_life: Duration,
    /// How it failed: `contended`, `unavailable`, `cancelled` or `other`.
    pub error: &'static str,
    /// When another thread cancelled the call while it was in flight.
    pub cancelled: Option<Instant>,
}

/// How a fair lock call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairOutcome {
    /// It returned a guard (its hold is recorded too).
    Granted,
    /// `Skipped`: it was dropped from the queue for a late heartbeat.
    Skipped,
    /// `Contended`: its wait ran out (or a `try_lock` found a holder or a
    /// queue).
    Contended,
    Cancelled,
    Unavailable,
    Other,
}

impl FairOutcome {
    pub const ALL: [FairOutcome; 6] = [
        FairOutcome::Granted,
        FairOutcome::Skipped,
        FairOutcome::Contended,
        FairOutcome::Cancelled,
        FairOutcome::Unavailable,
        FairOutcome::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FairOutcome::Granted => "granted",
            FairOutcome::Skipped => "skipped",
            FairOutcome::Contended => "contended",
            FairOutcome::Cancelled => "cancelled",
            FairOutcome::Unavailable => "unavailable",
            FairOutcome::Other => "other",
        }
    }

    pub fn of(result: &Result<(), &redfence::Error>) -> FairOutcome {
        match result {
            Ok(()) => FairOutcome::Granted,
            Err(redfence::Error::Skipped { .. }) => FairOutcome::Skipped,
            Err(redfence::Error::Contended { .. }) => FairOutcome::Contended,
            Err(redfence::Error::Cancelled { .. }) => FairOutcome::Cancelled,
            Err(redfence::Error::Unavailable { .. }) => FairOutcome::Unavailable,
            Err(_) => FairOutcome::Other,
        }
    }
}

/// One fair lock call (the `fair` workload), with its place in line: what
/// the order check judges.
#[derive(Debug, Clone)]
pub struct FairCall {
    pub client: usize,
    pub resource: String,
    /// The call began, and returned (granted: the grant).
    pub start: Instant,
    pub end: Instant,
    /// Its ticket, when its join began and when a quorum of queues had it:
    /// `None` for a call granted in its first round, or that never joined
    /// (a `try_lock`, a refusal short of a quorum).
    pub join: Option<(u64, Instant, Instant)>,
    pub outcome: FairOutcome,
    /// The grant's token.
    pub token: Option<u64>,
    /// The client-pause nemesis paused it right after its join, from and
    /// to: a dead waiter (its heartbeats stopped) for that long.
    pub paused: Option<(Instant, Instant)>,
}

/// What an operator's `force_release` revoked, or found free: one record
/// per lock, per semaphore slot, and per revoked writer or reader of a
/// reader-writer lock (one call may make several, with its times).
#[derive(Debug, Clone)]
pub struct Unlock {
    pub client: usize,
    /// The lock's name, the slot's (`slot_resource`), or the reader-writer
    /// lock's.
    pub resource: String,
    pub role: UnlockRole,
    pub start: Instant,
    pub end: Instant,
    pub outcome: UnlockOutcome,
}

/// Which guards of `resource` an unlock record speaks of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnlockRole {
    /// A lock's holder (`Redlock::force_release`).
    Lock,
    /// A semaphore slot's holder (`Semaphore::force_release`).
    Permit,
    /// A reader-writer lock's writer, or one of its readers, that
    /// `RwLock::force_release` returned.
    Writer,
    Reader,
    /// A reader-writer lock's whole call when it returned no holder or
    /// failed: any reader or writer.
    Rw,
}

impl UnlockRole {
    pub const ALL: [UnlockRole; 5] = [
        UnlockRole::Lock,
        UnlockRole::Permit,
        UnlockRole::Writer,
        UnlockRole::Reader,
        UnlockRole::Rw,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnlockRole::Lock => "lock",
            UnlockRole::Permit => "permit",
            UnlockRole::Writer => "writer",
            UnlockRole::Reader => "reader",
            UnlockRole::Rw => "rw",
        }
    }

    /// Whether a guard of `mode` on the record's resource is one it
    /// speaks of.
    pub fn covers(self, mode: Mode) -> bool {
        match self {
            UnlockRole::Lock => mode == Mode::Exclusive,
            UnlockRole::Permit => matches!(mode, Mode::Permit { .. }),
            UnlockRole::Writer => mode == Mode::Write,
            UnlockRole::Reader => mode == Mode::Read,
            UnlockRole::Rw => matches!(mode, Mode::Read | Mode::Write),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnlockOutcome {
    /// `Ok(Some(holder))`: the holder (the client its identity names) was
    /// revoked on a quorum by the call's return.
    Revoked { holder: usize },
    /// `Ok(Some(holder))` with an identity no client of the run has.
    RevokedUnknown,
    /// `Ok(None)`: nothing held on a quorum, nothing deleted.
    Free,
    /// An error: fewer than a quorum answered the reading or the delete;
    /// some deletes may have landed, or land late.
    Failed,
}

/// Which call a storage operation made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvKind {
    /// `fenced_get`: a holder's (or a writer's) read.
    Get,
    /// `fenced_set`.
    Set,
    /// `fenced_get_shared`: a reader-writer lock's reader's read.
    GetShared,
}

impl KvKind {
    pub const ALL: [KvKind; 3] = [KvKind::Get, KvKind::Set, KvKind::GetShared];

    pub fn name(self) -> &'static str {
        match self {
            KvKind::Get => "get",
            KvKind::Set => "set",
            KvKind::GetShared => "get_shared",
        }
    }
}

/// One `fenced_get`, `fenced_set` or `fenced_get_shared` on the storage
/// server.
#[derive(Debug, Clone)]
pub struct KvOp {
    pub client: usize,
    pub key: String,
    pub token: u64,
    pub op: KvKind,
    pub start: Instant,
    pub end: Instant,
    /// Accepted (`Some(true)`), refused as stale (`Some(false)`), or no
    /// answer (`None`: the storage connection failed).
    pub accepted: Option<bool>,
    /// The value read (absent: 0), or written.
    pub value: i64,
}

/// One `clock_offsets()` or `doctor()` call made while every instance's
/// clock offset was known (`nemesis::Clocks`): settled, one generation,
/// from the call's start to its return.
#[derive(Debug, Clone)]
pub struct ClockCheck {
    pub client: usize,
    pub start: Instant,
    pub end: Instant,
    /// Milliseconds each instance's clock was ahead of the machine's.
    pub applied_ms: Vec<i64>,
    /// `clock_offsets()`: per instance (micros, uncertainty in micros), or
    /// `None` with no answer. Empty for a doctor's check.
    pub offsets: Vec<Option<(i64, u64)>>,
    /// `doctor()`: per instance, the severity of its `clock` finding
    /// (`error`, `warning`, `notice`), or `none` without one (no answer).
    /// Empty for an offsets check.
    pub doctor: Vec<String>,
}

/// One fault, from injection to healing.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub nemesis: Nemesis,
    pub instances: Vec<usize>,
    pub start: Instant,
    pub end: Instant,
    pub detail: String,
    /// What it did to each instance's data or clock, and when: only these
    /// can excuse two holders at once (see `checker::excuse`).
    pub effects: Vec<Effect>,
}

/// One act of a fault on one instance's keys.
#[derive(Debug, Clone, Copy)]
pub struct Effect {
    pub instance: usize,
    /// The server was killed (its data lost with it), or its clock stepped.
    pub at: Instant,
    pub kind: EffectKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EffectKind {
    /// Its keys were lost: all of them (`since: None`, a kill without
    /// persistence), or those written after a snapshot taken at `since`
    /// (a rollback: the keys of the snapshot come back).
    Loss { since: Option<Instant> },
    /// Its clock stepped by this many milliseconds: forward (positive)
    /// expires keys early, back (negative) only keeps them longer.
    Clock { by_ms: i64 },
}

/// One run of a scheduled once-only job.
#[derive(Debug, Clone)]
pub struct Run {
    pub window: u64,
    pub client: usize,
    pub token: u64,
    pub granted: Instant,
}

/// A lock key holding a client's value, read straight from an instance.
#[derive(Debug, Clone)]
pub struct Sighting {
    pub resource: String,
    pub instance: usize,
    pub client: usize,
    /// When the watcher's reading returned.
    pub at: Instant,
    /// When the reading was sent: the key's time to live was read between
    /// the two, so `sent + pttl` is the earliest its expiry can be.
    pub sent: Instant,
    /// The key's time to live then.
    pub pttl: Duration,
    /// A void key for the same value existed too.
    pub voided: bool,
    /// An entry of a reader-writer lock's readers (it blocks writes, not
    /// reads); a lock's, a slot's or a writer's key otherwise.
    pub reader: bool,
}

/// Everything recorded, shared by the run's threads.
pub struct History {
    pub epoch: Instant,
    /// The machine's wall clock at `epoch`, in microseconds since 1970:
    /// the clock of every instance whose clock no fault moved.
    pub epoch_wall_micros: u64,
    pub holds: Mutex<Vec<Hold>>,
    pub calls: Mutex<Vec<Call>>,
    pub faults: Mutex<Vec<FaultRecord>>,
    pub runs: Mutex<Vec<Run>>,
    pub sightings: Mutex<Vec<Sighting>>,
    pub unlocks: Mutex<Vec<Unlock>>,
    pub kv: Mutex<Vec<KvOp>>,
    pub clock_checks: Mutex<Vec<ClockCheck>>,
    pub fair: Mutex<Vec<FairCall>>,
    /// Operations attempted, errors seen (by kind), refused writes.
    pub ops: Mutex<Counters>,
}

#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub ops: u64,
    pub grants: u64,
    pub contended: u64,
    pub unavailable: u64,
    pub other_errors: u64,
    pub lost_before_write: u64,
    pub writes_refused: u64,
    /// Reads under a read guard that the store refused (a write with a
    /// higher token was accepted first).
    pub reads_refused: u64,
    pub stalls: u64,
    /// Fair waiters the client-pause nemesis paused past their heartbeat.
    pub waiter_pauses: u64,
    pub extends: u64,
    pub database_errors: u64,
    /// Lock calls cancelled in flight by another thread, and of those the
    /// ones that returned `Cancelled`.
    pub cancels: u64,
    pub cancelled: u64,
    /// Unlocks (`force_release`) by outcome: revoked a holder, found none,
    /// failed (the checker tells live holders from dead ones).
    pub unlocks_revoked: u64,
    pub unlocks_free: u64,
    pub unlocks_failed: u64,
    /// `fenced_get`/`fenced_set` calls on the storage server, and refused.
    pub kv_ops: u64,
    pub kv_refused: u64,
    /// Clock checks made, and those skipped because a clock was being
    /// stepped during the call.
    pub clock_checks: u64,
    pub clock_checks_skipped: u64,
    /// Other calls that send requests (`holder`, `ping`, `leader`, ...).
    pub probes: u64,
    /// Operations attempted, per workload.
    pub ops_by_workload: BTreeMap<&'static str, u64>,
}

impl History {
    pub fn new(epoch: Instant) -> History {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        History {
            epoch,
            epoch_wall_micros: wall.saturating_sub(epoch.elapsed().as_micros() as u64),
            holds: Mutex::new(Vec::new()),
            calls: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            runs: Mutex::new(Vec::new()),
            sightings: Mutex::new(Vec::new()),
            unlocks: Mutex::new(Vec::new()),
            kv: Mutex::new(Vec::new()),
            clock_checks: Mutex::new(Vec::new()),
            fair: Mutex::new(Vec::new()),
            ops: Mutex::new(Counters::default()),
        }
    }

    /// Seconds since the run started.
    pub fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.epoch).as_secs_f64()
    }

    pub fn count(&self, bump: impl FnOnce(&mut Counters)) {
        bump(&mut self.ops.lock());
    }

    /// Counts an operation of `workload` begun.
    pub fn op(&self, workload: Workload) {
        self.count(|c| {
            c.ops += 1;
            *c.ops_by_workload.entry(workload.name()).or_default() += 1;
        });
    }

    /// Counts a failed lock call by its error, and names the kind.
    pub fn count_error(&self, error: &redfence::Error) -> &'static str {
        self.count(|c| match error {
            redfence::Error::Contended { .. } => c.contended += 1,
            redfence::Error::Unavailable { .. } => c.unavailable += 1,
            redfence::Error::Cancelled { .. } => c.cancelled += 1,
            _ => c.other_errors += 1,
        });
        match error {
            redfence::Error::Contended { .. } => "contended",
            redfence::Error::Unavailable { .. } => "unavailable",
            redfence::Error::Cancelled { .. } => "cancelled",
            _ => "other",
        }
    }
}
