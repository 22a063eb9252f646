//! Test scaffolding: a private runtime directory and a unique key per test, and cleanup of
//! every socket and /dev/shm object the test made, also when it fails (Drop runs on panic).
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

pub struct TestEnv {
    pub dir: PathBuf,
    pub key: String,
}

impl TestEnv {
    pub fn new(tag: &str) -> TestEnv {
        let n = cuframes_core::testing::unique_suffix();
        let key = format!("t-{tag}-{}-{:x}", std::process::id(), n & 0xFFFF_FFFF);
        let dir =
            std::env::temp_dir().join(format!("cuframes-test-{}-{:x}", std::process::id(), n));
        std::fs::create_dir_all(&dir).unwrap();
        TestEnv { dir, key }
    }

    pub fn publisher_options(&self) -> cuframes_core::publisher::PublisherOptions {
        cuframes_core::publisher::PublisherOptions {
            runtime_dir: Some(self.dir.clone()),
            ..Default::default()
        }
    }

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
        let _ = cuframes_core::shm::unlink(&format!("cuframes-{}", self.key));
        let _ = cuframes_core::shm::unlink(&format!("cuframes-{}-packets", self.key));
    }
}

/// The byte every subscriber expects at `offset` of frame `seq`.
pub fn pattern_byte(seq: u64, offset: usize) -> u8 {
    (seq.wrapping_mul(0x9E37_79B9)
        .wrapping_add(offset as u64 * 31)
        >> 3) as u8
}

/// Fill a host buffer with the pattern of `seq`.
pub fn fill_pattern(seq: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(seq, i);
    }
}

/// Check that every byte of every plane's rows matches the pattern of `seq` (the pattern
/// is laid out over the dense planes the publisher was given). Host frames, COPY or
/// zero-copy: each plane is copied out (a zero-copy slot may be rewritten under DROP_OLDEST,
/// so no slice of it is formed).
pub fn verify_frame(frame: &cuframes_core::subscriber::Frame, dense: &[Vec<u8>]) -> bool {
    let mut rows = Vec::new();
    for (i, plane) in dense.iter().enumerate() {
        rows.resize(plane.len(), 0);
        frame.copy_plane_to(i, &mut rows).unwrap();
        if rows != *plane {
            return false;
        }
    }
    true
}

/// Dense planes of frame `seq`: what a publisher writes and every subscriber expects.
pub fn planes_for(layout: &cuframes_core::format::FrameLayout, seq: u64) -> Vec<Vec<u8>> {
    layout
        .planes()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut v = vec![0u8; p.row_bytes * p.rows];
            fill_pattern(seq * 4 + i as u64, &mut v);
            v
        })
        .collect()
}

/// Publish the pattern planes of `seq` through the host-copy convenience.
pub fn publish_pattern(
    p: &cuframes_core::publisher::Publisher,
    seq: u64,
    pts_ns: Option<i64>,
) -> cuframes_core::Result<(u64, Vec<Vec<u8>>)> {
    let layout = p.frame_layout().unwrap().clone();
    let planes = planes_for(&layout, seq);
    let refs: Vec<&[u8]> = planes.iter().map(|v| v.as_slice()).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
    let published = p.publish_host_planes(&refs, &strides, pts_ns)?;
    Ok((published, planes))
}

/// Small deterministic PRNG (xorshift64*): no extra crate; `Rng::new(seed)` mixes the seed
/// (splitmix64), `Rng(state)` takes a non-zero state as it is.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed: never zero, and nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

/// The calling thread's run-queue delay so far (`/proc/thread-self/schedstat`, second field),
/// if the kernel keeps schedstats: CPU-starved time that a bound on a wall-clock wait must
/// not count on a loaded 2-core machine.
pub struct RunDelay(Option<std::fs::File>);

impl RunDelay {
    /// Whether the kernel reports it (else net times are wall times).
    pub fn available(&self) -> bool {
        self.0.is_some()
    }
}

impl RunDelay {
    pub fn of_this_thread() -> RunDelay {
        let rd = RunDelay(std::fs::File::open("/proc/thread-self/schedstat").ok());
        match rd.get() {
            Some(_) => rd,
            None => RunDelay(None),
        }
    }

    pub fn get(&self) -> Option<Duration> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.0.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let ns = text.split_whitespace().nth(1)?.parse().ok()?;
        Some(Duration::from_nanos(ns))
    }
}

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

/// Is there a CUDA driver with a device? `Some(why)` when not (tests print it when skipping).
pub fn no_cuda() -> Option<String> {
    match cuframes_core::cuda::driver_available().and_then(|_| cuframes_core::cuda::device_count())
    {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("the driver reports 0 devices".into()),
        Err(e) => Some(e.to_string()),
    }
}

/// Reads CUDA frames back to the host (a device-to-host copy on a stream of its own), so that
/// tests check them byte for byte like host frames.
pub struct CudaCheck {
    _dev: std::sync::Arc<cuframes_core::cuda::CudaDevice>,
    stream: cuframes_core::cuda::Stream,
}

impl CudaCheck {
    /// Device 0, made current on this thread.
    pub fn open() -> CudaCheck {
        let dev = cuframes_core::cuda::CudaDevice::open(0).unwrap();
        dev.make_current().unwrap();
        let stream = cuframes_core::cuda::Stream::new(&dev).unwrap();
        CudaCheck { _dev: dev, stream }
    }

    /// The frame's planes, dense (row_bytes per row, no pitch padding), as the publisher was
    /// given them.
    pub fn dense_planes(&self, f: &cuframes_core::subscriber::Frame) -> Vec<Vec<u8>> {
        f.layout
            .planes()
            .iter()
            .map(|p| {
                let mut out = vec![0u8; p.row_bytes * p.rows];
                // SAFETY: `f` keeps its device memory (the imported slot, or its pooled copy)
                // mapped while it lives; the plane (rows of row_bytes at pitch from its offset)
                // lies within the frame; `out` holds rows × row_bytes bytes at a pitch of
                // row_bytes; the copy is synchronous on a live stream of ours.
                unsafe {
                    cuframes_core::cuda::copy_dtoh_2d(
                        &mut out,
                        p.row_bytes,
                        f.address() + p.offset as u64,
                        p.pitch,
                        p.row_bytes,
                        p.rows,
                        &self.stream,
                    )
                }
                .unwrap();
                out
            })
            .collect()
    }
}

/// Does every byte of `f` match `dense` (host frames directly, CUDA frames through `cuda`)?
pub fn verify_any(
    f: &cuframes_core::subscriber::Frame,
    dense: &[Vec<u8>],
    cuda: Option<&CudaCheck>,
) -> bool {
    match cuda {
        None => verify_frame(f, dense),
        Some(c) => c.dense_planes(f) == dense,
    }
}
