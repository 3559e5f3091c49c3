//! The permissions violations the NATS server reported on this process's
//! connections: why a request got no answer.

static VIOLATIONS: std::sync::Mutex<Vec<(std::time::Instant, String)>> =
    std::sync::Mutex::new(Vec::new());

pub(crate) fn record(text: &str) {
    if let Ok(mut v) = VIOLATIONS.lock() {
        if v.len() >= 16 {
            v.remove(0);
        }
        v.push((std::time::Instant::now(), text.to_string()));
    }
}

/// The newest permissions violation the server reported on this process's
/// connections since `since`: why a request got no answer.
pub fn since(since: std::time::Instant) -> Option<String> {
    VIOLATIONS
        .lock()
        .ok()?
        .iter()
        .rev()
        .find(|(at, _)| *at >= since)
        .map(|(_, text)| text.clone())
}
