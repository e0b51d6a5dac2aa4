//! redfence (work in progress)
#[cfg(feature = "testing")]
pub mod testing;
