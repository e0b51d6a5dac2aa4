//! What the model checks (`tests/model_*.rs`) share.

/// Every core the machine has: a search is the only heavy work of its test
/// binary.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
