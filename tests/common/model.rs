//! What the model checks (`tests/model_*.rs`) share.

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
#[allow(dead_code)] // the models of sets use it, the others not
pub fn members(mask: u8, n: usize) -> impl Iterator<Item = usize> {
    (0..n).filter(move |i| mask & (1 << i) != 0)
}
