//! Unit tests that call the C API across handles, as a C program does.

mod codec;
mod every_entry_point;
mod publisher;
mod subscriber_threads;

/// A runtime directory of our own; the rings' /dev/shm objects go with it, also on failure.
struct Scratch {
    dir: std::path::PathBuf,
    key: String,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = cuframes_core::shm::unlink(&format!("cuframes-{}", self.key));
        let _ = cuframes_core::shm::unlink(&format!("cuframes-{}-packets", self.key));
    }
}
