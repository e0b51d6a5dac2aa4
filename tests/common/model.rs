//! What the model checks (`tests/model_*.rs`) share: the cluster's size,
//! the two kinds of search they run (every behaviour, or the shortest one
//! that breaks a property) and how a search reports what it covered.
#![allow(dead_code)] // each model uses part of it

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model, Path};

/// The instances every model runs on: the smallest cluster where a quorum
/// is not every instance.
pub const N: usize = 3;
/// A majority of `N`.
pub const QUORUM: usize = N / 2 + 1;

/// What the searches below need of a model to run it on several threads
/// and print its behaviours.
pub trait Searchable:
    Model<
        State: Debug + Hash + Send + Sync + Clone + PartialEq + 'static,
        Action: Debug + Clone + PartialEq,
    > + Send
    + Sync
    + 'static
{
}

impl<M> Searchable for M
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Debug + Clone + PartialEq,
{
}

/// A model's symmetry reduction: the representative of a state's class.
pub type Symmetry<M> = fn(&<M as Model>::State) -> <M as Model>::State;

/// Every core the machine has: a search is the only heavy work of its test
/// binary.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Prints what a search covered: its states, depth and time.
pub fn report<M: stateright::Model>(
    label: &str,
    start: std::time::Instant,
    checker: &impl stateright::Checker<M>,
) {
    println!(
        "{label}: {} unique states, depth {}, {:.2?}",
        checker.unique_state_count(),
        checker.max_depth(),
        start.elapsed()
    );
}

/// The members (bits) of `mask` below `n`.
pub fn members(mask: u8, n: usize) -> impl Iterator<Item = usize> {
    (0..n).filter(move |i| mask & (1 << i) != 0)
}

/// A depth-first search of `model` on every core, states folded by
/// `symmetry` where the model has one, stopping after `bound` generated
/// states if given. Whether it covered the whole space is
/// [`exhaustive`]'s question.
pub fn dfs<M: Searchable>(
    label: &str,
    model: M,
    symmetry: Option<Symmetry<M>>,
    bound: Option<usize>,
) -> impl Checker<M> {
    let start = Instant::now();
    let mut builder = model.checker().threads(cores());
    if let Some(representative) = symmetry {
        builder = builder.symmetry_fn(representative);
    }
    if let Some(bound) = bound {
        builder = builder.target_state_count(bound);
    }
    let checker = builder.spawn_dfs().join();
    report(label, start, &checker);
    checker
}

/// A breadth-first search of `model` on every core, stopping after `bound`
/// generated states: every behaviour up to the depth it reports, for a
/// space too large to search whole ([`exhaustive`] tells whether it was).
pub fn bfs<M: Searchable>(label: &str, model: M, bound: usize) -> impl Checker<M> {
    let start = Instant::now();
    let checker = model
        .checker()
        .threads(cores())
        .target_state_count(bound)
        .spawn_bfs()
        .join();
    report(label, start, &checker);
    checker
}

/// Whether a search that stopped at `bound` (if any) covered every state:
/// the checker stops early once it generated `bound` states, and
/// `is_done` is true then too, so only the count tells.
pub fn exhaustive<M: Model>(checker: &impl Checker<M>, bound: Option<usize>) -> bool {
    checker.is_done() && bound.is_none_or(|bound| checker.state_count() < bound)
}

/// Searches every behaviour of `model` ([`dfs`]) and fails unless the
/// search covered the whole space; the caller asserts the properties.
pub fn exhaustively<M: Searchable>(
    label: &str,
    model: M,
    symmetry: Option<Symmetry<M>>,
    bound: Option<usize>,
) -> impl Checker<M> {
    let checker = dfs(label, model, symmetry, bound);
    assert!(exhaustive(&checker, bound), "the search must be exhaustive");
    checker
}

/// Where a counterexample search stops besides its end.
#[derive(Clone, Copy)]
pub struct Stop {
    /// After this many generated states.
    pub bound: Option<usize>,
    /// At the first property that fails (what the model's `focus` points
    /// the search at).
    pub at_failure: bool,
}

impl Stop {
    /// At the end of the space only.
    pub const END: Stop = Stop {
        bound: None,
        at_failure: false,
    };
}

/// The shortest behaviour of `model` that breaks one of `properties`: a
/// breadth-first search on one thread (so the first failure it meets is
/// a shortest one, and the same each run). Returns the property and the
/// behaviour; fails if none of them breaks.
pub fn counterexample<M: Searchable>(
    label: &str,
    model: M,
    stop: Stop,
    properties: &[&'static str],
) -> (&'static str, Path<M::State, M::Action>) {
    let start = Instant::now();
    let mut builder = model.checker();
    if let Some(bound) = stop.bound {
        builder = builder.target_state_count(bound);
    }
    if stop.at_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    report(label, start, &checker);
    let (property, path) = properties
        .iter()
        .find_map(|&p| checker.discovery(p).map(|path| (p, path)))
        .unwrap_or_else(|| panic!("{label} must break one of {properties:?}"));
    let actions = path.clone().into_actions();
    println!(
        "counterexample to \"{property}\" ({} steps): {actions:?}",
        actions.len()
    );
    (property, path)
}
