//! A packet subscriber waiting in `next_packet` when its publisher is killed ends
//! `PublisherLost`, with and without `reconnect`. The subscriber labels every `Disconnected`
//! of its packet reader a clean end (`Shutdown`), which is right only because that reader's
//! pid check is off (the socket's EOF says the publisher is gone): with the check on, the
//! reader would see the dead producer before the subscriber looks at the socket again, and
//! report a killed publisher as a clean shutdown. The publisher is a
//! child process (this test binary re-executed).

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use common::{child, Children, TestEnv};
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{Publisher, PublisherOptions};
use cuframes_core::subscriber::{EndReason, Subscriber, SubscriberOptions};
use cuframes_core::wire::{CODEC_ID_H264, PACKET_FLAG_KEY};
use cuframes_core::ErrorCode;

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    assert_eq!(role, "packet_publisher");
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let p = Publisher::create(&key, PublisherOptions::default()).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: CODEC_ID_H264,
        ring_slots: 16,
        data_size: 1 << 16,
        ..Default::default()
    })
    .unwrap();
    p.publish_packet(b"\x00\x00\x00\x01\x65", 0, 0, PACKET_FLAG_KEY)
        .unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    // Until killed.
    std::thread::sleep(Duration::from_secs(120));
}

/// How a packet subscriber waiting in `next_packet` ends when its publisher is SIGKILLed.
fn end_of_a_wait_through_a_kill(reconnect: Option<Duration>) -> (ErrorCode, Option<EndReason>) {
    let env = TestEnv::new("pktlost");
    let mut child = child::role_command("packet_publisher", &env)
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let kids = Children(vec![child]);
    // The test harness prints its own lines first; kept open so the child never sees EPIPE.
    let mut out = BufReader::new(out);
    let mut line = String::new();
    while !line.contains("READY") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the publisher died");
    }
    let mut sub = Subscriber::connect(
        &env.key,
        &SubscriberOptions {
            want_frames: false,
            want_packets: true,
            reconnect,
            ..env.subscriber_options("pktlost")
        },
    )
    .unwrap();
    let mut buf = Vec::new();
    sub.next_packet(Some(Duration::from_secs(10)), &mut buf)
        .unwrap();
    // Kill it while the read below waits (several liveness slices into it).
    let pid = kids.0[0].id() as i32;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(350));
        // SAFETY: kill(2) on our own child, which `kids` reaps only when the test ends (so
        // the pid is not reused meanwhile).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let t = Instant::now();
    let e = sub
        .next_packet(Some(Duration::from_secs(20)), &mut buf)
        .expect_err("a packet after the kill");
    killer.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    // `kids` reaps the publisher, then `env` removes the SHM objects it could not.
    (e.code(), sub.end_reason())
}

#[test]
fn a_publisher_killed_during_a_packet_wait_is_lost_not_shut_down() {
    assert_eq!(
        end_of_a_wait_through_a_kill(None),
        (ErrorCode::Disconnected, Some(EndReason::PublisherLost))
    );
}

#[test]
fn with_reconnect_a_publisher_killed_during_a_packet_wait_is_lost_not_shut_down() {
    assert_eq!(
        end_of_a_wait_through_a_kill(Some(Duration::from_millis(500))),
        (ErrorCode::Disconnected, Some(EndReason::PublisherLost))
    );
}
