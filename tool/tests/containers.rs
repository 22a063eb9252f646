//! Containers: publisher and subscribers in separate PID, mount, network and user
//! namespaces (`unshare -rpfmn --mount-proc`), as in separate containers. Each namespace gets
//! a fresh `/proc` and a fresh, empty tmpfs over the temporary directory with only the
//! runtime directory bound back into it: what the processes share is `/dev/shm` and the
//! runtime directory, nothing else (no PIDs, no network, no other files).
//!
//! Checked: frames and packets flow (every byte verified); a SIGKILLed publisher is seen by
//! both subscribers (DISCONNECTED, not a hang: its pid means nothing in their namespaces, the
//! socket tells); `cuframes clean` run from outside keeps the live publisher (its pid and
//! socket are in another namespace: the connect test sees it alive), and run from the
//! publisher's namespace after the kill removes the socket and both SHM objects.
//!
//! Children are this test binary re-executed with `CUFRAMES_CHILD_ROLE`. Prints SKIPPED where
//! unprivileged namespaces are not available.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{
    child, frame_shm_name, packet_shm_name, planes_for, publish_pattern, verify_frame, Children,
    TestEnv,
};
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{Format, CODEC_ID_H264, PACKET_FLAG_KEY};
use cuframes_core::ErrorCode;

const KEY_ENV: &str = "CUFRAMES_TEST_KEY";
const CLI: &str = env!("CARGO_BIN_EXE_cuframes");

/// The packet payload of seq `n`: its seq, repeated, so that a reader can check it.
fn packet_payload(n: u64) -> Vec<u8> {
    n.to_le_bytes().repeat(16)
}

#[test]
fn containers_child() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var(KEY_ENV).unwrap();
    match role.as_str() {
        "publisher" => publisher_role(&key),
        "frames" => frames_role(&key),
        "packets" => packets_role(&key),
        other => panic!("unknown role {other}"),
    }
}

fn publisher_role(key: &str) {
    let p = Publisher::create(key, PublisherOptions::default()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
    cfg.ring_size = 8;
    p.enable_frames(cfg).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: CODEC_ID_H264,
        ring_slots: 64,
        data_size: 1 << 16,
        ..Default::default()
    })
    .unwrap();
    println!("READY pid {}", std::process::id());
    std::io::stdout().flush().unwrap();
    for n in 1u64.. {
        publish_pattern(&p, n, Some(n as i64 * 1_000_000)).unwrap();
        let flags = if n % 5 == 1 { PACKET_FLAG_KEY } else { 0 };
        p.publish_packet(&packet_payload(n), n as i64, n as i64, flags)
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn subscriber_options(name: &str, frames: bool) -> SubscriberOptions {
    SubscriberOptions {
        name: name.to_owned(),
        want_frames: frames,
        want_packets: !frames,
        connect_timeout: Duration::from_secs(20),
        ..Default::default()
    }
}

/// Read until the stream ends; RESULT good=… bad=… disconnected=0/1.
fn frames_role(key: &str) {
    let mut s = Subscriber::connect(key, &subscriber_options("ns-frames", true)).unwrap();
    let layout = s.frame_layout().unwrap().clone();
    let (mut good, mut bad) = (0u64, 0u64);
    let disconnected = loop {
        match s.next_frame(Some(Duration::from_secs(10))) {
            Ok(f) => {
                if verify_frame(&f, &planes_for(&layout, f.seq)) {
                    good += 1;
                } else {
                    bad += 1;
                }
                if good == 20 {
                    println!("FLOWING");
                    std::io::stdout().flush().unwrap();
                }
            }
            Err(e) => break e.code() == ErrorCode::Disconnected,
        }
    };
    println!(
        "RESULT good={good} bad={bad} disconnected={}",
        disconnected as u8
    );
}

fn packets_role(key: &str) {
    let mut s = Subscriber::connect(key, &subscriber_options("ns-packets", false)).unwrap();
    let (mut good, mut bad) = (0u64, 0u64);
    let mut buf = Vec::new();
    let disconnected = loop {
        match s.next_packet(Some(Duration::from_secs(10)), &mut buf) {
            Ok(info) => {
                if buf == packet_payload(info.seq) && info.pts_ns == info.seq as i64 {
                    good += 1;
                } else {
                    bad += 1;
                }
                if good == 20 {
                    println!("FLOWING");
                    std::io::stdout().flush().unwrap();
                }
            }
            Err(e) => break e.code() == ErrorCode::Disconnected,
        }
    };
    println!(
        "RESULT good={good} bad={bad} disconnected={}",
        disconnected as u8
    );
}

/// The shell that runs as PID 1 of a namespace: hides the temporary directory behind an
/// empty tmpfs, binds the runtime directory back (through the shell's own working directory,
/// which still is the original), and the test binaries' directory when it lies in the hidden
/// one (a clone under /tmp: through a descriptor opened before the tmpfs covers it), then
/// runs the rest of the script.
const ISOLATE: &str = r#"
set -e
cd "$CUFRAMES_RUNTIME_DIR"
[ -z "$BINS" ] || exec 3< "$BINS"
mount -t tmpfs cuframes-ns "$HIDE"
mkdir -p "$CUFRAMES_RUNTIME_DIR"
mount --no-canonicalize --bind "/proc/$$/cwd" "$CUFRAMES_RUNTIME_DIR"
if [ -n "$BINS" ]; then
  mkdir -p "$BINS"
  mount --no-canonicalize --bind "/proc/$$/fd/3" "$BINS"
  exec 3<&-
fi
cd /
set +e
"#;

/// The directory that holds both binaries the namespaces run (this test and the `cuframes`
/// tool), when it lies in `hide`: [`ISOLATE`] binds it back. `None` when the binaries are
/// elsewhere and stay visible anyway.
fn binaries_under(hide: &Path) -> Option<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let cli = PathBuf::from(CLI);
    let common = exe
        .ancestors()
        .find(|dir| cli.starts_with(dir))
        .expect("the binaries share the root directory at least")
        .to_path_buf();
    (common.starts_with(hide) && common != hide).then_some(common)
}

/// A namespace running `script` (after [`ISOLATE`]) with stdin and stdout piped.
fn namespace(env: &TestEnv, hide: &Path, script: &str, role: &str) -> std::process::Child {
    let bins = binaries_under(hide);
    // The one name the bound binaries add to the hidden directory (the check of what a
    // namespace sees there leaves it out, as it does the runtime directory).
    let bins_top = bins
        .as_ref()
        .and_then(|b| b.strip_prefix(hide).ok()?.components().next())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    Command::new("unshare")
        .args(["-rpfmn", "--mount-proc", "sh", "-c"])
        .arg(format!("{ISOLATE}{script}"))
        .env("CUFRAMES_RUNTIME_DIR", &env.dir)
        .env("HIDE", hide)
        .env(
            "BINS",
            bins.map(PathBuf::into_os_string).unwrap_or_default(),
        )
        .env("BINS_TOP", bins_top)
        .env("EXE", std::env::current_exe().unwrap())
        .env("CLI", CLI)
        .env(KEY_ENV, &env.key)
        .env(child::ROLE_ENV, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

const RUN_CHILD: &str = r#""$EXE" --exact containers_child --nocapture --test-threads=1"#;

/// Lines of a child's stdout, on a thread, so that waits can time out.
fn lines(out: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Wait for a line containing `what`; returns it (and every line before it, for messages).
fn wait_for(rx: &mpsc::Receiver<String>, what: &str, within: Duration, who: &str) -> String {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(what) => return l,
            Ok(l) => seen.push(l),
            Err(_) => panic!("{who}: no {what:?} within {within:?}; output: {seen:#?}"),
        }
    }
}

fn namespaces_available() -> bool {
    Command::new("unshare")
        .args(["-rpfmn", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn shm(name: &str) -> PathBuf {
    Path::new("/dev/shm").join(name)
}

#[test]
fn publisher_and_subscribers_in_separate_namespaces() {
    if !namespaces_available() {
        eprintln!("SKIPPED: unshare -rpfmn --mount-proc is not available here");
        return;
    }
    let env = TestEnv::new("ns");
    let hide = std::env::temp_dir();
    let sock = env.dir.join(format!("{}.sock", env.key));
    let frame_shm = shm(&frame_shm_name(&env.key));
    let packet_shm = shm(&packet_shm_name(&env.key));

    // The publisher's namespace: its shell (PID 1) outlives the publisher, so that
    // `cuframes clean` can run there after the kill.
    let publisher_script = format!(
        r#"{RUN_CHILD} &
pub=$!
read cmd
# the namespace's own view: no other process, no network but a down loopback
echo "PROCS $(ls /proc | grep -c '^[0-9]') SECRET $(ls "$HIDE" | grep -vxF -e "$(basename "$CUFRAMES_RUNTIME_DIR")" -e "${{BINS_TOP:-$(basename "$CUFRAMES_RUNTIME_DIR")}}" | grep -c .)"
kill -9 "$pub"
wait "$pub"
echo "KILLED $?"
read cmd
"$CLI" --runtime-dir "$CUFRAMES_RUNTIME_DIR" clean "$CUFRAMES_TEST_KEY"
echo "CLEAN_RC $?"
"#
    );
    let mut kids = Children(vec![namespace(&env, &hide, &publisher_script, "publisher")]);
    let pub_out = lines(kids.0[0].stdout.take().unwrap());
    let ready = wait_for(&pub_out, "READY", Duration::from_secs(30), "publisher");
    // In its PID namespace the publisher is a low pid (the shell is 1).
    let ns_pid: u32 = ready.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        ns_pid < 100,
        "publisher pid {ns_pid}: not in a fresh PID namespace?"
    );

    let mut subs = Vec::new();
    for role in ["frames", "packets"] {
        kids.0.push(namespace(&env, &hide, RUN_CHILD, role));
        let out = lines(kids.0.last_mut().unwrap().stdout.take().unwrap());
        subs.push((role, out));
    }
    for (role, out) in &subs {
        wait_for(out, "FLOWING", Duration::from_secs(30), role);
    }

    // Seen from outside, the publisher's pid and socket are in other namespaces; clean must
    // still recognise it as alive (it connects) and keep everything.
    let o = Command::new(CLI)
        .arg("--runtime-dir")
        .arg(&env.dir)
        .args(["clean", &env.key])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        sock.exists() && frame_shm.exists() && packet_shm.exists(),
        "clean from another namespace removed a live publisher's objects: {text}"
    );

    let stdin = kids.0[0].stdin.as_mut().unwrap();
    stdin.write_all(b"kill\n").unwrap();
    stdin.flush().unwrap();
    let procs = wait_for(&pub_out, "PROCS", Duration::from_secs(10), "publisher");
    // sh, the publisher, ls, grep, and the subshells of $(...): nothing of the host's.
    let n: u32 = procs.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(
        n < 10,
        "the publisher's namespace sees {n} processes: {procs}"
    );
    assert!(
        procs.ends_with("SECRET 0"),
        "the namespace sees more than the runtime directory (and the binaries' directory) in \
         {}: {procs}",
        hide.display()
    );
    wait_for(&pub_out, "KILLED", Duration::from_secs(10), "publisher");

    for (role, out) in &subs {
        let result = wait_for(out, "RESULT", Duration::from_secs(10), role);
        let fields: std::collections::HashMap<&str, u64> = result
            [result.find("RESULT ").unwrap() + 7..]
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, v.parse().unwrap()))
            .collect();
        assert!(fields["good"] >= 20, "{role}: {result}");
        assert_eq!(fields["bad"], 0, "{role}: {result}");
        assert_eq!(
            fields["disconnected"], 1,
            "{role} did not see the SIGKILLed publisher: {result}"
        );
    }
    // The kill left everything behind; clean, from the publisher's namespace, removes it.
    assert!(sock.exists() && frame_shm.exists() && packet_shm.exists());
    let stdin = kids.0[0].stdin.as_mut().unwrap();
    stdin.write_all(b"clean\n").unwrap();
    stdin.flush().unwrap();
    let rc = wait_for(&pub_out, "CLEAN_RC", Duration::from_secs(10), "publisher");
    assert_eq!(rc, "CLEAN_RC 0");
    assert!(
        !sock.exists() && !frame_shm.exists() && !packet_shm.exists(),
        "cuframes clean in the publisher's namespace left objects behind"
    );
    for k in &mut kids.0 {
        let _ = k.wait();
    }
}
