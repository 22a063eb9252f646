//! Unit tests of the subscriber that need its private state (the socket, the end).

use std::cell::RefCell;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use super::{EndReason, Subscriber, SubscriberOptions};
use crate::error::{Error, ErrorCode};
use crate::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use crate::wire::{Format, Policy, SubscriberMode};

thread_local! {
    /// Runs once, between `next_frame`'s load of the shutdown flag and its ring read.
    static HOOK: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
}

pub(super) fn between_shutdown_and_ring_loads() {
    if let Some(hook) = HOOK.with(|h| h.borrow_mut().take()) {
        hook();
    }
}

/// `next_frame` loads the shutdown flag before the ring: a publisher that publishes its last
/// frame and shuts down between the two loads must not make it report DISCONNECTED with that
/// frame unread (for FFmpeg an EOF that loses the last STRICT_WAIT frame).
#[test]
fn the_last_frame_before_shutdown_is_delivered_before_disconnected() {
    let dir = std::env::temp_dir().join(format!(
        "cuframes-unit-{}-{:x}",
        std::process::id(),
        crate::util::unique_suffix()
    ));
    let key = format!("u-last-{}", std::process::id());
    let publisher = Publisher::create(
        &key,
        PublisherOptions {
            runtime_dir: Some(dir.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let mut cfg = FrameRingConfig::new(Format::Rgba, 16, 16);
    cfg.policy = Policy::StrictWait;
    publisher.enable_frames(cfg).unwrap();
    let planes = [vec![1u8; 64 * 16]];
    let publish = |p: &Publisher, v: u8| {
        let plane = vec![v; 64 * 16];
        p.publish_host_planes(&[&plane], &[64], None).unwrap()
    };
    let mut sub = Subscriber::connect(
        &key,
        &SubscriberOptions {
            runtime_dir: Some(dir.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    publisher
        .publish_host_planes(&[&planes[0]], &[64], None)
        .unwrap();
    assert_eq!(sub.next_frame(Some(Duration::from_secs(2))).unwrap().seq, 1);

    HOOK.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            publish(&publisher, 2);
            drop(publisher); // sets the shutdown flag, sends SHUTDOWN, removes the key
        }))
    });
    let last = sub.next_frame(Some(Duration::from_secs(2)));
    let _ = std::fs::remove_dir_all(&dir);
    let last = last.expect("the frame published before the shutdown");
    assert_eq!(last.seq, 2);
    assert_eq!(last.bytes().unwrap()[0], 2);
    drop(last);
    let end = sub.next_frame(Some(Duration::from_secs(2))).err().unwrap();
    assert_eq!(end.code(), ErrorCode::Disconnected);
}

/// The connection ends while the publisher lives on and keeps publishing (it does not count
/// this subscriber any more, so nothing it publishes from then on is kept for it). The
/// subscriber delivers what was published up to the moment it saw the end, then
/// DISCONNECTED, and DISCONNECTED again at every later read, never a frame published after
/// the end. With `reconnect` it connects again instead, and the publisher counts it again.
#[test]
fn nothing_published_after_the_end_is_delivered() {
    for reconnect in [false, true] {
        let dir = std::env::temp_dir().join(format!(
            "cuframes-unit-{}-{:x}",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        let key = format!("u-end-{}-{}", std::process::id(), u8::from(reconnect));
        let publisher = Publisher::create(
            &key,
            PublisherOptions {
                runtime_dir: Some(dir.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        let run = || {
            publisher
                .enable_frames(FrameRingConfig::new(Format::Rgba, 16, 16))
                .unwrap();
            let publish = |v: u8| {
                let plane = vec![v; 64 * 16];
                publisher
                    .publish_host_planes(&[&plane], &[64], None)
                    .unwrap()
            };
            let wait = Some(Duration::from_secs(2));
            let mut sub = Subscriber::connect(
                &key,
                &SubscriberOptions {
                    runtime_dir: Some(dir.clone()),
                    reconnect: reconnect.then_some(Duration::from_secs(5)),
                    ..Default::default()
                },
            )
            .unwrap();
            publish(1);
            publish(2);
            // The connection ends without a SHUTDOWN: the publisher sees it close and
            // drops this subscriber, the ring goes on.
            sub.stream.shutdown(std::net::Shutdown::Both).unwrap();
            assert_eq!(sub.next_frame(wait).unwrap().seq, 1);
            assert!(sub.closing.is_some(), "the end is seen by now");
            let t = std::time::Instant::now();
            while publisher.subscriber_count() != 0 {
                assert!(t.elapsed() < Duration::from_secs(5), "still counted");
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(publish(3), 3);
            assert_eq!(sub.next_frame(wait).unwrap().seq, 2);
            if reconnect {
                // Reconnected at the end of what was delivered: frame 3 was published
                // while it was away (R26), frame 4 is for it.
                let e = sub.next_frame(Some(Duration::from_millis(100))).err();
                assert_eq!(e.map(|e| e.code()), Some(ErrorCode::Timeout));
                assert_eq!((sub.restarts(), publisher.subscriber_count()), (1, 1));
                assert_eq!(publish(4), 4);
                assert_eq!(sub.next_frame(wait).unwrap().seq, 4);
                return;
            }
            for v in [4, 5] {
                let e = sub.next_frame(wait).err().unwrap();
                assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
                publish(v);
            }
            let e = sub.next_frame(wait).err().unwrap();
            assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
        drop(publisher);
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(p) = outcome {
            std::panic::resume_unwind(p);
        }
    }
}

/// A publisher of 16x16 RGBA frames in a private runtime directory, for the end-reason
/// tests; the directory is removed by `EndFixture`'s drop (also when a test fails).
struct EndFixture {
    dir: PathBuf,
    key: String,
    publisher: Option<Publisher>,
}

impl EndFixture {
    fn new(tag: &str, policy: Policy) -> EndFixture {
        let dir = std::env::temp_dir().join(format!(
            "cuframes-unit-{}-{:x}",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        let key = format!(
            "u-{tag}-{}-{:x}",
            std::process::id(),
            crate::util::unique_suffix()
        );
        let publisher = Publisher::create(
            &key,
            PublisherOptions {
                runtime_dir: Some(dir.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        let mut cfg = FrameRingConfig::new(Format::Rgba, 16, 16);
        cfg.policy = policy;
        cfg.ring_size = 4;
        cfg.ack_timeout = Duration::from_millis(200);
        publisher.enable_frames(cfg).unwrap();
        EndFixture {
            dir,
            key,
            publisher: Some(publisher),
        }
    }

    fn subscribe(&self, mode: SubscriberMode) -> Subscriber {
        Subscriber::connect(
            &self.key,
            &SubscriberOptions {
                runtime_dir: Some(self.dir.clone()),
                mode,
                ..Default::default()
            },
        )
        .unwrap()
    }

    fn publish(&self, v: u8) -> u64 {
        let plane = vec![v; 64 * 16];
        self.publisher
            .as_ref()
            .unwrap()
            .publish_host_planes(&[&plane], &[64], None)
            .unwrap()
    }
}

impl Drop for EndFixture {
    fn drop(&mut self) {
        drop(self.publisher.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads until the end; the end must come within a few seconds.
fn read_to_end(sub: &mut Subscriber) -> Error {
    for _ in 0..100 {
        match sub.next_frame(Some(Duration::from_secs(5))) {
            Ok(_) => continue,
            Err(e) => return e,
        }
    }
    panic!("no end after 100 frames");
}

/// A clean shutdown ends the stream with reason Shutdown, and only once
/// a read has returned the end (None while frames are still delivered).
#[test]
fn end_reason_of_a_shutdown() {
    let mut fx = EndFixture::new("end-shut", Policy::DropOldest);
    let mut sub = fx.subscribe(SubscriberMode::Copy);
    fx.publish(1);
    drop(fx.publisher.take());
    assert_eq!(sub.next_frame(Some(Duration::from_secs(5))).unwrap().seq, 1);
    assert_eq!(sub.end_reason(), None, "the end is not read yet");
    let e = read_to_end(&mut sub);
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
    assert_eq!(sub.end_reason(), Some(EndReason::Shutdown));
    assert!(EndReason::Shutdown.is_clean());
}

/// A zero-copy reader holding every slot of a STRICT_WAIT ring is dropped by the
/// publisher after its ack timeout (ERROR): the end says Kicked, not a shutdown.
#[test]
fn end_reason_of_a_kick() {
    let fx = EndFixture::new("end-kick", Policy::StrictWait);
    let mut sub = fx.subscribe(SubscriberMode::ZeroCopy);
    assert!(sub.is_zero_copy());
    let mut held = Vec::new();
    for v in 1..=4 {
        fx.publish(v);
        held.push(sub.next_frame(Some(Duration::from_secs(5))).unwrap());
    }
    // The fifth needs a held slot: the publisher waits 200 ms, then drops the reader.
    fx.publish(5);
    let e = read_to_end(&mut sub);
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
    assert!(e.message().contains("dropped this subscriber"), "{e}");
    assert_eq!(sub.end_reason(), Some(EndReason::Kicked));
    assert!(!EndReason::Kicked.is_clean());
    drop(held);
}

/// The connection ends without a SHUTDOWN (as when the publisher is killed): the end is
/// PublisherLost, and the error says the publisher went without a shutdown.
#[test]
fn end_reason_of_a_lost_publisher() {
    let fx = EndFixture::new("end-lost", Policy::DropOldest);
    let mut sub = fx.subscribe(SubscriberMode::Copy);
    sub.stream.shutdown(std::net::Shutdown::Both).unwrap();
    let e = read_to_end(&mut sub);
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
    assert!(e.message().contains("without a SHUTDOWN"), "{e}");
    assert_eq!(sub.end_reason(), Some(EndReason::PublisherLost));
}

/// Bytes on the connection that are no message (a header declaring a 4 GiB payload):
/// the end is ProtocolError.
#[test]
fn end_reason_of_a_protocol_error() {
    use std::io::Write;
    let fx = EndFixture::new("end-proto", Policy::DropOldest);
    let mut sub = fx.subscribe(SubscriberMode::Copy);
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    // The publisher's connection closes with the old end (it drops the subscriber).
    drop(std::mem::replace(&mut sub.stream, ours));
    theirs.write_all(&[0xff; 8]).unwrap();
    let e = read_to_end(&mut sub);
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
    assert_eq!(sub.end_reason(), Some(EndReason::ProtocolError));
    drop(theirs);
}
