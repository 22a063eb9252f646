//! The names of a key's SHM objects, from `cuframes_core::Key` (the one place that spells
//! them), for tests that open, plant or look for them by name.

/// `cuframes-<key>`: the frame SHM name of `key`, relative to /dev/shm.
pub fn frame_shm_name(key: &str) -> String {
    cuframes_core::Key::new(key)
        .expect("a test key is a valid key")
        .frame_shm_name()
}

/// `cuframes-<key>-packets`: the packet SHM name of `key`, relative to /dev/shm.
pub fn packet_shm_name(key: &str) -> String {
    cuframes_core::Key::new(key)
        .expect("a test key is a valid key")
        .packet_shm_name()
}

/// `/dev/shm/<name>`: where the SHM object `name` lies in the file system.
pub fn shm_path(name: &str) -> String {
    format!("/dev/shm/{name}")
}
