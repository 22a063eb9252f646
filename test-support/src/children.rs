//! Child processes killed and reaped when a test ends.

/// Children that are killed and reaped when the test ends, passed or failed.
pub struct Children(pub Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
