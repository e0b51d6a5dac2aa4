//! The registry of every kind of request the client sends to a Redis
//! instance: each script of `lua/`, each native command, each plain
//! command, with what it may change there and, for a request that writes,
//! the model actions that let it land late, twice, out of order or never
//! and the model properties that judge it.
//!
//! Nothing in the library reads it: `tests/request_kinds.rs` holds it
//! against the source (every `lua/*.lua`, every command packed under
//! `src/`), the scripts' text and the models (`tests/model_*.rs`), and
//! fails when a request is sent that the registry, and so a model, has not
//! seen (docs/protocol.md, "The request registry"). Commands the redis
//! crate sends by itself when it connects (`AUTH`, `HELLO`, `SELECT`,
//! `CLIENT SETINFO`) set up the connection and change no key; they are
//! not packed here.

use Aspect::{CleanUp, Count, Exclusion, Holds, Order, Terms, Tokens};
use Key::{Fence, Lock, Permits, Queue, Term, Void};

/// One kind of request.
#[derive(Debug)]
pub struct RequestKind {
    /// Its name in docs/protocol.md: a script's file, or a native command
    /// with the shape of its arguments.
    pub name: &'static str,
    /// How it is packed, and where.
    pub sent: Sent,
    /// What it may change on the instance, and what checks that.
    pub effect: Effect,
}

/// How a request is packed, and where in `src/`.
#[derive(Debug)]
pub enum Sent {
    /// A script: `file` under `lua/`, taken into the crate by
    /// `include_str!` in `site` (a path such as `src/protocol/scripts.rs`).
    Script {
        /// The file name, such as `acquire.lua`.
        file: &'static str,
        /// The source file that includes it.
        site: &'static str,
    },
    /// A native command: `command` as packed with `cmd(…)` (with its
    /// subcommand, for a command that has them, as in `CLUSTER SLOTS`),
    /// and how many times each source file packs it for this kind.
    Command {
        /// The command, upper case.
        command: &'static str,
        /// Each source file that packs it, with how many times.
        sites: &'static [(&'static str, usize)],
    },
}

/// What a request may change on the instance that runs it.
#[derive(Debug)]
pub enum Effect {
    /// Reads only: landing late, twice or never changes nothing.
    ReadOnly,
    /// Publishes a message only; changes no key. A late or repeated
    /// message wakes a waiter for nothing (it tries once and waits again);
    /// a lost one costs it its wait's poll (docs/protocol.md).
    Publishes,
    /// Changes the connection's or the server's state, no key: what.
    NoKey(&'static str),
    /// Runs a script of `lua/` by its hash: each script is a kind of its
    /// own, judged as that script.
    RunsScript,
    /// Sent to the caller's own store, never to a lock instance: why it is
    /// safe.
    Store(&'static str),
    /// The doctor's permission probe (`src/doctor/permissions.rs`): writes
    /// only keys no guard depends on, whenever it lands: why.
    Probe(&'static str),
    /// Writes keys: which, and what checks it.
    Writes(Writes),
}

/// A writing request: what it changes, and the model checks that judge it.
#[derive(Debug)]
pub struct Writes {
    /// The keys it may change.
    pub changes: &'static [Key],
    /// The models that deliver it late, twice, out of order or never, and
    /// the properties they judge it by. Empty only for a known gap
    /// (`tests/request_kinds.rs`).
    pub judged: &'static [Judged],
    /// Each aspect no model judges it on, with why it cannot break it.
    pub unjudged: &'static [(Aspect, &'static str)],
    /// Where the models stand for it only approximately, and why that
    /// holds.
    pub caveat: Option<&'static str>,
}

/// A key a request may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// What a grant rests on: a lock key, a reader-writer lock's writer
    /// key, readers or writer-waiting intent.
    Lock,
    /// A fencing counter.
    Fence,
    /// A failed attempt's void key.
    Void,
    /// An elected leader's term record.
    Term,
    /// A semaphore's permits record.
    Permits,
    /// A fair lock's queue, its waiters' liveness records, its ticket
    /// counter.
    Queue,
}

/// What a model property judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aspect {
    /// No two valid guards overlap (and what that rests on: a believed
    /// lease is held by a quorum).
    Exclusion,
    /// Tokens strictly increase.
    Tokens,
    /// A hold (`hold_at_least`) is never cut short.
    Holds,
    /// No key is left owned by nobody (orphans, void keys).
    CleanUp,
    /// An elected leader's term is reported right.
    Terms,
    /// A semaphore hands out at most its count.
    Count,
    /// A fair lock grants in ticket order among live waiters, and no dead
    /// waiter stalls its queue.
    Order,
}

/// One model's judgement of a request.
#[derive(Debug)]
pub struct Judged {
    /// The model file under `tests/`, without `.rs` (`model_grants`).
    pub model: &'static str,
    /// The actions, as `Enum::Variant` of the model's action enum, that
    /// send the request and land it late, twice, out of order or never.
    pub actions: &'static [&'static str],
    /// The safety properties (`always`) that judge it: each a constant
    /// of the model holding the property's name, or the name itself.
    pub properties: &'static [(Aspect, &'static str)],
}

const GRANTS: &[(Aspect, &str)] = &[
    (Exclusion, "EXCLUSION"),
    (Tokens, "TOKENS"),
    (CleanUp, "ORPHAN"),
];
const FENCING: &[(Aspect, &str)] = &[(Tokens, "TOKENS_INCREASE")];
const LEASE: &[(Aspect, &str)] = &[(Exclusion, "BELIEVED"), (Holds, "HOLD_KEPT")];
const CLEANUP: &[(Aspect, &str)] = &[(CleanUp, "no orphan once everything landed")];
const RWLOCK: &[(Aspect, &str)] = &[
    (Exclusion, "EXCLUSION"),
    (Exclusion, "ON_A_QUORUM"),
    (Tokens, "WRITE_TOKENS"),
    (Tokens, "READ_TOKENS"),
    (CleanUp, "ORPHAN"),
];
const SEMAPHORE: &[(Aspect, &str)] = &[
    (Exclusion, "EXCLUSION"),
    (Exclusion, "ON_A_QUORUM"),
    (Count, "AT_MOST_COUNT"),
    (Count, "ONE_COUNT"),
];
const FAIR: &[(Aspect, &str)] = &[
    (Exclusion, "EXCLUSION"),
    (Order, "ORDER"),
    (Order, "NO_STALL"),
];
const TERM: &[(Aspect, &str)] = &[(Terms, "OWN_TERM"), (Terms, "KEPT"), (Terms, "OBSERVED")];

const NO_COUNTER: &str = "changes no fencing counter";
const NO_LOCK: &str = "changes no lock key";
const RW_NO_HOLD: &str = "a reader-writer lock takes no hold (`hold_at_least` is refused)";
const RELEASE_NO_HOLD: &str = "deletes only keys holding its own value, and a lease whose \
    hold still runs is released with release_hold.lua instead (src/lock/lease.rs)";
const CREATES_NONE: &str = "creates no key: it only moves the expiry of keys holding its value";

/// Every kind of request the client sends to an instance.
pub(crate) const REQUEST_KINDS: &[RequestKind] = &[
    ACQUIRE,
    RELEASE,
    EXTEND,
    RELEASE_HOLD,
    FENCE_RAISE,
    script("holder.lua", Effect::ReadOnly),
    TERM_RECORD,
    SEMAPHORE_SLOTS,
    PERMIT_ACQUIRE,
    SEMAPHORE_RECOUNT,
    PERMIT_EXTEND,
    RW_ACQUIRE,
    RW_RELEASE,
    RW_EXTEND,
    FORCE_RELEASE,
    RW_WITHDRAW,
    script("rw_holders.lua", Effect::ReadOnly),
    RW_FORCE_RELEASE,
    FAIR_ACQUIRE,
    FAIR_ENQUEUE,
    store_script("fenced_write.lua"),
    store_script("fenced_read.lua"),
    store_script("fenced_shared_read.lua"),
    probe("TYPE", Effect::ReadOnly),
    probe("ZSCORE", Effect::ReadOnly),
    probe("SET", Effect::Probe(PROBE_VOID)),
    probe("PEXPIRE", Effect::Probe(PROBE_VOID)),
    probe("DEL", Effect::Probe(PROBE_VOID)),
    probe("ZADD", Effect::Probe(PROBE_READER)),
    probe("ZREM", Effect::Probe(PROBE_READER)),
    probe("ZREMRANGEBYSCORE", Effect::Probe(PROBE_READER)),
    probe("PUBLISH", Effect::Publishes),
    command(
        "EVALSHA",
        &[("src/protocol/scripts.rs", 1)],
        Effect::RunsScript,
    ),
    command(
        "SCRIPT LOAD",
        &[
            ("src/transport/connection.rs", 1),
            ("src/doctor/permissions.rs", 1),
        ],
        Effect::NoKey("loads the scripts into the server's script cache"),
    ),
    command(
        "PUBLISH",
        &[
            ("src/protocol/scripts.rs", 5),
            ("src/protocol/native.rs", 1),
        ],
        Effect::Publishes,
    ),
    command(
        "SPUBLISH",
        &[("src/protocol/scripts.rs", 5)],
        Effect::Publishes,
    ),
    command(
        "SUBSCRIBE",
        &[("src/transport/notify/mod.rs", 1)],
        Effect::NoKey("subscribes the connection to a release channel"),
    ),
    command(
        "UNSUBSCRIBE",
        &[("src/transport/notify/mod.rs", 1)],
        Effect::NoKey("ends a subscription of the connection"),
    ),
    command(
        "SSUBSCRIBE",
        &[("src/transport/notify/sharded.rs", 1)],
        Effect::NoKey("subscribes the connection to a shard channel"),
    ),
    command(
        "SUNSUBSCRIBE",
        &[("src/transport/notify/sharded.rs", 1)],
        Effect::NoKey("ends a shard subscription of the connection"),
    ),
    command(
        "ASKING",
        &[("src/transport/instance.rs", 1)],
        Effect::NoKey("lets the connection's next command follow an ASK redirect"),
    ),
    native_release("DELIFEQ"),
    native_release("DELEX"),
    SET_VOID,
    SET_IFEQ,
    command(
        "TIME",
        &[
            ("src/client.rs", 2),
            ("src/transport/connection.rs", 1),
            ("src/transport/instance.rs", 1),
            ("src/bin/redfence/status.rs", 1),
            ("src/doctor/permissions.rs", 1),
        ],
        Effect::ReadOnly,
    ),
    command(
        "PING",
        &[
            ("src/client.rs", 1),
            ("src/doctor.rs", 1),
            ("src/doctor/permissions.rs", 1),
        ],
        Effect::ReadOnly,
    ),
    command("CONFIG GET", &[("src/doctor.rs", 1)], Effect::ReadOnly),
    command("INFO", &[("src/doctor.rs", 1)], Effect::ReadOnly),
    command("CLUSTER INFO", &[("src/doctor.rs", 1)], Effect::ReadOnly),
    command(
        "CLUSTER SLOTS",
        &[("src/transport/cluster/nodes.rs", 1)],
        Effect::ReadOnly,
    ),
    command(
        "GET",
        &[
            ("src/bin/redfence/status.rs", 7),
            ("src/doctor/permissions.rs", 1),
        ],
        Effect::ReadOnly,
    ),
    command(
        "PTTL",
        &[
            ("src/bin/redfence/status.rs", 4),
            ("src/doctor/permissions.rs", 1),
        ],
        Effect::ReadOnly,
    ),
    command(
        "ZRANGE",
        &[
            // The rw lock's readers and the fair lock's queue.
            ("src/bin/redfence/status.rs", 2),
            ("src/doctor/permissions.rs", 1),
        ],
        Effect::ReadOnly,
    ),
    command(
        "EXISTS",
        &[
            ("src/bin/redfence/status.rs", 1),
            ("src/doctor/permissions.rs", 1),
        ],
        Effect::ReadOnly,
    ),
];

const ACQUIRE: RequestKind = script(
    "acquire.lua",
    Effect::Writes(Writes {
        changes: &[Lock, Fence],
        judged: &[
            checked_by(
                "model_grants",
                &[
                    "GrantAction::Start",
                    "GrantAction::Resend",
                    "GrantAction::LandAcquire",
                ],
                GRANTS,
            ),
            checked_by(
                "model_fencing",
                &["Action::Start", "Action::LandAcquire"],
                FENCING,
            ),
            checked_by(
                "model_lease",
                &["CleanAction::LandAcquire", "CleanAction::DropAcquire"],
                CLEANUP,
            ),
            checked_by("model_semaphore", &["SemAction::LandAcquire"], SEMAPHORE),
        ],
        unjudged: &[(
            Holds,
            "SET … NX writes only a free key, and a resend that finds its own value changes \
             nothing: it never touches a key a hold rests on",
        )],
        caveat: None,
    }),
);

const RELEASE: RequestKind = script(
    "release.lua",
    Effect::Writes(Writes {
        changes: &[Lock, Void],
        judged: &[
            checked_by(
                "model_grants",
                &[
                    "GrantAction::GiveUp",
                    "GrantAction::Release",
                    "GrantAction::LandUndo",
                ],
                GRANTS,
            ),
            checked_by(
                "model_lease",
                &["CleanAction::Fail", "CleanAction::LandCleanup"],
                CLEANUP,
            ),
            checked_by(
                "model_fencing",
                &["Action::GiveUp", "Action::LockGone"],
                FENCING,
            ),
            checked_by(
                "model_semaphore",
                &[
                    "SemAction::GiveUp",
                    "SemAction::Release",
                    "SemAction::Vanish",
                ],
                SEMAPHORE,
            ),
        ],
        unjudged: &[(Holds, RELEASE_NO_HOLD)],
        caveat: None,
    }),
);

const EXTEND: RequestKind = script(
    "extend.lua",
    Effect::Writes(Writes {
        changes: &[Lock],
        judged: &[checked_by(
            "model_lease",
            &["LeaseAction::Round", "LeaseAction::Land"],
            LEASE,
        )],
        unjudged: &[(Tokens, NO_COUNTER), (CleanUp, CREATES_NONE)],
        caveat: None,
    }),
);

// Its void key is a known gap (tests/request_kinds.rs): written where a
// key was not ours, as release.lua's holder release does, but no model
// sends it.
const RELEASE_HOLD: RequestKind = script(
    "release_hold.lua",
    Effect::Writes(Writes {
        changes: &[Lock, Void],
        judged: &[
            checked_by(
                "model_lease",
                &["LeaseAction::ReleaseHold", "LeaseAction::LandHold"],
                LEASE,
            ),
            // Its void key: the clean-up model with a hold's release.
            checked_by(
                "model_lease",
                &["CleanAction::LandCleanup", "CleanAction::LandAcquire"],
                &[(CleanUp, "NOT_REWRITTEN")],
            ),
        ],
        unjudged: &[(Tokens, NO_COUNTER)],
        caveat: None,
    }),
);

const FENCE_RAISE: RequestKind = script(
    "fence_raise.lua",
    Effect::Writes(Writes {
        changes: &[Fence],
        judged: &[
            checked_by(
                "model_fencing",
                &["Action::Decide", "Action::LandRaise"],
                FENCING,
            ),
            checked_by(
                "model_grants",
                &["GrantAction::Decide", "GrantAction::LandRaise"],
                GRANTS,
            ),
            checked_by(
                "model_rwlock",
                &["RwAction::Decide", "RwAction::LandRaise"],
                RWLOCK,
            ),
        ],
        unjudged: &[(Holds, NO_LOCK)],
        caveat: None,
    }),
);

const TERM_RECORD: RequestKind = script(
    "term.lua",
    Effect::Writes(Writes {
        changes: &[Term],
        judged: &[checked_by(
            "model_term",
            &["TermAction::Elect", "TermAction::LandTerm"],
            TERM,
        )],
        unjudged: &[
            (Exclusion, NO_LOCK),
            (Tokens, NO_COUNTER),
            (Holds, NO_LOCK),
            (
                CleanUp,
                "creates no lock key; its record expires, and is reported only with the value \
                 that wrote it (OWN_TERM)",
            ),
        ],
        caveat: None,
    }),
);

const SEMAPHORE_SLOTS: RequestKind = script(
    "semaphore_slots.lua",
    Effect::Writes(Writes {
        changes: &[Permits],
        judged: &[checked_by(
            "model_semaphore",
            &["SemAction::Start", "SemAction::LandRecord"],
            SEMAPHORE,
        )],
        unjudged: &[
            (Tokens, NO_COUNTER),
            (Holds, NO_LOCK),
            (CleanUp, RECORD_EXPIRES),
        ],
        caveat: None,
    }),
);

const RECORD_EXPIRES: &str = "the record expires once unused for the counter idle time \
    (renewed by each listing and grant, never shorter than a grant's keys)";

const PERMIT_ACQUIRE: RequestKind = script(
    "permit_acquire.lua",
    Effect::Writes(Writes {
        changes: &[Lock, Fence, Permits],
        judged: &[
            checked_by(
                "model_semaphore",
                &[
                    "SemAction::Start",
                    "SemAction::Choose",
                    "SemAction::LandAcquire",
                ],
                SEMAPHORE,
            ),
            checked_by(
                "model_fencing",
                &["Action::Start", "Action::LandAcquire"],
                FENCING,
            ),
            checked_by(
                "model_lease",
                &["CleanAction::LandAcquire", "CleanAction::DropAcquire"],
                CLEANUP,
            ),
        ],
        unjudged: &[(
            Holds,
            "SET … NX writes only a free key, and a resend that finds its own value changes \
             nothing: it never touches a key a hold rests on",
        )],
        caveat: Some(
            "the slot's lock and counter are written by lua/acquire.lua itself, wrapped \
             as a function the script calls after its count check (src/protocol/scripts.rs), \
             so model_fencing and model_lease judge them as they judge acquire.lua; \
             model_semaphore judges the count check and the record a grant writes",
        ),
    }),
);

const FAIR_ACQUIRE: RequestKind = script(
    "fair_gate.lua",
    Effect::Writes(Writes {
        changes: &[Lock, Fence, Queue],
        judged: &[
            checked_by(
                "model_fair",
                &[
                    "Action::Start",
                    "Action::LandTicket",
                    "Action::LandAcquire",
                    "Action::Expire",
                    "Action::Restart",
                ],
                FAIR,
            ),
            checked_by(
                "model_fencing",
                &["Action::Start", "Action::LandAcquire"],
                FENCING,
            ),
            checked_by(
                "model_lease",
                &["CleanAction::LandAcquire", "CleanAction::DropAcquire"],
                CLEANUP,
            ),
        ],
        unjudged: &[(
            Holds,
            "SET … NX writes only a free key, and a resend that finds its own value changes \
             nothing: it never touches a key a hold rests on",
        )],
        caveat: Some(
            "the lock and its counter are written by lua/acquire.lua itself, wrapped as a \
             function the gate calls (src/protocol/scripts.rs), so model_fencing and \
             model_lease judge them as they judge acquire.lua; model_fair judges the gate \
             (ticket, purge, heartbeat, head) and exclusion, in searches bounded to a few \
             million states (docs/fair.md)",
        ),
    }),
);

const FAIR_ENQUEUE: RequestKind = script(
    "fair_enqueue.lua",
    Effect::Writes(Writes {
        changes: &[Queue],
        judged: &[checked_by(
            "model_fair",
            &["Action::LandEnqueue", "Action::LandWithdraw"],
            FAIR,
        )],
        unjudged: &[
            (Tokens, NO_COUNTER),
            (Holds, NO_LOCK),
            (
                CleanUp,
                "writes only the queue's keys, which expire one heartbeat TTL after the last \
                 waiter's heartbeat; an entry landing late expires within that TTL",
            ),
        ],
        caveat: None,
    }),
);

const PERMIT_EXTEND: RequestKind = script(
    "permit_extend.lua",
    Effect::Writes(Writes {
        changes: &[Lock, Permits],
        judged: &[
            checked_by(
                "model_lease",
                &["LeaseAction::Round", "LeaseAction::Land"],
                LEASE,
            ),
            checked_by("model_semaphore", &["SemAction::Recount"], SEMAPHORE),
        ],
        unjudged: &[(Tokens, NO_COUNTER), (CleanUp, CREATES_NONE)],
        caveat: Some(
            "the slot's lock is extended by lua/extend.lua itself, wrapped as a function \
             (src/protocol/scripts.rs), as model_lease judges it; the record's expiry only \
             moves later, where the lock still holds the value, which keeps model_semaphore's \
             rule that a record vanishes (Recount) only where no slot is held",
        ),
    }),
);

const SEMAPHORE_RECOUNT: RequestKind = script(
    "semaphore_recount.lua",
    Effect::Writes(Writes {
        changes: &[Permits],
        judged: &[checked_by(
            "model_semaphore",
            &["SemAction::Recount"],
            SEMAPHORE,
        )],
        unjudged: &[
            (Tokens, NO_COUNTER),
            (Holds, NO_LOCK),
            (CleanUp, RECORD_EXPIRES),
        ],
        caveat: Some(
            "modelled as the record vanishing where no slot is held: a recount writes a \
             count where that writes none, and no record lets every count through where a \
             recount's lets one",
        ),
    }),
);

const RW_ACQUIRE: RequestKind = script(
    "rw_acquire.lua",
    Effect::Writes(Writes {
        changes: &[Lock, Fence],
        judged: &[checked_by(
            "model_rwlock",
            &["RwAction::LandAcquire"],
            RWLOCK,
        )],
        unjudged: &[(Holds, RW_NO_HOLD)],
        caveat: None,
    }),
);

const RW_RELEASE: RequestKind = script(
    "rw_release.lua",
    Effect::Writes(Writes {
        changes: &[Lock, Void],
        judged: &[checked_by(
            "model_rwlock",
            &[
                "RwAction::GiveUp",
                "RwAction::Release",
                "RwAction::LandRelease",
            ],
            RWLOCK,
        )],
        unjudged: &[(Holds, RW_NO_HOLD)],
        caveat: None,
    }),
);

// model_lease's key stands for the writer key and for one reader's entry:
// rw_extend.lua lengthens either only where it holds the value, and only
// later (`PEXPIRE … GT`, `ZADD … GT` with the set's own expiry raised, never
// lowered), as extend.lua does for a lock key.
const RW_EXTEND: RequestKind = script(
    "rw_extend.lua",
    Effect::Writes(Writes {
        changes: &[Lock],
        judged: &[checked_by(
            "model_lease",
            &["LeaseAction::Round", "LeaseAction::Land"],
            LEASE,
        )],
        unjudged: &[(Tokens, NO_COUNTER), (CleanUp, CREATES_NONE)],
        caveat: Some(
            "model_lease models one key per instance; a reader's entry in the readers set \
             is such a key (its score is its expiry), and the set's own expiry is only \
             raised to cover it",
        ),
    }),
);

const FORCE_RELEASE: RequestKind = script(
    "force_release.lua",
    Effect::Writes(Writes {
        changes: &[Lock],
        judged: &[checked_by(
            "model_grants",
            &["GrantAction::Unlock", "GrantAction::LandDelete"],
            GRANTS,
        )],
        unjudged: &[(
            Holds,
            "an operator's unlock revokes whoever holds the lock, and its hold with it, on \
             purpose (docs/cli.md)",
        )],
        caveat: None,
    }),
);

const RW_WITHDRAW: RequestKind = script(
    "rw_withdraw.lua",
    Effect::Writes(Writes {
        changes: &[Lock],
        judged: &[checked_by(
            "model_rwlock",
            &["RwAction::ExpireIntent"],
            RWLOCK,
        )],
        unjudged: &[(Holds, RW_NO_HOLD)],
        caveat: Some(
            "the model's intent vanishes at any moment whatever it holds; the withdraw \
             deletes it only while it holds the call's id, a special case",
        ),
    }),
);

const RW_FORCE_RELEASE: RequestKind = script(
    "rw_force_release.lua",
    Effect::Writes(Writes {
        changes: &[Lock],
        judged: &[checked_by(
            "model_rwlock",
            &["RwAction::ExpireWriter", "RwAction::ExpireReader"],
            RWLOCK,
        )],
        unjudged: &[(Holds, RW_NO_HOLD)],
        caveat: Some(
            "the model's writer key and reader entries vanish at any moment, their holder \
             then stopping; the unlock deletes only the values it read on a quorum, and \
             the holders it revokes are not told (docs/cli.md)",
        ),
    }),
);

/// What judges a native release: model_grants's holder's release.
const NATIVE_RELEASE: &[Judged] = &[
    checked_by(
        "model_grants",
        &["GrantAction::Release", "GrantAction::LandUndo"],
        GRANTS,
    ),
    checked_by("model_fencing", &["Action::LockGone"], FENCING),
];

/// A single resource's native release (src/protocol/native.rs), `DELIFEQ
/// key value` or `DELEX key IFEQ value`, also sent once by a connection's
/// probe on a key nobody writes.
const fn native_release(command: &'static str) -> RequestKind {
    RequestKind {
        name: command,
        sent: Sent::Command {
            command,
            sites: &[("src/protocol/native.rs", 2)],
        },
        effect: Effect::Writes(Writes {
            changes: &[Lock],
            judged: NATIVE_RELEASE,
            unjudged: &[(
                Holds,
                "never sent for a lease whose hold still runs (src/lock/lease.rs), and deletes \
                 only its own value",
            )],
            caveat: None,
        }),
    }
}

/// What follows a native release that found the key not ours, on the same
/// connection (src/protocol/native.rs).
const SET_VOID: RequestKind = RequestKind {
    name: "SET void 1 PX ttl",
    sent: Sent::Command {
        command: "SET",
        sites: &[("src/protocol/native.rs", 1)],
    },
    effect: Effect::Writes(Writes {
        changes: &[Void],
        judged: &[checked_by(
            "model_grants",
            &["GrantAction::Release", "GrantAction::LandUndo"],
            GRANTS,
        )],
        unjudged: &[(Holds, NO_LOCK)],
        caveat: Some(
            "model_grants writes it in the same step as the DELIFEQ before it; a resent \
             acquire landing between the two leaves a lock nobody owns for one TTL at \
             most (docs/protocol.md, \"Native commands\")",
        ),
    }),
};

/// A single resource's native extension (src/protocol/native.rs), also
/// sent once by a connection's probe on a key nobody writes.
const SET_IFEQ: RequestKind = RequestKind {
    name: "SET … IFEQ … PX",
    sent: Sent::Command {
        command: "SET",
        sites: &[("src/protocol/native.rs", 2)],
    },
    effect: Effect::Writes(Writes {
        changes: &[Lock],
        judged: &[checked_by(
            "model_lease",
            &["LeaseAction::Round", "LeaseAction::Land"],
            LEASE,
        )],
        unjudged: &[
            (Tokens, NO_COUNTER),
            (
                CleanUp,
                "IFEQ sets only a key holding its value: it creates none",
            ),
        ],
        caveat: None,
    }),
};

/// A script sent to the caller's own store by `fenced_set` and
/// `fenced_get` (src/fenced.rs), never to a lock instance.
const fn store_script(file: &'static str) -> RequestKind {
    RequestKind {
        name: file,
        sent: Sent::Script {
            file,
            site: "src/fenced.rs",
        },
        effect: Effect::Store(
            "runs on the caller's connection to its own store, whose writes fencing \
             protects (docs/fencing.md, tests/fencing.rs)",
        ),
    }
}

const fn script(file: &'static str, effect: Effect) -> RequestKind {
    RequestKind {
        name: file,
        sent: Sent::Script {
            file,
            site: "src/protocol/scripts.rs",
        },
        effect,
    }
}

/// What the doctor's permission probe writes, and why no guard minds.
const PROBE_VOID: &str = "only the void key of the value `doctor-probe`, which no attempt's \
    value can be (every attempt's value holds a `:`): no acquire ever checks it";
const PROBE_READER: &str = "only the reader `doctor-probe` scored 0, long expired: every rw \
    script purges it first, and no guard counts it";

/// A command of the doctor's permission probe (`src/doctor/permissions.rs`).
const fn probe(command: &'static str, effect: Effect) -> RequestKind {
    RequestKind {
        name: command,
        sent: Sent::Command {
            command,
            sites: &[("src/doctor/permissions.rs", 1)],
        },
        effect,
    }
}

const fn command(
    command: &'static str,
    sites: &'static [(&'static str, usize)],
    effect: Effect,
) -> RequestKind {
    RequestKind {
        name: command,
        sent: Sent::Command { command, sites },
        effect,
    }
}

const fn checked_by(
    model: &'static str,
    actions: &'static [&'static str],
    properties: &'static [(Aspect, &'static str)],
) -> Judged {
    Judged {
        model,
        actions,
        properties,
    }
}
