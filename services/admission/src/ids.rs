//! The ids admission makes: a new job's, and a client token's key.

/// A new job's id.
pub(crate) fn new_job_id() -> String {
    format!("j-{}", qm_service::random_id())
}

/// A KV-safe key for a client token (any string) within a queue.
pub(crate) fn token_key(queue: &str, token: &str) -> String {
    // Two independent 64-bit FNV-1a hashes of the token, plus its length:
    // distinct tokens colliding is not a practical concern.
    let fnv = |seed: u64| {
        token.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    format!(
        "{queue}.{:016x}{:016x}{:x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142),
        token.len()
    )
}
