//! The operator tools' test scene (`tool/tests/cli.rs`, `tool/tests/cli_exporter/`): one live
//! publisher whose every number `cuframes stat` and the exporter show is known in advance.

use std::time::Duration;

use cuframes_core::packet_ring::{PacketRingConfig, PacketRingWriter};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, CODEC_ID_H264, PACKET_FLAG_KEY};
use cuframes_core::Key;

use crate::TestEnv;

/// A subscriber name that needs escaping in text, JSON and Prometheus labels.
pub const WEIRD_NAME: &str = "we\"ird\\name";

/// Publisher of `env.key`: NV12 64x48 frame ring of 8 (host memory), 6 frames published;
/// subscriber "alpha" read all 6, [`WEIRD_NAME`] read 2; a packet ring (H.264, 32 slots, 1 MiB,
/// extradata 5 bytes) with 5 packets of 1000 bytes, 20 ms apart, the 3rd a keyframe. The
/// publisher mirrors the subscribers' counters into the header every 250 ms; `start` returns
/// once the header holds them.
pub struct OperatorScene {
    pub publisher: Publisher,
    pub alpha: Subscriber,
    pub weird: Subscriber,
    pub packets: PacketRingWriter,
}

impl OperatorScene {
    pub fn start(env: &TestEnv) -> OperatorScene {
        let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
        let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
        cfg.ring_size = 8;
        p.enable_frames(cfg).unwrap();
        let mut alpha = Subscriber::connect(&env.key, &env.subscriber_options("alpha")).unwrap();
        let mut weird = Subscriber::connect(&env.key, &env.subscriber_options(WEIRD_NAME)).unwrap();
        for _ in 0..6 {
            publish_filler(&p);
        }
        for _ in 0..6 {
            alpha.next_frame(Some(Duration::from_secs(5))).unwrap();
        }
        for _ in 0..2 {
            weird.next_frame(Some(Duration::from_secs(5))).unwrap();
        }
        let cfg = PacketRingConfig {
            codec_id: CODEC_ID_H264,
            extradata: vec![0, 0, 0, 1, 0x67],
            ring_slots: 32,
            data_size: 1 << 20,
        };
        let mut packets =
            PacketRingWriter::create(&Key::new(&env.key).unwrap(), cfg, 0o660).unwrap();
        for n in 1..=5u64 {
            let flags = if n == 3 { PACKET_FLAG_KEY } else { 0 };
            packets
                .publish(
                    &[1; 1000],
                    n as i64 * 20_000_000,
                    n as i64 * 20_000_000,
                    flags,
                )
                .unwrap();
        }
        // The publisher copies the subscribers' counters into the header every 250 ms (its
        // server thread): wait until the header shows these reads, not a fixed 600 ms.
        let name = Key::new(&env.key).unwrap().frame_shm_name();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let f = cuframes_core::inspect::read_frame_shm(&name).unwrap();
            let delivered: u64 = f.subscribers.iter().map(|s| s.delivered).sum();
            if delivered == 8 && f.subscribers.iter().all(|s| s.ack_age.is_some()) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the header never showed the scene's reads: {:?}",
                f.subscribers
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        OperatorScene {
            publisher: p,
            alpha,
            weird,
            packets,
        }
    }
}

/// Publish one frame of constant bytes (3) through the host-copy path; returns its seq. For
/// tests that count frames, not check them (those use [`crate::publish_pattern`]).
pub fn publish_filler(p: &Publisher) -> u64 {
    let layout = p.frame_layout().unwrap().clone();
    let planes: Vec<Vec<u8>> = layout
        .planes()
        .iter()
        .map(|pl| vec![3u8; pl.row_bytes * pl.rows])
        .collect();
    let refs: Vec<&[u8]> = planes.iter().map(|v| v.as_slice()).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|pl| pl.row_bytes).collect();
    p.publish_host_planes(&refs, &strides, None).unwrap()
}
