//! `cuframes clean` next to a socket that never accepts: a socket bound under another name,
//! listening with a full backlog of 0, renamed to a key's path. `clean` and `clean --dry-run`
//! confirm a key dead by connecting to it, which must not hang in connect(): they return and
//! keep the key. The squatter is this process (the same shape
//! as another user's; core/tests/unresponsive_socket.rs runs it as another uid).

use cuframes_test_support as common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{squat_never_accepting as squat, TestEnv};
use cuframes_core::Key;

const BIN: &str = env!("CARGO_BIN_EXE_cuframes");

/// Run `cuframes --runtime-dir DIR args`, killed after 20 s: (exited in time, stdout+stderr).
fn run_bounded(env: &TestEnv, args: &[&str]) -> (bool, Duration, String) {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .arg("--runtime-dir")
        .arg(&env.dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut exited = false;
    while started.elapsed() < Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (exited, took, text)
}

/// `cuframes clean --dry-run` and `cuframes clean` do not hang in connect() on the socket:
/// both return within a bound, keep the key, and leave the socket in place.
#[test]
fn clean_returns_next_to_a_socket_that_never_accepts() {
    let env = TestEnv::new("cli-unacc");
    let target = cuframes_core::paths::socket_path(&env.dir, &Key::new(&env.key).unwrap()).unwrap();
    let _squatter = squat(&env.dir.join(".squat"), &target);
    for args in [&["clean", "--dry-run"][..], &["clean"][..]] {
        let (exited, took, text) = run_bounded(&env, args);
        assert!(
            exited,
            "cuframes {args:?} hung (killed after {took:?}): {text}"
        );
        assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
        assert!(
            text.contains(&env.key) && text.contains("does not accept"),
            "cuframes {args:?} says why the key is kept: {text}"
        );
        assert!(
            target.exists(),
            "cuframes {args:?} removed the socket: {text}"
        );
    }
}
