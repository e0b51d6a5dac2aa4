//! One request to every voter, and everything about where it goes: its
//! packed commands, the native form some servers run instead, and, for a
//! client with a Redis Cluster position, how it reaches the shards (one
//! slot, or one part per slot). The caller says what the request is about;
//! the fan-out (`round.rs`) decides how to route it.

use std::sync::Arc;

use crate::protocol::keys::Target;
use crate::protocol::native::Form;
use crate::protocol::split::{Combine, Route};

/// Packed commands and how many replies they give.
pub(crate) type Packed = (Arc<[u8]>, usize);

/// Packs a request for one part of a target (one slot's members).
pub(crate) type PackPart<'a> = &'a dyn Fn(&Target) -> Packed;
/// Combines the parts' replies, given the parts' targets.
pub(crate) type CombineParts<'a> = &'a dyn Fn(&[Target]) -> Combine;

/// A request about to go to every voter.
pub(crate) struct Outgoing<'a> {
    whole: Packed,
    native: Option<Arc<Form>>,
    scope: Scope<'a>,
    cluster_form: Option<&'a dyn Fn() -> Packed>,
}

/// Which keys a request touches, for a cluster position to route it.
enum Scope<'a> {
    /// Keys that share one slot (or none).
    Slot(Option<u16>),
    /// A target's keys, in one slot or several: a request over several is
    /// cut into one part per slot, each packed by `part`, their replies
    /// combined by `combine` (a 1/0 script's rule when `None`).
    Target {
        target: &'a Target,
        part: PackPart<'a>,
        combine: Option<CombineParts<'a>>,
    },
}

impl<'a> Outgoing<'a> {
    /// A request about `target`, packed whole as `whole`; where the target's
    /// keys lie in several slots of a cluster position, each slot's part is
    /// packed by `part`.
    pub(crate) fn about(target: &'a Target, whole: Packed, part: PackPart<'a>) -> Self {
        Outgoing {
            whole,
            native: None,
            scope: Scope::Target {
                target,
                part,
                combine: None,
            },
            cluster_form: None,
        }
    }

    /// A request whose keys share `slot` (`None`: no keys).
    pub(crate) fn to_slot(slot: Option<u16>, whole: Packed) -> Self {
        Outgoing {
            whole,
            native: None,
            scope: Scope::Slot(slot),
            cluster_form: None,
        }
    }

    /// The parts' replies combine as `combine` says (an acquire's rule)
    /// instead of a 1/0 script's.
    pub(crate) fn combined(mut self, combine: CombineParts<'a>) -> Self {
        if let Scope::Target { combine: c, .. } = &mut self.scope {
            *c = Some(combine);
        }
        self
    }

    /// Sends `native` instead to the instances whose connection runs it.
    pub(crate) fn or_native(mut self, native: Option<Arc<Form>>) -> Self {
        self.native = native;
        self
    }

    /// The form a cluster position sends when the request goes to one slot
    /// whole, where it differs (a release announces with `SPUBLISH`).
    pub(crate) fn on_cluster(mut self, form: &'a dyn Fn() -> Packed) -> Self {
        self.cluster_form = Some(form);
        self
    }

    pub(crate) fn packed(&self) -> &Arc<[u8]> {
        &self.whole.0
    }

    pub(crate) fn commands(&self) -> usize {
        self.whole.1
    }

    pub(crate) fn native(&self) -> Option<&Arc<Form>> {
        self.native.as_ref()
    }

    /// Where the request goes, on a client with a cluster position
    /// (`cluster` true) or without one: nothing is packed for a cluster
    /// unless there is one.
    pub(crate) fn route(&self, cluster: bool) -> Route {
        let route = match &self.scope {
            Scope::Slot(slot) => Route::slot(*slot),
            Scope::Target {
                target,
                part,
                combine,
            } => Route::new(
                target,
                cluster,
                |subs| combine.map_or(Combine::AllYes, |c| c(subs)),
                part,
            ),
        };
        match self.cluster_form {
            Some(form) => route.with_cluster_form(cluster, form),
            None => route,
        }
    }
}
