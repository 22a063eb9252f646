//! A reader's teardown after its publisher's (`Subscriber::wait_publisher_exit`): once the
//! publisher ended the stream, the wait returns as its process exits, not before and not
//! long after; before the end it returns false at once; a publisher that ended the stream and
//! lives on costs the whole timeout, no more. The publisher is a child process (this test
//! binary re-executed) that publishes, ends the stream, then lives on for a while.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{child, publish_pattern, Children, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::Format;
use cuframes_core::ErrorCode;

/// The child: waits for one subscriber, publishes 3 frames, ends the stream (drops the
/// publisher), prints ENDED, and exits after `CUFRAMES_TEST_LIVE_MS`.
#[test]
fn publisher_exit_child() {
    if child::role().is_none() {
        return;
    }
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let live: u64 = std::env::var("CUFRAMES_TEST_LIVE_MS")
        .unwrap()
        .parse()
        .unwrap();
    let p = Publisher::create(&key, PublisherOptions::default()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 48))
        .unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    let t = Instant::now();
    while p.ready_subscriber_count() < 1 {
        assert!(t.elapsed() < Duration::from_secs(20), "no subscriber came");
        std::thread::sleep(Duration::from_millis(2));
    }
    for n in 1..=3 {
        publish_pattern(&p, n, Some(n as i64)).unwrap();
    }
    drop(p);
    println!("ENDED");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_millis(live));
}

fn start_publisher(env: &TestEnv, live_ms: u64) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut cmd = child::command_for("publisher_exit_child", "publisher");
    let mut c = child::in_env(&mut cmd, env)
        .env("CUFRAMES_TEST_LIVE_MS", live_ms.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    wait_line(&mut out, "READY");
    (c, out)
}

fn wait_line(out: &mut BufReader<std::process::ChildStdout>, what: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "publisher died before {what}"
        );
        if line.contains(what) {
            return;
        }
    }
}

/// Reads until the stream ends: the 3 frames, then DISCONNECTED.
fn read_to_end(sub: &mut Subscriber) {
    let mut frames = 0;
    loop {
        match sub.next_frame(Some(Duration::from_secs(10))) {
            Ok(f) => {
                frames += 1;
                f.release();
            }
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => panic!("reading: {e}"),
        }
    }
    assert_eq!(frames, 3);
}

#[test]
fn the_wait_ends_when_the_publisher_process_exits() {
    let env = TestEnv::new("pubexit");
    let (c, mut out) = start_publisher(&env, 600);
    let mut kids = Children(vec![c]);
    let mut sub = Subscriber::connect(&env.key, &env.subscriber_options("pubexit")).unwrap();
    // While the stream runs, no wait: false at once.
    let t = Instant::now();
    assert!(!sub.wait_publisher_exit(Duration::from_secs(5)));
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );

    read_to_end(&mut sub);
    wait_line(&mut out, "ENDED");
    let ended = Instant::now();
    assert!(sub.wait_publisher_exit(Duration::from_secs(10)));
    let waited = ended.elapsed();
    // The child lives 600 ms after ENDED: the wait lasted about that long.
    assert!(
        waited >= Duration::from_millis(400),
        "returned before the exit: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "returned long after the exit: {waited:?}"
    );
    assert!(kids.0[0].wait().unwrap().success());
    // Gone (reaped): at once.
    let t = Instant::now();
    assert!(sub.wait_publisher_exit(Duration::from_secs(5)));
    assert!(t.elapsed() < Duration::from_millis(500));
    kids.0.clear();
}

#[test]
fn a_publisher_that_lives_on_costs_the_timeout_and_no_more() {
    let env = TestEnv::new("pubexitlive");
    let (c, mut out) = start_publisher(&env, 20_000);
    let _kids = Children(vec![c]);
    let mut sub = Subscriber::connect(&env.key, &env.subscriber_options("pubexit")).unwrap();
    read_to_end(&mut sub);
    wait_line(&mut out, "ENDED");
    let t = Instant::now();
    assert!(!sub.wait_publisher_exit(Duration::from_millis(300)));
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}
