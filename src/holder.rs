//! [`Redlock::holder`](crate::Redlock::holder): who holds a lock, read from
//! every instance with `lua/holder.lua` (the identity in the lock value,
//! its time to live, an election's term). The value's format is in
//! `protocol/value.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::lock::shared::Shared;
use crate::protocol::keys::{Keys, RwKeys};
use crate::protocol::majority::Quorum;
use crate::protocol::scripts;
use crate::transport::outgoing::Outgoing;
use crate::transport::round::{error_reply, unexpected, Classify, Vote};
use crate::Error;

/// Who holds a lock, as a quorum of the instances sees it: returned by
/// [`Redlock::holder`](crate::Redlock::holder).
///
/// ```no_run
/// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
/// if let Some(holder) = locks.holder("nightly-report")? {
///     println!(
///         "held by {} for {:?} more, on instances {:?}",
///         holder.identity.as_deref().unwrap_or("(unknown)"),
///         holder.ttl,
///         holder.instances
///     );
/// }
/// # Ok::<(), redfence::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's identity ([`RedlockBuilder::identity`](crate::RedlockBuilder::identity));
    /// `None` for a lock taken by a client that predates identities.
    pub identity: Option<String>,
    /// The remaining time to live a quorum of instances agrees on: at least
    /// this long on at least a quorum of them, as of the reading (less the
    /// time the reading took).
    pub ttl: Duration,
    /// The positions (in the order the instances were given to the
    /// builder) of the instances where this identity holds the lock.
    pub instances: Vec<usize>,
    /// The term an election's leader recorded for this holding, as the
    /// highest among those instances (see `lua/term.lua`).
    pub(crate) counter: Option<u64>,
    /// The SHA1 of the lock value held (`lua/holder.lua`): what a forced
    /// release deletes, and nothing else.
    pub(crate) tag: Vec<u8>,
}

/// One instance's answer to `lua/holder.lua`.
enum Reading {
    Free,
    Held {
        pttl: Option<Duration>,
        identity: String,
        counter: Option<u64>,
        /// The value's SHA1: answers are counted together only when they
        /// name one value, not merely one identity (see `lua/holder.lua`).
        tag: Vec<u8>,
    },
}

fn classify(values: &[Value]) -> Vote<Reading, ()> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    if let [Value::Array(items)] = values {
        match items.as_slice() {
            [Value::Int(0)] => return Vote::Yes(Reading::Free),
            [Value::Int(1), Value::Int(pttl), Value::BulkString(identity), Value::BulkString(counter), Value::BulkString(tag)] =>
            {
                let pttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
                return Vote::Yes(Reading::Held {
                    pttl,
                    identity: String::from_utf8_lossy(identity).into_owned(),
                    counter: std::str::from_utf8(counter)
                        .ok()
                        .and_then(|c| c.parse().ok()),
                    tag: tag.clone(),
                });
            }
            _ => {}
        }
    }
    unexpected("holder", values)
}

/// Reads the holder of `resource` on every instance (see
/// [`Redlock::holder`](crate::Redlock::holder)).
pub(crate) fn read(shared: &Shared, name: &str, keys: &Keys) -> Result<Option<Holder>, Error> {
    let read = read_round(shared, name, keys, scripts::holder(keys), classify)?;
    Ok(agreed_holder(
        &read.answers,
        read.quorum,
        read.start.elapsed(),
    ))
}

/// The answers of a reading round, from a quorum at least.
struct Readings<T> {
    answers: Vec<(usize, T)>,
    quorum: Quorum,
    /// When the round started: the TTLs read are shortened by the time
    /// since.
    start: Instant,
}

/// A read-only round: `packed` (one command) on the slot of `keys`, sent
/// once the connections are warm, waiting for every answer. Fails with a
/// key of another type under `name`, or fewer than a quorum of answers.
fn read_round<T: Send + 'static>(
    shared: &Shared,
    name: &str,
    keys: &Keys,
    packed: Arc<[u8]>,
    classify: Classify<T, ()>,
) -> Result<Readings<T>, Error> {
    shared.warmup.wait();
    let start = Instant::now();
    let deadline = shared.round_deadline();
    let out = Outgoing::to_slot(keys.slot, (packed, 1));
    let tally = shared
        .instances
        .round(&out, deadline, classify)
        .wait_all(deadline);
    let quorum = shared.instances.quorum();
    let wrong_type = tally.has_wrong_type();
    if wrong_type || !quorum.reached(tally.yes.len()) {
        return Err(refusal(
            name,
            quorum,
            tally.yes.len(),
            tally.failed,
            wrong_type,
        ));
    }
    Ok(Readings {
        answers: tally.yes,
        quorum,
        start,
    })
}

/// Reads the holder, then deletes its lock value on every instance where
/// that value is still there (see
/// [`Redlock::force_release`](crate::Redlock::force_release)). Nothing is
/// sent when no value is held on a quorum, or when the reading failed: a
/// delete of a value the call did not read could land late and take a
/// later holder's key (`tests/model_grants.rs`).
pub(crate) fn force_release(
    shared: &Shared,
    name: &str,
    keys: &Keys,
) -> Result<Option<Holder>, Error> {
    let Some(held) = read(shared, name, keys)? else {
        return Ok(None);
    };
    delete_round(shared, name, keys, |sharded| {
        scripts::force_release(keys, &held.tag, sharded)
    })?;
    Ok(Some(held))
}

/// A forced release's delete (then its announcement): done whether the
/// value was there or not; either way the instance no longer holds it.
fn deleted(values: &[Value]) -> Vote<(), ()> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    match values.first() {
        Some(Value::Int(_)) => Vote::Yes(()),
        _ => unexpected("force_release", values),
    }
}

/// The holder a quorum of the readings names, if any: by value, not
/// identity, since a client that holds the lock again may have left its
/// earlier value (and that value's term) on an instance.
fn agreed_holder(
    readings: &[(usize, Reading)],
    quorum: Quorum,
    elapsed: Duration,
) -> Option<Holder> {
    agreed_values(readings, quorum, elapsed).into_iter().next()
}

/// Every value held on a quorum of the readings (an instance may give
/// several: the readers of an rw lock), each as a holder, in the order
/// first read.
fn agreed_values(readings: &[(usize, Reading)], quorum: Quorum, elapsed: Duration) -> Vec<Holder> {
    type Seen = (usize, Option<Duration>, Option<u64>);
    let mut order: Vec<&[u8]> = Vec::new();
    let mut by_value: HashMap<&[u8], (&str, Vec<Seen>)> = HashMap::new();
    for (index, reading) in readings {
        if let Reading::Held {
            pttl,
            identity,
            counter,
            tag,
        } = reading
        {
            let entry = by_value.entry(tag.as_slice()).or_insert_with(|| {
                order.push(tag.as_slice());
                (identity.as_str(), Vec::new())
            });
            entry.1.push((*index, *pttl, *counter));
        }
    }
    order
        .into_iter()
        .filter_map(|tag| {
            let (identity, mut held) = by_value.remove(tag)?;
            held.sort_by_key(|(index, _, _)| *index);
            held.dedup_by_key(|(index, _, _)| *index);
            if !quorum.reached(held.len()) {
                return None;
            }
            let mut ttls: Vec<Duration> = held
                .iter()
                .map(|(_, ttl, _)| ttl.unwrap_or(Duration::MAX))
                .collect();
            let counter = held.iter().filter_map(|(_, _, c)| *c).max();
            // Descending: the quorum-th longest is what a quorum agrees on.
            ttls.sort_by(|a, b| b.cmp(a));
            let ttl = ttls.get(quorum.size() - 1)?.saturating_sub(elapsed);
            Some(Holder {
                identity: (!identity.is_empty()).then(|| identity.to_string()),
                ttl,
                instances: held.into_iter().map(|(index, _, _)| index).collect(),
                counter,
                tag: tag.to_vec(),
            })
        })
        .collect()
}

// --- Reader-writer locks -----------------------------------------------------

/// What [`RwLock::force_release`](crate::RwLock::force_release) revoked:
/// the writer and the readers that held the lock on a quorum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwHolders {
    /// The writer, if one held it.
    pub writer: Option<Holder>,
    /// The readers, in the order first read.
    pub readers: Vec<Holder>,
}

/// One instance's answer to `lua/rw_holders.lua`: (is the writer, reading)
/// per holder.
fn classify_rw(values: &[Value]) -> Vote<Vec<(bool, Reading)>, ()> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    let [Value::Array(items)] = values else {
        return unexpected("rw_holders", values);
    };
    let mut out = Vec::with_capacity(items.len() / 4);
    for chunk in items.chunks(4) {
        let [Value::BulkString(kind), Value::Int(pttl), Value::BulkString(identity), Value::BulkString(tag)] =
            chunk
        else {
            return unexpected("rw_holders", values);
        };
        let reading = Reading::Held {
            pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            identity: String::from_utf8_lossy(identity).into_owned(),
            counter: None,
            tag: tag.clone(),
        };
        out.push((kind.as_slice() == b"w", reading));
    }
    Vote::Yes(out)
}

/// Reads the writer and readers of rw lock `name` on every instance, then
/// deletes the values held on a quorum wherever they still are, and
/// nothing else (`lua/rw_force_release.lua`).
pub(crate) fn rw_force_release(
    shared: &Shared,
    name: &str,
    keys: &Keys,
    rw: &RwKeys,
) -> Result<RwHolders, Error> {
    let packed = scripts::rw_holders(keys, rw);
    let read = read_round(shared, name, keys, packed, classify_rw)?;
    let (mut writers, mut readers) = (Vec::new(), Vec::new());
    for (index, answers) in read.answers {
        for (is_writer, reading) in answers {
            let list = if is_writer {
                &mut writers
            } else {
                &mut readers
            };
            list.push((index, reading));
        }
    }
    let revoked = RwHolders {
        writer: agreed_holder(&writers, read.quorum, read.start.elapsed()),
        readers: agreed_values(&readers, read.quorum, read.start.elapsed()),
    };
    let tags: Vec<&[u8]> = revoked
        .writer
        .iter()
        .chain(&revoked.readers)
        .map(|h| h.tag.as_slice())
        .collect();
    if tags.is_empty() {
        return Ok(revoked);
    }
    delete_round(shared, name, keys, |sharded| {
        scripts::rw_force_release(keys, rw, &tags, sharded)
    })?;
    Ok(revoked)
}

/// An unlock's deletes (`pack`, then `SPUBLISH` with `sharded`) to every
/// instance: done once a quorum confirmed them.
fn delete_round(
    shared: &Shared,
    name: &str,
    keys: &Keys,
    pack: impl Fn(bool) -> (Arc<[u8]>, usize),
) -> Result<(), Error> {
    let on_cluster = || pack(true);
    let out = Outgoing::to_slot(keys.slot, pack(false)).on_cluster(&on_cluster);
    let deadline = shared.round_deadline();
    let tally = shared
        .instances
        .round(&out, deadline, deleted)
        .wait_all(deadline);
    let quorum = shared.instances.quorum();
    if !quorum.reached(tally.yes.len()) {
        return Err(refusal(name, quorum, tally.yes.len(), tally.failed, false));
    }
    Ok(())
}

/// Too few answers, or a key of another type under the lock's name.
fn refusal(
    name: &str,
    quorum: Quorum,
    answered: usize,
    failed: Vec<crate::InstanceError>,
    wrong_type: bool,
) -> Error {
    if wrong_type {
        return Error::WrongType {
            resource: name.to_string(),
            errors: failed,
        };
    }
    Error::unavailable(name, quorum.size(), answered, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any reply to the holder scripts classifies: never a panic.
        #[test]
        fn any_holder_reply_classifies(values in crate::arbitrary::replies()) {
            let _ = classify(&values);
            let _ = classify_rw(&values);
        }
    }
}
