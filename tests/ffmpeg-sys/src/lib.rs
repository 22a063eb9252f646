//! What the libav* API tests (`tests/libav.rs`) share: the cuframes C ABI (bindings of
//! cuframes.h, the same libcuframes.a the FFmpeg components call), a private runtime
//! directory with unique keys that is cleaned up even when a test fails, and small safe
//! wrappers around the libav* calls the tests repeat.

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use ffmpeg_sys_next as ff;

#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code
)]
pub mod cf {
    include!(concat!(env!("OUT_DIR"), "/cuframes.rs"));
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// One test's world: its runtime directory (passed to every component as `runtime_dir`,
/// so no process-wide environment is changed) and its keys. Drop removes the keys' SHM
/// objects and the directory.
pub struct World {
    pub dir: PathBuf,
    pub dir_c: CString,
    keys: Vec<String>,
}

impl World {
    pub fn new(name: &str) -> World {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("cuframes-ffsys-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dir_c = CString::new(dir.to_str().unwrap()).unwrap();
        World {
            dir,
            dir_c,
            keys: Vec::new(),
        }
    }

    /// A unique key: `s<pid>-<n>-<name>`.
    pub fn key(&mut self, name: &str) -> String {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let k = format!("s{}-{n}-{name}", std::process::id());
        assert!(k.len() <= 63);
        self.keys.push(k.clone());
        k
    }

    /// The component options every test passes: this world's runtime directory.
    pub fn runtime_dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for k in &self.keys {
            let _ = std::fs::remove_file(format!("/dev/shm/cuframes-{k}"));
            let _ = std::fs::remove_file(format!("/dev/shm/cuframes-{k}-packets"));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A cuframes publisher made through the C ABI; destroyed on drop.
pub struct Publisher(pub *mut cf::cuframes_publisher_t);

// SAFETY: a cuframes publisher handle may be used from any thread (cuframes.h: the publisher
// is internally locked); the tests hand it to one publishing thread at a time.
unsafe impl Send for Publisher {}
// SAFETY: as above; subscriber_count and publish may run concurrently.
unsafe impl Sync for Publisher {}

impl Publisher {
    pub fn new(w: &World, key: &str) -> Publisher {
        let key = CString::new(key).unwrap();
        // SAFETY: plain C structs filled by the library's defaults; the strings outlive the
        // call (the library copies what it keeps).
        unsafe {
            let mut o: cf::cuframes_publisher_options_t = std::mem::zeroed();
            cf::cuframes_publisher_options_default(&mut o);
            o.runtime_dir = w.dir_c.as_ptr();
            let mut p = ptr::null_mut();
            let rc = cf::cuframes_publisher_create(key.as_ptr(), &o, &mut p);
            assert_eq!(rc, 0, "cuframes_publisher_create: {}", last_error());
            Publisher(p)
        }
    }

    pub fn subscriber_count(&self) -> i32 {
        // SAFETY: a live publisher handle.
        unsafe { cf::cuframes_publisher_subscriber_count(self.0) }
    }

    /// Wait until the publisher counts `n` subscribers (it notices joins and leaves through
    /// its socket, asynchronously); false after `timeout`.
    pub fn wait_subscribers(&self, n: i32, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.subscriber_count() != n {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuframes_publisher_create and is destroyed once.
        unsafe { cf::cuframes_publisher_destroy(self.0) }
    }
}

/// The library's message for the last failed call of this thread.
pub fn last_error() -> String {
    // SAFETY: cuframes_last_error returns a NUL-terminated thread-local string or NULL.
    unsafe {
        let p = cf::cuframes_last_error();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// An FFmpeg error code as text.
pub fn av_err(code: i32) -> String {
    let mut buf = [0 as libc::c_char; 128];
    // SAFETY: av_strerror writes at most buf.len() bytes, NUL-terminated.
    unsafe {
        ff::av_strerror(code, buf.as_mut_ptr(), buf.len());
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    }
}

/// An AVDictionary of options; freed on drop (what FFmpeg did not consume stays in it).
pub struct Options(pub *mut ff::AVDictionary);

impl Options {
    pub fn new(pairs: &[(&str, &str)]) -> Options {
        let mut d = ptr::null_mut();
        for (k, v) in pairs {
            let (k, v) = (CString::new(*k).unwrap(), CString::new(*v).unwrap());
            // SAFETY: av_dict_set copies key and value.
            assert!(unsafe { ff::av_dict_set(&mut d, k.as_ptr(), v.as_ptr(), 0) } >= 0);
        }
        Options(d)
    }

    /// The options FFmpeg did not recognise.
    pub fn leftover(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut e: *const ff::AVDictionaryEntry = ptr::null();
        let empty = CString::new("").unwrap();
        loop {
            // SAFETY: iterating a valid (or NULL) dictionary with AV_DICT_IGNORE_SUFFIX.
            e = unsafe {
                ff::av_dict_get(self.0, empty.as_ptr(), e, ff::AV_DICT_IGNORE_SUFFIX as _)
            };
            if e.is_null() {
                return out;
            }
            // SAFETY: a live entry of the dictionary.
            out.push(
                unsafe { CStr::from_ptr((*e).key) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

impl Drop for Options {
    fn drop(&mut self) {
        // SAFETY: the dictionary was made by av_dict_set (or is NULL).
        unsafe { ff::av_dict_free(&mut self.0) }
    }
}

/// An opened input (avformat_open_input); closed on drop.
pub struct Input(pub *mut ff::AVFormatContext);

impl Input {
    /// `avformat_open_input(url, av_find_input_format(format), options)`.
    pub fn open(format: &str, url: &str, opts: &[(&str, &str)]) -> Result<Input, i32> {
        // SAFETY: avdevice_register_all is idempotent; the strings live across the calls.
        unsafe {
            ff::avdevice_register_all();
            let f = CString::new(format).unwrap();
            let fmt = ff::av_find_input_format(f.as_ptr());
            assert!(!fmt.is_null(), "this FFmpeg has no input format {format}");
            let url = CString::new(url).unwrap();
            let mut o = Options::new(opts);
            let mut ctx = ptr::null_mut();
            let rc = ff::avformat_open_input(&mut ctx, url.as_ptr(), fmt, &mut o.0);
            if rc < 0 {
                return Err(rc);
            }
            assert!(
                o.leftover().is_empty(),
                "{format} did not take options {:?}",
                o.leftover()
            );
            Ok(Input(ctx))
        }
    }

    pub fn stream(&self, i: usize) -> &ff::AVStream {
        // SAFETY: an open context; the index is checked against nb_streams.
        unsafe {
            assert!(i < (*self.0).nb_streams as usize);
            &**(*self.0).streams.add(i)
        }
    }

    pub fn codecpar(&self, i: usize) -> &ff::AVCodecParameters {
        // SAFETY: every stream of an opened input has codecpar.
        unsafe { &*self.stream(i).codecpar }
    }

    /// av_read_frame into `pkt`.
    pub fn read(&mut self, pkt: &mut Packet) -> i32 {
        // SAFETY: an open context and an allocated packet.
        unsafe { ff::av_read_frame(self.0, pkt.0) }
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        // SAFETY: opened by avformat_open_input; closes and NULLs the pointer.
        unsafe { ff::avformat_close_input(&mut self.0) }
    }
}

/// An AVPacket; freed on drop.
pub struct Packet(pub *mut ff::AVPacket);

impl Packet {
    pub fn new() -> Packet {
        // SAFETY: av_packet_alloc returns a blank packet or NULL.
        let p = unsafe { ff::av_packet_alloc() };
        assert!(!p.is_null());
        Packet(p)
    }

    pub fn get(&self) -> &ff::AVPacket {
        // SAFETY: allocated in new().
        unsafe { &*self.0 }
    }

    pub fn data(&self) -> &[u8] {
        let p = self.get();
        if p.data.is_null() {
            return &[];
        }
        // SAFETY: an AVPacket's data holds size bytes.
        unsafe { std::slice::from_raw_parts(p.data, p.size as usize) }
    }

    pub fn unref(&mut self) {
        // SAFETY: an allocated packet.
        unsafe { ff::av_packet_unref(self.0) }
    }
}

impl Default for Packet {
    fn default() -> Self {
        Packet::new()
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        // SAFETY: allocated by av_packet_alloc.
        unsafe { ff::av_packet_free(&mut self.0) }
    }
}

/// Whether this machine has a CUDA device cuframes can use (GPU tests otherwise skip).
pub fn have_cuda() -> bool {
    // SAFETY: a query without arguments.
    unsafe { cf::cuframes_cuda_device_count() > 0 }
}
