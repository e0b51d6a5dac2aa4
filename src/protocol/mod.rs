//! What goes on the wire: key names and slots, the Lua scripts and the
//! native commands that replace some of them, the instances' clocks as the
//! client reads them, and how a request splits over a cluster's slots.
//! The lowest layer: it uses nothing above it (see docs/architecture.md).

pub(crate) mod clock;
pub(crate) mod keys;
pub(crate) mod majority;
pub(crate) mod native;
// Read by tests/request_kinds.rs only, through `testing::request_kinds`.
#[cfg(feature = "testing")]
pub(crate) mod requests;
pub(crate) mod scripts;
pub(crate) mod slot;
pub(crate) mod split;
pub(crate) mod value;
