//! A subscriber facing a broken or hostile publisher gets a clear error, never a crash or a
//! hang. The "publisher" here is a raw socket server scripted per case.

use cuframes_test_support as common;

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use common::TestEnv;
use cuframes_core::format::FrameLayout;
use cuframes_core::subscriber::Subscriber;
use cuframes_core::tlv::{self, HelloResp, Message, SubscribeResp, VmmFds};
use cuframes_core::wire::frame::FRAME_SHM_SIZE;
use cuframes_core::wire::*;
use cuframes_core::ErrorCode;

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
        meta: FrameLayout::new(Format::Nv12, 64, 32).unwrap().to_meta(),
        shm_path: format!("cuframes-{key}"),
        // A plain v4 publisher: no ACK pages, our subscriber ACKs in the header.
        publisher_flags: 0,
        packets: None,
    }
}

#[test]
fn hello_pointing_at_another_key_is_refused() {
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
        cuframes_core::shm::create(&format!("cuframes-{key}"), FRAME_SHM_SIZE, 0o600).unwrap();
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
    let env = TestEnv::new("hp5");
    let _shm = valid_frame_shm(&env.key);
    let key = env.key.clone();
    let e = against(&env, move |mut s| {
        through_subscribe(&mut s, &key);
        let fd = cuframes_core::shm::memfd("x", 16384).unwrap();
        let v = VmmFds {
            fd_count: 2,
            frame_size_bytes: 16384,
            vmm_granularity: 4096,
            memory_kind: 1,
        };
        send_fds(&s, v, &[fd.as_raw_fd()]);
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
}

#[test]
fn unsealed_memfd_slots_are_refused() {
    let env = TestEnv::new("hp6");
    let _shm = valid_frame_shm(&env.key);
    let key = env.key.clone();
    let e = against(&env, move |mut s| {
        through_subscribe(&mut s, &key);
        let a = cuframes_core::shm::memfd("a", 16384).unwrap();
        let b = cuframes_core::shm::memfd("b", 16384).unwrap();
        let v = VmmFds {
            fd_count: 2,
            frame_size_bytes: 16384,
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
    let env = TestEnv::new("hp7");
    let _shm = valid_frame_shm(&env.key);
    let key = env.key.clone();
    let e = against(&env, move |mut s| {
        through_subscribe(&mut s, &key);
        let a = cuframes_core::shm::memfd("a", 16384).unwrap();
        let v = VmmFds {
            fd_count: 2,
            frame_size_bytes: 16384,
            vmm_granularity: 4096,
            memory_kind: 7,
        };
        send_fds(&s, v, &[a.as_raw_fd(), a.as_raw_fd()]);
    });
    assert_eq!(e.code(), ErrorCode::Format, "{e}");
}

#[test]
fn a_legacy_magic_frame_shm_is_refused() {
    let env = TestEnv::new("hp8");
    // A v1–v3 style SHM under the key's name, from a "publisher" that is this process.
    let (_fd, map) =
        cuframes_core::shm::create(&format!("cuframes-{}", env.key), FRAME_SHM_SIZE, 0o600)
            .unwrap();
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
                frame_size_bytes: 16384,
                vmm_granularity: 4096,
                memory_kind: 1,
            },
            &raw,
        );
    });
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
    assert!(e.message().contains("0xCC7C1DCC"), "{e}");
}

/// Issue #14 (GPU identity): a publisher whose CUDA ring is on a GPU this process cannot see
/// (another container's GPU, a CUDA_VISIBLE_DEVICES that hides it) is refused before
/// SUBSCRIBE, with an error naming the announced UUID; without the check the subscriber
/// would import the ring's handles on whatever its device 0 is. CPU-testable: here no GPU is
/// visible at all (or, on a GPU machine, none has this made-up UUID).
#[test]
fn a_publisher_on_an_unknown_gpu_is_refused_naming_its_uuid() {
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
