//! Where a resource's lock, fencing counter and release channel live.
//!
//! For resource `R` and prefix `P` (default `redfence:`):
//! - `P lock:{R}`: the lock, a string holding the holder's random value,
//!   with the lease's TTL;
//! - `P fence:{R}`: the last fencing counter, an integer string that expires
//!   after the counter idle time;
//! - `P released:{R}`: the pub/sub channel a release is announced on;
//! - `P term:{R}`: an election's term record (`lua/term.lua`);
//! - `P void:{R}:V`: written by the clean-up of an attempt with lock value
//!   `V` that found no lock of its own (the attempt's acquire may still be
//!   on its way); it makes that acquire refuse, and expires with the TTL.
//!
//! A semaphore `S` (`Redlock::semaphore`) keeps its permit count in
//! `P permits:{S}` (`lua/semaphore_slots.lua`), and each of its slots `i`
//! is a lock of its own: `P permit:{S}:i`, `P fence:{S}:permit:i`,
//! `P void:{S}:permit:i:V`, all slots announcing releases on
//! `P released:{S}:permits`. A resource's keys end with `}`, a slot's with
//! its number, so they never collide; `{S}` keeps one semaphore on one
//! cluster slot.
//!
//! A reader-writer lock `W` (`Redlock::rw_lock`) has a writer key
//! `P rw:{W}:writer` (where a lock's key would be), its readers
//! `P rw:{W}:readers` (a sorted set), a waiting writer's `P rw:{W}:intent`,
//! one counter `P fence:{W}:rw`, void keys `P void:{W}:rw:V`, and the
//! channel `P released:{W}:rw`.
//!
//! The two prefixes differ, so no resource name can collide with another's
//! counter, and `{R}` is a hash tag that keeps both keys on the same slot if
//! an instance is a cluster node.
//!
//! [`Keys`] holds key names only. What a call is (a lock, a set, a permit,
//! a read or a write, a fair lock's attempt) and what it carries beside
//! its keys (an rw call's id, a permit's count, a fair lock's queue entry)
//! is the [`Target`]'s [`Kind`].

use crate::Error;

/// Longest accepted resource name, in bytes.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// Most resources one [`lock_all`](crate::Redlock::lock_all) call may lock
/// together.
pub const MAX_RESOURCES: usize = 64;

/// The key names of one resource, permit slot or rw lock's writer side;
/// nothing about the call that uses them (that is the target's [`Kind`]).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub lock: String,
    pub fence: String,
    pub channel: String,
    /// An election's term record (see `lua/term.lua`).
    pub term: String,
    /// The void keys of this resource, without the attempt's value.
    void: String,
    /// The cluster slot of every key above (they share the hash tag
    /// `{R}`); none for a name that starts with `}`, whose tag is empty, so
    /// that its keys would land on different slots.
    pub slot: Option<u16>,
}

impl Keys {
    pub(crate) fn new(prefix: &str, resource: &str) -> Self {
        let lock = tagged(prefix, "lock:", resource, "");
        Keys {
            slot: (!resource.starts_with('}'))
                .then(|| crate::protocol::slot::key_slot(lock.as_bytes())),
            lock,
            fence: tagged(prefix, "fence:", resource, ""),
            channel: tagged(prefix, "released:", resource, ""),
            term: tagged(prefix, "term:", resource, ""),
            void: tagged(prefix, "void:", resource, ":"),
        }
    }
}

/// `{prefix}{kind}{{{name}}}{tail}`, in one allocation: a lock's keys are
/// made for every call (`format!` grows its string two or three times).
fn tagged(prefix: &str, kind: &str, name: &str, tail: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + kind.len() + name.len() + tail.len() + 2);
    for part in [prefix, kind, "{", name, "}", tail] {
        key.push_str(part);
    }
    key
}

impl Keys {
    /// The keys of slot `slot` of semaphore `name`: a lock of its own.
    pub(crate) fn permit(prefix: &str, name: &str, slot: u32) -> Self {
        let lock = format!("{prefix}permit:{{{name}}}:{slot}");
        Keys {
            slot: (!name.starts_with('}'))
                .then(|| crate::protocol::slot::key_slot(lock.as_bytes())),
            lock,
            fence: format!("{prefix}fence:{{{name}}}:permit:{slot}"),
            channel: semaphore_channel(prefix, name),
            term: format!("{prefix}term:{{{name}}}:permit:{slot}"),
            void: format!("{prefix}void:{{{name}}}:permit:{slot}:"),
        }
    }

    /// The keys of reader-writer lock `name` a lock also has: the writer
    /// key stands where a lock's key does (`lua/rw_acquire.lua`); the rest
    /// are in [`RwKeys`].
    pub(crate) fn rw(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}rw:{{{name}}}:writer");
        Keys {
            slot: (!name.starts_with('}'))
                .then(|| crate::protocol::slot::key_slot(lock.as_bytes())),
            lock,
            fence: format!("{prefix}fence:{{{name}}}:rw"),
            channel: format!("{prefix}released:{{{name}}}:rw"),
            term: format!("{prefix}term:{{{name}}}:rw"),
            void: format!("{prefix}void:{{{name}}}:rw:"),
        }
    }
}

/// What a reader-writer lock keeps beside its writer key.
#[derive(Debug, Clone)]
pub(crate) struct RwKeys {
    /// The readers: a sorted set of values scored by expiry.
    pub readers: String,
    /// A waiting writer's value, which new readers wait behind.
    pub intent: String,
}

impl RwKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        RwKeys {
            readers: format!("{prefix}rw:{{{name}}}:readers"),
            intent: format!("{prefix}rw:{{{name}}}:intent"),
        }
    }
}

/// One call on a reader-writer lock: the keys beside its writer key, and
/// what the call carries to the instances (`lua/rw_acquire.lua`).
#[derive(Debug, Clone)]
pub(crate) struct RwCall {
    pub keys: RwKeys,
    /// The call's id, one for all its attempts: a waiting writer's mark.
    pub call: String,
    pub access: Access,
}

/// Whether an rw lock's call reads or writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Access {
    Read,
    /// A write, which stops waiting at `wait_until`: a refused writer's
    /// mark lasts until then.
    Write {
        wait_until: std::time::Instant,
    },
}

/// Where semaphore `name` records its permit count.
pub(crate) fn permits_record(prefix: &str, name: &str) -> String {
    format!("{prefix}permits:{{{name}}}")
}

/// The channel every slot of semaphore `name` announces its releases on.
pub(crate) fn semaphore_channel(prefix: &str, name: &str) -> String {
    format!("{prefix}released:{{{name}}}:permits")
}

/// One resource a lock call asks for, and its keys.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub resource: String,
    pub keys: Keys,
}

/// What one lock call asks for: a single resource, or a set locked all or
/// nothing. Members keep the order the caller gave.
#[derive(Debug)]
pub(crate) struct Target {
    /// How errors name it: the resource, or `[a, b]` for a set.
    pub name: String,
    pub members: Vec<Member>,
    pub kind: Kind,
}

/// What kind of thing a target is, with what that kind's calls carry
/// beside its members' keys: which scripts pack its requests, and with
/// what. The packers match on it once each (`protocol/scripts.rs`); every
/// kind is named in each match, so a new one is placed in every script.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A lock of one resource.
    Lock,
    /// Resources locked all or nothing
    /// ([`lock_all`](crate::Redlock::lock_all)).
    Set,
    /// Slot `slot` of a semaphore: a lock of its own. With `count`, its
    /// acquire checks the semaphore's count (`lua/permit_acquire.lua`) and
    /// its extensions keep the count's record alive.
    Permit {
        slot: u32,
        count: Option<PermitCount>,
    },
    /// A read or a write of a reader-writer lock.
    Rw(RwCall),
    /// A fair lock's attempt: the lock, gated by its queue
    /// (`lua/fair_gate.lua`).
    Fair(FairQueue),
}

/// What a fair lock's release announces before its token
/// (`lock/lease.rs`): `fair:TOKEN`, one tag per release, which its
/// waiters count (`fair.rs`).
pub(crate) const FAIR_TAG: &[u8] = b"fair:";

/// A fair lock's queue keys and one waiter's place in them
/// (`lua/fair_gate.lua`): `P fair:{R}:queue` (call ids by ticket),
/// `P fair:{R}:alive` (call ids by heartbeat expiry), `P fair:{R}:tickets`.
#[derive(Debug, Clone)]
pub(crate) struct FairQueue {
    pub queue: String,
    pub alive: String,
    pub tickets: String,
    /// The waiter's call id: one for all its attempts.
    pub call: String,
    /// How long a heartbeat keeps the waiter's place.
    pub beat: std::time::Duration,
    /// The ticket round (take a ticket, or the lock where nobody queues),
    /// else an attempt of a queued waiter.
    pub ticket_round: bool,
}

impl FairQueue {
    pub(crate) fn new(prefix: &str, name: &str, beat: std::time::Duration) -> Self {
        FairQueue {
            queue: format!("{prefix}fair:{{{name}}}:queue"),
            alive: format!("{prefix}fair:{{{name}}}:alive"),
            tickets: format!("{prefix}fair:{{{name}}}:tickets"),
            call: uuid::Uuid::new_v4().simple().to_string(),
            beat,
            ticket_round: true,
        }
    }
}

/// A semaphore's permit count and its record's key.
#[derive(Debug, Clone)]
pub(crate) struct PermitCount {
    pub record: String,
    pub permits: u32,
    /// How long the record lives unused: the counter idle time.
    pub idle: std::time::Duration,
}

impl Target {
    pub(crate) fn one(prefix: &str, resource: &str) -> Result<Self, Error> {
        validate_resource(resource)?;
        Ok(Target {
            name: resource.to_string(),
            members: vec![Member {
                resource: resource.to_string(),
                keys: Keys::new(prefix, resource),
            }],
            kind: Kind::Lock,
        })
    }

    /// The lock `name` of a fair lock's call, gated by its `queue`.
    pub(crate) fn fair(prefix: &str, name: &str, queue: FairQueue) -> Result<Self, Error> {
        Ok(Target {
            kind: Kind::Fair(queue),
            ..Target::one(prefix, name)?
        })
    }

    /// Slot `slot` of semaphore `name` (validated by the caller), named
    /// `name#slot` in errors.
    pub(crate) fn permit(prefix: &str, name: &str, slot: u32) -> Self {
        let resource = format!("{name}#{slot}");
        Target {
            name: resource.clone(),
            members: vec![Member {
                resource,
                keys: Keys::permit(prefix, name, slot),
            }],
            kind: Kind::Permit { slot, count: None },
        }
    }

    /// Slot `slot` of semaphore `name` of `permits` permits, taken only
    /// where the record holds that count (`lua/permit_acquire.lua`), the
    /// record kept alive `idle` past the grant and every extension.
    pub(crate) fn counted_permit(
        prefix: &str,
        name: &str,
        slot: u32,
        permits: u32,
        idle: std::time::Duration,
    ) -> Self {
        let count = PermitCount {
            record: permits_record(prefix, name),
            permits,
            idle,
        };
        Target {
            kind: Kind::Permit {
                slot,
                count: Some(count),
            },
            ..Target::permit(prefix, name, slot)
        }
    }

    /// Reader-writer lock `name`, for a call that reads or writes.
    pub(crate) fn rw(prefix: &str, name: &str, access: Access) -> Result<Self, Error> {
        validate_resource(name)?;
        Ok(Target {
            name: name.to_string(),
            members: vec![Member {
                resource: name.to_string(),
                keys: Keys::rw(prefix, name),
            }],
            kind: Kind::Rw(RwCall {
                keys: RwKeys::new(prefix, name),
                call: uuid::Uuid::new_v4().simple().to_string(),
                access,
            }),
        })
    }

    pub(crate) fn all(prefix: &str, resources: &[&str]) -> Result<Self, Error> {
        if resources.is_empty() {
            return Err(Error::InvalidResource {
                reason: "the list of resources is empty".to_string(),
            });
        }
        if resources.len() > MAX_RESOURCES {
            return Err(Error::InvalidResource {
                reason: format!(
                    "{} resources in one set, the limit is {MAX_RESOURCES}",
                    resources.len()
                ),
            });
        }
        let mut seen = std::collections::HashSet::new();
        let mut members = Vec::with_capacity(resources.len());
        for resource in resources {
            validate_resource(resource)?;
            if !seen.insert(*resource) {
                return Err(Error::InvalidResource {
                    reason: format!("{resource:?} is listed twice"),
                });
            }
            members.push(Member {
                resource: resource.to_string(),
                keys: Keys::new(prefix, resource),
            });
        }
        Ok(Target {
            name: format!("[{}]", resources.join(", ")),
            members,
            kind: Kind::Set,
        })
    }

    /// The cluster slot of every key of the target, if they share one (a
    /// set's members usually do not).
    pub(crate) fn slot(&self) -> Option<u16> {
        let first = self.members[0].keys.slot;
        if self.members.iter().all(|m| m.keys.slot == first) {
            first
        } else {
            None
        }
    }

    /// The members grouped by slot, in the order each slot first appears:
    /// each group's slot, its members' indices, and a target of just those
    /// members. `None` if a member has no slot (see [`Keys::slot`]).
    pub(crate) fn by_slot(&self) -> Option<Vec<(u16, Vec<usize>, Target)>> {
        let mut groups: Vec<(u16, Vec<usize>, Target)> = Vec::new();
        for (i, member) in self.members.iter().enumerate() {
            let slot = member.keys.slot?;
            match groups.iter_mut().find(|(s, _, _)| *s == slot) {
                Some((_, indices, sub)) => {
                    indices.push(i);
                    sub.members.push(member.clone());
                }
                None => groups.push((
                    slot,
                    vec![i],
                    Target {
                        name: self.name.clone(),
                        members: vec![member.clone()],
                        kind: self.kind.clone(),
                    },
                )),
            }
        }
        Some(groups)
    }

    pub(crate) fn lock_keys(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.keys.lock.as_str()).collect()
    }

    /// The void key of the attempt that uses lock value `value` (see
    /// `lua/release.lua`), next to the first member's keys.
    pub(crate) fn void_key(&self, value: &str) -> String {
        format!("{}{value}", self.members[0].keys.void)
    }
}

pub(crate) fn validate_resource(resource: &str) -> Result<(), Error> {
    let reason = if resource.is_empty() {
        "the name is empty".to_string()
    } else if resource.len() > MAX_RESOURCE_LEN {
        format!(
            "the name is {} bytes long, the limit is {MAX_RESOURCE_LEN}",
            resource.len()
        )
    } else {
        return Ok(());
    };
    Err(Error::InvalidResource { reason })
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid_config(format!(
            "key prefix {prefix:?} contains '{{' or '}}', which would break the hash tag of every key"
        )));
    }
    if prefix.len() > MAX_RESOURCE_LEN {
        return Err(Error::invalid_config(
            "key prefix is longer than 1024 bytes",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_documented_keys() {
        let k = Keys::new("redfence:", "invoice:42");
        assert_eq!(k.lock, "redfence:lock:{invoice:42}");
        assert_eq!(k.fence, "redfence:fence:{invoice:42}");
        assert_eq!(k.channel, "redfence:released:{invoice:42}");
    }

    #[test]
    fn a_prefix_may_be_as_long_as_a_resource_name_and_no_longer() {
        assert!(validate_prefix(&"p".repeat(MAX_RESOURCE_LEN)).is_ok());
        assert!(validate_prefix(&"p".repeat(MAX_RESOURCE_LEN + 1)).is_err());
        assert!(validate_prefix("").is_ok());
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        assert!(matches!(
            validate_resource(""),
            Err(Error::InvalidResource { .. })
        ));
        let long = "x".repeat(MAX_RESOURCE_LEN + 1);
        let err = validate_resource(&long).unwrap_err().to_string();
        assert!(err.contains("1025 bytes"), "{err}");
        assert!(validate_resource(&"x".repeat(MAX_RESOURCE_LEN)).is_ok());
        assert!(validate_prefix("app{").is_err());
        assert!(validate_prefix("").is_ok());
    }

    #[test]
    fn sets_are_checked_as_a_whole() {
        let reason = |r: Result<Target, Error>| match r {
            Err(Error::InvalidResource { reason }) => reason,
            other => panic!("expected InvalidResource, got {other:?}"),
        };
        assert!(reason(Target::all("p:", &[])).contains("empty"));
        assert!(reason(Target::all("p:", &["a", "b", "a"])).contains("twice"));
        assert!(reason(Target::all("p:", &["a", ""])).contains("empty"));
        let many: Vec<String> = (0..=MAX_RESOURCES).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(reason(Target::all("p:", &many)).contains("limit is 64"));
        let set = Target::all("p:", &["b", "a"]).unwrap();
        assert_eq!(set.name, "[b, a]");
        assert_eq!(set.lock_keys(), ["p:lock:{b}", "p:lock:{a}"]);
        assert_eq!(set.members.len(), 2);
        assert_eq!(Target::one("p:", "a").unwrap().members.len(), 1);
    }
}
