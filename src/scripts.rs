//! The Lua scripts, hashed once and sent with EVALSHA.

use std::sync::LazyLock;

use redis::Script;

const ACQUIRE_SOURCE: &str = concat!(
    include_str!("../lua/counter.lua"),
    include_str!("../lua/acquire.lua")
);
const FENCE_RAISE_SOURCE: &str = concat!(
    include_str!("../lua/counter.lua"),
    include_str!("../lua/fence_raise.lua")
);

pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SOURCE));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/extend.lua")));
pub(crate) static FENCE_RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(FENCE_RAISE_SOURCE));

/// Sources of every script a worker connection preloads.
pub(crate) const ALL_SOURCES: [&str; 4] = [
    ACQUIRE_SOURCE,
    include_str!("../lua/release.lua"),
    include_str!("../lua/extend.lua"),
    FENCE_RAISE_SOURCE,
];

/// An EVALSHA command packed once, shared by every instance's worker.
pub(crate) fn packed(script: &Script, keys: &[&str], args: &[&[u8]]) -> std::sync::Arc<[u8]> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd.get_packed_command().into()
}

/// The release of one lease: compare-and-delete its lock key, announce on
/// its channel. Shared by guards and by failed attempts cleaning up.
pub(crate) fn release(keys: &crate::keys::Keys, value: &str) -> std::sync::Arc<[u8]> {
    packed(
        &RELEASE,
        &[&keys.lock],
        &[value.as_bytes(), keys.channel.as_bytes()],
    )
}
