//! What a local peer with access to the runtime directory cannot do (trust-boundary issue):
//! hold up the publisher, lock others out, or redirect what the publisher touches.
//!
//! The publisher's server thread against peers that misuse the socket (finding 4,
//! it never waits for a peer to read, so honest subscribers and shutdown are
//! not held up by any number of peers that flood it with PINGs and never read the PONGs.

use cuframes_test_support as common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::{child, packet_shm_name, shm_path, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::tlv::{self, Message};
use cuframes_core::wire::Format;

/// A peer that writes PINGs as fast as the socket takes them and never reads an answer.
fn ping_flooder(socket: std::path::PathBuf, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let Ok(mut s) = UnixStream::connect(socket) else {
        return;
    };
    // A small receive buffer: the PONGs pile up in the publisher's send buffer at once.
    let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &4096);
    s.set_write_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let ping = tlv::encode(&Message::Ping { token: 7 }).unwrap();
    let burst: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * 256)
        .collect();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if s.write_all(&burst).is_err() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Peers that PING without reading never block the server: with PONGs sent under a blocking
/// wait (up to 1 s per message on a full socket), 4 such peers would make every new reader
/// fail "no HELLO_RESP in time", and 16 would make a publisher take 29 s to shut down.
#[test]
fn peers_that_never_read_do_not_block_the_server() {
    let env = TestEnv::new("noread");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooders: Vec<_> = (0..16)
        .map(|_| {
            let (socket, stop) = (p.socket_path().to_owned(), stop.clone());
            std::thread::spawn(move || ping_flooder(socket, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500)); // let their unread PONGs pile up

    let t = Instant::now();
    let mut sub = Subscriber::connect(&env.key, &env.subscriber_options("honest")).unwrap();
    let connect = t.elapsed();
    common::publish_pattern(&p, 1, None).unwrap();
    let f = sub.next_frame(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(f.seq, 1);
    drop(f);

    let t = Instant::now();
    drop(p);
    let shutdown = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    println!("connect took {connect:?}, shutdown {shutdown:?} with 16 flooding peers");
    assert!(connect < Duration::from_secs(1), "connect took {connect:?}");
    assert!(
        shutdown < Duration::from_secs(1),
        "shutdown took {shutdown:?}"
    );
}

/// Re-executed as a child process (another pid) for the connect flood.
#[test]
fn child_entry() {
    if child::role().as_deref() != Some("flood") {
        return;
    }
    let socket = std::env::var("CUFRAMES_FLOOD_SOCKET").unwrap();
    let until = Instant::now() + Duration::from_secs(4);
    let mut open = Vec::new();
    while Instant::now() < until {
        // Silent connections, renewed as the publisher drops them.
        open.retain(|s: &UnixStream| {
            let mut b = [0u8; 1];
            s.set_nonblocking(true).unwrap();
            !matches!(std::io::Read::read(&mut &*s, &mut b), Ok(0))
        });
        while open.len() < 100 {
            match UnixStream::connect(&socket) {
                Ok(s) => open.push(s),
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One process that keeps opening silent connections must not refuse every new subscriber
/// until its connections time out, as 64 pending handshake slots served first come first
/// would.
#[test]
fn a_connection_flood_from_one_process_does_not_lock_others_out() {
    let env = TestEnv::new("flood");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut flood = child::command("flood")
        .env("CUFRAMES_FLOOD_SOCKET", p.socket_path())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut worst = Duration::ZERO;
    for i in 0..3 {
        let t = Instant::now();
        let connected = Subscriber::connect(&env.key, &env.subscriber_options(&format!("s{i}")));
        worst = worst.max(t.elapsed());
        if let Err(e) = connected {
            let _ = flood.kill();
            let _ = flood.wait();
            panic!("subscriber {i} refused during a connect flood: {e}");
        }
    }
    let _ = flood.kill();
    let _ = flood.wait();
    println!("slowest connect during the flood: {worst:?}");
    assert!(worst < Duration::from_secs(1), "{worst:?}");
}

/// The socket's mode is never set by path after `bind`: a group member that replaces the
/// socket by a symlink in between would make a root publisher chmod the symlink's target (a
/// 0600 file turns 0660 within a few hundred creations).
#[test]
fn a_symlink_planted_at_the_socket_name_is_never_followed() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new("symlink");
    let target = env.dir.join("secret");
    std::fs::write(&target, b"not the publisher's").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let socket = env.dir.join(format!("{}.sock", env.key));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let attacker = {
        let (socket, target, stop) = (socket.clone(), target.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::FileTypeExt;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // The moment a socket appears, put a symlink in its place.
                let is_socket =
                    std::fs::symlink_metadata(&socket).is_ok_and(|m| m.file_type().is_socket());
                if is_socket {
                    let _ = std::fs::remove_file(&socket);
                    let _ = std::os::unix::fs::symlink(&target, &socket);
                }
            }
        })
    };
    let mut created = 0;
    for _ in 0..1000 {
        if let Ok(p) = Publisher::create(&env.key, env.publisher_options()) {
            created += 1;
            drop(p);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    attacker.join().unwrap();
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    println!("{created} of 1000 creations succeeded against the attacker");
    assert_eq!(
        mode, 0o600,
        "the publisher changed the mode of a file it did not create"
    );
    assert!(
        created > 0,
        "no creation succeeded: the race was not exercised"
    );
}

/// A frame publisher on key `K-packets` must not replace the live packet ring of key `K`
/// (`/dev/shm/cuframes-K-packets`): were the frame SHM of one key the packet SHM of the
/// other, stale recovery would unlink an object whose magic it does not expect. No key ends
/// in `-packets` (R32), which keeps the two name spaces apart.
#[test]
fn key_x_packets_cannot_touch_key_x() {
    let env = TestEnv::new("ns");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(cuframes_core::packet_ring::PacketRingConfig {
        codec_id: 27,
        extradata: vec![0, 0, 0, 1, 0x67, 1],
        ring_slots: 16,
        data_size: 1 << 16,
    })
    .unwrap();
    let packets = shm_path(&packet_shm_name(&env.key));
    let before = std::fs::metadata(&packets).unwrap();
    let other = format!("{}-packets", env.key);
    let refused = Publisher::create(&other, env.publisher_options())
        .and_then(|q| {
            q.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
                .map(|()| q)
        })
        .err()
        .expect("a key ending in -packets was accepted");
    assert_eq!(
        refused.code(),
        cuframes_core::ErrorCode::InvalidArg,
        "{refused}"
    );
    let after = std::fs::metadata(&packets).expect("key K's packet ring is gone");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        before.ino(),
        after.ino(),
        "key K's packet ring was replaced"
    );
    drop(p);
}

/// The packet ring is 0640: at 0660 any group member could `truncate` it and every mapping of
/// it (the publisher's, every reader's) would fault with SIGBUS. Readers only read it, and a
/// group member's truncate and O_RDWR open are refused.
#[test]
fn a_group_member_cannot_truncate_the_packet_ring() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::process::Command;
    let env = TestEnv::new("trunc");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(cuframes_core::packet_ring::PacketRingConfig {
        codec_id: 27,
        extradata: vec![0, 0, 0, 1, 0x67, 1],
        ring_slots: 16,
        data_size: 1 << 16,
    })
    .unwrap();
    let path = shm_path(&packet_shm_name(&env.key));
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED the truncate attempt (needs root and setpriv to act as a group member)");
        return;
    }
    // uid 65534 in the object's group: what the documented setup grants a subscriber.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            &format!("--regid={}", meta.gid()),
            "--clear-groups",
        ])
        .args(["truncate", "-s", "4096", &path])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a group member truncated the packet ring"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), meta.len());
    // The publisher goes on.
    p.publish_packet(&[0, 0, 0, 1, 0x65, 1, 2, 3], 0, 0, 1)
        .unwrap();
}
