//! The Lua scripts, hashed once and sent with EVALSHA.

use std::sync::LazyLock;

use redis::Script;

pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/acquire.lua")));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/extend.lua")));
pub(crate) static FENCE_RAISE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fence_raise.lua")));

/// Sources of every script a worker connection preloads.
pub(crate) const ALL_SOURCES: [&str; 4] = [
    include_str!("../lua/acquire.lua"),
    include_str!("../lua/release.lua"),
    include_str!("../lua/extend.lua"),
    include_str!("../lua/fence_raise.lua"),
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
