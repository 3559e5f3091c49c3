//! What the wire tests share.

/// A v1 fixture's text (`tests/fixtures/<name>`).
pub fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture exists")
}
