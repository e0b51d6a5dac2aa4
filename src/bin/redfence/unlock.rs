//! `redfence unlock`: revokes a resource's holder, deleting the lock value
//! it read on a quorum and nothing else (after a crashed holder with a long
//! TTL, or a hold that must end early). The fence counter stays, so tokens
//! keep increasing.

use crate::cli::{Common, UnlockArgs};
use crate::client;
use crate::exit::{Failure, USAGE};

pub fn unlock(common: &Common, args: &UnlockArgs) -> Result<u8, Failure> {
    if args.resource.is_empty() {
        return Err(Failure::new(USAGE, "the resource name is empty"));
    }
    let locks = client::Target::from_options(common)?.client(common)?;
    let held = locks
        .force_release(&args.resource)
        .map_err(|e| Failure::from_lock_error(&e, USAGE, USAGE))?;
    match held {
        Some(holder) => out!(
            "{}: released (held by {})",
            args.resource,
            holder
                .identity
                .as_deref()
                .unwrap_or("a holder without an identity")
        ),
        None => out!(
            "{}: nothing to release (no holder on a quorum)",
            args.resource
        ),
    }
    Ok(0)
}
