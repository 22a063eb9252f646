//! Availability against hostile subscribers of other uids: a peer must not take every subscriber slot, lock newcomers out of the handshake,
//! or hold a STRICT_WAIT publisher down by never ACKing and rejoining, or by waking it for
//! nothing. The attackers are re-executed children of this binary run as other uids in the
//! SHM objects' group (`setpriv`, gid 0 here), as the documented setup lets a subscriber of
//! another service be; the tests skip without root and setpriv.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{child, shm_path, Children, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::tlv::{HelloReq, Message};
use cuframes_core::wire::{
    Format, Policy, SubscriberMode, PROTOCOL_VERSION, SUBSCRIBE_ACK_PAGE, SUBSCRIBE_WANTS_FRAMES,
};
use cuframes_core::ErrorCode;

/// Attackers' uids (all in group 0, like the SHM objects).
const UIDS: [u32; 4] = [65534, 65533, 65532, 65531];

fn can_act_as_others() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("setpriv").arg("--version").output().is_ok()
}

/// `role_command`, run as `uid` (group 0) with stdin piped: a child that holds what it took
/// until its stdin closes.
fn role_as(role: &str, env: &TestEnv, uid: u32, extra: &[(&str, String)]) -> Command {
    let base = child::role_command(role, env);
    let mut cmd = Command::new("setpriv");
    cmd.args([
        format!("--reuid={uid}"),
        "--regid=0".into(),
        "--clear-groups".into(),
    ])
    .arg(base.get_program())
    .args(base.get_args());
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// Read a child's stdout until its `RESULT` line: the fields, and the lines before it.
fn read_result(
    out: &mut BufReader<ChildStdout>,
) -> (std::collections::HashMap<String, u64>, String) {
    let mut seen = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("the child ended without a RESULT line; it said:\n{seen}");
        }
        if let Some(i) = line.find("RESULT ") {
            let fields = line[i + 7..]
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
                .collect();
            return (fields, seen);
        }
        seen.push_str(&line);
    }
}

fn spawn(children: &mut Children, mut cmd: Command) -> BufReader<ChildStdout> {
    let mut child: Child = cmd.spawn().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    children.0.push(child);
    out
}

/// The hostile children read from here; the test's own key and directory come from
/// `role_command`.
#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let dir = std::path::PathBuf::from(std::env::var("CUFRAMES_RUNTIME_DIR").unwrap());
    match role.as_str() {
        "hoarder" => hoarder(&key, &dir),
        "pender" => pender(&dir.join(format!("{key}.sock"))),
        "rejoiner" | "waker" => rejoiner(&dir.join(format!("{key}.sock")), role == "waker"),
        "header_waker" => header_waker(&key, &dir),
        other => panic!("unknown role {other}"),
    }
}

/// Wait until the parent closes our stdin (it holds what we took until then).
fn hold_until_stdin_closes() {
    let mut sink = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut sink);
}

/// Subscribe as many times as the publisher lets us (up to all 31 slots) and hold them.
fn hoarder(key: &str, dir: &std::path::Path) {
    let tries: usize = std::env::var("CUFRAMES_HOARD")
        .map(|v| v.parse().unwrap())
        .unwrap_or(31);
    let mut held = Vec::new();
    let mut refused = 0;
    let mut last_why: Option<String> = None;
    for i in 0..tries {
        let opts = SubscriberOptions {
            runtime_dir: Some(dir.to_owned()),
            name: format!("hoard{i}"),
            ..Default::default()
        };
        match Subscriber::connect(key, &opts) {
            Ok(s) => held.push(s),
            Err(e) => {
                refused += 1;
                // Once per kind of refusal (they repeat).
                let why = format!("REFUSED code={} {}", e.code().name(), e.message());
                if last_why.as_deref() != Some(why.as_str()) {
                    println!("{why}");
                }
                last_why = Some(why);
            }
        }
    }
    println!("RESULT admitted={} refused={refused}", held.len());
    std::io::stdout().flush().unwrap();
    hold_until_stdin_closes();
}

/// Keep up to 8 silent connections open (the publisher's per-process cap is 4), renewing
/// those it drops; report how many it held steadily, then go on until stdin closes.
fn pender(socket: &std::path::Path) {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            hold_until_stdin_closes();
            stop.store(true, Ordering::SeqCst);
        });
    }
    let mut open: Vec<UnixStream> = Vec::new();
    let mut stable_since = Instant::now();
    let mut last = usize::MAX;
    let mut reported = false;
    let give_up = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::SeqCst) && Instant::now() < give_up {
        open.retain(still_open);
        while open.len() < 8 {
            match UnixStream::connect(socket) {
                Ok(s) => open.push(s),
                Err(_) => break,
            }
        }
        // Connections the publisher dropped at once are seen closed on the next pass.
        std::thread::sleep(Duration::from_millis(20));
        let alive = open.iter().filter(|s| still_open(s)).count();
        if alive != last {
            last = alive;
            stable_since = Instant::now();
        }
        if !reported && stable_since.elapsed() > Duration::from_millis(500) {
            println!("RESULT held={alive}");
            std::io::stdout().flush().unwrap();
            reported = true;
        }
    }
}

/// The publisher has not closed it (a silent connection has nothing to read).
fn still_open(s: &UnixStream) -> bool {
    let mut b = [0u8; 1];
    s.set_nonblocking(true).unwrap();
    matches!(std::io::Read::read(&mut &*s, &mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

fn hello() -> Message {
    Message::HelloReq(HelloReq {
        proto_version: PROTOCOL_VERSION,
        consumer_name: "rejoiner".into(),
        cuda_device: 0,
        mode: SubscriberMode::Copy as u32,
        subscribe_flags: SUBSCRIBE_WANTS_FRAMES | SUBSCRIBE_ACK_PAGE,
    })
}

/// One raw frame subscription with an ACK page: Ok((socket, page)) or Err(the refusal).
fn raw_subscribe(socket: &std::path::Path) -> Result<(UnixStream, OwnedFd), String> {
    let s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    let within = || Some(Instant::now() + Duration::from_secs(5));
    let send = |m: &Message| cuframes_core::testing::send(s.as_fd(), m, &[]);
    send(&hello()).map_err(|e| e.to_string())?;
    match cuframes_core::testing::recv(s.as_fd(), within()) {
        Ok((Message::HelloResp(r), _)) if r.result == 0 => {}
        other => return Err(format!("HELLO: {other:?}")),
    }
    send(&Message::SubscribeReq {
        proto_version: PROTOCOL_VERSION,
    })
    .map_err(|e| e.to_string())?;
    match cuframes_core::testing::recv(s.as_fd(), within()) {
        Ok((Message::SubscribeResp(r), _)) if r.result == 0 => {}
        Ok((Message::Error { code, message }, _)) => return Err(format!("{code}: {message}")),
        other => return Err(format!("SUBSCRIBE: {other:?}")),
    }
    let mut page = None;
    for _ in 0..2 {
        match cuframes_core::testing::recv(s.as_fd(), within()) {
            Ok((Message::VmmFds(_), _)) => {}
            Ok((Message::AckPage(_), mut fds)) => page = fds.pop(),
            other => return Err(format!("after SUBSCRIBE: {other:?}")),
        }
    }
    Ok((s, page.ok_or("no ACK page")?))
}

/// A frame subscriber that never ACKs and subscribes again as soon as it is dropped (and,
/// refused, at once again), for `CUFRAMES_ATTACK_SECS`. The `waker` also bumps its own ACK
/// page's counter and wakes it as fast as it can, all the while.
fn rejoiner(socket: &std::path::Path, wake: bool) {
    use cuframes_core::wire::ack_page::{ACK_PAGE_ACK_COUNT_OFFSET, ACK_PAGE_SIZE};
    let secs: u64 = std::env::var("CUFRAMES_ATTACK_SECS")
        .unwrap()
        .parse()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(secs);
    let (mut admitted, mut kicked, mut refused, mut backoff_msgs) = (0u64, 0u64, 0u64, 0u64);
    while Instant::now() < until {
        let (s, page) = match raw_subscribe(socket) {
            Ok(x) => x,
            Err(e) => {
                refused += 1;
                backoff_msgs += u64::from(e.contains("rejoin backoff"));
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        admitted += 1;
        // SAFETY: a fresh shared mapping of the page the publisher sent (sealed against
        // shrinking: it cannot fault); unmapped below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ACK_PAGE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                page.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: inside our mapping, 4-byte aligned; the word is shared with the publisher,
        // so it is only touched atomically.
        let count = unsafe {
            &*((map as *mut u8).add(ACK_PAGE_ACK_COUNT_OFFSET)
                as *const std::sync::atomic::AtomicU32)
        };
        s.set_nonblocking(true).unwrap();
        let mut spins = 0u64;
        loop {
            if wake {
                count.fetch_add(1, Ordering::SeqCst);
                // SAFETY: FUTEX_WAKE only uses the address as a key.
                unsafe {
                    libc::syscall(libc::SYS_futex, count.as_ptr(), libc::FUTEX_WAKE, i32::MAX)
                };
                spins += 1;
                if spins % 256 != 0 {
                    continue;
                }
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
            if Instant::now() >= until {
                break;
            }
            let mut b = [0u8; 256];
            match std::io::Read::read(&mut &s, &mut b) {
                // ERROR(TIMEOUT): we were dropped; or the publisher closed.
                Ok(_) => {
                    kicked += 1;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    kicked += 1;
                    break;
                }
            }
        }
        // SAFETY: our own mapping, not used after this.
        unsafe { libc::munmap(map, ACK_PAGE_SIZE) };
    }
    println!(
        "RESULT admitted={admitted} kicked={kicked} refused={refused} backoff_msgs={backoff_msgs}"
    );
    std::io::stdout().flush().unwrap();
}

/// A plain v4 frame subscriber (its ACKs go to the slots' header bitmaps) that never ACKs
/// and, for `CUFRAMES_ATTACK_SECS`, wakes every slot's header ACK word as fast as it can
/// (FUTEX_WAKE needs only a mapping, and the frame SHM is readable to the group). Then it
/// reports and holds its subscriber until stdin closes.
fn header_waker(key: &str, dir: &std::path::Path) {
    use cuframes_core::wire::frame::FRAME_SHM_SIZE;
    use cuframes_core::wire::MAX_RING_SIZE;
    let secs: u64 = std::env::var("CUFRAMES_ATTACK_SECS")
        .unwrap()
        .parse()
        .unwrap();
    let opts = SubscriberOptions {
        runtime_dir: Some(dir.to_owned()),
        name: "header-waker".into(),
        mode: SubscriberMode::Copy,
        plain_v4_acks: true,
        ..Default::default()
    };
    let sub = Subscriber::connect(key, &opts).unwrap();
    let name = cuframes_core::paths::Key::new(key)
        .unwrap()
        .frame_shm_name();
    let shm = std::fs::File::open(shm_path(&name)).unwrap();
    // SAFETY: a fresh read-only shared mapping of the frame SHM (FRAME_SHM_SIZE bytes, which
    // the publisher never shrinks); unmapped below.
    let header = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            FRAME_SHM_SIZE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            shm.as_raw_fd(),
            0,
        )
    };
    assert_ne!(header, libc::MAP_FAILED);
    // The low half of each slot's `ack_bitmap` (slots at 0x100, 64 bytes each, the bitmap at
    // 0x10): the word a publisher sleeps on for header ACKs.
    let words: Vec<usize> = (0..MAX_RING_SIZE)
        .map(|k| header as usize + 0x100 + 64 * k + 0x10)
        .collect();
    let until = Instant::now() + Duration::from_secs(secs);
    let mut wakes = 0u64;
    while Instant::now() < until {
        for &w in &words {
            // SAFETY: FUTEX_WAKE only uses the address (inside our mapping) as a key.
            unsafe { libc::syscall(libc::SYS_futex, w, libc::FUTEX_WAKE, i32::MAX) };
        }
        wakes += 1;
    }
    // SAFETY: our own mapping, not used after this.
    unsafe { libc::munmap(header, FRAME_SHM_SIZE) };
    println!("RESULT wakes={wakes}");
    std::io::stdout().flush().unwrap();
    hold_until_stdin_closes();
    drop(sub);
}

// ---------------------------------------------------------------------------------------
// Item 10: slots.

/// One process must not take all 31 subscriber slots with 31 handshakes, leaving every other
/// subscriber of any uid TOO_MANY while it holds them. A uid holds at most
/// `max_subscribers_per_uid` (8) slots and a process `max_subscribers_per_pid` (4); the
/// refusal names the cap and its option; root (the publisher's uid here) is not capped.
#[test]
fn one_process_or_uid_cannot_take_every_subscriber_slot() {
    if !can_act_as_others() {
        println!("SKIPPED: needs root and setpriv");
        return;
    }
    let env = TestEnv::new("hoard");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut kids = Children(Vec::new());
    // Three processes of one uid, one after the other, each trying for all 31 slots.
    let mut got = Vec::new();
    let mut said = String::new();
    for _ in 0..3 {
        let mut out = spawn(&mut kids, role_as("hoarder", &env, UIDS[0], &[]));
        let (fields, lines) = read_result(&mut out);
        got.push(fields["admitted"]);
        said.push_str(&lines);
    }
    println!("uid {} admitted {got:?}; first refusals:", UIDS[0]);
    for l in said.lines().filter(|l| l.contains("REFUSED")) {
        println!("  {l}");
    }
    assert_eq!(got, [4, 4, 0], "slots taken per process of one uid");
    assert!(
        said.contains("TOO_MANY") && said.contains("max_subscribers_per_pid"),
        "the per-process refusal names its option: {said}"
    );
    assert!(
        said.contains("max_subscribers_per_uid"),
        "the per-uid refusal names its option: {said}"
    );
    // An honest subscriber of another uid still gets in.
    let mut out = spawn(
        &mut kids,
        role_as(
            "hoarder",
            &env,
            UIDS[1],
            &[("CUFRAMES_HOARD", "1".to_owned())],
        ),
    );
    let (fields, lines) = read_result(&mut out);
    assert_eq!(fields["admitted"], 1, "another uid was refused: {lines}");
    // Root (here also the publisher's own uid) is not capped.
    let own: Vec<Subscriber> = (0..6)
        .map(|i| {
            Subscriber::connect(&env.key, &env.subscriber_options(&format!("own{i}"))).unwrap()
        })
        .collect();
    assert_eq!(p.subscriber_count(), 8 + 1 + own.len());
}

// ---------------------------------------------------------------------------------------
// Item 11: pending handshakes.

/// Four colluding uids (16 pending handshakes each, from four processes each) fill the global
/// cap of 64 pending handshakes; every new subscriber must not be dropped at accept until
/// their handshakes time out (never, with a long handshake timeout). A newcomer whose
/// uid holds fewer pending handshakes takes the oldest place of the biggest holder.
#[test]
fn four_uids_flooding_pending_handshakes_cannot_lock_out_a_fifth() {
    if !can_act_as_others() {
        println!("SKIPPED: needs root and setpriv");
        return;
    }
    let env = TestEnv::new("pending");
    let p = Publisher::create(
        &env.key,
        PublisherOptions {
            // Their silent handshakes are not dropped for being slow during the test.
            handshake_timeout: Duration::from_secs(120),
            ..env.publisher_options()
        },
    )
    .unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut kids = Children(Vec::new());
    let mut outs = Vec::new();
    for uid in UIDS {
        for _ in 0..4 {
            outs.push(spawn(&mut kids, role_as("pender", &env, uid, &[])));
        }
    }
    let held: u64 = outs.iter_mut().map(|o| read_result(o).0["held"]).sum();
    println!("the flood holds {held} pending handshakes");
    assert_eq!(held, 64, "the flood did not fill the pending handshakes");
    for i in 0..3 {
        let t = Instant::now();
        let opts = SubscriberOptions {
            connect_timeout: Duration::from_secs(5),
            ..env.subscriber_options(&format!("fifth{i}"))
        };
        match Subscriber::connect(&env.key, &opts) {
            Ok(_s) => println!("subscriber {i} admitted in {:?}", t.elapsed()),
            Err(e) => panic!("a fifth uid was locked out by the flood: {e}"),
        }
    }
    drop(kids);
    drop(p);
}

// ---------------------------------------------------------------------------------------
// Item 12: STRICT_WAIT against a reader that never ACKs.

/// Frames published in `span` at up to ~200 fps (a 5 ms pause between frames), and the CPU
/// time the publishing thread spent (RUSAGE_THREAD).
fn publish_for(p: &Publisher, span: Duration) -> (u64, Duration) {
    let layout = p.frame_layout().unwrap().clone();
    let planes = common::planes_for(&layout, 1);
    let refs: Vec<&[u8]> = planes.iter().map(|v| v.as_slice()).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
    let cpu = || {
        // SAFETY: getrusage fills the zeroed struct we own.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Duration::from_micros(us(ru.ru_utime) + us(ru.ru_stime))
    };
    let (t, c) = (Instant::now(), cpu());
    let mut n = 0;
    while t.elapsed() < span {
        p.publish_host_planes(&refs, &strides, None).unwrap();
        n += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    (n, cpu() - c)
}

/// A STRICT_WAIT publisher with an honest reader of its own (in this process) that reads
/// every frame.
fn strict_publisher(
    env: &TestEnv,
    ack_timeout: Duration,
) -> (Publisher, Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    strict_publisher_with(env, ack_timeout, env.publisher_options())
}

fn strict_publisher_with(
    env: &TestEnv,
    ack_timeout: Duration,
    options: PublisherOptions,
) -> (Publisher, Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    let p = Publisher::create(&env.key, options).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.policy = Policy::StrictWait;
    cfg.ring_size = 4;
    cfg.ack_timeout = ack_timeout;
    p.enable_frames(cfg).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut honest = Subscriber::connect(&env.key, &env.subscriber_options("honest")).unwrap();
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let read = AtomicU64::new(0);
            while !stop.load(Ordering::SeqCst) {
                match honest.next_frame(Some(Duration::from_millis(100))) {
                    Ok(f) => {
                        read.fetch_add(1, Ordering::Relaxed);
                        f.release();
                    }
                    Err(e) if e.code() == ErrorCode::Timeout => {}
                    Err(e) => panic!("the honest reader: {e}"),
                }
            }
            read.load(Ordering::Relaxed)
        })
    };
    (p, stop, reader)
}

/// Under STRICT_WAIT, a reader of another uid that never ACKs and subscribes again whenever
/// it is dropped would cost the publisher one ack timeout per rejoin, for as long as it likes
/// (~8 fps instead of ~200). Rejoin after a kick waits, per uid, one ack timeout
/// doubled per kick (bounded).
#[test]
fn a_never_acking_rejoiner_does_not_hold_strict_wait_publishing_down() {
    if !can_act_as_others() {
        println!("SKIPPED: needs root and setpriv");
        return;
    }
    let env = TestEnv::new("rejoin");
    let (p, stop, reader) = strict_publisher(&env, Duration::from_millis(100));
    let (calm, _) = publish_for(&p, Duration::from_secs(2));
    let mut kids = Children(Vec::new());
    let attack = Duration::from_secs(5);
    let mut out = spawn(
        &mut kids,
        role_as(
            "rejoiner",
            &env,
            UIDS[1],
            &[("CUFRAMES_ATTACK_SECS", (attack.as_secs() + 1).to_string())],
        ),
    );
    let (attacked, _) = publish_for(&p, attack);
    let (r, _) = read_result(&mut out);
    stop.store(true, Ordering::SeqCst);
    let read = reader.join().unwrap();
    let calm_fps = calm as f64 / 2.0;
    let attacked_fps = attacked as f64 / attack.as_secs_f64();
    println!(
        "{calm_fps:.0} fps calm, {attacked_fps:.0} fps under attack; the rejoiner: {r:?}; the \
         honest reader read {read}"
    );
    assert!(
        r["admitted"] >= 2 && r["kicked"] >= 2,
        "the attack did not run: {r:?}"
    );
    assert!(
        attacked_fps >= 0.5 * calm_fps,
        "a never-ACKing rejoiner held publishing at {attacked_fps:.0} fps (calm: {calm_fps:.0})"
    );
    assert!(
        r["backoff_msgs"] > 0,
        "refusals do not name the backoff: {r:?}"
    );
}

/// A subscriber that bumps its own ACK page's counter and wakes it in a loop would make a
/// STRICT_WAIT publisher waiting for its ACK re-check at CPU speed (2.4 s of CPU in 8 s).
/// Wake-ups of a page that bring no ACK are trusted only a few times per wait.
#[test]
fn a_page_that_wakes_the_publisher_for_nothing_costs_it_little_cpu() {
    if !can_act_as_others() {
        println!("SKIPPED: needs root and setpriv");
        return;
    }
    let env = TestEnv::new("waker");
    let (p, stop, reader) = strict_publisher(&env, Duration::from_secs(1));
    let mut kids = Children(Vec::new());
    let span = Duration::from_secs(6);
    let mut out = spawn(
        &mut kids,
        role_as(
            "waker",
            &env,
            UIDS[2],
            &[("CUFRAMES_ATTACK_SECS", span.as_secs().to_string())],
        ),
    );
    let (frames, cpu) = publish_for(&p, span);
    let (r, _) = read_result(&mut out);
    stop.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    println!("{frames} frames in {span:?}, publishing thread CPU {cpu:?}; the waker: {r:?}");
    assert!(
        r["admitted"] >= 1 && r["kicked"] >= 1,
        "the attack did not run: {r:?}"
    );
    assert!(
        cpu < Duration::from_millis(250),
        "a page's wake-ups cost the publishing thread {cpu:?} of CPU in {span:?}"
    );
}

/// The same for a plain v4 subscriber, whose ACKs the publisher waits for on the slot's
/// header bitmap word: one that never ACKs and wakes that word for nothing is slept on only
/// a few times per wait too (a mutant that kept sleeping on the header word spun for the
/// whole ack timeout).
#[test]
fn a_header_acking_subscriber_that_wakes_the_publisher_for_nothing_costs_it_little_cpu() {
    if !can_act_as_others() {
        println!("SKIPPED: needs root and setpriv");
        return;
    }
    let env = TestEnv::new("hwaker");
    // One wait takes most of the span: a publisher that sleeps on the woken word spins
    // through all of it.
    let ack_timeout = Duration::from_secs(3);
    let options = PublisherOptions {
        allow_legacy_subscribers: true,
        ..env.publisher_options()
    };
    let (p, stop, reader) = strict_publisher_with(&env, ack_timeout, options);
    let mut kids = Children(Vec::new());
    let span = Duration::from_secs(5);
    let mut out = spawn(
        &mut kids,
        role_as(
            "header_waker",
            &env,
            UIDS[3],
            &[("CUFRAMES_ATTACK_SECS", span.as_secs().to_string())],
        ),
    );
    let (frames, cpu) = publish_for(&p, span);
    let (r, _) = read_result(&mut out);
    stop.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    println!("{frames} frames in {span:?}, publishing thread CPU {cpu:?}; the waker: {r:?}");
    assert!(r["wakes"] > 0, "the attack did not run: {r:?}");
    // At most one frame per 5 ms: 1000 in the span without a wait, 400 with one ack timeout.
    assert!(
        frames < 700,
        "the publisher never waited for the waker's ACK: {frames} frames"
    );
    assert!(
        cpu < Duration::from_millis(250),
        "a header word's wake-ups cost the publishing thread {cpu:?} of CPU in {span:?}"
    );
}
