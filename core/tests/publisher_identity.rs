//! Publisher impersonation: while a key's publisher is away, a
//! member of the runtime directory's group can bind the key's socket. A reconnecting reader
//! accepts only a publisher of the uid its first connection saw (SO_PEERCRED), and an
//! explicit `publisher_uid` is checked on every connection, the first included.
//!
//! The impostor is this test binary re-executed as uid 65534 in group 0 (setpriv): a real
//! cuframes publisher of the key, publishing frames.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{child, publish_pattern, Children, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::Format;
use cuframes_core::ErrorCode;

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    match role.as_str() {
        "impostor" => impostor(),
        other => panic!("unknown role {other}"),
    }
}

/// Publish frames under the test's key until our stdin closes, then stop cleanly (the socket
/// and the SHM go).
fn impostor() {
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let p = Publisher::create(&key, Default::default()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    println!("READY");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    };
    let mut seq = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let _ = publish_pattern(&p, seq, None);
        seq += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    watcher.join().unwrap();
    drop(p);
}

fn can_switch_users() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("setpriv").arg("--version").output().is_ok()
}

/// The impostor, as uid 65534 in group 0, once it publishes. Dropping the returned guard
/// kills it; closing its stdin (`leave`) makes it stop cleanly.
fn start_impostor(env: &TestEnv) -> Children {
    use std::os::unix::fs::PermissionsExt;
    // The directory's group may create names in it (what lets the impostor in).
    std::os::unix::fs::chown(&env.dir, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&env.dir, std::fs::Permissions::from_mode(0o770)).unwrap();
    let mut cmd = child::command_as(&child::OTHER_USER_GROUP_0, "impostor");
    child::in_env(&mut cmd, env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut children = Children(vec![cmd.spawn().unwrap()]);
    let out = children.0[0].stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    lines
        .find_map(|l| l.ok().filter(|l| l.contains("READY")))
        .expect("the impostor never published");
    // The rest of its output (the test harness's lines) is read, so that it never fails
    // writing to a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    children
}

/// Close the impostor's stdin: it stops cleanly (its socket and SHM go); wait for it.
fn leave(mut impostor: Children) {
    let child = &mut impostor.0[0];
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "the impostor failed: {status}");
}

fn honest_publisher(env: &TestEnv) -> Publisher {
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    p
}

/// Read until `limit`: every frame read, and the last error.
fn read_for(s: &mut Subscriber, limit: Duration) -> (u64, Option<cuframes_core::Error>) {
    let until = Instant::now() + limit;
    let (mut frames, mut last) = (0, None);
    while Instant::now() < until {
        match s.next_frame(Some(Duration::from_millis(200))) {
            Ok(_) => frames += 1,
            Err(e) => last = Some(e),
        }
    }
    (frames, last)
}

/// The honest publisher stops, a reader with `reconnect` waits, a group member binds the key
/// first: the reader must not silently take the impostor's frames. It refuses the impostor
/// (the uid its first connection saw is not the impostor's), says so while it waits, and
/// takes the honest publisher back when that returns.
#[test]
fn a_reconnecting_reader_refuses_an_impostor_and_waits_for_its_publisher() {
    if !can_switch_users() {
        println!("SKIPPED: needs root and setpriv");
        return;
    }
    let env = TestEnv::new("impost");
    let p = honest_publisher(&env);
    let mut opts = env.subscriber_options("pinned");
    opts.reconnect = Some(Duration::from_secs(60));
    let mut s = Subscriber::connect(&env.key, &opts).unwrap();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    assert_eq!(s.publisher_uid(), me);
    publish_pattern(&p, 0, None).unwrap();
    s.next_frame(Some(Duration::from_secs(5))).unwrap();
    drop(p); // a clean stop: the socket and the SHM go

    let impostor = start_impostor(&env);
    let (frames, last) = read_for(&mut s, Duration::from_secs(3));
    assert_eq!(frames, 0, "the reader took {frames} frames of the impostor");
    let e = last.expect("reads while waiting return an error");
    assert_eq!(e.code(), ErrorCode::Timeout, "{}", e.message());
    assert!(
        e.message().contains("uid 65534")
            && e.message().contains(&format!("uid {me} was expected")),
        "the wait names both uids: {}",
        e.message()
    );
    assert_eq!(s.restarts(), 0);

    leave(impostor);
    let p = honest_publisher(&env);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seq = 1;
    let got = loop {
        publish_pattern(&p, seq, None).unwrap();
        seq += 1;
        match s.next_frame(Some(Duration::from_millis(100))) {
            Ok(f) => break f,
            Err(e) if e.code() == ErrorCode::Timeout && Instant::now() < deadline => {}
            Err(e) => panic!("the honest publisher was not taken back: {}", e.message()),
        }
    };
    assert_eq!(s.restarts(), 1);
    assert_eq!(s.publisher_uid(), me);
    drop(got);
}

/// When only the impostor answers until the wait runs out, the stream ends with PERMISSION
/// naming both uids (not DISCONNECTED, the end of a stream), for good.
#[test]
fn the_wait_ends_with_the_refusal_when_only_an_impostor_answers() {
    if !can_switch_users() {
        println!("SKIPPED: needs root and setpriv");
        return;
    }
    let env = TestEnv::new("impend");
    let p = honest_publisher(&env);
    let mut opts = env.subscriber_options("pinned");
    opts.reconnect = Some(Duration::from_secs(3));
    let mut s = Subscriber::connect(&env.key, &opts).unwrap();
    drop(p);
    let _impostor = start_impostor(&env);
    let (frames, last) = read_for(&mut s, Duration::from_secs(8));
    assert_eq!(frames, 0, "the reader took {frames} frames of the impostor");
    let e = last.expect("an error");
    assert_eq!(e.code(), ErrorCode::Permission, "{}", e.message());
    assert!(e.message().contains("uid 65534"), "{}", e.message());
    let again = s.next_frame(Some(Duration::ZERO)).err().unwrap();
    assert_eq!(again.code(), ErrorCode::Permission, "{}", again.message());
}

/// `publisher_uid` is checked on the first connection: a publisher of another uid is
/// refused with PERMISSION naming both; the right uid connects.
#[test]
fn an_explicit_publisher_uid_is_checked_on_the_first_connection() {
    let env = TestEnv::new("pubuid");
    let _p = honest_publisher(&env);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let other = if me == 65534 { 65533 } else { 65534 };
    let mut opts = env.subscriber_options("explicit");
    opts.publisher_uid = Some(other);
    let e = Subscriber::connect(&env.key, &opts)
        .err()
        .expect("connected to a publisher of another uid");
    assert_eq!(e.code(), ErrorCode::Permission, "{}", e.message());
    assert!(
        e.message().contains(&format!("runs as uid {me}"))
            && e.message().contains(&format!("uid {other} was expected"))
            && e.message().contains("publisher_uid"),
        "{}",
        e.message()
    );
    opts.publisher_uid = Some(me);
    let s = Subscriber::connect(&env.key, &opts).unwrap();
    assert_eq!(s.publisher_uid(), me);
}
