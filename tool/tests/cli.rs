//! The `cuframes` operator tool as a user runs it: `ls`, `stat` (text and JSON), `clean`
//! on a SIGKILLed publisher's leftovers and next to a live one, and objects the user may not
//! read. Children are this test binary re-executed with `CUFRAMES_CHILD_ROLE`.

use cuframes_test_support as common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{
    child, frame_shm_name, packet_shm_name, publish_filler, shm_path, OperatorScene, TestEnv,
    WEIRD_NAME,
};
use cuframes_core::packet_ring::{PacketRingConfig, PacketRingWriter};
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, CODEC_ID_H264, PACKET_FLAG_KEY};
use cuframes_core::Key;

const BIN: &str = env!("CARGO_BIN_EXE_cuframes");

fn run(env: &TestEnv, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--runtime-dir")
        .arg(&env.dir)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn shm_exists(name: &str) -> bool {
    Path::new("/dev/shm").join(name).exists()
}

/// Children killed and reaped when the test ends, passed or failed.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    assert_eq!(role, "publisher");
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let mode = u32::from_str_radix(&std::env::var("CUFRAMES_TEST_MODE").unwrap(), 8).unwrap();
    let opts = PublisherOptions {
        file_mode: mode,
        ..Default::default()
    };
    let p = Publisher::create(&key, opts).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 32, 32))
        .unwrap();
    let cfg = PacketRingConfig {
        codec_id: CODEC_ID_H264,
        ring_slots: 8,
        data_size: 8192,
        ..Default::default()
    };
    let mut w = PacketRingWriter::create(&Key::new(&key).unwrap(), cfg, mode).unwrap();
    for n in 0..5u64 {
        publish_filler(&p);
        w.publish(&[9; 64], n as i64, n as i64, PACKET_FLAG_KEY)
            .unwrap();
    }
    println!("READY");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A publisher (frames + packets, objects with `mode`) in a child process, SIGKILLed.
fn dead_publisher(env: &TestEnv, mode: &str) -> u32 {
    let mut kids = Children(vec![child::role_command("publisher", env)
        .env("CUFRAMES_TEST_MODE", mode)
        .spawn()
        .unwrap()]);
    let child = &mut kids.0[0];
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child died early");
        if line.contains("READY") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    pid
}

// --- the JSON output, read as a tree ---------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum V {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<V>),
    Obj(BTreeMap<String, V>),
}

impl V {
    fn get(&self, k: &str) -> &V {
        match self {
            V::Obj(m) => m.get(k).unwrap_or_else(|| panic!("no {k:?} in {self:?}")),
            _ => panic!("not an object: {self:?}"),
        }
    }
    fn num(&self) -> f64 {
        match self {
            V::Num(n) => *n,
            _ => panic!("not a number: {self:?}"),
        }
    }
    fn str(&self) -> &str {
        match self {
            V::Str(s) => s,
            _ => panic!("not a string: {self:?}"),
        }
    }
    fn arr(&self) -> &[V] {
        match self {
            V::Arr(a) => a,
            _ => panic!("not an array: {self:?}"),
        }
    }
}

/// Parse the tool's JSON output with a real parser (serde_json), into the small tree the
/// checks below read with panicking accessors.
fn parse_json(s: &str) -> V {
    let v: serde_json::Value =
        serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"));
    V::from(v)
}

impl From<serde_json::Value> for V {
    fn from(v: serde_json::Value) -> V {
        use serde_json::Value as J;
        match v {
            J::Null => V::Null,
            J::Bool(b) => V::Bool(b),
            J::Number(n) => V::Num(n.as_f64().expect("a finite number")),
            J::String(s) => V::Str(s),
            J::Array(a) => V::Arr(a.into_iter().map(V::from).collect()),
            J::Object(m) => V::Obj(m.into_iter().map(|(k, v)| (k, V::from(v))).collect()),
        }
    }
}

// --- tests --------------------------------------------------------------------------------

#[test]
fn help_and_usage_errors() {
    let env = TestEnv::new("cli-help");
    let o = run(&env, &["--help"]);
    assert!(o.status.success());
    let (out, _) = text(&o);
    assert!(
        out.contains("Usage:") && out.contains("clean [--dry-run]"),
        "{out}"
    );
    for bad in [
        &["stat"][..],
        &["frobnicate"],
        &["ls", "--dry-run"],
        &["stat", "a b"],
    ] {
        let o = run(&env, bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        assert!(text(&o).1.contains("cuframes: "), "{bad:?}");
    }
    let o = run(&env, &["stat", "nosuchkey-cli-test"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).1.contains("no publisher \"nosuchkey-cli-test\""),
        "{:?}",
        text(&o)
    );
}

#[test]
fn ls_and_stat_show_a_live_publisher() {
    let env = TestEnv::new("cli-live");
    let OperatorScene {
        publisher: p,
        alpha: mut a,
        weird: _b,
        packets: mut w,
    } = OperatorScene::start(&env);
    let weird = WEIRD_NAME;
    // While nothing is published: exact numbers.
    let o = run(&env, &["stat", &env.key, "--interval", "0"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.starts_with(&format!("{}: alive", env.key)), "{out}");
    assert!(out.contains("nv12 64x48 ring 8 drop_oldest host"), "{out}");
    assert!(out.contains("seq 6 "), "{out}");
    let alpha = out.lines().find(|l| l.contains("alpha")).expect(&out);
    let cols: Vec<&str> = alpha.split_whitespace().collect();
    // BIT NAME PID STATE READS LAG LAST ACK ... DELIVERED DROPS OVERRUN TORN
    assert_eq!(cols[1], "alpha");
    assert_eq!(cols[2], std::process::id().to_string());
    assert_eq!(
        (cols[3], cols[4], cols[5]),
        ("active", "frames", "0"),
        "{alpha}"
    );
    assert!(cols[6].ends_with('s') && cols[7] == "ago", "{alpha}");
    assert_eq!(&cols[8..], ["6", "0", "0", "0"], "{alpha}");
    let weird_line = out.lines().find(|l| l.contains(weird)).expect(&out);
    assert!(weird_line.contains(" 4 "), "{weird_line}");
    assert!(
        out.contains("h264 (codec id 27)  32 slots  1.0MiB data  extradata 5 bytes"),
        "{out}"
    );
    assert!(
        out.contains("last keyframe seq 3 (2 packets ago, 0.04s of stream)"),
        "{out}"
    );

    let o = run(&env, &["stat", &env.key, "--json", "--interval", "0"]);
    assert!(o.status.success());
    let j = parse_json(&text(&o).0);
    assert_eq!(j.get("key").str(), env.key);
    assert_eq!(j.get("state").str(), "alive");
    assert_eq!(j.get("alive"), &V::Bool(true));
    assert_eq!(j.get("pid").num(), std::process::id() as f64);
    assert_eq!(j.get("subscriber_count").num(), 2.0);
    assert_eq!(j.get("socket").get("state").str(), "listening");
    assert_eq!(j.get("socket").get("connections").num(), 2.0);
    let f = j.get("frames");
    assert_eq!(f.get("format").str(), "nv12");
    assert_eq!((f.get("width").num(), f.get("height").num()), (64.0, 48.0));
    assert_eq!(f.get("ring_size").num(), 8.0);
    assert_eq!(f.get("policy").str(), "drop_oldest");
    assert_eq!(f.get("memory").str(), "host");
    assert_eq!(f.get("seq").num(), 6.0);
    assert_eq!(f.get("fps"), &V::Null);
    let subs = f.get("subscribers").arr();
    assert_eq!(subs.len(), 2);
    let sb = subs.iter().find(|s| s.get("name").str() == weird).unwrap();
    assert_eq!(sb.get("lag").num(), 4.0);
    assert_eq!(sb.get("delivered").num(), 2.0);
    assert_eq!(sb.get("drops").num(), 0.0);
    assert_eq!(sb.get("state").str(), "active");
    assert!(sb.get("last_ack_age_s").num() < 60.0);
    let pk = j.get("packets");
    assert_eq!(pk.get("codec").str(), "h264");
    assert_eq!(pk.get("seq").num(), 5.0);
    assert_eq!(pk.get("bytes").num(), 5000.0);
    assert_eq!(pk.get("last_keyframe_seq").num(), 3.0);
    assert_eq!(pk.get("keyframe_age_packets").num(), 2.0);
    assert_eq!(pk.get("keyframe_age_s").num(), 0.04);

    // While frames and packets flow: rates.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 6;
            while !stop.load(Ordering::Relaxed) {
                publish_filler(&p);
                n += 1;
                w.publish(&[2; 10_000], n * 1_000_000, n * 1_000_000, 0)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let o = run(&env, &["ls", "--interval", "0.3"]);
        let o2 = run(&env, &["ls", "--json", "--interval", "0.3"]);
        stop.store(true, Ordering::Relaxed);

        let (out, err) = text(&o);
        // `ls` shows the whole machine (/dev/shm): other users' and tests' broken objects
        // are listed under the table and fail the status, ours must not be among them.
        let problems: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.is_empty())
            .chain(err.lines())
            .filter(|l| !l.is_empty())
            .collect();
        assert!(
            !problems
                .iter()
                .any(|l| l.starts_with(&format!("{}:", env.key))),
            "{out}\n{err}"
        );
        assert_eq!(o.status.success(), problems.is_empty(), "{out}\n{err}");
        let header = out.lines().next().unwrap();
        assert!(header.starts_with("KEY") && header.contains("FPS") && header.contains("MB/S"));
        let row = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(env.key.as_str()))
            .expect(&out);
        for want in [
            "alive",
            "listening",
            "nv12 64x48 ring 8 drop_oldest host",
            "h264 32 slots 1.0MiB",
        ] {
            assert!(row.contains(want), "{want:?} not in {row}");
        }
        assert!(row.contains(&format!(" {} ", std::process::id())), "{row}");

        let j = parse_json(&text(&o2).0);
        let me = j
            .get("publishers")
            .arr()
            .iter()
            .find(|p| p.get("key").str() == env.key)
            .unwrap();
        let fps = me.get("frames").get("fps").num();
        let pps = me.get("packets").get("packets_per_s").num();
        let mbs = me.get("packets").get("mb_per_s").num();
        assert!(fps > 5.0, "fps {fps}");
        assert!(pps > 5.0, "pps {pps}");
        assert!(
            (mbs / pps * 1e6 - 10_000.0).abs() < 100.0,
            "{mbs} MB/s for {pps} pkt/s"
        );
    });
    // Undisturbed.
    assert_eq!(p.subscriber_count(), 2);
    assert!(a.next_frame(Some(Duration::from_secs(5))).is_ok());
}

#[test]
fn clean_dry_run_then_clean_on_a_sigkilled_publisher() {
    let env = TestEnv::new("cli-dead");
    let pid = dead_publisher(&env, "660");
    let frame = frame_shm_name(&env.key);
    let packets = packet_shm_name(&env.key);
    let sock = env.dir.join(format!("{}.sock", env.key));

    let o = run(&env, &["stat", &env.key, "--interval", "0"]);
    let (out, _) = text(&o);
    assert!(out.starts_with(&format!("{}: dead", env.key)), "{out}");
    assert!(out.contains(&format!("producer pid {pid} (gone)")), "{out}");
    assert!(out.contains("not listening"), "{out}");

    let o = run(&env, &["clean", "--dry-run", &env.key]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    for (what, path) in [
        ("socket", sock.display().to_string()),
        ("frame SHM", shm_path(&frame)),
        ("packet SHM", shm_path(&packets)),
    ] {
        assert!(
            out.contains(&format!("would remove {what} {path} (key {}", env.key)),
            "{out}"
        );
    }
    assert!(!out.contains("removed "), "{out}");
    assert!(shm_exists(&frame) && shm_exists(&packets) && sock.exists());

    let o = run(&env, &["clean", "--json", &env.key]);
    assert!(o.status.success());
    let j = parse_json(&text(&o).0);
    assert_eq!(j.get("dry_run"), &V::Bool(false));
    assert_eq!(j.get("removed").arr().len(), 3);
    assert!(j.get("failed").arr().is_empty());
    assert!(!shm_exists(&frame) && !shm_exists(&packets) && !sock.exists());

    let o = run(&env, &["clean", &env.key]);
    assert_eq!(
        text(&o).0.trim(),
        format!("nothing to clean for {}", env.key)
    );
    let o = run(&env, &["ls", "--interval", "0"]);
    assert!(!text(&o).0.contains(&env.key));
}

#[test]
fn clean_never_touches_a_live_publisher() {
    let live = TestEnv::new("cli-keep");
    let dead = TestEnv::new("cli-gone");
    let p = Publisher::create(&live.key, live.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Bgra, 16, 16))
        .unwrap();
    let _s = Subscriber::connect(&live.key, &live.subscriber_options("keeper")).unwrap();
    // The dead one publishes into the live one's directory.
    let dead_env = TestEnv {
        dir: live.dir.clone(),
        key: dead.key.clone(),
    };
    dead_publisher(&dead_env, "660");
    std::mem::forget(dead_env); // `dead` and `live` clean up its objects and directory

    let o = run(&live, &["clean", "--dry-run"]);
    let (out, _) = text(&o);
    assert!(out.contains(&format!("kept {}: alive", live.key)), "{out}");
    assert!(
        !out.lines().any(|l| l.starts_with("would remove")
            && l.contains(&format!("key {})", live.key))
            || l.contains(&format!("{} ", frame_shm_name(&live.key)))),
        "{out}"
    );
    let o = run(&live, &["clean", &live.key, &dead.key]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("removed ")).count(),
        3,
        "{out}"
    );
    assert!(
        out.lines()
            .all(|l| !l.starts_with("removed ") || l.contains(&dead.key)),
        "{out}"
    );
    assert!(p.socket_path().exists());
    assert!(shm_exists(&frame_shm_name(&live.key)));
    assert!(!shm_exists(&frame_shm_name(&dead.key)));
    assert_eq!(p.subscriber_count(), 1);
}

fn unprivileged(env: &TestEnv, args: &[&str]) -> Option<Output> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to switch to an unprivileged user");
        return None;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .arg("--runtime-dir")
        .arg(&env.dir)
        .args(args)
        .output();
    match o {
        Ok(o) => Some(o),
        Err(e) => {
            eprintln!("skipped: setpriv not available: {e}");
            None
        }
    }
}

#[test]
fn objects_the_user_may_not_read() {
    let env = TestEnv::new("cli-perm");
    let p = Publisher::create(
        &env.key,
        PublisherOptions {
            file_mode: 0o600,
            ..env.publisher_options()
        },
    )
    .unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 32, 32))
        .unwrap();
    let frame = shm_path(&frame_shm_name(&env.key));

    let Some(o) = unprivileged(&env, &["stat", &env.key, "--interval", "0"]) else {
        return;
    };
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(err.contains(&frame), "{err}");
    assert!(err.contains("mode 0600"), "{err}");
    assert!(err.contains("needs read (r) permission"), "{err}");
    assert!(err.contains("uid 65534"), "{err}");
    // It still says what it could see without reading: the socket listens.
    assert!(out.starts_with(&format!("{}: alive", env.key)), "{out}");

    let o = unprivileged(&env, &["ls", "--interval", "0"]).unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(out.contains("unreadable (permission)"), "{out}");
    assert!(
        err.contains(&frame) && err.contains("needs read (r) permission"),
        "{err}"
    );

    let o = unprivileged(&env, &["stat", &env.key, "--json", "--interval", "0"]).unwrap();
    let j = parse_json(&text(&o).0);
    assert_eq!(j.get("frames").get("code").str(), "CUFRAMES_ERR_PERMISSION");
    assert!(j.get("frames").get("error").str().contains(&frame));

    // A dead publisher's 0600 leftovers: an unprivileged clean cannot judge them and keeps
    // them, naming the object; root cleans them.
    drop(p);
    let dead = TestEnv::new("cli-perm-dead");
    let pid = dead_publisher(&dead, "600");
    let dead_frame = shm_path(&frame_shm_name(&dead.key));
    let o = unprivileged(&dead, &["clean", &dead.key]).unwrap();
    let (out, err) = text(&o);
    assert!(
        out.contains(&format!("kept {}: cannot tell", dead.key)),
        "{out}\n{err}"
    );
    assert!(
        out.contains(&dead_frame) && out.contains("needs read (r) permission"),
        "{out}"
    );
    assert!(shm_exists(&frame_shm_name(&dead.key)));
    let o = run(&dead, &["clean", &dead.key]);
    let (out, _) = text(&o);
    assert!(out.contains(&format!("producer pid {pid}")), "{out}");
    assert!(!shm_exists(&frame_shm_name(&dead.key)));
}

/// Foreign and squatted rings in the tool's output. A ring owned by uid 65534 with a valid
/// header and producer pid 1 (what a publisher refuses) is "foreign", not an alive
/// publisher, with the mismatch in text and JSON (`owner_mismatch`).
/// And a publisher whose ring lives under its generation name (another uid holds its key's
/// name) is listed under its key, alive, with the squatter's object among `other_shm`.
#[test]
fn fake_owner_rings_are_foreign_and_generation_rings_are_their_keys() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to create an object owned by another uid");
        return;
    }
    let env = TestEnv::new("cli-owner");
    let frame = frame_shm_name(&env.key);
    // Removes whatever the test planted or left, also on failure.
    struct Planted(String);
    impl Drop for Planted {
        fn drop(&mut self) {
            let key = Key::new(&self.0).unwrap();
            for e in std::fs::read_dir("/dev/shm").unwrap().flatten() {
                let n = e.file_name().into_string().unwrap_or_default();
                if key.is_frame_shm(&n) || key.is_packet_shm(&n) {
                    let _ = cuframes_core::shm::unlink(&n);
                }
            }
        }
    }
    let _planted = Planted(env.key.clone());
    {
        let (_fd, map) = cuframes_core::shm::create(&frame, 7424, 0o644).unwrap();
        let shm = cuframes_core::testing::FrameShm::new(map).unwrap();
        shm.initialise(
            &cuframes_core::format::FrameGeometry::new(Format::Nv12, 64, 32)
                .unwrap()
                .to_meta(),
            2,
            cuframes_core::wire::Policy::DropOldest,
            cuframes_core::wire::MemoryKind::HostMemfd,
            1,
        );
    }
    std::os::unix::fs::chown(shm_path(&frame), Some(65534), None).unwrap();

    let o = run(&env, &["stat", &env.key, "--interval", "0"]);
    let (out, err) = text(&o);
    assert!(
        out.starts_with(&format!("{}: foreign", env.key)),
        "{out}\n{err}"
    );
    assert!(
        out.contains("owner    mismatch:") && out.contains("pid 1 runs as uid 0"),
        "{out}"
    );
    let o = run(&env, &["stat", &env.key, "--json", "--interval", "0"]);
    let j = parse_json(&text(&o).0);
    assert_eq!(j.get("state").str(), "foreign");
    assert_eq!(j.get("alive"), &V::Bool(false));
    let mismatch = j.get("owner_mismatch").arr();
    assert_eq!(mismatch.len(), 1, "{mismatch:?}");
    assert!(mismatch[0].str().contains("uid 65534"), "{mismatch:?}");
    let o = run(&env, &["ls", "--interval", "0"]);
    let (out, _) = text(&o);
    let line = out.lines().find(|l| l.starts_with(&env.key)).unwrap();
    assert!(line.contains("foreign"), "{out}");

    // A publisher now takes the key: its ring is under a generation name.
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 80, 32))
        .unwrap();
    publish_filler(&p);
    let ring = p.frame_shm_name().unwrap();
    assert!(ring.starts_with(&format!("{frame}.")), "{ring}");
    let o = run(&env, &["stat", &env.key, "--json", "--interval", "0"]);
    let j = parse_json(&text(&o).0);
    assert_eq!(j.get("state").str(), "alive", "{j:?}");
    assert_eq!(j.get("frames").get("shm").str(), shm_path(&ring));
    assert_eq!(j.get("owner_mismatch").arr(), &[] as &[V]);
    let others = j.get("other_shm").arr();
    assert_eq!(others.len(), 1, "{others:?}");
    assert_eq!(others[0].get("shm").str(), shm_path(&frame));
    assert_eq!(others[0].get("uid").num(), 65534.0);
    let o = run(&env, &["ls", "--interval", "0"]);
    let (out, _) = text(&o);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(&env.key)).collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].contains("alive"), "{out}");
}
