//! What this process holds, for the tests that check nothing leaks over many cycles.

/// Descriptors open in this process (`/proc/self/fd`; the directory's own descriptor counts,
/// the same in every reading).
pub fn count_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Mappings of this process (lines of `/proc/self/maps`).
pub fn count_maps() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}
