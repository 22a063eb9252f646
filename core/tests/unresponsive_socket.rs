//! A socket that never accepts: a member of the runtime
//! directory's group binds a Unix socket under another name, listens with a backlog of 0,
//! fills the backlog and renames the socket to the key's path. Every connect to it blocks in
//! the kernel until a connection is accepted, which is never: a subscriber, a publisher's
//! create and `cuframes clean` each return within their bound instead, with a clear error.
//!
//! The squatter is this test binary re-executed as uid 65534 in group 0 (setpriv) where the
//! test runs as root, else as this user: the same shape either way.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{child, squat_never_accepting, Children, TestEnv};
use cuframes_core::publisher::Publisher;
use cuframes_core::subscriber::Subscriber;
use cuframes_core::{ErrorCode, Key};

/// The bound every call is given before the test calls it hung: the call's own timeout plus
/// generous slack for a loaded 2-core machine.
const HUNG: Duration = Duration::from_secs(15);

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    match role.as_str() {
        "squatter" => squatter(),
        other => panic!("unknown role {other}"),
    }
}

/// A socket under another name, with a full backlog of 0, renamed to the key's path
/// (test-support's `squat_never_accepting`). Held until the test closes our stdin.
fn squatter() {
    let key = Key::new(&std::env::var("CUFRAMES_TEST_KEY").unwrap()).unwrap();
    let dir = PathBuf::from(std::env::var("CUFRAMES_RUNTIME_DIR").unwrap());
    let target = cuframes_core::paths::socket_path(&dir, &key).unwrap();
    let hidden = dir.join(format!(".squat-{}", std::process::id()));
    let (listener, held) = squat_never_accepting(&hidden, &target);
    println!("READY held={}", held.len());
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(listener);
    let _ = std::fs::remove_file(&target);
}

/// A squatter at `env`'s key, ready: its child (killed and reaped with `Children`) and the
/// inode of the socket it renamed into place.
struct Squatter {
    /// Killed and reaped when the test ends; its socket goes with the test's directory.
    _children: Children,
    socket: PathBuf,
    ino: u64,
}

impl Squatter {
    fn start(env: &TestEnv) -> Squatter {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let other_uid = root && Command::new("setpriv").arg("--version").output().is_ok();
        let mut cmd = if other_uid {
            // Another user in the directory's group, which may create names in it.
            use std::os::unix::fs::PermissionsExt;
            std::os::unix::fs::chown(&env.dir, Some(0), Some(0)).unwrap();
            std::fs::set_permissions(&env.dir, std::fs::Permissions::from_mode(0o770)).unwrap();
            child::command_as(&child::OTHER_USER_GROUP_0, "squatter")
        } else {
            println!("(squatter runs as this user: needs root and setpriv for another uid)");
            child::command("squatter")
        };
        child::in_env(&mut cmd, env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut children = Children(vec![cmd.spawn().unwrap()]);
        let child: &mut Child = &mut children.0[0];
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines
            .find_map(|l| l.ok().filter(|l| l.contains("READY")))
            .expect("the squatter never got ready");
        assert!(!ready.contains("held=0"), "{ready}");
        let socket =
            cuframes_core::paths::socket_path(&env.dir, &Key::new(&env.key).unwrap()).unwrap();
        let ino = std::fs::symlink_metadata(&socket).unwrap().ino();
        Squatter {
            _children: children,
            socket,
            ino,
        }
    }

    /// The squatter's socket is still in place: nobody unlinked or replaced it.
    fn assert_untouched(&self) {
        let meta = std::fs::symlink_metadata(&self.socket).expect("the socket was removed");
        assert_eq!(meta.ino(), self.ino, "the socket was replaced");
    }
}

/// Run `f` on a thread and wait at most [`HUNG`]: a call that blocks in connect() fails the
/// test instead of hanging it (the blocked thread is left behind). Returns the result and
/// how long the call took.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> (T, Duration) {
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HUNG) {
        Ok(v) => (v, started.elapsed()),
        Err(_) => panic!("{what} hung for more than {HUNG:?} on a socket that never accepts"),
    }
}

/// The subscriber's connect never blocks in connect() past its connect timeout: it gives up
/// within it, with TIMEOUT naming the socket.
#[test]
fn a_subscriber_gives_up_within_its_connect_timeout() {
    let env = TestEnv::new("unacc-sub");
    let squat = Squatter::start(&env);
    let mut opts = env.subscriber_options("waiter");
    opts.connect_timeout = Duration::from_secs(1);
    let key = env.key.clone();
    let (got, took) = within("Subscriber::connect", move || {
        Subscriber::connect(&key, &opts).map(|_| ())
    });
    let e = got.expect_err("connected to a socket that never accepts");
    assert_eq!(e.code(), ErrorCode::Timeout, "{}", e.message());
    assert!(
        e.message().contains(&squat.socket.display().to_string()),
        "the error names the socket: {}",
        e.message()
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(6),
        "gave up after {took:?}, the connect timeout is 1 s"
    );
    squat.assert_untouched();
}

/// A publisher's create (its recovery of a dead predecessor connects to the key's socket)
/// does not hang on a socket that never accepts: the socket has a live listener, so it is
/// ALREADY_EXISTS, and the socket is left where it is.
#[test]
fn a_publisher_create_fails_with_already_exists() {
    let env = TestEnv::new("unacc-pub");
    let squat = Squatter::start(&env);
    let (key, opts) = (env.key.clone(), env.publisher_options());
    let (got, took) = within("Publisher::create", move || {
        Publisher::create(&key, opts).map(|_| ())
    });
    let e = got.expect_err("created a publisher over a live listener");
    assert_eq!(e.code(), ErrorCode::AlreadyExists, "{}", e.message());
    assert!(
        e.message().contains("does not answer"),
        "the error says why: {}",
        e.message()
    );
    assert!(took < Duration::from_secs(6), "took {took:?}");
    squat.assert_untouched();
}

/// `cuframes clean` (and `--dry-run`) does not hang in connect() while confirming that the
/// key is dead (its socket is not bound under its own name, so `/proc/net/unix` does not show
/// it listening): it returns and keeps the key, since something listens on it.
#[test]
fn clean_returns_and_keeps_the_key() {
    let env = TestEnv::new("unacc-clean");
    let squat = Squatter::start(&env);
    for dry_run in [true, false] {
        let (dir, key) = (env.dir.clone(), Key::new(&env.key).unwrap());
        let (got, took) = within("inspect::clean", move || {
            cuframes_core::inspect::clean(&dir, Some(&[key]), dry_run)
        });
        let report = got.unwrap();
        assert!(report.removed.is_empty(), "{report:?}");
        let kept = report
            .kept
            .iter()
            .find(|(k, _)| *k == env.key)
            .unwrap_or_else(|| panic!("the key is kept: {report:?}"));
        assert!(kept.1.contains("does not accept"), "{kept:?}");
        assert!(
            took < Duration::from_secs(6),
            "dry_run {dry_run}: took {took:?}"
        );
        squat.assert_untouched();
    }
}
