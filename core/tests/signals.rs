//! The library under the host's signal dispositions and process life: a daemon that
//! ignores SIGCHLD or reaps every child itself, and a C host that leaves SIGPIPE at its default
//! (terminate). Each case runs in a child process (this test binary re-executed with
//! `CUFRAMES_CHILD_ROLE` set, see `child_entry`), so that a disposition never leaks into
//! other tests.

use cuframes_test_support as common;

use std::process::Stdio;
use std::time::Duration;

use common::{child, wait_until, Children, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::Format;

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    match role.as_str() {
        "sigchld_ignored" => {
            // SAFETY: sets a disposition of this (child) process before any thread of ours
            // could be creating children.
            unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
            create_and_serve(&key, 3);
        }
        "sigchld_reaper" => {
            install_reaper();
            create_and_serve(&key, 40);
        }
        "sigpipe_wake" => wake_after_the_server_ended(&key),
        "crash_with_forked_worker" => crash_with_a_forked_worker(&key),
        "diag_sigpipe_default" | "diag_sigpipe_ignored" => {
            let disposition = if role == "diag_sigpipe_default" {
                libc::SIG_DFL
            } else {
                libc::SIG_IGN
            };
            // SAFETY: sets a disposition of this (child) process; nothing else runs yet.
            unsafe { libc::signal(libc::SIGPIPE, disposition) };
            for i in 0..3 {
                cuframes_core::testing::diag(&format!("diagnostic {i} to a closed stderr"));
            }
            println!("RESULT survived=1");
        }
        other => panic!("unknown role {other}"),
    }
}

/// A host's SIGCHLD handler that reaps every child that ends, as some daemons have.
extern "C" fn reap_all(_: libc::c_int) {
    // SAFETY: waitpid and the errno location are async-signal-safe; errno is restored so that
    // the interrupted code does not see ours.
    unsafe {
        let saved = *libc::__errno_location();
        while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
        *libc::__errno_location() = saved;
    }
}

fn install_reaper() {
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (see reap_all);
    // SA_RESTART as a daemon would set it.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = reap_all as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut()), 0);
    }
}

/// Create the key's publisher `rounds` times (each one serving a subscriber one frame, then
/// shut down); RESULT reports how many creations succeeded and whether a failed one left its
/// socket file behind.
fn create_and_serve(key: &str, rounds: u64) {
    let socket = cuframes_core::paths::socket_path(
        &cuframes_core::paths::runtime_dir(None),
        &cuframes_core::Key::new(key).unwrap(),
    )
    .unwrap();
    let (mut created, mut served, mut left_behind) = (0u64, 0u64, 0u64);
    for _ in 0..rounds {
        let p = match Publisher::create(key, PublisherOptions::default()) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("create failed: {e}");
                if socket.exists() {
                    left_behind += 1;
                    let _ = std::fs::remove_file(&socket);
                }
                continue;
            }
        };
        created += 1;
        p.enable_frames(FrameRingConfig::new(Format::Rgba, 8, 8))
            .unwrap();
        let mut sub = Subscriber::connect(key, &SubscriberOptions::default()).unwrap();
        let (seq, _) = common::publish_pattern(&p, 1, None).unwrap();
        if sub.next_frame(Some(Duration::from_secs(5))).unwrap().seq == seq {
            served += 1;
        }
        drop(sub);
        drop(p);
        if socket.exists() {
            left_behind += 1;
        }
    }
    println!("RESULT rounds={rounds} created={created} served={served} left_behind={left_behind}");
}

/// With SIGPIPE at its default (terminate, what a C host has unless it changes it; the Rust
/// runtime ignores it, so it is set back here), the publisher's shutdown wakes its server
/// thread after that thread has already ended (as when flushing CUDA publications outlasts
/// the server's wait). The process must survive.
fn wake_after_the_server_ended(key: &str) {
    // SAFETY: sets a disposition of this (child) process; nothing else runs yet.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let p = Publisher::create(key, PublisherOptions::default()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Rgba, 8, 8))
        .unwrap();
    cuframes_core::testing::hooks::set_before_shutdown_wake(key, || {
        // The server thread sees the shutdown within one of its poll slices and ends.
        wait_until(
            "the publisher's server thread to end",
            Duration::from_secs(10),
            || !server_thread_runs(),
        );
    });
    // The thread names itself once it runs.
    wait_until(
        "the publisher's server thread to run",
        Duration::from_secs(10),
        server_thread_runs,
    );
    drop(p);
    println!("RESULT survived=1");
}

/// Is a publisher server thread (named `cuframes-pub-<key>`, cut to 15 bytes) running in
/// this process? The child has only the one publisher.
fn server_thread_runs() -> bool {
    std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
        std::fs::read_to_string(t.unwrap().path().join("comm"))
            .is_ok_and(|name| name.starts_with("cuframes-pub"))
    })
}

fn check_serving_child(role: &str, rounds: u64) {
    let env = TestEnv::new("sig");
    let (code, fields, out) = child::run_role(child::role_command(role, &env));
    let fields = fields.unwrap_or_else(|| panic!("no RESULT from the child: {out}"));
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(fields["rounds"], rounds);
    assert_eq!(fields["created"], rounds, "every create succeeds: {out}");
    assert_eq!(fields["served"], rounds, "every publisher serves: {out}");
    assert_eq!(
        fields["left_behind"], 0,
        "no socket file is left behind: {out}"
    );
}

/// `signal(SIGCHLD, SIG_IGN)`: the kernel reaps children itself, so a `waitpid` for the
/// socket-binding child returns ECHILD. Creating a publisher must still work.
#[test]
fn a_publisher_is_created_with_sigchld_ignored() {
    check_serving_child("sigchld_ignored", 3);
}

/// A SIGCHLD handler that reaps every child may take the binding child before the library's
/// own `waitpid`. Creating a publisher must still work, every time.
#[test]
fn a_publisher_is_created_under_a_reaping_sigchld_handler() {
    check_serving_child("sigchld_reaper", 40);
}

/// SIGPIPE at its default disposition: waking the server thread after it ended must not kill
/// the process.
#[test]
fn waking_an_ended_server_thread_raises_no_sigpipe() {
    let env = TestEnv::new("sigpipe");
    let (code, fields, out) = child::run_role(child::role_command("sigpipe_wake", &env));
    assert_eq!(
        code,
        Some(0),
        "the child must survive its publisher's shutdown (None: killed by a signal): {out}"
    );
    assert_eq!(fields.map(|f| f["survived"]), Some(1), "{out}");
}

/// The library's diagnostics (a release that failed, a stream that never finished) go to
/// stderr, and stderr may be a pipe nobody reads any more (a supervisor that went away). With
/// SIGPIPE at its default (a C host) that must not kill the process, and with SIGPIPE
/// ignored (Rust, Python) it must not panic, as `eprintln!` does on EPIPE.
#[test]
fn a_diagnostic_to_a_closed_stderr_neither_kills_nor_panics() {
    let env = TestEnv::new("diag");
    for role in ["diag_sigpipe_default", "diag_sigpipe_ignored"] {
        let mut cmd = child::role_command(role, &env);
        cmd.stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        // Nobody reads the child's stderr: its writes there fail with EPIPE.
        drop(child.stderr.take());
        let mut children = Children(vec![child]);
        let (code, fields, out) = child::wait_for_result(&mut children.0[0]);
        assert_eq!(
            code,
            Some(0),
            "{role}: the child must survive (None: killed by a signal): {out}"
        );
        assert_eq!(fields.map(|f| f["survived"]), Some(1), "{role}: {out}");
    }
}

/// A publisher that forked a worker (which never exec'd, as a `multiprocessing` fork worker)
/// and then crashed: the worker still holds the listening socket, so connecting to it works,
/// but the process that listened is dead. Restarting the publisher under the same key must
/// work (the supervisor's restart), not fail with "a live publisher is listening".
#[test]
fn a_publisher_restarts_after_a_crash_while_a_forked_worker_holds_its_socket() {
    let env = TestEnv::new("crashfork");
    let status = child::role_command("crash_with_forked_worker", &env)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        None,
        "the publisher's process must have crashed"
    );
    let worker: i32 = std::fs::read_to_string(env.dir.join("worker.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let kill_worker = || {
        // SAFETY: plain system calls on the worker we made (a grandchild, reparented).
        unsafe { libc::kill(worker, libc::SIGKILL) };
    };
    let created = Publisher::create(&env.key, env.publisher_options());
    kill_worker();
    let p = created.unwrap_or_else(|e| panic!("restart after the crash: {e}"));
    p.enable_frames(FrameRingConfig::new(Format::Rgba, 8, 8))
        .unwrap();
}

fn crash_with_a_forked_worker(key: &str) {
    let dir = std::env::var("CUFRAMES_RUNTIME_DIR").unwrap();
    let p = Publisher::create(key, PublisherOptions::default()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Rgba, 8, 8))
        .unwrap();
    // SAFETY: the child only sleeps and _exits (async-signal-safe), keeping what it inherited.
    let worker = unsafe { libc::fork() };
    if worker == 0 {
        // SAFETY: as above.
        unsafe {
            libc::sleep(60);
            libc::_exit(0);
        }
    }
    std::fs::write(format!("{dir}/worker.pid"), worker.to_string()).unwrap();
    // SAFETY: the crash this test is about.
    unsafe { libc::raise(libc::SIGKILL) };
}
