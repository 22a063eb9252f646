//! The parent: the publisher, the honest readers and the hostile peer started, and what they
//! report checked.

use cuframes_test_support as common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    child, frame_shm_name, packet_shm_name, shm_path, wait_until, Children, RunDelay, TestEnv,
};
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::paths::{PACKET_SHM_SUFFIX, SHM_PREFIX};
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::wire::{Format, Policy};

use super::config::{memory_is_cuda, secs};

const ACK_TIMEOUT: Duration = Duration::from_millis(300);
/// Slack on top of the ack timeout for the slowest publish, measured net of the publishing
/// thread's run-queue wait (schedstat). What remains after the wait itself: one futex slice
/// (5 ms) of overshoot, the give-up bookkeeping (a table lock the server thread may hold while
/// preempted), page faults and the host copy of a small frame. frame_ring_churn measured 0–15 ms
/// over a 200 ms timeout net of the run delay on this 2-core machine under heavy load; 100 ms
/// still fails a publish that waits twice (2 × 300 ms) or on a subscriber already given up on.
const PUBLISH_MARGIN: Duration = Duration::from_millis(100);
/// Honest readers: the longest wall-clock gap between two frames they may see. A publish waits
/// at most one ack timeout; the rest is wall-clock scheduling slack on a loaded 2-core machine
/// (not taken out here), so this only catches real stalls (seconds), not jitter.
const READER_GAP_LIMIT: Duration = Duration::from_millis(1300);

fn spawn_child(role: &str, env: &TestEnv, extra: &[(&str, String)], as_hostile: bool) -> Child {
    let mut cmd = if as_hostile {
        // Another user, in the SHM objects' group (gid 0 here): what the documented setup
        // grants a subscriber of another service.
        child::command_as(&child::OTHER_USER_GROUP_0, role)
    } else {
        child::command(role)
    };
    child::in_env(&mut cmd, env)
        .env("CUFRAMES_PUBLISHER_PID", std::process::id().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

fn read_ready(child: &mut Child) -> String {
    // The test harness prints its own lines first ("running 1 test").
    let out = child.stdout.as_mut().unwrap();
    loop {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\n") {
            assert_eq!(out.read(&mut b).unwrap(), 1, "child died before READY");
            line.push(b[0]);
        }
        let line = String::from_utf8_lossy(&line).into_owned();
        if line.contains("READY") {
            return line;
        }
    }
}

fn run(policy: Policy) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("setpriv").arg("--version").output().is_err()
    {
        println!("SKIPPED: needs root and setpriv");
        return;
    }
    let cuda = memory_is_cuda();
    if cuda {
        if let Some(why) = common::no_cuda() {
            println!("SKIPPED: no CUDA driver ({why})");
            return;
        }
    }
    let secs = secs();
    let env = TestEnv::new(match policy {
        Policy::StrictWait => "hostsw",
        _ => "hostdo",
    });
    // The hostile child (uid 65534, group 0) must reach the socket: search permission on the
    // directory for the group (not write: it must not replace the socket), and the socket's
    // default mode 0660 gives the group write.
    {
        use std::os::unix::fs::PermissionsExt;
        std::os::unix::fs::chown(&env.dir, Some(0), Some(0)).unwrap();
        std::fs::set_permissions(&env.dir, std::fs::Permissions::from_mode(0o750)).unwrap();
    }
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
    cfg.policy = policy;
    cfg.ring_size = 4;
    cfg.ack_timeout = ACK_TIMEOUT;
    if cuda {
        cfg.memory = MemoryChoice::Cuda { device: 0 };
    }
    p.enable_frames(cfg).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: 27,
        extradata: vec![0, 0, 0, 1, 0x67, 1],
        ring_slots: 16,
        data_size: 1 << 16,
    })
    .unwrap();
    p.publish_packet(&[0, 0, 0, 1, 0x65, 1, 2, 3], 0, 0, 1)
        .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        for name in [frame_shm_name(&env.key), packet_shm_name(&env.key)] {
            let m = std::fs::metadata(shm_path(&name)).unwrap();
            assert_eq!(m.permissions().mode() & 0o777, 0o640, "{name}");
        }
    }
    let policy_env = match policy {
        Policy::StrictWait => "strict",
        _ => "drop",
    };
    let mut kids = Children(Vec::new());
    for i in 0..4 {
        let mode = if i < 2 { "copy" } else { "zero_copy" };
        kids.0.push(spawn_child(
            "honest",
            &env,
            &[
                ("CUFRAMES_TEST_MODE", mode.into()),
                ("CUFRAMES_TEST_POLICY", policy_env.into()),
            ],
            false,
        ));
    }
    for k in kids.0.iter_mut() {
        read_ready(k);
    }
    wait_until("honest subscribers", Duration::from_secs(30), || {
        p.subscriber_count() == 4
    });
    let honest_names: Vec<String> = p.subscribers().iter().map(|s| s.name.clone()).collect();
    kids.0.push(spawn_child(
        "hostile",
        &env,
        &[
            ("CUFRAMES_TEST_POLICY", policy_env.into()),
            ("CUFRAMES_HOSTILE_RUN_SECS", secs.to_string()),
        ],
        true,
    ));

    let layout = p.frame_layout().unwrap().clone();
    let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
    let run_delay = RunDelay::of_this_thread();
    let (mut slowest_wall, mut slowest_net) = (Duration::ZERO, Duration::ZERO);
    let (mut over_timeout, mut published, mut packets) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let publish_for = Duration::from_secs(secs) + Duration::from_millis(500);
    let mut seq = 1u64;
    let mut honest_lost = Vec::new();
    while start.elapsed() < publish_for {
        let planes = common::planes_for(&layout, seq);
        let refs: Vec<&[u8]> = planes.iter().map(|v| v.as_slice()).collect();
        let d0 = run_delay.get();
        let t = Instant::now();
        let got = p
            .publish_host_planes(&refs, &strides, None)
            .unwrap_or_else(|e| panic!("publish {seq} failed: {e}"));
        let wall = t.elapsed();
        let net = match (d0, run_delay.get()) {
            (Some(a), Some(b)) => wall.saturating_sub(b.saturating_sub(a)),
            _ => wall,
        };
        assert_eq!(got, seq, "the publisher numbers frames 1, 2, 3, ...");
        published += 1;
        slowest_wall = slowest_wall.max(wall);
        slowest_net = slowest_net.max(net);
        if net >= ACK_TIMEOUT {
            over_timeout += 1;
        }
        if seq % 16 == 0 {
            p.publish_packet(&[0, 0, 0, 1, 0x41, seq as u8, 2, 3], 0, 0, 0)
                .unwrap();
            packets += 1;
        }
        if seq % 256 == 0 {
            // The honest readers must stay subscribed the whole time.
            let now: Vec<String> = p.subscribers().iter().map(|s| s.name.clone()).collect();
            for n in &honest_names {
                if !now.contains(n) && !honest_lost.contains(n) {
                    honest_lost.push(n.clone());
                }
            }
        }
        seq += 1;
        match policy {
            Policy::StrictWait => {
                if seq % 4 == 0 {
                    std::thread::yield_now();
                }
            }
            _ => std::thread::sleep(Duration::from_micros(250)),
        }
    }
    let elapsed = start.elapsed();
    // The hostile child ends by itself after `secs`.
    let hostile_child = kids.0.last_mut().unwrap();
    let (h_code, h, h_out) = child::wait_for_result(hostile_child);
    let h = h.unwrap_or_default();
    if policy == Policy::StrictWait {
        // Every honest subscriber ACKs everything before we shut down.
        wait_until("final ACKs", Duration::from_secs(30), || {
            p.subscribers()
                .iter()
                .filter(|s| honest_names.contains(&s.name))
                .all(|s| s.lag == 0)
        });
    } else {
        std::thread::sleep(Duration::from_millis(200));
    }
    let still: Vec<String> = p.subscribers().iter().map(|s| s.name.clone()).collect();
    drop(p);
    let mut honest_results = Vec::new();
    for c in kids.0.iter_mut().take(4) {
        let (code, fields, out) = child::wait_for_result(c);
        honest_results.push((code, fields.unwrap_or_default(), out));
    }

    // Report.
    println!(
        "{policy:?} on {}: {elapsed:?}, {published} frames and {packets} packets published; slowest \
         publish {slowest_wall:?} wall, {slowest_net:?} net of run-queue wait ({}), {over_timeout} \
         publishes >= the ack timeout",
        if cuda { "CUDA VMM" } else { "host memory" },
        if run_delay.available() {
            "schedstat"
        } else {
            "no schedstat: wall clock"
        }
    );
    for (i, (code, r, _)) in honest_results.iter().enumerate() {
        let mut v: Vec<_> = r.iter().collect();
        v.sort();
        println!(
            "honest {i} ({}): exit {code:?} {v:?}",
            if i < 2 { "COPY" } else { "ZERO_COPY" }
        );
    }
    println!("hostile: exit {h_code:?}");
    let mut v: Vec<_> = h.iter().collect();
    v.sort();
    for (k, n) in v {
        println!("  {k} = {n}");
    }

    // Assertions.
    assert_eq!(
        h_code,
        Some(0),
        "the hostile child crashed or failed: {h_out}"
    );
    assert!(
        h.get("rounds").copied().unwrap_or(0) > 0,
        "hostile did nothing: {h_out}"
    );
    for (i, (code, r, out)) in honest_results.iter().enumerate() {
        assert_eq!(*code, Some(0), "honest {i} crashed or failed: {out}");
        let g = |k: &str| {
            *r.get(k)
                .unwrap_or_else(|| panic!("honest {i}: no {k}: {out}"))
        };
        assert!(g("delivered") > 0, "honest {i} verified nothing");
        assert_eq!(g("corrupt"), 0, "honest {i}: wrong frames accepted");
        assert_eq!(g("misordered"), 0, "honest {i}: frames out of order");
        assert_eq!(g("held_changed"), 0, "honest {i}: a held frame changed");
        assert_eq!(g("dropped"), 0, "honest {i} was given up on");
        if policy == Policy::StrictWait {
            assert_eq!(g("torn"), 0, "honest {i}: torn frames under STRICT_WAIT");
        }
        // DROP_OLDEST: the seqlock rejects frames overwritten while a reader copied them
        // (counted as torn, never delivered; `corrupt` above stays 0), which is the policy
        // working, not an attack getting through: the header is read-only to every subscriber,
        // so only the publisher's own laps can tear a read. How often depends on the reader's
        // speed against the lap: on the H200's CUDA VMM ~30 % of reads (a device copy and its
        // check, ~0.8 ms a frame with six processes sharing the GPU, against a 4-slot lap of
        // ~1.4 ms); on a loaded 2-core CI machine with host memory, 0 to a few in 30 s (a
        // reader preempted mid-copy).
        if policy == Policy::StrictWait {
            assert_eq!(g("gaps"), 0, "honest {i}: STRICT_WAIT lost frames");
            assert_eq!(g("overrun"), 0, "honest {i}: STRICT_WAIT overran");
            assert_eq!(
                g("delivered"),
                published,
                "honest {i}: STRICT_WAIT loses nothing"
            );
            if i >= 2 {
                assert!(
                    g("held_checked") > 0 && g("zero_copy") > 0,
                    "honest {i}: no zero-copy frame held"
                );
            }
        } else {
            // R12: without accept_zero_copy_overwrite a DROP_OLDEST subscriber gets copies.
            assert_eq!(
                g("zero_copy"),
                0,
                "honest {i}: DROP_OLDEST handed out zero-copy frames"
            );
        }
        assert!(
            Duration::from_micros(g("max_gap_us")) < READER_GAP_LIMIT,
            "honest {i}: {} us without a frame",
            g("max_gap_us")
        );
    }
    assert!(
        honest_lost.is_empty(),
        "honest subscribers removed: {honest_lost:?}"
    );
    for n in &honest_names {
        assert!(still.contains(n), "honest subscriber {n} was removed");
    }
    assert!(
        slowest_net < ACK_TIMEOUT + PUBLISH_MARGIN,
        "a publish stalled {slowest_net:?} net of run-queue wait ({slowest_wall:?} wall)"
    );
    let hv = |k: &str| h.get(k).copied().unwrap_or(0);
    // Every write/truncate of the frame SHM and packet SHM refused, and tried.
    for k in [
        "shm_open_write",
        "shm_open_rdwr",
        "shm_open_truncate",
        "shm_truncate_path",
        "shm_unlink",
        "shm_ftruncate_ro_fd",
        "shm_mmap_rw",
        "shm_mprotect_rw",
        "shm_reopen_proc_rw",
        "proc_publisher_fds",
        "proc_publisher_mem",
    ] {
        assert!(hv(&format!("{k}_refused")) > 0, "{k} never tried: {h_out}");
        assert_eq!(hv(&format!("{k}_ok")), 0, "{k} succeeded: {h_out}");
    }
    assert!(
        hv("shm_open_read_ok") > 0,
        "the hostile peer could not even read the SHM"
    );
    assert!(
        hv("plain_v4_hello_refused") > 0,
        "plain v4 HELLO never tried"
    );
    assert_eq!(
        hv("plain_v4_hello_ok"),
        0,
        "a plain v4 HELLO was not refused with PERMISSION"
    );
    assert!(
        hv("raw_subscribed_ok") > 0,
        "the raw ACK-page subscriber never got in"
    );
    assert!(hv("ack_page_lies_ok") > 0, "the ACK page was never abused");
    assert!(
        hv("lib_zero_copy_ok") + hv("lib_copy_ok") > 0,
        "no library subscriber"
    );
    // Sealed SHRINK|GROW|SEAL: never resized, never resealed.
    for k in [
        "slot_ftruncate_shrink",
        "slot_ftruncate_grow",
        "slot_add_seal_write",
        "ack_page_ftruncate",
        "ack_page_ftruncate_grow",
    ] {
        assert!(hv(&format!("{k}_refused")) > 0, "{k} never tried: {h_out}");
        assert_eq!(hv(&format!("{k}_ok")), 0, "{k} succeeded: {h_out}");
    }
    // Writable mappings and writes into the slots: F_SEAL_FUTURE_WRITE's job. Reported, and
    // when one succeeds the hostile child scribbled over the slot, which the honest readers'
    // checks above would have caught.
    let gaps: Vec<String> = [
        "slot_mmap_rw",
        "slot_mprotect_rw",
        "slot_pwrite",
        "slot_reopen_rw_write",
        "slot_reopen_rw_mmap",
        "slot_punch_hole",
    ]
    .iter()
    .filter(|k| hv(&format!("{k}_ok")) > 0)
    .map(|k| {
        format!(
            "{k}: {} of {}",
            hv(&format!("{k}_ok")),
            hv(&format!("{k}_ok")) + hv(&format!("{k}_refused"))
        )
    })
    .collect();
    if gaps.is_empty() {
        println!(
            "slot memfds: every writable mapping and write refused (seals 0x{:x})",
            hv("slot_seals")
        );
    } else {
        println!(
            "GAP: slot memfds writable by a subscriber: {gaps:?} (seals 0x{:x})",
            hv("slot_seals")
        );
    }
    assert!(
        hv("slot_mmap_rw_refused") + hv("slot_mmap_rw_ok") > 0,
        "slots never attacked"
    );
    let key = env.key.clone();
    drop(env);
    no_shm_left(&key);
}

fn no_shm_left(key: &str) {
    for suffix in ["", PACKET_SHM_SUFFIX] {
        let path = shm_path(&format!("{SHM_PREFIX}{key}{suffix}"));
        assert!(!std::path::Path::new(&path).exists(), "{path} left behind");
    }
}

pub fn run_and_check_cleanup(policy: Policy) {
    let before: std::collections::HashSet<String> = shm_names();
    run(policy);
    let tag = match policy {
        Policy::StrictWait => "hostsw",
        _ => "hostdo",
    };
    let leftover: Vec<String> = shm_names()
        .difference(&before)
        .filter(|n| n.contains(&format!("t-{tag}-{}-", std::process::id())))
        .cloned()
        .collect();
    for n in &leftover {
        no_shm_left(n.trim_start_matches(SHM_PREFIX));
    }
    assert!(leftover.is_empty(), "SHM objects left behind: {leftover:?}");
}

fn shm_names() -> std::collections::HashSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}
