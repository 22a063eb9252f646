//! A subscriber facing a broken or hostile publisher gets a clear error, never a crash or a
//! hang. The "publisher" here is a raw socket server scripted per case.

use cuframes_test_support as common;

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use common::{child, frame_shm_name, packet_shm_name, TestEnv};
use cuframes_core::format::FrameGeometry;
use cuframes_core::subscriber::Subscriber;
use cuframes_core::tlv::{self, HelloResp, Message, SubscribeResp, VmmFds};
use cuframes_core::wire::frame::FRAME_SHM_SIZE;
use cuframes_core::wire::*;
use cuframes_core::ErrorCode;

/// One test of this file at a time. Some map and populate a gigabyte (a hostile ring that a
/// raised option admits) and measure this process's peak RSS; run beside them, a scripted
/// handshake with a 500 ms timeout can stall past it, and any allocation of a neighbour
/// counts in the peak they measure.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serve one connection with `script` on a thread; returns the subscriber's result.
fn against(
    env: &TestEnv,
    script: impl FnOnce(UnixStream) + Send + 'static,
) -> cuframes_core::Error {
    let path = env.dir.join(format!("{}.sock", env.key));
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        script(s);
    });
    let mut opts = env.subscriber_options("victim");
    opts.connect_timeout = Duration::from_millis(500);
    let t = Instant::now();
    let err = Subscriber::connect(&env.key, &opts)
        .err()
        .expect("the subscriber must refuse");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    server.join().unwrap();
    let _ = std::fs::remove_file(&path);
    err
}

fn read_msg(s: &mut UnixStream) -> Message {
    let mut h = [0u8; 8];
    s.read_exact(&mut h).unwrap();
    let (t, len) = tlv::decode_header(&h).unwrap();
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).unwrap();
    tlv::decode_payload(t, &p).unwrap()
}

fn send(s: &mut UnixStream, m: &Message) {
    s.write_all(&tlv::encode(m).unwrap()).unwrap();
}

fn good_hello(key: &str) -> HelloResp {
    HelloResp {
        result: 0,
        proto_version: 4,
        ring_size: 2,
        ownership_mode: 0,
        meta: FrameGeometry::new(Format::Nv12, 64, 32).unwrap().to_meta(),
        shm_path: frame_shm_name(key),
        // A plain v4 publisher: no ACK pages, our subscriber ACKs in the header.
        publisher_flags: 0,
        packets: None,
    }
}

#[test]
fn hello_pointing_at_another_key_is_refused() {
    let _serial = serial();
    let env = TestEnv::new("hp1");
    let e = against(&env, |mut s| {
        read_msg(&mut s);
        let mut h = good_hello("somebody-else");
        h.shm_path = "cuframes-somebody-else".into();
        send(&mut s, &Message::HelloResp(h));
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
}

#[test]
fn inconsistent_frame_meta_is_refused() {
    let _serial = serial();
    let env = TestEnv::new("hp2");
    let key = env.key.clone();
    let e = against(&env, move |mut s| {
        read_msg(&mut s);
        let mut h = good_hello(&key);
        h.meta.pitch_y = 8; // shorter than a row
        send(&mut s, &Message::HelloResp(h));
    });
    assert_eq!(e.code(), ErrorCode::Format, "{e}");
}

#[test]
fn a_silent_publisher_times_out() {
    let _serial = serial();
    let env = TestEnv::new("hp3");
    let e = against(&env, |mut s| {
        read_msg(&mut s);
        // Silent until the subscriber gives up and hangs up (the 5 s read timeout bounds
        // it): a fixed 800 ms closed the socket under a subscriber preempted past its 500 ms
        // deadline, which then saw EOF (DISCONNECTED) instead of TIMEOUT.
        let mut b = [0u8; 64];
        while matches!(s.read(&mut b), Ok(n) if n > 0) {}
    });
    assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
}

#[test]
fn garbage_instead_of_hello_resp_is_a_protocol_error() {
    let _serial = serial();
    let env = TestEnv::new("hp4");
    let e = against(&env, |mut s| {
        read_msg(&mut s);
        s.write_all(&[2, 0, 0, 0, 3, 0, 0, 0, 1, 2, 3]).unwrap();
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
}

/// A valid frame SHM for the fake publisher's key (so that the refusal under test is the
/// one the case is about); removed by TestEnv.
fn valid_frame_shm(key: &str) -> cuframes_core::testing::FrameShm {
    let (_fd, map) =
        cuframes_core::shm::create(&frame_shm_name(key), FRAME_SHM_SIZE, 0o600).unwrap();
    let shm = cuframes_core::testing::FrameShm::new(map).unwrap();
    shm.initialise(
        &good_hello(key).meta,
        2,
        Policy::DropOldest,
        MemoryKind::HostMemfd,
        std::process::id(),
    );
    shm
}

fn through_subscribe(s: &mut UnixStream, key: &str) {
    read_msg(s);
    send(s, &Message::HelloResp(good_hello(key)));
    read_msg(s);
    send(
        s,
        &Message::SubscribeResp(SubscribeResp {
            result: 0,
            assigned_bit: 1,
            initial_seq: 0,
        }),
    );
}

fn send_fds(s: &UnixStream, v: VmmFds, fds: &[std::os::fd::RawFd]) {
    cuframes_core::testing::send(s.as_fd(), &Message::VmmFds(v), fds).unwrap();
}

#[test]
fn vmm_fds_with_too_few_descriptors_is_refused() {
    let _serial = serial();
    let env = TestEnv::new("hp5");
    let _shm = valid_frame_shm(&env.key);
    let key = env.key.clone();
    let e = against(&env, move |mut s| {
        through_subscribe(&mut s, &key);
        let fd = cuframes_core::shm::memfd("x", 16384).unwrap();
        let v = VmmFds {
            fd_count: 2,
            frame_size_bytes: 12288,
            vmm_granularity: 4096,
            memory_kind: 1,
        };
        send_fds(&s, v, &[fd.as_raw_fd()]);
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
}

#[test]
fn unsealed_memfd_slots_are_refused() {
    let _serial = serial();
    let env = TestEnv::new("hp6");
    let _shm = valid_frame_shm(&env.key);
    let key = env.key.clone();
    let e = against(&env, move |mut s| {
        through_subscribe(&mut s, &key);
        let a = cuframes_core::shm::memfd("a", 16384).unwrap();
        let b = cuframes_core::shm::memfd("b", 16384).unwrap();
        let v = VmmFds {
            fd_count: 2,
            frame_size_bytes: 12288,
            vmm_granularity: 4096,
            memory_kind: 1,
        };
        send_fds(&s, v, &[a.as_raw_fd(), b.as_raw_fd()]);
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
    assert!(e.message().contains("sealed"), "{e}");
}

#[test]
fn an_unknown_memory_kind_is_a_format_error() {
    let _serial = serial();
    let env = TestEnv::new("hp7");
    let _shm = valid_frame_shm(&env.key);
    let key = env.key.clone();
    let e = against(&env, move |mut s| {
        through_subscribe(&mut s, &key);
        let a = cuframes_core::shm::memfd("a", 16384).unwrap();
        let v = VmmFds {
            fd_count: 2,
            frame_size_bytes: 12288,
            vmm_granularity: 4096,
            memory_kind: 7,
        };
        send_fds(&s, v, &[a.as_raw_fd(), a.as_raw_fd()]);
    });
    assert_eq!(e.code(), ErrorCode::Format, "{e}");
}

#[test]
fn a_legacy_magic_frame_shm_is_refused() {
    let _serial = serial();
    let env = TestEnv::new("hp8");
    // A v1–v3 style SHM under the key's name, from a "publisher" that is this process.
    let (_fd, map) =
        cuframes_core::shm::create(&frame_shm_name(&env.key), FRAME_SHM_SIZE, 0o600).unwrap();
    map.atomic_u32(0)
        .store(LEGACY_FRAME_MAGIC, std::sync::atomic::Ordering::Release);
    let key = env.key.clone();
    let e = against(&env, move |mut s| {
        through_subscribe(&mut s, &key);
        // Valid, sealed host slots: the refusal must come from the SHM header.
        let slots: Vec<_> = (0..2)
            .map(|_| {
                let fd = nix::sys::memfd::memfd_create(
                    c"slot",
                    nix::sys::memfd::MFdFlags::MFD_CLOEXEC
                        | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
                )
                .unwrap();
                nix::unistd::ftruncate(fd.as_fd(), 16384).unwrap();
                nix::fcntl::fcntl(
                    fd.as_fd(),
                    nix::fcntl::FcntlArg::F_ADD_SEALS(nix::fcntl::SealFlag::F_SEAL_SHRINK),
                )
                .unwrap();
                fd
            })
            .collect();
        let raw: Vec<_> = slots.iter().map(|f| f.as_raw_fd()).collect();
        send_fds(
            &s,
            VmmFds {
                fd_count: 2,
                frame_size_bytes: 12288,
                vmm_granularity: 4096,
                memory_kind: 1,
            },
            &raw,
        );
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
    assert!(e.message().contains("0xCC7C1DCC"), "{e}");
}

/// GPU identity: a publisher whose CUDA ring is on a GPU this process cannot see
/// (another container's GPU, a CUDA_VISIBLE_DEVICES that hides it) is refused before
/// SUBSCRIBE, with an error naming the announced UUID; without the check the subscriber
/// would import the ring's handles on whatever its device 0 is. CPU-testable: here no GPU is
/// visible at all (or, on a GPU machine, none has this made-up UUID).
#[test]
fn a_publisher_on_an_unknown_gpu_is_refused_naming_its_uuid() {
    let _serial = serial();
    use cuframes_core::wire::meta_ext::MetaExt;
    let env = TestEnv::new("hp-uuid");
    let key = env.key.clone();
    let unknown = [0x5A; 16];
    let subscribed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = subscribed.clone();
    let e = against(&env, move |mut s| {
        read_msg(&mut s);
        let mut h = good_hello(&key);
        MetaExt {
            colour: None,
            gpu_uuid: Some(unknown),
        }
        .write(&mut h.meta);
        send(&mut s, &Message::HelloResp(h));
        // The subscriber must hang up instead of subscribing.
        let mut b = [0u8; 8];
        if s.read(&mut b).unwrap_or(0) > 0 {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    let uuid = cuframes_core::cuda::GpuUuid(unknown).to_string();
    assert_eq!(uuid, "GPU-5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a");
    assert!(e.message().contains(&uuid), "{e}");
    assert!(e.message().contains("cannot see"), "{e}");
    assert!(
        !subscribed.load(std::sync::atomic::Ordering::SeqCst),
        "the subscriber sent SUBSCRIBE_REQ for a GPU it cannot use"
    );
}

/// With an explicit device that is not the publisher's GPU the refusal names both UUIDs
/// (needs a GPU to have a device 0 with a UUID; prints SKIPPED otherwise).
#[test]
fn an_explicit_device_that_is_another_gpu_is_refused_naming_both_uuids() {
    let _serial = serial();
    use cuframes_core::wire::meta_ext::MetaExt;
    let Ok(Some(mine)) = cuframes_core::cuda::visible_gpus().map(|v| v.first().copied()) else {
        eprintln!("SKIPPED: no CUDA device visible");
        return;
    };
    let env = TestEnv::new("hp-uuid2");
    let key = env.key.clone();
    let mut other = mine.0;
    other[15] ^= 0xFF;
    let path = env.dir.join(format!("{}.sock", env.key));
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        read_msg(&mut s);
        let mut h = good_hello(&key);
        MetaExt {
            colour: None,
            gpu_uuid: Some(other),
        }
        .write(&mut h.meta);
        send(&mut s, &Message::HelloResp(h));
    });
    let mut opts = env.subscriber_options("victim");
    opts.cuda_device = 0;
    let e = Subscriber::connect(&env.key, &opts).err().expect("refused");
    server.join().unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    assert!(e.message().contains(&mine.to_string()), "{e}");
    assert!(
        e.message()
            .contains(&cuframes_core::cuda::GpuUuid(other).to_string()),
        "{e}"
    );
}

/// Serialises the tests that measure this process's peak RSS: what another one allocates
/// meanwhile would count as theirs.
static RSS_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A field of /proc/self/status in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

/// How far this process's resident memory rose above where it was while `f` ran (the peak,
/// VmHWM, reset first through /proc/self/clear_refs): what a refused subscribe mapped and
/// dropped again still shows.
fn peak_rss_growth<T>(f: impl FnOnce() -> T) -> (T, u64) {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
    let before = status_bytes("VmRSS");
    let out = f();
    let peak = status_bytes("VmHWM");
    (out, peak.saturating_sub(before))
}

/// A sealed, sparse memfd of `len` bytes: costs nothing until someone maps and touches it.
fn sparse_sealed_memfd(len: u64) -> std::os::fd::OwnedFd {
    let fd = nix::sys::memfd::memfd_create(
        c"slot",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
    )
    .unwrap();
    nix::unistd::ftruncate(fd.as_fd(), len as i64).unwrap();
    nix::fcntl::fcntl(
        fd.as_fd(),
        nix::fcntl::FcntlArg::F_ADD_SEALS(
            nix::fcntl::SealFlag::F_SEAL_SHRINK | nix::fcntl::SealFlag::F_SEAL_GROW,
        ),
    )
    .unwrap();
    fd
}

/// A 64x32 NV12 ring (12 KiB frames) announcing 2 GiB slots on sparse sealed memfds would
/// make a reader map and populate 2 GiB of shmem per slot (4 GiB for this ring of two). A
/// slot may be no larger than the frame rounded up to a granularity: the
/// subscribe is refused at once, naming both sizes, before anything is mapped.
#[test]
fn slots_far_larger_than_the_frame_are_refused_without_allocating() {
    let _serial = serial();
    let _serial = RSS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let env = TestEnv::new("hp-bigslot");
    let _shm = valid_frame_shm(&env.key);
    let key = env.key.clone();
    let frame = FrameGeometry::new(Format::Nv12, 64, 32).unwrap().frame_size;
    assert!(frame <= 16384, "a small frame: {frame}");
    const SLOT: u64 = 2 << 30;
    let (e, grew) = peak_rss_growth(|| {
        against(&env, move |mut s| {
            through_subscribe(&mut s, &key);
            let slots = [sparse_sealed_memfd(SLOT), sparse_sealed_memfd(SLOT)];
            let v = VmmFds {
                fd_count: 2,
                frame_size_bytes: SLOT,
                vmm_granularity: 4096,
                memory_kind: 1,
            };
            send_fds(&s, v, &[slots[0].as_raw_fd(), slots[1].as_raw_fd()]);
            // Keep the descriptors open until the subscriber is done with them.
            let mut b = [0u8; 64];
            while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        })
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
    assert!(e.message().contains(&SLOT.to_string()), "{e}");
    assert!(e.message().contains(&frame.to_string()), "{e}");
    assert!(
        grew < 32 << 20,
        "the refused subscribe raised the peak RSS by {} MiB",
        grew >> 20
    );
}

/// A slot memfd smaller than VMM_FDS announces (sealed, so it cannot shrink later) would
/// fault (SIGBUS) where it ends on the first read: refused at import, naming both sizes.
#[test]
fn slot_memfds_smaller_than_announced_are_refused() {
    let _serial = serial();
    let env = TestEnv::new("hp-smallslot");
    let _shm = valid_frame_shm(&env.key);
    let key = env.key.clone();
    let frame = FrameGeometry::new(Format::Nv12, 64, 32).unwrap().frame_size as u64;
    let announced = frame.next_multiple_of(4096);
    let e = against(&env, move |mut s| {
        through_subscribe(&mut s, &key);
        let slots = [
            sparse_sealed_memfd(announced),
            sparse_sealed_memfd(announced - 4096),
        ];
        let v = VmmFds {
            fd_count: 2,
            frame_size_bytes: announced,
            vmm_granularity: 4096,
            memory_kind: 1,
        };
        send_fds(&s, v, &[slots[0].as_raw_fd(), slots[1].as_raw_fd()]);
        let mut b = [0u8; 64];
        while matches!(s.read(&mut b), Ok(n) if n > 0) {}
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
    assert!(
        e.message().contains(&format!(
            "{} bytes; VMM_FDS announced {announced}",
            announced - 4096
        )),
        "{e}"
    );
}

fn packets_only(env: &TestEnv, name: &str) -> cuframes_core::subscriber::SubscriberOptions {
    let mut o = env.subscriber_options(name);
    o.want_frames = false;
    o.want_packets = true;
    o
}

fn packet_publisher(env: &TestEnv, data_size: u32) -> cuframes_core::publisher::Publisher {
    let p = cuframes_core::publisher::Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(cuframes_core::packet_ring::PacketRingConfig {
        codec_id: CODEC_ID_HEVC,
        extradata: vec![0, 0, 0, 1, 0x40, 1],
        ring_slots: 16,
        data_size,
    })
    .unwrap();
    p
}

/// A 1 GiB packet data ring (here a publisher's ring whose header is forged to 1 GiB over a
/// sparse object, holding a 1 GiB "packet") would make every reader map and populate all of
/// it (`-f cuframes_pkt` reaches 3.2 GB with the packet's copies). A ring larger than `max_packet_ring_size` is refused at subscribe, naming the option,
/// before its pages are touched; a raised option lets it through.
#[test]
fn a_packet_ring_larger_than_the_bound_is_refused_without_allocating() {
    let _serial = serial();
    use cuframes_core::packet_ring::shm_region::{
        HDR_DATA_SIZE, HDR_GLOBAL_SEQ, HDR_LAST_KEYFRAME_SEQ, HDR_WRITE_OFFSET, SLOT_DATA_OFFSET,
        SLOT_DATA_SIZE, SLOT_FLAGS, SLOT_SEQ,
    };
    use cuframes_core::wire::packet::{packet_shm_size, packet_slot_offset};
    use std::sync::atomic::Ordering;
    let _serial = RSS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let env = TestEnv::new("hp-bigring");
    let p = packet_publisher(&env, 1 << 16);
    const GIB: u32 = 1 << 30;
    let name = packet_shm_name(&env.key);
    {
        let (fd, _) = cuframes_core::shm::open(&name, 4096, true).unwrap();
        nix::unistd::ftruncate(fd.as_fd(), packet_shm_size(16, GIB as usize) as i64).unwrap();
        let (_fd, map) = cuframes_core::shm::open(&name, 4096, true).unwrap();
        map.atomic_u32(HDR_DATA_SIZE).store(GIB, Ordering::Release);
        // One keyframe of 1 GiB at seq 1.
        let slot = packet_slot_offset(1);
        map.atomic_u64(slot + SLOT_DATA_OFFSET)
            .store(0, Ordering::Relaxed);
        map.atomic_u32(slot + SLOT_DATA_SIZE)
            .store(GIB, Ordering::Relaxed);
        map.atomic_u32(slot + SLOT_FLAGS)
            .store(PACKET_FLAG_KEY, Ordering::Relaxed);
        map.atomic_u64(slot + SLOT_SEQ).store(1, Ordering::Release);
        map.atomic_u64(HDR_WRITE_OFFSET)
            .store(u64::from(GIB), Ordering::Release);
        map.atomic_u64(HDR_LAST_KEYFRAME_SEQ)
            .store(1, Ordering::Release);
        map.atomic_u64(HDR_GLOBAL_SEQ).store(1, Ordering::Release);
    }
    let (got, grew) = peak_rss_growth(|| {
        let t = Instant::now();
        let got = Subscriber::connect(&env.key, &packets_only(&env, "victim"));
        (got, t.elapsed())
    });
    let (got, took) = got;
    let e = got.err().expect("a 1 GiB packet ring must be refused");
    assert_eq!(e.code(), ErrorCode::NoMemory, "{e}");
    assert!(e.message().contains("1073741824 bytes"), "{e}");
    assert!(e.message().contains("max_packet_ring_size"), "{e}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(
        grew < 32 << 20,
        "the refused subscribe raised the peak RSS by {} MiB",
        grew >> 20
    );
    // Raised, the ring is read, and its 1 GiB packet is still bounded by max_packet_size:
    // skipped without a buffer for it (the ring's own pages are what the option allowed).
    let mut o = packets_only(&env, "raised");
    o.max_packet_ring_size = u64::from(GIB);
    let mut s = Subscriber::connect(&env.key, &o).unwrap();
    let mut buf = Vec::new();
    let (e, grew) = peak_rss_growth(|| {
        s.next_packet(Some(Duration::from_millis(300)), &mut buf)
            .unwrap_err()
    });
    assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
    assert_eq!(s.packet_stats().unwrap().oversized, 1);
    assert!(buf.capacity() < 1 << 20, "{} bytes", buf.capacity());
    assert!(
        grew < 32 << 20,
        "reading raised the peak RSS by {} MiB",
        grew >> 20
    );
    drop(s);
    drop(p);
}

/// A packet larger than `max_packet_size` is not copied (no buffer of its
/// size is allocated): it is skipped as a counted loss, the stream goes on at the next
/// keyframe flagged DISCONTINUITY. A subscriber that raised the option reads the same
/// 80 MiB packet bit-exact.
#[test]
fn oversized_packets_are_a_counted_loss_and_a_raised_bound_reads_them() {
    let _serial = serial();
    let _serial = RSS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let env = TestEnv::new("hp-bigpkt");
    let p = packet_publisher(&env, 96 << 20);
    let mut small = Subscriber::connect(&env.key, &packets_only(&env, "default")).unwrap();
    let mut o = packets_only(&env, "raised");
    o.max_packet_size = 96 << 20;
    let mut big = Subscriber::connect(&env.key, &o).unwrap();

    let large: Vec<u8> = (0..80usize << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    p.publish_packet(&[1; 1000], 0, 0, PACKET_FLAG_KEY).unwrap();
    p.publish_packet(&large, 1, 1, PACKET_FLAG_KEY).unwrap();
    p.publish_packet(&[3; 100], 2, 2, 0).unwrap();
    p.publish_packet(&[4; 1000], 3, 3, PACKET_FLAG_KEY).unwrap();

    let wait = Some(Duration::from_secs(5));
    let mut buf = Vec::new();
    assert_eq!(small.next_packet(wait, &mut buf).unwrap().seq, 1);
    let (info, grew) = peak_rss_growth(|| small.next_packet(wait, &mut buf).unwrap());
    assert_eq!(
        info.seq, 4,
        "the oversized packet and the one after it are lost"
    );
    assert!(info.is_discontinuity());
    assert_eq!(buf, vec![4; 1000]);
    assert!(buf.capacity() < 1 << 20, "{} bytes", buf.capacity());
    assert!(
        grew < 32 << 20,
        "reading raised the peak RSS by {} MiB",
        grew >> 20
    );
    let stats = small.packet_stats().unwrap();
    assert_eq!((stats.oversized, stats.overruns), (1, 0));

    let mut got = Vec::new();
    for (seq, want) in [(1, vec![1; 1000]), (2, large), (3, vec![3; 100])] {
        let info = big.next_packet(wait, &mut got).unwrap();
        assert_eq!(info.seq, seq);
        assert!(!info.is_discontinuity());
        assert!(got == want, "packet {seq} differs");
    }
    assert_eq!(big.packet_stats().unwrap().oversized, 0);
}

/// The re-executed children of this binary (`common::role_command`) run here.
#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    match role.as_str() {
        "oversized_reader" => {
            oversized_reader(std::env::var("CUFRAMES_OVERRUN_ERRORS").unwrap() == "1")
        }
        other => panic!("unknown role {other}"),
    }
}

/// Three oversized keyframes, each read as it comes (so each is tried, skipped and counted),
/// then one the reader accepts; the reader's diagnostics go to this process's stderr.
fn oversized_reader(errors: bool) {
    use cuframes_core::packet_ring::PacketLimits;
    use cuframes_core::packet_ring::PacketRingReader;
    let env = TestEnv::new("hp-diag-child");
    let p = packet_publisher(&env, 1 << 16);
    let limits = PacketLimits {
        max_ring_size: 1 << 16,
        max_packet_size: 1000,
    };
    let mut r = PacketRingReader::open_with(&p.packet_shm_name().unwrap(), limits).unwrap();
    r.set_overrun_errors(errors);
    let (poll, mut buf, mut refused) = (Some(Duration::ZERO), Vec::new(), 0);
    for (i, size) in [1001usize, 1002, 1003].into_iter().enumerate() {
        p.publish_packet(&vec![9; size], i as i64, i as i64, PACKET_FLAG_KEY)
            .unwrap();
        match r.next_packet(poll, &mut buf) {
            Err(e) if e.code() == ErrorCode::PacketOverrun => refused += 1,
            Err(e) if e.code() == ErrorCode::Timeout => {}
            other => panic!("an oversized packet was read: {other:?}"),
        }
    }
    p.publish_packet(&[4; 1000], 3, 3, PACKET_FLAG_KEY).unwrap();
    let info = r.next_packet(poll, &mut buf).unwrap();
    assert!(info.is_discontinuity());
    println!(
        "RESULT oversized={} refused={refused} read={}",
        r.stats().oversized,
        buf.len()
    );
}

/// "A stream of them says it once": without overrun errors the reader says on stderr that
/// it skipped a packet for its size on the first one only (the count is in the stats);
/// with them on the error says it, and stderr nothing.
#[test]
fn a_stream_of_oversized_packets_is_reported_once() {
    let _serial = serial();
    let env = TestEnv::new("hp-diag");
    for errors in [false, true] {
        let mut cmd = child::role_command("oversized_reader", &env);
        cmd.env("CUFRAMES_OVERRUN_ERRORS", if errors { "1" } else { "0" })
            .stderr(std::process::Stdio::piped());
        let out = cmd.output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let refused = if errors { 3 } else { 0 };
        assert!(
            stdout.contains(&format!("RESULT oversized=3 refused={refused} read=1000")),
            "{stdout}\n{stderr}"
        );
        let said = stderr
            .lines()
            .filter(|l| l.contains("more than this reader accepts"))
            .count();
        assert_eq!(
            said,
            usize::from(!errors),
            "overrun errors {errors}: {stderr}"
        );
    }
}
