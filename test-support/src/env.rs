//! A private runtime directory and a unique key per test; dropping it removes the
//! directory and every /dev/shm object of the key, also when the test fails (Drop runs on
//! panic).

use std::path::PathBuf;

/// One test's world: its runtime directory and its key, removed with every SHM object of
/// the key when dropped.
pub struct TestEnv {
    /// The private runtime directory (sockets live here).
    pub dir: PathBuf,
    /// A key no other test (or run) uses: `t-<tag>-<pid>-<n>`.
    pub key: String,
}

impl TestEnv {
    /// A fresh directory and key; `tag` names the test in the key.
    pub fn new(tag: &str) -> TestEnv {
        let n = cuframes_core::testing::unique_suffix();
        let key = format!("t-{tag}-{}-{:x}", std::process::id(), n & 0xFFFF_FFFF);
        let dir =
            std::env::temp_dir().join(format!("cuframes-test-{}-{:x}", std::process::id(), n));
        std::fs::create_dir_all(&dir).unwrap();
        TestEnv { dir, key }
    }

    /// Publisher options in this runtime directory.
    pub fn publisher_options(&self) -> cuframes_core::publisher::PublisherOptions {
        cuframes_core::publisher::PublisherOptions {
            runtime_dir: Some(self.dir.clone()),
            ..Default::default()
        }
    }

    /// Subscriber options named `name` in this runtime directory.
    pub fn subscriber_options(&self, name: &str) -> cuframes_core::subscriber::SubscriberOptions {
        cuframes_core::subscriber::SubscriberOptions {
            runtime_dir: Some(self.dir.clone()),
            name: name.to_owned(),
            ..Default::default()
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let Ok(key) = cuframes_core::Key::new(&self.key) else {
            return;
        };
        let _ = cuframes_core::shm::unlink(&key.frame_shm_name());
        let _ = cuframes_core::shm::unlink(&key.packet_shm_name());
        // Generation names (`cuframes-KEY.<16 hex>`, a ring whose plain name someone else
        // held) are the key's too.
        for entry in std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if key.is_frame_shm(&name) || key.is_packet_shm(&name) {
                let _ = cuframes_core::shm::unlink(&name);
            }
        }
    }
}
