//! The hostile subscriber: a child, running as another user in the SHM objects' group, that
//! writes into everything it can map writable, truncates what it can open and abuses the
//! protocol, counting what it was refused and what succeeded.

use cuframes_test_support as common;

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::{frame_shm_name, packet_shm_name, shm_path, Rng};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::tlv::{HelloReq, Message};
use cuframes_core::wire::{
    SubscriberMode, PROTOCOL_VERSION, SUBSCRIBE_ACK_PAGE, SUBSCRIBE_WANTS_FRAMES,
};
use cuframes_core::ErrorCode;

/// Outcome counts per kind of attempt: (refused, succeeded).
#[derive(Default)]
struct Tally(std::collections::BTreeMap<&'static str, (u64, u64)>);

impl Tally {
    fn note<T>(&mut self, what: &'static str, r: std::result::Result<T, i32>) -> Option<T> {
        let e = self.0.entry(what).or_default();
        match r {
            Ok(v) => {
                e.1 += 1;
                Some(v)
            }
            Err(_) => {
                e.0 += 1;
                None
            }
        }
    }
    fn refused(&mut self, what: &'static str) {
        self.0.entry(what).or_default().0 += 1;
    }
    fn succeeded(&mut self, what: &'static str) {
        self.0.entry(what).or_default().1 += 1;
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn io_err(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

/// mmap `len` bytes of `fd` shared with `prot`; Ok(address) or Err(errno).
fn try_mmap(fd: i32, len: usize, prot: i32) -> std::result::Result<*mut u8, i32> {
    // SAFETY: a fresh mapping chosen by the kernel; nothing else is touched.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p as *mut u8)
    }
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p` is a mapping of `len` bytes made by try_mmap and not used after this.
    unsafe { libc::munmap(p as *mut libc::c_void, len) };
}

/// Map read-only, then ask for PROT_WRITE with mprotect: Ok(()) if the kernel let it.
fn try_mprotect_writable(fd: i32, len: usize) -> std::result::Result<(), i32> {
    let p = try_mmap(fd, len, libc::PROT_READ)?;
    // SAFETY: `p` is our own mapping of `len` bytes.
    let r = unsafe {
        libc::mprotect(
            p as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    let e = errno();
    unmap(p, len);
    if r == 0 {
        Ok(())
    } else {
        Err(e)
    }
}

fn try_ftruncate(fd: i32, len: i64) -> std::result::Result<(), i32> {
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::ftruncate(fd, len) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn fd_size(fd: i32) -> usize {
    // SAFETY: fstat into a zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return 0;
    }
    st.st_size as usize
}

/// Write random words over `len` bytes at `p` (our own writable mapping).
fn scribble(p: *mut u8, len: usize, rng: &mut Rng) {
    for i in 0..len / 8 {
        // SAFETY: in bounds of our own mapping; volatile, as another process reads it.
        unsafe { std::ptr::write_volatile((p as *mut u64).add(i), rng.next()) };
    }
}

/// Everything a group member can try on a /dev/shm object it may only read.
fn attack_shm_object(path: &str, t: &mut Tally, rng: &mut Rng) {
    use std::fs::OpenOptions;
    t.note(
        "shm_open_write",
        OpenOptions::new().write(true).open(path).map_err(io_err),
    );
    t.note(
        "shm_open_rdwr",
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err),
    );
    t.note(
        "shm_open_truncate",
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(io_err),
    );
    let c = std::ffi::CString::new(path).unwrap();
    // SAFETY: plain syscall with a valid C string.
    let r = unsafe { libc::truncate(c.as_ptr(), rng.below(4096) as i64) };
    t.note(
        "shm_truncate_path",
        if r == 0 { Ok(()) } else { Err(errno()) },
    );
    // Unlinking would not hurt mappings but would hide the ring from new subscribers:
    // /dev/shm is sticky, so only the owner may.
    // SAFETY: plain syscall with a valid C string.
    let r = unsafe { libc::unlink(c.as_ptr()) };
    t.note("shm_unlink", if r == 0 { Ok(()) } else { Err(errno()) });
    let Ok(ro) = std::fs::File::open(path) else {
        t.refused("shm_open_read"); // not an attack: reading is granted
        return;
    };
    t.succeeded("shm_open_read");
    let fd = ro.as_raw_fd();
    t.note("shm_ftruncate_ro_fd", try_ftruncate(fd, 0));
    let len = fd_size(fd).max(4096);
    if let Some(p) = t.note(
        "shm_mmap_rw",
        try_mmap(fd, len, libc::PROT_READ | libc::PROT_WRITE),
    ) {
        scribble(p, len, rng);
        unmap(p, len);
    }
    t.note("shm_mprotect_rw", try_mprotect_writable(fd, len));
    // A writable descriptor through /proc/self/fd (a new open of the same inode).
    t.note(
        "shm_reopen_proc_rw",
        OpenOptions::new()
            .write(true)
            .open(format!("/proc/self/fd/{fd}"))
            .map_err(io_err),
    );
}

/// Everything a subscriber can try on a slot memfd it was handed.
fn attack_slot(fd: &OwnedFd, t: &mut Tally, rng: &mut Rng, seals: &mut u64) {
    let raw = fd.as_raw_fd();
    // SAFETY: plain fcntl on our descriptor.
    *seals = unsafe { libc::fcntl(raw, libc::F_GET_SEALS) } as u64;
    let len = fd_size(raw).max(4096);
    if let Some(p) = t.note(
        "slot_mmap_rw",
        try_mmap(raw, len, libc::PROT_READ | libc::PROT_WRITE),
    ) {
        eprintln!("hostile: a slot memfd mapped PROT_WRITE|MAP_SHARED: scribbling over it");
        scribble(p, len, rng);
        unmap(p, len);
    }
    t.note("slot_mprotect_rw", try_mprotect_writable(raw, len));
    let junk: Vec<u8> = (0..64).map(|_| rng.next() as u8).collect();
    // SAFETY: pwrite from our own buffer.
    let r = unsafe {
        libc::pwrite(
            raw,
            junk.as_ptr() as *const libc::c_void,
            junk.len(),
            rng.below(len as u64) as i64,
        )
    };
    t.note("slot_pwrite", if r >= 0 { Ok(()) } else { Err(errno()) });
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{raw}"))
    {
        Ok(f) => {
            use std::os::unix::fs::FileExt;
            // Opening it is not yet harm; writing through it would be.
            t.note("slot_reopen_rw_write", f.write_at(&junk, 0).map_err(io_err));
            t.note(
                "slot_reopen_rw_mmap",
                try_mmap(f.as_raw_fd(), len, libc::PROT_READ | libc::PROT_WRITE).map(|p| {
                    scribble(p, len, rng);
                    unmap(p, len);
                }),
            );
        }
        Err(e) => {
            t.note::<()>("slot_reopen_rw_write", Err(io_err(e)));
        }
    }
    t.note("slot_ftruncate_shrink", try_ftruncate(raw, 0));
    t.note("slot_ftruncate_grow", try_ftruncate(raw, len as i64 * 2));
    // SAFETY: plain syscalls on our descriptor.
    let r = unsafe {
        libc::fallocate(
            raw,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            len as i64,
        )
    };
    t.note(
        "slot_punch_hole",
        if r == 0 { Ok(()) } else { Err(errno()) },
    );
    // A seal of our own (F_SEAL_WRITE) would make the publisher's next write fault/refuse.
    // SAFETY: fcntl on a descriptor we own; a failure is an errno, counted.
    let r = unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
    t.note(
        "slot_add_seal_write",
        if r == 0 { Ok(()) } else { Err(errno()) },
    );
}

/// Our own ACK page: writable (that is the design); lie in it.
fn abuse_ack_page(fd: &OwnedFd, t: &mut Tally, rng: &mut Rng, published_hint: u64) {
    use cuframes_core::wire::ack_page::*;
    let raw = fd.as_raw_fd();
    t.note("ack_page_ftruncate", try_ftruncate(raw, 0));
    t.note(
        "ack_page_ftruncate_grow",
        try_ftruncate(raw, ACK_PAGE_SIZE as i64 * 4),
    );
    let Some(p) = t.note(
        "ack_page_mmap_rw",
        try_mmap(raw, ACK_PAGE_SIZE, libc::PROT_READ | libc::PROT_WRITE),
    ) else {
        return;
    };
    for round in 0..50 {
        let w64 = |off: usize, v: u64| {
            // SAFETY: in bounds of our own 4096-byte mapping, 8-aligned offsets.
            unsafe { std::ptr::write_volatile(p.add(off) as *mut u64, v) }
        };
        let w32 = |off: usize, v: u32| {
            // SAFETY: as above, 4-aligned.
            unsafe { std::ptr::write_volatile(p.add(off) as *mut u32, v) }
        };
        match round % 5 {
            0 => scribble(p, ACK_PAGE_SIZE, rng), // everything, magic and version included
            1 => {
                // Claim future frames in every slot.
                for k in 0..16 {
                    w64(
                        ACK_PAGE_ACKED_SEQ_OFFSET + 8 * k,
                        published_hint + 1 + rng.below(1000),
                    );
                }
            }
            2 => {
                for k in 0..16 {
                    w64(ACK_PAGE_ACKED_SEQ_OFFSET + 8 * k, rng.next());
                }
                w64(ACK_PAGE_LAST_SEEN_OFFSET, u64::MAX);
                w64(ACK_PAGE_LAST_ACK_NS_OFFSET, rng.next());
                w64(ACK_PAGE_DELIVERED_OFFSET, rng.next());
                w64(ACK_PAGE_DROPPED_OVERRUN_OFFSET, rng.next());
                w64(ACK_PAGE_DROPPED_TORN_OFFSET, rng.next());
            }
            _ => {}
        }
        w32(ACK_PAGE_ACK_COUNT_OFFSET, rng.next() as u32);
        // Wake whoever sleeps on the counter (a publisher waiting for our ACK).
        // SAFETY: FUTEX_WAKE on a word of our own shared mapping.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                p.add(ACK_PAGE_ACK_COUNT_OFFSET),
                libc::FUTEX_WAKE,
                i32::MAX,
            )
        };
        t.succeeded("ack_page_lies");
        if round % 10 == 9 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    unmap(p, ACK_PAGE_SIZE);
}

fn send_msg(s: &UnixStream, m: &Message) -> bool {
    cuframes_core::testing::send(s.as_fd(), m, &[]).is_ok()
}

fn recv_msg(s: &UnixStream, within: Duration) -> Option<(Message, Vec<OwnedFd>)> {
    cuframes_core::testing::recv(s.as_fd(), Some(Instant::now() + within)).ok()
}

fn hello(flags: u32, mode: SubscriberMode) -> Message {
    Message::HelloReq(HelloReq {
        proto_version: PROTOCOL_VERSION,
        consumer_name: "hostile".into(),
        cuda_device: 0,
        mode: mode as u32,
        subscribe_flags: flags,
    })
}

/// A plain v4 frame subscriber (no ACK page): must be refused with PERMISSION.
fn plain_v4_hello(socket: &std::path::Path, t: &mut Tally) {
    let Ok(s) = UnixStream::connect(socket) else {
        t.succeeded("connect_failed");
        return;
    };
    if !send_msg(&s, &hello(0, SubscriberMode::ZeroCopy)) {
        t.succeeded("connect_failed");
        return;
    }
    match recv_msg(&s, Duration::from_secs(5)) {
        Some((Message::HelloResp(r), _)) if r.result == ErrorCode::Permission as i32 => {
            t.refused("plain_v4_hello")
        }
        other => {
            eprintln!("hostile: plain v4 HELLO got {other:?}");
            t.succeeded("plain_v4_hello");
        }
    }
}

/// A raw hardened subscriber: gets the slot memfds and its ACK page, attacks them, never ACKs
/// properly, stalls, goes.
fn raw_ack_page_subscriber(
    socket: &std::path::Path,
    t: &mut Tally,
    rng: &mut Rng,
    seals: &mut u64,
) {
    let Ok(s) = UnixStream::connect(socket) else {
        t.succeeded("connect_failed");
        return;
    };
    let mode = if rng.below(2) == 0 {
        SubscriberMode::ZeroCopy
    } else {
        SubscriberMode::Copy
    };
    if !send_msg(
        &s,
        &hello(SUBSCRIBE_WANTS_FRAMES | SUBSCRIBE_ACK_PAGE, mode),
    ) {
        t.succeeded("connect_failed");
        return;
    }
    match recv_msg(&s, Duration::from_secs(5)) {
        Some((Message::HelloResp(r), _)) if r.result == 0 => {}
        other => {
            eprintln!("hostile: raw HELLO got {other:?}");
            t.succeeded("raw_refused");
            return;
        }
    }
    if !send_msg(
        &s,
        &Message::SubscribeReq {
            proto_version: PROTOCOL_VERSION,
        },
    ) {
        t.succeeded("connect_failed");
        return;
    }
    let initial = match recv_msg(&s, Duration::from_secs(5)) {
        Some((Message::SubscribeResp(r), _)) if r.result == 0 => r.initial_seq,
        other => {
            // TOO_MANY is possible while a given-up bit of ours is still quarantined.
            eprintln!("hostile: raw SUBSCRIBE got {other:?}");
            t.succeeded("raw_refused");
            return;
        }
    };
    let mut slot_fds = Vec::new();
    let mut page = None;
    for _ in 0..2 {
        match recv_msg(&s, Duration::from_secs(5)) {
            Some((Message::VmmFds(_), fds)) => slot_fds = fds,
            Some((Message::AckPage(_), mut fds)) => page = fds.pop(),
            other => {
                eprintln!("hostile: raw subscriber got {other:?}");
                break;
            }
        }
    }
    t.succeeded("raw_subscribed");
    for fd in &slot_fds {
        attack_slot(fd, t, rng, seals);
    }
    if let Some(page) = &page {
        abuse_ack_page(page, t, rng, initial);
    } else {
        t.refused("ack_page_received");
    }
    // Never ACK properly; stall, sometimes past the ack timeout, without reading the socket.
    std::thread::sleep(Duration::from_millis(rng.below(700)));
    if let Some(page) = &page {
        abuse_ack_page(page, t, rng, initial + 100);
    }
}

/// A real library subscriber, ZERO_COPY or COPY: reads a few frames, holds one and stalls.
fn library_subscriber(key: &str, zero_copy: bool, t: &mut Tally, rng: &mut Rng) {
    let opts = SubscriberOptions {
        name: "hostile-lib".into(),
        mode: if zero_copy {
            SubscriberMode::ZeroCopy
        } else {
            SubscriberMode::Copy
        },
        want_packets: rng.below(2) == 0,
        accept_zero_copy_overwrite: true,
        ..Default::default()
    };
    let mut s = match Subscriber::connect(key, &opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hostile: library connect: {e}");
            t.succeeded("lib_connect_failed");
            return;
        }
    };
    t.succeeded(if zero_copy {
        "lib_zero_copy"
    } else {
        "lib_copy"
    });
    let mut held = Vec::new();
    for _ in 0..rng.below(8) + 1 {
        match s.next_frame(Some(Duration::from_millis(500))) {
            Ok(f) => {
                t.succeeded("lib_frames");
                if rng.below(3) == 0 {
                    held.push(f); // keep it: no ACK
                }
            }
            Err(_) => {
                t.succeeded("lib_frame_errors"); // given up on (expected), or no frame yet
                break;
            }
        }
    }
    std::thread::sleep(Duration::from_millis(rng.below(600)));
    drop(held);
}

pub fn hostile(key: &str) {
    let dir = std::path::PathBuf::from(std::env::var("CUFRAMES_RUNTIME_DIR").unwrap());
    let socket = dir.join(format!("{key}.sock"));
    let secs: u64 = std::env::var("CUFRAMES_HOSTILE_RUN_SECS")
        .unwrap()
        .parse()
        .unwrap();
    let publisher_pid = std::env::var("CUFRAMES_PUBLISHER_PID").unwrap();
    let frame_shm = shm_path(&frame_shm_name(key));
    let packet_shm = shm_path(&packet_shm_name(key));
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    eprintln!("hostile: uid {uid} gid {gid}, {secs} s");
    assert_eq!(uid, 65534, "the hostile child must run as another user");
    let mut t = Tally::default();
    let mut rng =
        Rng::new(cuframes_core::testing::unique_suffix() ^ ((std::process::id() as u64) << 32));
    let mut seals = 0u64;
    let end = Instant::now() + Duration::from_secs(secs);
    let mut rounds = 0u64;
    while Instant::now() < end {
        rounds += 1;
        attack_shm_object(&frame_shm, &mut t, &mut rng);
        attack_shm_object(&packet_shm, &mut t, &mut rng);
        // The publisher's own descriptors (its slot memfds, its writable SHM mapping).
        t.note(
            "proc_publisher_fds",
            std::fs::read_dir(format!("/proc/{publisher_pid}/fd")).map_err(io_err),
        );
        t.note(
            "proc_publisher_mem",
            std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/proc/{publisher_pid}/mem"))
                .map_err(io_err),
        );
        plain_v4_hello(&socket, &mut t);
        match rounds % 3 {
            0 => library_subscriber(key, true, &mut t, &mut rng),
            1 => raw_ack_page_subscriber(&socket, &mut t, &mut rng, &mut seals),
            _ => library_subscriber(key, false, &mut t, &mut rng),
        }
    }
    let mut line = format!("RESULT rounds={rounds} slot_seals={seals}");
    for (k, (refused, ok)) in &t.0 {
        line += &format!(" {k}_refused={refused} {k}_ok={ok}");
    }
    println!("{line}");
    std::io::stdout().flush().unwrap();
}
