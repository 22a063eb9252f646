//! The probe: a spinning subscriber that splits the spinning path's latency into its parts.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::testing::monotonic_ns;
use cuframes_core::wire::frame::{FRAME_SLOTS_OFFSET, FRAME_SUBSCRIBERS_OFFSET};
use cuframes_core::wire::SubscriberMode;
use cuframes_core::ErrorCode;

use crate::bench_common::cpu::self_cpu;
use crate::latency::join;

/// `global_seq` in the frame SHM header (§2.1).
const GLOBAL_SEQ_OFFSET: usize =
    std::mem::offset_of!(cuframes_core::wire::frame::SharedHeader, global_seq);

/// The spinning path split in two: this child spins on the ring header's `global_seq` itself
/// (a read-only mapping of its own, the same loads `SubscriberOptions::spin` does), stamps the
/// moment the publication became visible, reads the whole slot-descriptor table (the
/// publisher's other stores: which of them cost a slow cache-line transfer shows here), and
/// makes one non-blocking `recv` on an empty socket of its own (a system call right after a
/// long spin, as the subscriber's socket poll), and only then calls `next_frame`
/// (`Some(ZERO)`: no spin inside, so it polls its socket before reading). Prints the latency
/// publication -> visible here (the publisher's stores and the transfer of global_seq's line),
/// the time the table read took, the time the `recv` took, and publication -> `next_frame`
/// returned. Every other frame is read by `next_frame` spinning itself instead
/// (`SubscriberOptions::spin`, which polls its socket during the spin, not after it): the two
/// paths compared in the same pair of processes (the figures vary more between pairs than
/// between paths).
pub fn child(key: &str, budget: Duration) {
    let opts = SubscriberOptions {
        name: "probe".into(),
        mode: SubscriberMode::ZeroCopy,
        accept_zero_copy_overwrite: true,
        spin: budget,
        ..Default::default()
    };
    let mut s = Subscriber::connect(key, &opts).expect("connect");
    let name = cuframes_core::paths::Key::new(key)
        .unwrap()
        .frame_shm_name();
    let (_fd, header) =
        cuframes_core::shm::open(&name, FRAME_SUBSCRIBERS_OFFSET, false).expect("open the header");
    let global_seq = header.atomic_u64(GLOBAL_SEQ_OFFSET);
    let mut table = vec![0u8; FRAME_SUBSCRIBERS_OFFSET - FRAME_SLOTS_OFFSET];
    // A socket of our own, empty: what one non-blocking `recv` (the subscriber's socket poll)
    // costs right after a long spin, apart from anything of the ring's.
    let (quiet, _peer) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    quiet.set_nonblocking(true).unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let (mut lat, mut visible, mut touched, mut polled, mut own) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // The seq of the last frame read: a publication past it is one to read.
    let mut last_read = 0;
    let (cpu0, wall0) = (self_cpu(), Instant::now());
    let mut own_turn = false;
    loop {
        own_turn = !own_turn;
        if own_turn {
            let began = monotonic_ns();
            match s.next_frame(Some(budget)) {
                Ok(f) => {
                    if f.pts_ns > began {
                        own.push(monotonic_ns() - f.pts_ns);
                    }
                    last_read = f.seq;
                    // SAFETY: null stream: nothing reads the frame.
                    unsafe { f.release_after_stream(std::ptr::null_mut()) };
                }
                Err(e) if e.code() == ErrorCode::Timeout => {}
                Err(e) if e.code() == ErrorCode::Disconnected => break,
                Err(e) => panic!("{e}"),
            }
            continue;
        }
        let (start, spin_began) = (Instant::now(), monotonic_ns());
        let mut seen = None;
        // As `spin_for_publish`: a load, PAUSE, and the clock every 64 loads.
        'spin: while start.elapsed() < budget {
            for _ in 0..64 {
                if global_seq.load(Ordering::Acquire) > last_read {
                    let at = monotonic_ns();
                    header.read_bytes(FRAME_SLOTS_OFFSET, &mut table);
                    std::hint::black_box(&table);
                    let read = monotonic_ns();
                    let _ = std::io::Read::read(&mut &quiet, &mut [0u8; 64]);
                    seen = Some((at, read, monotonic_ns()));
                    break 'spin;
                }
                std::hint::spin_loop();
            }
        }
        match s.next_frame(Some(Duration::ZERO)) {
            Ok(f) => {
                let got = monotonic_ns();
                last_read = f.seq;
                // Only a frame that was not yet published when the spin began: the others
                // were published while this child was elsewhere.
                if let Some((seen, read, recv)) = seen.filter(|_| f.pts_ns > spin_began) {
                    visible.push(seen - f.pts_ns);
                    touched.push(read - seen);
                    polled.push(recv - read);
                    lat.push(got - f.pts_ns);
                }
                // SAFETY: null stream: nothing reads the frame.
                unsafe { f.release_after_stream(std::ptr::null_mut()) };
            }
            Err(e) if e.code() == ErrorCode::Timeout => {}
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => panic!("{e}"),
        }
    }
    let cpu = (self_cpu() - cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64();
    println!(
        "lat {cpu} {} | {} | {} | {} | {}",
        join(&lat),
        join(&visible),
        join(&touched),
        join(&polled),
        join(&own)
    );
}
