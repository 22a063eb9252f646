//! The soak process: the publisher at a high rate and the supervisor that starts, stalls,
//! stops and kills subscriber processes, then the checks of what they all report.

use cuframes_test_support as common;

use std::collections::HashMap;
use std::io::Read;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use common::{child, count_fds, count_maps, frame_shm_name, Rng, RunDelay, TestEnv};
use cuframes_core::format::FrameGeometry;
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::testing::monotonic_ns;
use cuframes_core::wire::{Format, Policy};

use super::config::{
    env_u64, memory_is_cuda, policy_name, soak_secs, ACK_TIMEOUT, CHILD_ENV, POLICY_ENV,
    PUBLISH_MARGIN, RING_SIZE, STALL_MS,
};

#[derive(Default)]
struct PublishStats {
    count: u64,
    /// Wall clock.
    slowest: Duration,
    /// Wall clock less the run-queue delay (see `PUBLISH_MARGIN`), and that delay.
    slowest_net: Duration,
    slowest_net_run_delay: Duration,
    /// Publishes that waited the whole ack timeout (a subscriber was given up on).
    waited_out: u64,
}

struct Kid {
    child: Child,
    kill_at: Option<Instant>,
    stop_at: Option<Instant>,
    stop_for: Duration,
    /// Some while SIGSTOPped: when to SIGCONT.
    resume_at: Option<Instant>,
}

#[derive(Default)]
struct Totals {
    /// Sums of the children's SESSION and RESULT fields.
    sums: HashMap<String, u64>,
    started: u64,
    killed: u64,
    stopped: u64,
    joins: u64,
    rejoins: u64,
    /// Children that were not SIGKILLed but exited badly or without RESULT.
    failures: Vec<String>,
    bad: Vec<String>,
}

impl Totals {
    fn get(&self, k: &str) -> u64 {
        self.sums.get(k).copied().unwrap_or(0)
    }

    /// Take in what a finished child printed.
    fn absorb(&mut self, out: &str, status: ExitStatus, killed: bool) {
        let mut joins = 0;
        let mut result = false;
        for line in out.lines() {
            let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
            match tag {
                "JOIN" => joins += 1,
                "SESSION" | "RESULT" => {
                    result |= tag == "RESULT";
                    for (k, v) in rest.split_whitespace().filter_map(|kv| kv.split_once('=')) {
                        if let Ok(v) = v.parse::<u64>() {
                            *self.sums.entry(k.to_owned()).or_default() += v;
                        }
                    }
                }
                "BAD" if self.bad.len() < 40 => self.bad.push(line.to_owned()),
                _ => {}
            }
        }
        self.joins += joins;
        self.rejoins += joins.saturating_sub(1);
        if !killed && (!status.success() || !result) {
            self.failures.push(format!(
                "{status}: {}",
                out.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
            ));
        }
    }
}

struct Supervisor<'a> {
    env: &'a TestEnv,
    policy: Policy,
    rng: Rng,
    kids: Vec<Kid>,
    totals: Totals,
    max: usize,
    target: usize,
    next_phase: Instant,
    /// CLOCK_MONOTONIC end of the soak: children do not start sessions past it.
    end_ns: i64,
    /// Whether some children play a zombie ACKer (`CUFRAMES_CHURN_ZOMBIES=0`: none).
    zombies: bool,
}

impl Supervisor<'_> {
    /// Start a subscriber process: COPY or ZERO_COPY, a lifetime, and a fate (SIGKILL or
    /// SIGSTOP at a random moment, a first session as a zombie ACKer under STRICT_WAIT, or
    /// none of these; the child itself decides per session whether it stalls and whether it
    /// rejoins). `calm`: one plain session (warm-up).
    fn spawn(&mut self, calm: bool) {
        let fate = if calm { 100 } else { self.rng.below(100) };
        let zombie = self.policy == Policy::StrictWait && self.zombies && (33..40).contains(&fate);
        let zero_copy = calm && self.totals.started % 2 == 1 || !calm && self.rng.chance(50);
        let life = if calm {
            Duration::from_millis(300)
        } else {
            self.rng.ms(150, 4000)
        };
        let seed = self.rng.next();
        let spec = format!(
            "{} {} {seed} {} {} {}",
            if zero_copy { "zero_copy" } else { "copy" },
            life.as_millis(),
            self.end_ns,
            calm as u8,
            zombie as u8
        );
        let mut cmd = child::command("churn_sub");
        let child = child::in_env(&mut cmd, self.env)
            .env(CHILD_ENV, spec)
            .env(POLICY_ENV, policy_name(self.policy))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let now = Instant::now();
        let mut kid = Kid {
            child,
            kill_at: None,
            stop_at: None,
            stop_for: Duration::ZERO,
            resume_at: None,
        };
        if fate < 25 {
            // Anywhere: during start-up, the handshake, a session, a pause between sessions.
            kid.kill_at = Some(now + self.rng.ms(5, life.as_millis() as u64 + 300));
        } else if fate < 33 {
            kid.stop_at = Some(now + self.rng.ms(30, life.as_millis() as u64));
            kid.stop_for = self.rng.ms(STALL_MS.0, STALL_MS.1);
        }
        self.totals.started += 1;
        self.kids.push(kid);
    }

    /// Signals due, reaping, and (while churning) spawning towards the phase's target.
    fn tick(&mut self, churn: bool) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.kids.len() {
            let kid = &mut self.kids[i];
            let pid = kid.child.id() as libc::pid_t;
            if kid.resume_at.is_some_and(|t| now >= t) {
                // SAFETY: our own child, not yet reaped (so the pid is still its).
                unsafe { libc::kill(pid, libc::SIGCONT) };
                kid.resume_at = None;
            }
            if churn && kid.stop_at.is_some_and(|t| now >= t) {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                kid.stop_at = None;
                kid.resume_at = Some(now + kid.stop_for);
                self.totals.stopped += 1;
            }
            let killed = churn && kid.kill_at.is_some_and(|t| now >= t);
            let status = if killed {
                let _ = kid.child.kill();
                Some(kid.child.wait().unwrap())
            } else {
                kid.child.try_wait().unwrap()
            };
            match status {
                Some(st) => {
                    let mut kid = self.kids.swap_remove(i);
                    let mut out = String::new();
                    let _ = kid.child.stdout.take().unwrap().read_to_string(&mut out);
                    // SIGKILLed by us: its unfinished session and RESULT are lost.
                    if killed {
                        self.totals.killed += 1;
                    }
                    self.totals.absorb(&out, st, killed);
                }
                None => i += 1,
            }
        }
        if !churn {
            return;
        }
        if now >= self.next_phase {
            // Phases of lighter and heavier load; above 31 processes some meet TOO_MANY.
            self.target = self.rng.range(4, self.max as u64) as usize;
            self.next_phase = now + self.rng.ms(1000, 4000);
        }
        if self.kids.len() < self.target {
            self.spawn(false);
        }
    }

    /// SIGCONT every stopped child (end of the soak).
    fn resume_all(&mut self) {
        for kid in &mut self.kids {
            kid.stop_at = None;
            kid.kill_at = None;
            if kid.resume_at.take().is_some() {
                // SAFETY: our own child, not yet reaped.
                unsafe { libc::kill(kid.child.id() as libc::pid_t, libc::SIGCONT) };
            }
        }
    }
}

impl Drop for Supervisor<'_> {
    fn drop(&mut self) {
        for kid in &mut self.kids {
            let _ = kid.child.kill();
            let _ = kid.child.wait();
        }
    }
}

struct Publishing<'a> {
    p: &'a Publisher,
    layout: FrameGeometry,
    strides: Vec<usize>,
    policy: Policy,
    stats: PublishStats,
    run_delay: RunDelay,
}

impl Publishing<'_> {
    /// Publish the next frame's pattern; time acquire + write + publish.
    fn one(&mut self) {
        let seq = self.stats.count + 1;
        let planes = common::planes_for(&self.layout, seq);
        let refs: Vec<&[u8]> = planes.iter().map(|v| v.as_slice()).collect();
        let d0 = self.run_delay.get();
        let t = Instant::now();
        let got = self
            .p
            .publish_host_planes(&refs, &self.strides, None)
            .unwrap();
        let took = t.elapsed();
        let delayed = match (d0, self.run_delay.get()) {
            (Some(a), Some(b)) => b.saturating_sub(a).min(took),
            _ => Duration::ZERO,
        };
        assert_eq!(got, seq);
        let st = &mut self.stats;
        st.count = seq;
        st.slowest = st.slowest.max(took);
        if took - delayed > st.slowest_net {
            st.slowest_net = took - delayed;
            st.slowest_net_run_delay = delayed;
        }
        if took >= ACK_TIMEOUT {
            st.waited_out += 1;
        }
        if self.policy == Policy::DropOldest {
            // Unpaced, the publisher laps every reader on every frame; ~2–3 k frames/s
            // still laps the slow ones and lets every reader verify a good share.
            std::thread::sleep(Duration::from_micros(250));
        }
    }
}

/// What the supervisor thread is to do (set by the publishing thread).
const WARM_UP: u8 = 0;
const CHURN: u8 = 1;
const DRAIN: u8 = 2;
const FINISH: u8 = 3;

/// Between the publishing thread and the supervisor thread.
struct Control {
    phase: AtomicU8,
    /// Set by the supervisor: in the current phase, every child has finished.
    idle: AtomicBool,
}

struct FinishOnDrop<'a>(&'a Control);

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        self.0.phase.store(FINISH, Ordering::SeqCst);
    }
}

/// The supervisor thread: ticks every 2 ms, so that kills, stops and joins also land while
/// a publish is blocked on a stalled subscriber.
fn supervise(mut sup: Supervisor, ctl: &Control) -> Totals {
    let mut seen = WARM_UP;
    loop {
        let phase = ctl.phase.load(Ordering::SeqCst);
        if phase != seen {
            ctl.idle.store(false, Ordering::SeqCst);
            if phase == DRAIN {
                sup.resume_all();
            }
            seen = phase;
        }
        if phase == FINISH {
            return std::mem::take(&mut sup.totals);
        }
        sup.tick(phase == CHURN);
        if phase != CHURN && sup.kids.is_empty() {
            ctl.idle.store(true, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub fn soak(policy: Policy) {
    println!();
    let secs = soak_secs();
    let cuda = memory_is_cuda();
    let seed = env_u64("CUFRAMES_CHURN_SEED").unwrap_or_else(|| {
        cuframes_core::testing::unique_suffix() ^ ((std::process::id() as u64) << 40)
    });
    let max = env_u64("CUFRAMES_CHURN_MAX").unwrap_or(33).clamp(2, 40) as usize;
    println!(
        "churn {policy:?} on {}: seed {seed}, {secs} s, up to {max} subscriber processes \
         (replay the choices with CUFRAMES_CHURN_SEED={seed})",
        if cuda { "CUDA VMM" } else { "host memory" }
    );
    let env = TestEnv::new(match policy {
        Policy::StrictWait => "churnsw",
        _ => "churndo",
    });
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
    cfg.policy = policy;
    cfg.ring_size = RING_SIZE;
    cfg.ack_timeout = ACK_TIMEOUT;
    if cuda {
        cfg.memory = MemoryChoice::Cuda { device: 0 };
    }
    p.enable_frames(cfg).unwrap();
    let layout = p.frame_layout().unwrap().clone();
    let mut publishing = Publishing {
        p: &p,
        strides: layout.planes().iter().map(|p| p.row_bytes).collect(),
        layout,
        policy,
        stats: PublishStats::default(),
        run_delay: RunDelay::of_this_thread(),
    };
    let end_ns = monotonic_ns() + secs as i64 * 1_000_000_000;
    let mut sup = Supervisor {
        env: &env,
        policy,
        rng: Rng::new(seed),
        kids: Vec::with_capacity(64),
        totals: Totals::default(),
        max,
        target: 0,
        next_phase: Instant::now(),
        end_ns,
        zombies: env_u64("CUFRAMES_CHURN_ZOMBIES") != Some(0),
    };
    // Warm-up (lazy allocations of the allocator, the process spawner, the first imports):
    // one COPY and one ZERO_COPY subscriber, one short session each, then nobody.
    sup.spawn(true);
    sup.spawn(true);
    let sup_zombies = sup.zombies;
    let ctl = Control {
        phase: AtomicU8::new(WARM_UP),
        idle: AtomicBool::new(false),
    };
    let (totals, fds_before, maps_before, fds_after, maps_after) = std::thread::scope(|scope| {
        let supervisor = scope.spawn(|| supervise(sup, &ctl));
        // Whatever happens here (a failed assertion too), the supervisor ends and kills its
        // children; otherwise the scope would wait for it forever.
        let _finish = FinishOnDrop(&ctl);
        let set = |phase| ctl.phase.store(phase, Ordering::SeqCst);
        // Publish (so that nobody waits for frames) until the supervisor has no children
        // left, then until the publisher's table is empty.
        let drain = |publishing: &mut Publishing, limit: Duration| {
            let start = Instant::now();
            while !ctl.idle.load(Ordering::SeqCst) {
                if supervisor.is_finished() {
                    return; // it panicked: the join below reports it
                }
                assert!(
                    start.elapsed() < limit,
                    "subscribers still running after {limit:?}"
                );
                publishing.one();
                if publishing.policy == Policy::StrictWait {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            let start = Instant::now();
            while publishing.p.subscriber_count() != 0 {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "the publisher still lists {:?}",
                    publishing.p.subscribers()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            // subscriber_count() drops before the server thread closes the socket, and a
            // handshake never admitted is not counted at all: before descriptors are counted,
            // wait until the socket has no accepted connection left (not a fixed 50 ms).
            use cuframes_core::inspect::sockets::{read_proc_net_unix, socket_state, SocketState};
            let start = Instant::now();
            loop {
                let table = read_proc_net_unix().map_err(|e| e.to_string());
                match socket_state(publishing.p.socket_path(), &table) {
                    SocketState::Listening { connections: 0 } => break,
                    other => assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "the publisher's socket after the drain: {other:?}"
                    ),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        drain(&mut publishing, Duration::from_secs(30));
        let before = (count_fds(), count_maps());
        set(CHURN);
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end && !supervisor.is_finished() {
            publishing.one();
        }
        // Wind down: nobody starts a session past `end_ns`; stopped children are resumed.
        set(DRAIN);
        drain(&mut publishing, Duration::from_secs(45));
        let after = (count_fds(), count_maps());
        set(FINISH);
        let totals = supervisor.join().unwrap();
        (totals, before.0, before.1, after.0, after.1)
    });
    let stats = std::mem::take(&mut publishing.stats);
    let run_delay_known = publishing.run_delay.available();
    drop(publishing);
    drop(p);
    let prefix = frame_shm_name(&env.key);
    let shm_left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();

    let t = &totals;
    let g = |k: &str| t.get(k);
    println!(
        "SUMMARY policy={policy:?} memory={} seed={seed} secs={secs} \
         readers_started={} sigkilled={} sigstopped={} sessions={} rejoins={} too_many={} \
         connect_retries={} \
         stalls={} (voluntary {} of which holding {}, SIGSTOP {}) declared_dead={} \
         published={} verified={} zero_copy={} held_rechecked={} torn_rejected={} overrun={} \
         corrupt={} misordered={} gaps={} gaps_after_drop={} lapped={} held_overwritten={} \
         late_overwritten={} late_corrupt={} late_acks={} zombies={} zombie_acks={} \
         errors={} timeouts={} \
         slowest_publish={:?} (net of run-queue delay {:?}, {}; that one waited {:?} for a CPU) \
         waited_out={} fds={}->{} maps={}->{} shm_left={} child_failures={} \
         connect_ms_mean={} cuda_init_ms_mean={}",
        if cuda { "cuda" } else { "host" },
        t.started,
        t.killed,
        t.stopped,
        t.joins,
        t.rejoins,
        g("too_many"),
        g("connect_errors"),
        g("stalls") + t.stopped,
        g("stalls"),
        g("stall_holding"),
        t.stopped,
        g("declared_dead"),
        stats.count,
        g("delivered"),
        g("zero_copy"),
        g("held_checked"),
        g("torn"),
        g("overrun"),
        g("corrupt"),
        g("misordered"),
        g("gaps"),
        g("gaps_after_drop"),
        g("lapped"),
        g("held_overwritten"),
        g("late_overwritten"),
        g("late_corrupt"),
        g("late_acks"),
        g("zombies"),
        g("zombie_acks"),
        g("errors"),
        g("timeouts"),
        stats.slowest,
        stats.slowest_net,
        if run_delay_known {
            "schedstat"
        } else {
            "no schedstat: wall clock"
        },
        stats.slowest_net_run_delay,
        stats.waited_out,
        fds_before,
        fds_after,
        maps_before,
        maps_after,
        shm_left.len(),
        t.failures.len(),
        g("connect_ms") / g("connects").max(1),
        g("cuda_init_ms") / g("cuda_inits").max(1),
    );
    for b in &t.bad {
        println!("{b}");
    }
    assert!(t.failures.is_empty(), "children failed: {:#?}", t.failures);
    assert_eq!(g("corrupt"), 0, "torn or corrupt frames delivered");
    assert_eq!(g("misordered"), 0, "frames delivered out of order");
    assert_eq!(g("held_overwritten"), 0, "held frames overwritten");
    assert_eq!(g("errors"), 0, "unexpected subscriber errors");
    if policy == Policy::StrictWait {
        assert_eq!(g("gaps"), 0, "STRICT_WAIT lost frames of a live subscriber");
    }
    assert!(
        stats.slowest_net <= ACK_TIMEOUT + PUBLISH_MARGIN,
        "a publish took {:?} not counting {:?} of waiting for a CPU (ack timeout \
         {ACK_TIMEOUT:?} + {PUBLISH_MARGIN:?})",
        stats.slowest_net,
        stats.slowest_net_run_delay
    );
    assert_eq!(fds_after, fds_before, "the publisher's descriptors leaked");
    assert_eq!(maps_after, maps_before, "the publisher's mappings leaked");
    assert!(shm_left.is_empty(), "left in /dev/shm: {shm_left:?}");
    // The churn really happened (a vacuous pass is a failure).
    assert!(
        g("delivered") > 0 && g("held_checked") > 0,
        "nothing verified"
    );
    assert!(t.killed > 0, "no subscriber was SIGKILLed");
    assert!(g("stalls") > 0 && t.stopped > 0, "no stalls");
    assert!(t.rejoins > 0, "nobody rejoined");
    match policy {
        Policy::StrictWait => {
            assert!(g("zero_copy") > 0, "no zero-copy frame held");
            assert!(
                g("declared_dead") > 0,
                "no stalled subscriber was given up on"
            );
            if sup_zombies {
                assert!(g("zombies") > 0, "no given-up subscriber went on ACKing");
            }
        }
        _ => {
            // R12: without accept_zero_copy_overwrite a DROP_OLDEST subscriber gets copies,
            // and DROP_OLDEST never waits, so never gives up on anybody.
            assert_eq!(g("zero_copy"), 0, "DROP_OLDEST handed out zero-copy frames");
            assert_eq!(
                g("declared_dead"),
                0,
                "DROP_OLDEST declared a subscriber dead"
            );
        }
    }
}
