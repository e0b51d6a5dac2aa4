//! The Lua scripts, hashed once and sent with EVALSHA, and the packed
//! requests built from them. The hot path uses only the release script;
//! extension and the raise round are rarer.

use std::sync::{Arc, LazyLock};

use redis::Script;

use crate::keys::Target;

const FENCE_RAISE_SOURCE: &str = include_str!("../lua/fence_raise.lua");

pub(crate) static ACQUIRE_ALL: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/acquire_all.lua")));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/extend.lua")));
pub(crate) static FENCE_RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(FENCE_RAISE_SOURCE));

/// Sources of every script a worker connection preloads.
pub(crate) const ALL_SOURCES: [&str; 4] = [
    include_str!("../lua/acquire_all.lua"),
    include_str!("../lua/release.lua"),
    include_str!("../lua/extend.lua"),
    FENCE_RAISE_SOURCE,
];

/// An EVALSHA command packed once, shared by every instance's worker.
pub(crate) fn packed(script: &Script, keys: &[&str], args: &[&[u8]]) -> Arc<[u8]> {
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

/// Compare-and-delete of a lease's lock keys: how a failed attempt cleans
/// up. Nobody waits for a lock that was never granted, so nothing is
/// announced.
pub(crate) fn release(target: &Target, value: &str) -> Arc<[u8]> {
    packed(&RELEASE, &target.lock_keys(), &[value.as_bytes()])
}

/// A holder's release: compare-and-delete, then a native `PUBLISH` on each
/// member's release channel to wake waiters; `commands` of them in all.
/// The announcement goes out even where a key was already gone; a waiter
/// woken for nothing tries once and waits again, which is cheaper than a
/// `redis.call` inside the script on every release.
pub(crate) fn release_and_announce(target: &Target, value: &str) -> (Arc<[u8]>, usize) {
    let mut pipe = redis::pipe();
    pipe.add_command(eval(&RELEASE, &target.lock_keys(), &[value.as_bytes()]));
    for member in &target.members {
        pipe.cmd("PUBLISH").arg(&member.keys.channel).arg("1");
    }
    (pipe.get_packed_pipeline().into(), 1 + target.members.len())
}
