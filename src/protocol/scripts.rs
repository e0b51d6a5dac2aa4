//! The Lua scripts, hashed once and sent with EVALSHA, and one typed packer
//! per script: the only place their keys and arguments are laid out (each
//! script's header names its packer). Every script reads and writes only
//! state that stays right when the request lands late, twice, or after
//! later ones: what they execute is modelled in `tests/model_*.rs` (the
//! table in docs/protocol.md, "What is checked").

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;

use crate::protocol::keys::{Access, FairQueue, Keys, Kind, PermitCount, RwCall, RwKeys, Target};

const ACQUIRE_SOURCE: &str = include_str!("../../lua/acquire.lua");
const RELEASE_SOURCE: &str = include_str!("../../lua/release.lua");
const EXTEND_SOURCE: &str = include_str!("../../lua/extend.lua");
const FENCE_RAISE_SOURCE: &str = include_str!("../../lua/fence_raise.lua");
const HOLDER_SOURCE: &str = include_str!("../../lua/holder.lua");
const RELEASE_HOLD_SOURCE: &str = include_str!("../../lua/release_hold.lua");
const TERM_SOURCE: &str = include_str!("../../lua/term.lua");
const SEMAPHORE_SLOTS_SOURCE: &str = include_str!("../../lua/semaphore_slots.lua");
const RW_ACQUIRE_SOURCE: &str = include_str!("../../lua/rw_acquire.lua");
const RW_RELEASE_SOURCE: &str = include_str!("../../lua/rw_release.lua");
const RW_EXTEND_SOURCE: &str = include_str!("../../lua/rw_extend.lua");
const FORCE_RELEASE_SOURCE: &str = include_str!("../../lua/force_release.lua");
const RW_WITHDRAW_SOURCE: &str = include_str!("../../lua/rw_withdraw.lua");
const RW_HOLDERS_SOURCE: &str = include_str!("../../lua/rw_holders.lua");
const RW_FORCE_RELEASE_SOURCE: &str = include_str!("../../lua/rw_force_release.lua");
/// `lua/permit_acquire.lua` after `lua/acquire.lua`, wrapped as the
/// function it calls: one script, so the count check and the slot's
/// acquire run at once, and the acquire's rules stay in one file.
const PERMIT_ACQUIRE_SOURCE: &str = concat!(
    "local function acquire()\n",
    include_str!("../../lua/acquire.lua"),
    "\nend\n",
    include_str!("../../lua/permit_acquire.lua"),
);
/// `lua/fair_gate.lua` after `lua/acquire.lua`, wrapped as the function it
/// calls: a fair lock's queue gates the lock's own acquire, written once.
const FAIR_ACQUIRE_SOURCE: &str = concat!(
    "local function acquire()\n",
    include_str!("../../lua/acquire.lua"),
    "\nend\n",
    include_str!("../../lua/fair_gate.lua"),
);
const FAIR_ENQUEUE_SOURCE: &str = include_str!("../../lua/fair_enqueue.lua");
const SEMAPHORE_RECOUNT_SOURCE: &str = include_str!("../../lua/semaphore_recount.lua");
/// `lua/permit_extend.lua` after `lua/extend.lua`, wrapped as the function
/// it calls.
const PERMIT_EXTEND_SOURCE: &str = concat!(
    "local function extend()\n",
    include_str!("../../lua/extend.lua"),
    "\nend\n",
    include_str!("../../lua/permit_extend.lua"),
);

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SOURCE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SOURCE));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_SOURCE));
static FENCE_RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(FENCE_RAISE_SOURCE));
static HOLDER: LazyLock<Script> = LazyLock::new(|| Script::new(HOLDER_SOURCE));
static TERM: LazyLock<Script> = LazyLock::new(|| Script::new(TERM_SOURCE));
static RELEASE_HOLD: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_HOLD_SOURCE));
static SEMAPHORE_SLOTS: LazyLock<Script> = LazyLock::new(|| Script::new(SEMAPHORE_SLOTS_SOURCE));
static RW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_ACQUIRE_SOURCE));
static RW_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_RELEASE_SOURCE));
static RW_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(RW_EXTEND_SOURCE));
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(FORCE_RELEASE_SOURCE));
static RW_WITHDRAW: LazyLock<Script> = LazyLock::new(|| Script::new(RW_WITHDRAW_SOURCE));
static RW_HOLDERS: LazyLock<Script> = LazyLock::new(|| Script::new(RW_HOLDERS_SOURCE));
static RW_FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_FORCE_RELEASE_SOURCE));
static PERMIT_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_ACQUIRE_SOURCE));
static PERMIT_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_EXTEND_SOURCE));
static FAIR_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(FAIR_ACQUIRE_SOURCE));
static FAIR_ENQUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(FAIR_ENQUEUE_SOURCE));
static SEMAPHORE_RECOUNT: LazyLock<Script> =
    LazyLock::new(|| Script::new(SEMAPHORE_RECOUNT_SOURCE));

/// Sources of every script a worker connection preloads.
pub(crate) const ALL_SOURCES: [&str; 20] = [
    TERM_SOURCE,
    ACQUIRE_SOURCE,
    RELEASE_SOURCE,
    EXTEND_SOURCE,
    FENCE_RAISE_SOURCE,
    HOLDER_SOURCE,
    RELEASE_HOLD_SOURCE,
    SEMAPHORE_SLOTS_SOURCE,
    RW_ACQUIRE_SOURCE,
    RW_RELEASE_SOURCE,
    RW_EXTEND_SOURCE,
    FORCE_RELEASE_SOURCE,
    RW_WITHDRAW_SOURCE,
    RW_HOLDERS_SOURCE,
    RW_FORCE_RELEASE_SOURCE,
    PERMIT_ACQUIRE_SOURCE,
    SEMAPHORE_RECOUNT_SOURCE,
    PERMIT_EXTEND_SOURCE,
    FAIR_ACQUIRE_SOURCE,
    FAIR_ENQUEUE_SOURCE,
];

/// How far ahead of an instance's clock the acquire script accepts the
/// client's proposal for a new token, in microseconds (`EPS` in
/// `lua/acquire.lua`). Tokens run at most this far ahead of the instances'
/// clocks: a counter lost and recreated sooner than this (plus the offset
/// between instance clocks) after a grant may repeat a token.
pub(crate) const PROPOSAL_WINDOW_MICROS: u64 = 5000;

/// How far ahead of its latest reading of the instance clocks the client
/// proposes: the proposal reaches an instance a little later than it was
/// made, so it aims at 3 ms ahead and is taken by every instance it reaches
/// within 3 ms, whose clock lags the latest by at most 2 ms.
pub(crate) const PROPOSAL_LEAD_MICROS: u64 = 3000;

/// How far ahead of its own clock a counter adopts a token in a raise round
/// (`MAX_AHEAD` in `lua/fence_raise.lua`): every token handed out lies
/// within this of the clock of each instance of its quorum, so a counter
/// lost and recreated more than this after a grant counts above it, even if
/// another instance's clock ran ahead at that grant. Also the largest offset
/// between instance clocks that raise rounds tolerate.
pub(crate) const MAX_AHEAD_MICROS: u64 = 1_000_000;

// A proposal ahead of the window would never be taken.
const _: () = assert!(PROPOSAL_WINDOW_MICROS < MAX_AHEAD_MICROS);

const _: () = assert!(PROPOSAL_LEAD_MICROS < PROPOSAL_WINDOW_MICROS);

/// An EVALSHA command packed once, shared by every instance's worker.
fn packed(script: &Script, keys: &[&str], args: &[&[u8]]) -> Arc<[u8]> {
    eval(script, keys, args).get_packed_command().into()
}

fn eval(script: &Script, keys: &[&str], args: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// A semaphore's count check and free-slot list: its permits record, then
/// the lock key of each of its `permits` slots.
pub(crate) fn semaphore_slots(
    prefix: &str,
    name: &str,
    permits: u32,
    record_ttl: Duration,
) -> Arc<[u8]> {
    on_record(
        &SEMAPHORE_SLOTS,
        prefix,
        name,
        (permits, permits),
        record_ttl,
    )
}

/// `lua/semaphore_recount.lua`: the record of semaphore `name` set to
/// `permits` where none of the first `slots` slots is held.
pub(crate) fn semaphore_recount(
    prefix: &str,
    name: &str,
    permits: u32,
    slots: u32,
    record_ttl: Duration,
) -> Arc<[u8]> {
    on_record(
        &SEMAPHORE_RECOUNT,
        prefix,
        name,
        (permits, slots),
        record_ttl,
    )
}

/// A script on a semaphore's record and its first `slots` slots, given
/// the count and the record's life.
fn on_record(
    script: &Script,
    prefix: &str,
    name: &str,
    (permits, slots): (u32, u32),
    record_ttl: Duration,
) -> Arc<[u8]> {
    let keys = record_and_slots(prefix, name, slots);
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let ttl_ms = record_ttl.as_millis().max(1).to_string();
    let count = permits.to_string();
    packed(script, &keys, &[count.as_bytes(), ttl_ms.as_bytes()])
}

/// A semaphore's permits record, then the lock key of each of its first
/// `slots` slots.
fn record_and_slots(prefix: &str, name: &str, slots: u32) -> Vec<String> {
    let record = crate::protocol::keys::permits_record(prefix, name);
    let locks = (0..slots).map(|slot| Keys::permit(prefix, name, slot).lock);
    std::iter::once(record).chain(locks).collect()
}

/// The acquire script of a lease, by the target's kind.
pub(crate) fn acquire(
    target: &Target,
    value: &str,
    ttl: Duration,
    idle: Duration,
    proposal: u64,
) -> Arc<[u8]> {
    match &target.kind {
        Kind::Lock | Kind::Set | Kind::Permit { count: None, .. } => {
            lock_acquire(target, value, ttl, idle, proposal)
        }
        Kind::Permit {
            count: Some(count), ..
        } => permit_acquire(target, count, value, ttl, idle, proposal),
        Kind::Rw(rw) => rw_acquire(target, rw, value, ttl, idle, proposal),
        Kind::Fair(fair) => fair_acquire(target, fair, value, (ttl, idle), proposal),
    }
}

/// `lua/acquire.lua`: lock and fence keys in pairs, then the attempt's
/// void key.
fn lock_acquire(
    target: &Target,
    value: &str,
    ttl: Duration,
    idle: Duration,
    proposal: u64,
) -> Arc<[u8]> {
    let void = target.void_key(value);
    let keys: Vec<&str> = target
        .members
        .iter()
        .flat_map(|m| [m.keys.lock.as_str(), m.keys.fence.as_str()])
        .chain([void.as_str()])
        .collect();
    let (ttl_ms, idle_ms, proposal) = (
        ttl.as_millis().to_string(),
        idle.as_millis().to_string(),
        proposal.to_string(),
    );
    packed(
        &ACQUIRE,
        &keys,
        &[
            value.as_bytes(),
            ttl_ms.as_bytes(),
            idle_ms.as_bytes(),
            proposal.as_bytes(),
        ],
    )
}

/// `lua/permit_acquire.lua`: a semaphore's slot taken as a lock is, where
/// the record holds the caller's count. The record lives the counter idle
/// time, and never less than the slot's keys.
fn permit_acquire(
    target: &Target,
    count: &PermitCount,
    value: &str,
    ttl: Duration,
    idle: Duration,
    proposal: u64,
) -> Arc<[u8]> {
    let keys = &target.members[0].keys;
    let void = target.void_key(value);
    let lock_keys = [keys.lock.as_str(), keys.fence.as_str(), void.as_str()];
    let record_ttl = idle.max(ttl);
    let (ttl_ms, idle_ms, proposal, permits, record_ms) = (
        ttl.as_millis().to_string(),
        idle.as_millis().to_string(),
        proposal.to_string(),
        count.permits.to_string(),
        record_ttl.as_millis().to_string(),
    );
    let all_keys: Vec<&str> = lock_keys
        .into_iter()
        .chain([count.record.as_str()])
        .collect();
    packed(
        &PERMIT_ACQUIRE,
        &all_keys,
        &[
            value.as_bytes(),
            ttl_ms.as_bytes(),
            idle_ms.as_bytes(),
            proposal.as_bytes(),
            permits.as_bytes(),
            record_ms.as_bytes(),
        ],
    )
}

/// `lua/fair_gate.lua` around `lua/acquire.lua`: a fair lock's ticket
/// round or a queued waiter's attempt (its heartbeat too).
fn fair_acquire(
    target: &Target,
    fair: &FairQueue,
    value: &str,
    (ttl, idle): (Duration, Duration),
    proposal: u64,
) -> Arc<[u8]> {
    let keys = &target.members[0].keys;
    let void = target.void_key(value);
    let (ttl_ms, idle_ms, proposal, beat_ms) = (
        ttl.as_millis().to_string(),
        idle.as_millis().to_string(),
        proposal.to_string(),
        fair.beat.as_millis().max(1).to_string(),
    );
    let mode: &[u8] = if fair.ticket_round { b"t" } else { b"a" };
    packed(
        &FAIR_ACQUIRE,
        &[
            &keys.lock,
            &keys.fence,
            &void,
            &fair.queue,
            &fair.alive,
            &fair.tickets,
        ],
        &[
            value.as_bytes(),
            ttl_ms.as_bytes(),
            idle_ms.as_bytes(),
            proposal.as_bytes(),
            fair.call.as_bytes(),
            beat_ms.as_bytes(),
            mode,
        ],
    )
}

/// `lua/fair_enqueue.lua`: a fair lock's waiter joins the queue with
/// `ticket`, or leaves it (`ticket` 0).
pub(crate) fn fair_enqueue(fair: &FairQueue, ticket: u64, idle: Duration) -> Arc<[u8]> {
    let (ticket, beat_ms, idle_ms) = (
        ticket.to_string(),
        fair.beat.as_millis().max(1).to_string(),
        idle.as_millis().max(1).to_string(),
    );
    packed(
        &FAIR_ENQUEUE,
        &[&fair.queue, &fair.alive, &fair.tickets],
        &[
            fair.call.as_bytes(),
            ticket.as_bytes(),
            beat_ms.as_bytes(),
            idle_ms.as_bytes(),
        ],
    )
}

/// `lua/rw_acquire.lua`: a read or a write of a reader-writer lock.
fn rw_acquire(
    target: &Target,
    rw: &RwCall,
    value: &str,
    ttl: Duration,
    idle: Duration,
    proposal: u64,
) -> Arc<[u8]> {
    let keys = &target.members[0].keys;
    let void = target.void_key(value);
    let (ttl_ms, idle_ms, proposal) = (
        ttl.as_millis().to_string(),
        idle.as_millis().to_string(),
        proposal.to_string(),
    );
    // A refused writer marks its wait for the rest of it, at most a TTL.
    let (mode, mark): (&[u8], _) = match rw.access {
        Access::Read => (b"r", Duration::ZERO),
        Access::Write { wait_until } => (
            b"w",
            wait_until
                .saturating_duration_since(std::time::Instant::now())
                .min(ttl),
        ),
    };
    let mark_ms = mark.as_millis().to_string();
    let RwKeys { readers, intent } = &rw.keys;
    packed(
        &RW_ACQUIRE,
        &[&keys.lock, readers, intent, &keys.fence, &void],
        &[
            value.as_bytes(),
            ttl_ms.as_bytes(),
            idle_ms.as_bytes(),
            proposal.as_bytes(),
            mode,
            rw.call.as_bytes(),
            mark_ms.as_bytes(),
        ],
    )
}

/// Compare-and-delete of a lease's lock keys, leaving the void key where a
/// key was not ours (the acquire may still land there), or everywhere with
/// `void_always`. `ttl` is the lease's TTL: how long the void key stays.
fn release_cmd(target: &Target, value: &str, ttl: Duration, void_always: bool) -> redis::Cmd {
    let void = target.void_key(value);
    let ttl_ms = ttl.as_millis().max(1).to_string();
    let always: &[u8] = if void_always { b"1" } else { b"0" };
    match &target.kind {
        Kind::Lock | Kind::Set | Kind::Permit { .. } | Kind::Fair(_) => {
            let keys: Vec<&str> = target
                .lock_keys()
                .into_iter()
                .chain([void.as_str()])
                .collect();
            eval(
                &RELEASE,
                &keys,
                &[value.as_bytes(), ttl_ms.as_bytes(), always],
            )
        }
        Kind::Rw(rw) => {
            let writer = &target.members[0].keys.lock;
            eval(
                &RW_RELEASE,
                &[writer, &rw.keys.readers, &rw.keys.intent, &void],
                &[
                    value.as_bytes(),
                    ttl_ms.as_bytes(),
                    always,
                    rw.call.as_bytes(),
                ],
            )
        }
    }
}

/// How a failed attempt cleans up: it voids the attempt on every instance
/// it reaches, since a second copy of the acquire (a resend after a reset)
/// may land after it (`tests/model_lease.rs`). Nobody waits for a lock that
/// was never granted, so nothing is announced.
pub(crate) fn release(target: &Target, value: &str, ttl: Duration) -> Arc<[u8]> {
    release_cmd(target, value, ttl, true)
        .get_packed_command()
        .into()
}

/// The release of a lease that must stay held until `hold` from now
/// ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)):
/// compare-and-set of each key's expiry, only where it still holds our
/// value. Nothing is announced: nothing is released yet.
pub(crate) fn release_hold(
    target: &Target,
    value: &str,
    ttl: Duration,
    hold: Duration,
) -> Arc<[u8]> {
    let void = target.void_key(value);
    let keys: Vec<&str> = target
        .lock_keys()
        .into_iter()
        .chain([void.as_str()])
        .collect();
    let ttl_ms = ttl.as_millis().max(1).to_string();
    let hold_ms = hold.as_millis().max(1).to_string();
    packed(
        &RELEASE_HOLD,
        &keys,
        &[value.as_bytes(), ttl_ms.as_bytes(), hold_ms.as_bytes()],
    )
}

/// A holder's release: compare-and-delete, then a native `PUBLISH` of
/// `announcement` on each member's release channel to wake waiters;
/// `commands` of them in all.
/// The announcement goes out even where a key was already gone; a waiter
/// woken for nothing tries once and waits again, which is cheaper than a
/// `redis.call` inside the script on every release.
pub(crate) fn release_and_announce(
    target: &Target,
    value: &str,
    ttl: Duration,
    announcement: &[u8],
    sharded: bool,
) -> (Arc<[u8]>, usize) {
    let release = release_cmd(target, value, ttl, false);
    announced(release, target, announcement, sharded)
}

/// The undo of a grant whose call was cancelled: a failed attempt's
/// clean-up ([`release`]: compare-and-delete, the attempt voided
/// everywhere), then the announcement that wakes waiters it refused.
pub(crate) fn undo_and_announce(
    target: &Target,
    value: &str,
    ttl: Duration,
    announcement: &[u8],
    sharded: bool,
) -> (Arc<[u8]>, usize) {
    let undo = release_cmd(target, value, ttl, true);
    announced(undo, target, announcement, sharded)
}

/// `release` in one pipeline with `announcement` on each member's
/// release channel; the number of commands.
fn announced(
    release: redis::Cmd,
    target: &Target,
    announcement: &[u8],
    sharded: bool,
) -> (Arc<[u8]>, usize) {
    let mut pipe = redis::pipe();
    pipe.add_command(release);
    for member in &target.members {
        pipe.cmd(announce_command(sharded))
            .arg(&member.keys.channel)
            .arg(announcement);
    }
    (pipe.get_packed_pipeline().into(), 1 + target.members.len())
}

/// `lua/extend.lua` on a lease's lock keys: each key's expiry moved to
/// `ttl` from now, never earlier, where it still holds `value`.
pub(crate) fn extend(target: &Target, value: &str, ttl: Duration) -> Arc<[u8]> {
    let ttl_ms = ttl.as_millis().to_string();
    match &target.kind {
        Kind::Lock | Kind::Set | Kind::Permit { count: None, .. } | Kind::Fair(_) => packed(
            &EXTEND,
            &target.lock_keys(),
            &[value.as_bytes(), ttl_ms.as_bytes()],
        ),
        Kind::Permit {
            count: Some(count), ..
        } => {
            // The record outlives the lock it was counted for.
            let record_ms = count.idle.max(ttl).as_millis().to_string();
            let keys = [target.members[0].keys.lock.as_str(), count.record.as_str()];
            packed(
                &PERMIT_EXTEND,
                &keys,
                &[value.as_bytes(), ttl_ms.as_bytes(), record_ms.as_bytes()],
            )
        }
        Kind::Rw(rw) => {
            let writer = &target.members[0].keys.lock;
            packed(
                &RW_EXTEND,
                &[writer, &rw.keys.readers],
                &[value.as_bytes(), ttl_ms.as_bytes()],
            )
        }
    }
}

/// A raise round (`lua/fence_raise.lua`): one script per member of a
/// target of `kind`, in one request, each taking the member's counter up
/// to its token where the lock still holds `value`.
pub(crate) fn raise(
    kind: &Kind,
    lagging: &[(&Keys, u64)],
    value: &str,
    idle: Duration,
) -> Arc<[u8]> {
    // A reader of an rw lock holds through its entry in the readers.
    let readers = match kind {
        Kind::Lock | Kind::Set | Kind::Permit { .. } | Kind::Fair(_) => None,
        Kind::Rw(rw) => Some(rw.keys.readers.as_str()),
    };
    let idle_ms = idle.as_millis().to_string();
    let mut bytes = Vec::new();
    for (keys, token) in lagging {
        let token = token.to_string();
        let mut keys = vec![keys.lock.as_str(), keys.fence.as_str()];
        keys.extend(readers);
        bytes.extend_from_slice(&packed(
            &FENCE_RAISE,
            &keys,
            &[value.as_bytes(), token.as_bytes(), idle_ms.as_bytes()],
        ));
    }
    bytes.into()
}

/// `lua/holder.lua`'s source, which the doctor's permission probe loads.
pub(crate) fn holder_source() -> &'static str {
    HOLDER_SOURCE
}

/// `lua/holder.lua` on `keys` as a command of its own (the doctor's
/// permission probe runs it beside plain commands).
pub(crate) fn holder_cmd(keys: &Keys) -> redis::Cmd {
    eval(&HOLDER, &[&keys.lock, &keys.term], &[])
}

/// `lua/holder.lua`: who holds the lock of `keys`, read-only.
pub(crate) fn holder(keys: &Keys) -> Arc<[u8]> {
    packed(&HOLDER, &[&keys.lock, &keys.term], &[])
}

/// `lua/term.lua`, recording an elected leader's `term` next to its lock
/// for `idle`, then the announcement on the release channel that wakes
/// observers (`SPUBLISH` with `sharded`): two commands.
pub(crate) fn term_and_announce(
    keys: &Keys,
    value: &str,
    term: u64,
    idle: Duration,
    sharded: bool,
) -> (Arc<[u8]>, usize) {
    let (term, idle_ms) = (term.to_string(), idle.as_millis().to_string());
    let mut pipe = redis::pipe();
    pipe.add_command(eval(
        &TERM,
        &[&keys.lock, &keys.term],
        &[value.as_bytes(), term.as_bytes(), idle_ms.as_bytes()],
    ));
    pipe.cmd(announce_command(sharded))
        .arg(&keys.channel)
        .arg("elected");
    (pipe.get_packed_pipeline().into(), 2)
}

/// A forced release ([`Redlock::force_release`](crate::Redlock::force_release)):
/// `lua/force_release.lua`, deleting the lock key only while it holds the
/// value whose SHA1 is `tag` (the holder the call read), then the
/// announcement that wakes waiters (`SPUBLISH` with `sharded`): two
/// commands. The fence counter stays.
pub(crate) fn force_release(keys: &Keys, tag: &[u8], sharded: bool) -> (Arc<[u8]>, usize) {
    let mut pipe = redis::pipe();
    pipe.add_command(eval(&FORCE_RELEASE, &[&keys.lock], &[tag]));
    pipe.cmd(announce_command(sharded))
        .arg(&keys.channel)
        .arg("1");
    (pipe.get_packed_pipeline().into(), 2)
}

/// `lua/rw_withdraw.lua`: a writer's call that ended without a grant
/// takes back its wait (the intent key, while it holds `call`), then the
/// announcement that wakes the readers it kept waiting (`SPUBLISH` with
/// `sharded`): two commands.
pub(crate) fn rw_withdraw(keys: &Keys, rw: &RwCall, sharded: bool) -> (Arc<[u8]>, usize) {
    let mut pipe = redis::pipe();
    let intent = &rw.keys.intent;
    pipe.add_command(eval(&RW_WITHDRAW, &[intent], &[rw.call.as_bytes()]));
    pipe.cmd(announce_command(sharded))
        .arg(&keys.channel)
        .arg("1");
    (pipe.get_packed_pipeline().into(), 2)
}

/// `lua/rw_holders.lua`: the writer and the live readers of the rw lock
/// of `keys`, read-only.
pub(crate) fn rw_holders(keys: &Keys, rw: &RwKeys) -> Arc<[u8]> {
    packed(&RW_HOLDERS, &[&keys.lock, &rw.readers], &[])
}

/// `lua/rw_force_release.lua`: deletes the writer and the reader entries
/// whose values' SHA1s are `tags` (what the call read on a quorum), then
/// the announcement that wakes waiters: two commands.
pub(crate) fn rw_force_release(
    keys: &Keys,
    rw: &RwKeys,
    tags: &[&[u8]],
    sharded: bool,
) -> (Arc<[u8]>, usize) {
    let mut pipe = redis::pipe();
    pipe.add_command(eval(&RW_FORCE_RELEASE, &[&keys.lock, &rw.readers], tags));
    pipe.cmd(announce_command(sharded))
        .arg(&keys.channel)
        .arg("1");
    (pipe.get_packed_pipeline().into(), 2)
}

/// How a release is announced: `SPUBLISH` on a cluster position, where it
/// goes to the channel's shard only (a `PUBLISH` goes to every node).
fn announce_command(sharded: bool) -> &'static str {
    if sharded {
        "SPUBLISH"
    } else {
        "PUBLISH"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raise_script_uses_the_same_bound() {
        let line = format!("local MAX_AHEAD = {MAX_AHEAD_MICROS}\n");
        assert!(FENCE_RAISE_SOURCE.contains(&line), "{line}");
    }

    /// Whether `packed` runs `script` (by its hash).
    fn runs(packed: &[u8], script: &Script) -> bool {
        let hash = script.get_hash().as_bytes();
        packed.windows(hash.len()).any(|w| w == hash)
    }

    #[test]
    fn each_kind_is_packed_with_its_own_scripts() {
        let (ttl, idle) = (Duration::from_secs(10), Duration::from_secs(30));
        let until = std::time::Instant::now() + ttl;
        let fair = FairQueue::new("p:", "f", Duration::from_secs(1));
        let kinds = [
            (Target::one("p:", "a").unwrap(), &*ACQUIRE, &*EXTEND),
            (Target::all("p:", &["a", "b"]).unwrap(), &ACQUIRE, &EXTEND),
            (Target::permit("p:", "s", 1), &ACQUIRE, &EXTEND),
            (
                Target::counted_permit("p:", "s", 1, 3, idle),
                &PERMIT_ACQUIRE,
                &PERMIT_EXTEND,
            ),
            (
                Target::rw("p:", "w", Access::Read).unwrap(),
                &RW_ACQUIRE,
                &RW_EXTEND,
            ),
            (
                Target::rw("p:", "w", Access::Write { wait_until: until }).unwrap(),
                &RW_ACQUIRE,
                &RW_EXTEND,
            ),
            (
                Target::fair("p:", "f", fair).unwrap(),
                &FAIR_ACQUIRE,
                &EXTEND,
            ),
        ];
        for (target, acquire_script, extend_script) in kinds {
            let kind = &target.kind;
            assert!(
                runs(&acquire(&target, "v", ttl, idle, 1), acquire_script),
                "{kind:?}"
            );
            assert!(runs(&extend(&target, "v", ttl), extend_script), "{kind:?}");
            let release_script = match kind {
                Kind::Rw(_) => &*RW_RELEASE,
                _ => &*RELEASE,
            };
            assert!(
                runs(&release(&target, "v", ttl), release_script),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn the_acquire_script_uses_the_same_window() {
        let line = format!("local EPS = {PROPOSAL_WINDOW_MICROS}\n");
        assert!(ACQUIRE_SOURCE.contains(&line), "{line}");
    }
}
