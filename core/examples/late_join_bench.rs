//! Time to first packet (TTFP) of late subscribers across GOP lengths, with the GOP store and
//! without it (the baseline, measured in the same run on an identical stream).
//!
//! ```text
//! cargo run --release -p cuframes-core --example late_join_bench             # 8 joins per GOP
//! cargo run --release -p cuframes-core --example late_join_bench -- 16 0.5,1,2,4,8
//! ```
//!
//! Two publishers (one with the default GOP store, one without) under two keys of a private
//! runtime directory publish the same 4K-like stream in real time: 30 fps, a keyframe of
//! 1 MiB and P frames of 60 KiB, the default packet ring (64 slots, 8 MiB). For each GOP
//! length, after one GOP has been published, `joins` subscribers join each publisher at
//! instants spread evenly over one GOP; each one's TTFP runs from the start of
//! `Subscriber::connect` to the return of its first packet (a keyframe). The publisher thread
//! paces itself; joiners are threads of this process.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{CODEC_ID_HEVC, PACKET_FLAG_KEY};

const FPS: f64 = 30.0;
const KEY_BYTES: usize = 1 << 20;
const P_BYTES: usize = 60 << 10;

struct Sample {
    ttfp: Duration,
    /// Until the joiner had read everything published (its first wait for a packet).
    live: Duration,
    from_store: u64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let joins: usize = args.next().map_or(8, |a| a.parse().expect("joins per GOP"));
    let gops: Vec<f64> = args.next().map_or(vec![0.5, 1.0, 2.0, 4.0, 8.0], |a| {
        a.split(',')
            .map(|g| g.parse().expect("GOP seconds"))
            .collect()
    });
    let dir = std::env::temp_dir().join(format!("cuframes-late-join-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("runtime dir");
    println!(
        "late joiners: TTFP (connect to first packet, a keyframe), {joins} joins per GOP \
         length spread over one GOP; 30 fps, keyframe 1 MiB, P 60 KiB, ring 64 slots / 8 MiB"
    );
    println!(
        "| GOP | packets/GOP | TTFP without store: median / p90 / max | TTFP with GOP store: median / p90 / max | with store: at the live edge after (median) | read from the store (mean) |"
    );
    println!("|---|---|---|---|---|---|");
    let mut costs: [[Cost; 2]; 2] = Default::default();
    for (i, gop) in gops.iter().enumerate() {
        let (base, store, cost) = run(&dir, i, *gop, joins);
        for (all, this) in costs.iter_mut().flatten().zip(cost.iter().flatten()) {
            all.0.extend_from_slice(&this.0);
        }
        let mean_store = store.iter().map(|s| s.from_store).sum::<u64>() / store.len() as u64;
        let mut live: Vec<Duration> = store.iter().map(|s| s.live).collect();
        live.sort();
        println!(
            "| {gop} s | {} | {} | {} | {} | {mean_store} packets |",
            (gop * FPS).round(),
            summary(&base),
            summary(&store),
            ms(live[live.len() / 2])
        );
    }
    let line = |what: &str, c: &[[Cost; 2]; 2]| {
        println!(
            "| {what} | {:.0} µs | {:.0} µs | {:.1} µs | {:.1} µs |",
            c[0][0].median_us(),
            c[1][0].median_us(),
            c[0][1].median_us(),
            c[1][1].median_us()
        )
    };
    println!("\npublish_packet (median)");
    println!(
        "| | keyframe (1 MiB), without store | with store | P frame (60 KiB), without | with |"
    );
    println!("|---|---|---|---|---|");
    line(
        "paced runs above (their first GOPs: the store's pages touched once)",
        &costs,
    );
    line(
        "steady state (2 s GOPs, after 3 GOPs, 10 GOPs timed)",
        &steady_cost(&dir),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn summary(s: &[Sample]) -> String {
    let mut v: Vec<Duration> = s.iter().map(|s| s.ttfp).collect();
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!("{} / {} / {}", ms(at(0.5)), ms(at(0.9)), ms(at(1.0)))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// One GOP length: both publishers, the pacing thread and the joiners.
fn run(
    dir: &Path,
    round: usize,
    gop_s: f64,
    joins: usize,
) -> (Vec<Sample>, Vec<Sample>, [[Cost; 2]; 2]) {
    let gop = (gop_s * FPS).round().max(1.0) as u64;
    let keys = [
        format!("ljb-{}-{round}-base", std::process::id()),
        format!("ljb-{}-{round}-store", std::process::id()),
    ];
    let options = PublisherOptions {
        runtime_dir: Some(dir.to_path_buf()),
        ..Default::default()
    };
    let pubs: Vec<Publisher> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let p = Publisher::create(k, options.clone()).expect("publisher");
            p.enable_packets(PacketRingConfig {
                codec_id: CODEC_ID_HEVC,
                extradata: vec![0, 0, 0, 1, 0x40, 1],
                ..PacketRingConfig::default()
            })
            .expect("packets");
            if i == 0 {
                p.set_gop_store(None).expect("no store");
            }
            p
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let pacer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let key = vec![0xA5u8; KEY_BYTES];
            let p_frame = vec![0x5Au8; P_BYTES];
            let t0 = Instant::now();
            let mut n = 0u64;
            // [publisher][keyframe, P frame]: what publish_packet costs with and without the store.
            let mut cost: [[Cost; 2]; 2] = Default::default();
            while !stop.load(Ordering::Relaxed) {
                let is_key = n % gop == 0;
                let (data, flags) = if is_key {
                    (&key, PACKET_FLAG_KEY)
                } else {
                    (&p_frame, 0)
                };
                let t = (n as f64 / FPS * 1e9) as i64;
                for (i, p) in pubs.iter().enumerate() {
                    let t1 = Instant::now();
                    p.publish_packet(data, t, t, flags).expect("publish");
                    cost[i][usize::from(!is_key)].add(t1.elapsed());
                }
                n += 1;
                let next = t0 + Duration::from_secs_f64(n as f64 / FPS);
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            (pubs, cost) // dropped here, after the joiners are done
        })
    };
    // One GOP first: every join below has a keyframe to start on.
    let start = Instant::now() + Duration::from_secs_f64(gop as f64 / FPS + 0.1);
    let period = Duration::from_secs_f64(gop as f64 / FPS);
    let mut threads = Vec::new();
    for j in 0..joins {
        let at = start + period.mul_f64((j as f64 + 0.5) / joins as f64);
        for (which, key) in keys.iter().enumerate() {
            let (key, dir) = (key.clone(), dir.to_path_buf());
            threads.push(std::thread::spawn(move || {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                (which, join(&key, dir))
            }));
        }
    }
    let mut out = (Vec::new(), Vec::new());
    for t in threads {
        let (which, sample) = t.join().expect("joiner");
        if which == 0 {
            out.0.push(sample);
        } else {
            out.1.push(sample);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (pubs, cost) = pacer.join().expect("pacer");
    drop(pubs);
    (out.0, out.1, cost)
}

/// Publish cost once both banks of the store have been used: 3 GOPs of 60 packets first,
/// then 10 timed, both publishers in turns, unthrottled.
fn steady_cost(dir: &Path) -> [[Cost; 2]; 2] {
    let options = PublisherOptions {
        runtime_dir: Some(dir.to_path_buf()),
        ..Default::default()
    };
    let pubs: Vec<Publisher> = (0..2)
        .map(|i| {
            let key = format!("ljb-{}-steady-{i}", std::process::id());
            let p = Publisher::create(&key, options.clone()).expect("publisher");
            p.enable_packets(PacketRingConfig {
                codec_id: CODEC_ID_HEVC,
                extradata: vec![0, 0, 0, 1, 0x40, 1],
                ..PacketRingConfig::default()
            })
            .expect("packets");
            if i == 0 {
                p.set_gop_store(None).expect("no store");
            }
            p
        })
        .collect();
    let (key, p_frame) = (vec![0xA5u8; KEY_BYTES], vec![0x5Au8; P_BYTES]);
    let mut cost: [[Cost; 2]; 2] = Default::default();
    for n in 0..13 * 60u64 {
        let is_key = n % 60 == 0;
        let (data, flags) = if is_key {
            (&key, PACKET_FLAG_KEY)
        } else {
            (&p_frame, 0)
        };
        for (i, p) in pubs.iter().enumerate() {
            let t = Instant::now();
            p.publish_packet(data, n as i64, n as i64, flags)
                .expect("publish");
            if n >= 3 * 60 {
                cost[i][usize::from(!is_key)].add(t.elapsed());
            }
        }
    }
    cost
}

/// Publish times of one kind of packet. The median: on a shared machine a preempted publish
/// weighs on a mean far more than the copies measured.
#[derive(Debug, Default, Clone)]
struct Cost(Vec<Duration>);

impl Cost {
    fn add(&mut self, d: Duration) {
        self.0.push(d);
    }

    fn median_us(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort();
        v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    }
}

fn join(key: &str, dir: PathBuf) -> Sample {
    let options = SubscriberOptions {
        runtime_dir: Some(dir),
        want_frames: false,
        want_packets: true,
        name: "late".into(),
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut s = Subscriber::connect(key, &options).expect("connect");
    let mut buf = Vec::new();
    let info = s
        .next_packet(Some(Duration::from_secs(30)), &mut buf)
        .expect("first packet");
    let ttfp = t0.elapsed();
    assert!(info.is_key(), "a late subscriber starts on a keyframe");
    let mut last = info.seq;
    while let Ok(info) = s.next_packet(Some(Duration::ZERO), &mut buf) {
        assert_eq!(info.seq, last + 1, "nothing missing");
        last = info.seq;
    }
    Sample {
        ttfp,
        live: t0.elapsed(),
        from_store: s.packet_stats().map_or(0, |st| st.from_gop_store),
    }
}
