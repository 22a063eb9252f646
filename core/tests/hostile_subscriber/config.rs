//! The knobs of the hostile-subscriber test, read from the environment.

/// How long the hostile child attacks per policy: `CUFRAMES_HOSTILE_SECS`, 30 s by default.
pub fn secs() -> u64 {
    std::env::var("CUFRAMES_HOSTILE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

/// Whether the slots are on CUDA VMM device 0 (`CUFRAMES_HOSTILE_MEMORY=cuda`).
pub fn memory_is_cuda() -> bool {
    std::env::var("CUFRAMES_HOSTILE_MEMORY").is_ok_and(|v| v.eq_ignore_ascii_case("cuda"))
}
