//! `redfence unlock`: revokes a resource's holder (a lock's, each slot of a
//! semaphore's with `--permits`, an rw lock's writer and readers with
//! `--rw`), deleting the values it read on a quorum and nothing else (after
//! a crashed holder with a long TTL, or a hold that must end early). The
//! fence counters stay, so tokens keep increasing. `--permits N --recount`
//! then makes N the semaphore's count.

use redfence::Holder;

use crate::cli::{Common, UnlockArgs};
use crate::client;
use crate::exit::{Failure, CONFLICT, USAGE};

pub fn unlock(common: &Common, args: &UnlockArgs) -> Result<u8, Failure> {
    if args.resource.is_empty() {
        return Err(Failure::new(USAGE, "the resource name is empty"));
    }
    let locks = client::Target::from_options(common)?.client(common)?;
    let failed = |e: redfence::Error| Failure::from_lock_error(&e, USAGE, USAGE);
    let name = &args.resource;
    report(name, revoke(&locks, args).map_err(failed)?);
    if let (Some(permits), true) = (args.permits, args.recount) {
        // Permits still held where the count must change: a conflict.
        let held = |e: redfence::Error| Failure::from_lock_error(&e, CONFLICT, USAGE);
        locks.semaphore(name, permits).recount().map_err(held)?;
        let plural = if permits == 1 { "" } else { "s" };
        out!("{name}: {permits} permit{plural} recorded");
    }
    Ok(0)
}

/// Revokes what `args` names: each revoked part with its holder.
fn revoke(
    locks: &redfence::Redlock,
    args: &UnlockArgs,
) -> Result<Vec<(String, Holder)>, redfence::Error> {
    let name = &args.resource;
    let revoked: Vec<(String, Holder)> = if let Some(permits) = args.permits {
        let slots = locks.semaphore(name, permits).force_release()?;
        slots
            .into_iter()
            .map(|(slot, h)| (format!("slot {slot}"), h))
            .collect()
    } else if args.rw {
        let held = locks.rw_lock(name).force_release()?;
        let writer = held.writer.map(|h| ("the writer".to_string(), h));
        let readers = held
            .readers
            .into_iter()
            .map(|h| ("a reader".to_string(), h));
        writer.into_iter().chain(readers).collect()
    } else {
        let held = locks.force_release(name)?;
        held.map(|h| (String::new(), h)).into_iter().collect()
    };
    Ok(revoked)
}

/// Prints what was revoked.
fn report(name: &str, revoked: Vec<(String, Holder)>) {
    if revoked.is_empty() {
        out!("{name}: nothing to release (no holder on a quorum)");
    }
    for (what, holder) in revoked {
        let by = holder
            .identity
            .as_deref()
            .unwrap_or("a holder without an identity");
        match what.as_str() {
            "" => out!("{name}: released (held by {by})"),
            what => out!("{name}: released {what} (held by {by})"),
        }
    }
}
