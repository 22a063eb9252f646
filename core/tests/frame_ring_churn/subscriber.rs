//! A subscriber process: sessions that join, read and verify, stall, leave and rejoin, each
//! reported on a line of its own.

use cuframes_test_support as common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{CudaCheck, Rng};
use cuframes_core::subscriber::{Frame, Subscriber, SubscriberOptions};
use cuframes_core::testing::monotonic_ns;
use cuframes_core::wire::{Policy, SubscriberMode};
use cuframes_core::ErrorCode;

use super::config::{memory_is_cuda, policy_from_env, ACK_TIMEOUT, CHILD_ENV, RING_SIZE, STALL_MS};

/// Counters of one session (printed as a SESSION line).
#[derive(Default)]
struct Session {
    delivered: u64,
    zero_copy: u64,
    corrupt: u64,
    misordered: u64,
    gaps: u64,
    gaps_after_drop: u64,
    lapped: u64,
    held_checked: u64,
    held_overwritten: u64,
    late_overwritten: u64,
    late_corrupt: u64,
    late_acks: u64,
    stalls: u64,
    stall_holding: u64,
    declared_dead: u64,
    shutdowns: u64,
    timeouts: u64,
    errors: u64,
    torn: u64,
    overrun: u64,
    zombies: u64,
    zombie_acks: u64,
}

impl Session {
    fn line(&self) -> String {
        format!(
            "SESSION delivered={} zero_copy={} corrupt={} misordered={} gaps={} \
             gaps_after_drop={} lapped={} held_checked={} held_overwritten={} \
             late_overwritten={} late_corrupt={} late_acks={} stalls={} stall_holding={} \
             declared_dead={} shutdowns={} timeouts={} errors={} torn={} overrun={} \
             zombies={} zombie_acks={}",
            self.delivered,
            self.zero_copy,
            self.corrupt,
            self.misordered,
            self.gaps,
            self.gaps_after_drop,
            self.lapped,
            self.held_checked,
            self.held_overwritten,
            self.late_overwritten,
            self.late_corrupt,
            self.late_acks,
            self.stalls,
            self.stall_holding,
            self.declared_dead,
            self.shutdowns,
            self.timeouts,
            self.errors,
            self.torn,
            self.overrun,
            self.zombies,
            self.zombie_acks
        )
    }
}

/// Does every byte of `f` match the pattern of its seq (`dense`)?
fn verify(f: &Frame, dense: &[Vec<u8>], cuda: Option<&CudaCheck>) -> bool {
    common::verify_any(f, dense, cuda)
}

/// Limit the BAD lines of one process (its stdout is a pipe read when it exits).
fn bad(budget: &mut u32, what: std::fmt::Arguments) {
    if *budget > 0 {
        *budget -= 1;
        println!("BAD pid={} {what}", std::process::id());
    }
}

pub fn churn_subscriber() {
    // libtest has printed "test child_entry ... " without a newline: start our lines afresh.
    println!();
    let spec = std::env::var(CHILD_ENV).unwrap();
    let f: Vec<&str> = spec.split_whitespace().collect();
    let mode = if f[0] == "zero_copy" {
        SubscriberMode::ZeroCopy
    } else {
        SubscriberMode::Copy
    };
    let life = Duration::from_millis(f[1].parse().unwrap());
    let mut rng = Rng::new(f[2].parse().unwrap());
    let end_ns: i64 = f[3].parse().unwrap();
    let calm = f[4] == "1";
    let mut zombie = f[5] == "1";
    let policy = policy_from_env();
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let dir = std::env::var("CUFRAMES_RUNTIME_DIR").unwrap();
    let t_init = Instant::now();
    let cuda = memory_is_cuda().then(CudaCheck::open);
    if cuda.is_some() {
        // Start-up cost of a CUDA subscriber process (driver, context), for the summary.
        println!(
            "SESSION cuda_inits=1 cuda_init_ms={}",
            t_init.elapsed().as_millis()
        );
    }
    let until = {
        let left = Duration::from_nanos(end_ns.saturating_sub(monotonic_ns()).max(0) as u64);
        Instant::now() + life.min(left)
    };
    let (mut too_many, mut connect_errors, mut sessions, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let mut budget = 20u32;
    while Instant::now() < until {
        let opts = SubscriberOptions {
            runtime_dir: Some(dir.clone().into()),
            name: format!("churn-{}-{sessions}", std::process::id()),
            mode,
            ..Default::default()
        };
        let t_connect = Instant::now();
        let connected = Subscriber::connect(&key, &opts);
        println!(
            "SESSION connects=1 connect_ms={}",
            t_connect.elapsed().as_millis()
        );
        match connected {
            Ok(s) => {
                sessions += 1;
                println!("JOIN bit={} zero_copy={}", s.bit(), s.is_zero_copy() as u8);
                let mut c = Session::default();
                if std::mem::take(&mut zombie) {
                    zombie_session(s, &key, &mut rng, cuda.as_ref(), &mut c, &mut budget);
                    println!("{}", c.line());
                    continue;
                }
                run_session(
                    s,
                    &mut rng,
                    policy,
                    cuda.as_ref(),
                    until,
                    calm,
                    &mut c,
                    &mut budget,
                );
                println!("{}", c.line());
            }
            Err(e) if e.code() == ErrorCode::TooMany => {
                // All 31 bits taken (some may be quarantined): try again a little later.
                too_many += 1;
                std::thread::sleep(rng.ms(5, 40));
                continue;
            }
            Err(e)
                if matches!(
                    e.code(),
                    ErrorCode::Timeout | ErrorCode::Disconnected | ErrorCode::Io
                ) =>
            {
                // A handshake can time out, or be cut off by the publisher's limits on
                // pending handshakes, when 60 processes share 2 cores: no verdict on the
                // ring. Count it and retry.
                connect_errors += 1;
                if connect_errors <= 3 {
                    eprintln!("churn subscriber {}: connect: {e}", std::process::id());
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                errors += 1;
                bad(&mut budget, format_args!("connect: {e}"));
                break;
            }
        }
        if calm || !rng.chance(65) {
            break;
        }
        std::thread::sleep(rng.ms(0, 50));
    }
    println!(
        "RESULT sessions={sessions} too_many={too_many} connect_errors={connect_errors} \
         errors={errors}"
    );
    std::process::exit(0);
}

#[allow(clippy::too_many_arguments)]
fn run_session(
    mut s: Subscriber,
    rng: &mut Rng,
    policy: Policy,
    cuda: Option<&CudaCheck>,
    until: Instant,
    calm: bool,
    c: &mut Session,
    budget: &mut u32,
) {
    let layout = s.frame_layout().unwrap().clone();
    let bit = s.bit();
    let start = Instant::now();
    let len = rng.ms(50, 1500);
    let end = until.min(start + len);
    // A stall past the ack timeout somewhere in the session, holding a frame or not.
    let mut stall = (!calm && rng.chance(8)).then(|| {
        (
            start + rng.ms(0, len.as_millis() as u64),
            rng.ms(STALL_MS.0, STALL_MS.1),
            rng.chance(50),
        )
    });
    let late_ns = ACK_TIMEOUT.as_nanos() as i64;
    let mut last: Option<u64> = None;
    // Late with an ACK, saw a gap, or stalled: the publisher may have given up on us.
    let mut compromised = false;
    let mut stalled = false;
    let mut dropped = false;
    let mut pending_gaps = 0u64;
    let mut end = end;
    let mut extended = false;
    loop {
        let now = Instant::now();
        if now >= end {
            // After a gap, wait a moment for the ERROR that must come with it (STRICT_WAIT).
            if pending_gaps > 0 && !dropped && !extended {
                end = now + Duration::from_millis(500);
                extended = true;
            } else {
                break;
            }
        }
        let timeout = (end - now).clamp(Duration::from_millis(1), Duration::from_secs(1));
        match s.next_frame(Some(timeout)) {
            Ok(f) => {
                c.delivered += 1;
                let zc = f.is_zero_copy();
                c.zero_copy += zc as u64;
                let late = |t: i64| t - f.pts_ns >= late_ns;
                if let Some(l) = last {
                    if f.seq <= l {
                        c.misordered += 1;
                        bad(
                            budget,
                            format_args!("bit={bit} misordered seq {} after {l}", f.seq),
                        );
                    } else if f.seq > l + 1 {
                        if policy == Policy::StrictWait {
                            pending_gaps += f.seq - l - 1;
                            compromised = true;
                        } else {
                            c.lapped += f.seq - l - 1;
                        }
                    }
                }
                last = Some(last.map_or(f.seq, |l| l.max(f.seq)));
                let expected = common::planes_for(&layout, f.seq);
                let ok = verify(&f, &expected, cuda);
                let t_check = monotonic_ns();
                if !zc && late(t_check) {
                    // A copy is ACKed before it is handed out: this ACK was late.
                    c.late_acks += 1;
                    compromised = true;
                }
                if !ok {
                    if zc && (compromised || late(t_check)) {
                        c.late_corrupt += 1;
                    } else {
                        c.corrupt += 1;
                        bad(
                            budget,
                            format_args!(
                                "bit={bit} corrupt seq {} zero_copy={zc} age {} us",
                                f.seq,
                                (t_check - f.pts_ns) / 1000
                            ),
                        );
                    }
                }
                // Hold the frame 0–3 ms (or stall holding it), then check it again.
                if stall.is_some_and(|(at, _, holding)| holding && Instant::now() >= at) {
                    let (_, d, _) = stall.take().unwrap();
                    std::thread::sleep(d);
                    c.stalls += 1;
                    c.stall_holding += 1;
                    stalled = true;
                    compromised = true;
                } else {
                    let hold = rng.below(3001);
                    if hold > 0 {
                        std::thread::sleep(Duration::from_micros(hold));
                    }
                }
                let ok2 = verify(&f, &expected, cuda);
                let t_release = monotonic_ns();
                c.held_checked += 1;
                if ok && !ok2 {
                    if zc && (compromised || late(t_release)) {
                        c.late_overwritten += 1;
                    } else {
                        c.held_overwritten += 1;
                        bad(
                            budget,
                            format_args!(
                                "bit={bit} held frame {} overwritten zero_copy={zc} \
                                 {} us after its publish",
                                f.seq,
                                (t_release - f.pts_ns) / 1000
                            ),
                        );
                    }
                }
                if zc && late(t_release) {
                    c.late_acks += 1;
                    compromised = true;
                }
                f.release();
                if stall.is_some_and(|(at, _, holding)| !holding && Instant::now() >= at) {
                    let (_, d, _) = stall.take().unwrap();
                    std::thread::sleep(d);
                    c.stalls += 1;
                    stalled = true;
                    compromised = true;
                }
            }
            Err(e) if e.code() == ErrorCode::Disconnected => {
                if e.message().contains("dropped this subscriber") {
                    c.declared_dead += 1;
                    dropped = true;
                } else {
                    c.shutdowns += 1;
                }
                break;
            }
            Err(e) if e.code() == ErrorCode::Timeout => c.timeouts += 1,
            Err(e) => {
                c.errors += 1;
                bad(budget, format_args!("bit={bit} next_frame: {e}"));
                break;
            }
        }
    }
    let st = s.frame_stats();
    c.torn += st.dropped_torn;
    c.overrun += st.dropped_overrun;
    if pending_gaps > 0 {
        if dropped || stalled {
            c.gaps_after_drop += pending_gaps;
        } else {
            c.gaps += pending_gaps;
            bad(
                budget,
                format_args!("bit={bit} STRICT_WAIT: {pending_gaps} frames skipped without a drop"),
            );
        }
    }
    drop(s);
}

/// A peer that goes on ACKing with its bit after the publisher gave up on it: what a process
/// whose ACKs were in flight when ERROR(TIMEOUT) came does, stretched out (or a peer that
/// ignores the ERROR). The publisher keeps a given-up bit quarantined until the socket closes,
/// so these ACKs must never count for the bit's next owner; here they go straight into the
/// frame SHM's slot bitmaps, past the library's ACK gate, for 300–800 ms with the socket open.
/// (A subscriber with a per-connection ACK page is not ACKed for through the bitmap at all:
/// then these writes check that a bitmap ACK never counts for a page subscriber.)
fn zombie_session(
    mut s: Subscriber,
    key: &str,
    rng: &mut Rng,
    cuda: Option<&CudaCheck>,
    c: &mut Session,
    budget: &mut u32,
) {
    let layout = s.frame_layout().unwrap().clone();
    let bit = s.bit();
    let read_until = Instant::now() + rng.ms(30, 300);
    let mut last = 0u64;
    while Instant::now() < read_until {
        match s.next_frame(Some(Duration::from_millis(100))) {
            Ok(f) => {
                c.delivered += 1;
                if f.seq <= last {
                    c.misordered += 1;
                    bad(
                        budget,
                        format_args!("bit={bit} misordered seq {} after {last}", f.seq),
                    );
                }
                last = last.max(f.seq);
                let ok = verify(&f, &common::planes_for(&layout, f.seq), cuda);
                if !ok && !f.is_zero_copy() {
                    c.corrupt += 1;
                    bad(
                        budget,
                        format_args!("bit={bit} corrupt seq {} (zombie, reading)", f.seq),
                    );
                }
            }
            Err(e) if e.code() == ErrorCode::Timeout => c.timeouts += 1,
            Err(e) if e.code() == ErrorCode::Disconnected => {
                c.shutdowns += 1;
                return;
            }
            Err(e) => {
                c.errors += 1;
                bad(budget, format_args!("bit={bit} next_frame: {e}"));
                return;
            }
        }
    }
    // Stall past the ack timeout, then look whether the publisher gave up on us.
    std::thread::sleep(rng.ms(STALL_MS.0, STALL_MS.1));
    c.stalls += 1;
    match s.next_frame(Some(Duration::from_millis(1))) {
        Err(e) if e.message().contains("dropped this subscriber") => c.declared_dead += 1,
        _ => return, // not given up on (or the end): a plain session after all
    }
    let name = cuframes_core::paths::Key::new(key)
        .unwrap()
        .frame_shm_name();
    // The frame SHM may not be writable for subscribers: then there is no bitmap to ACK in.
    let Ok((_fd, map)) =
        cuframes_core::shm::open(&name, cuframes_core::wire::frame::FRAME_SHM_SIZE, true)
    else {
        return;
    };
    let shm = cuframes_core::testing::FrameShm::new(map).unwrap();
    let until = Instant::now() + rng.ms(300, 800);
    while Instant::now() < until {
        for k in 0..RING_SIZE {
            let seq = shm.slot_seq(k).load(Ordering::Acquire);
            if seq != 0 && seq != cuframes_core::wire::INVALID_SEQ {
                shm.slot_ack(k).fetch_or(1u64 << bit, Ordering::AcqRel);
                c.zombie_acks += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.range(50, 300)));
    }
    c.zombies += 1;
    drop(s); // only now does the socket close (and the bit become free)
}
