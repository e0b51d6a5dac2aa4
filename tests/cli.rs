#[test]
fn bin_path() { println!("{}", env!("CARGO_BIN_EXE_redfence")); assert!(std::path::Path::new(env!("CARGO_BIN_EXE_redfence")).exists()); }
