//! Child processes of a test: the test binary re-executed in a role, and children killed and
//! reaped when a test ends.
//!
//! A test that needs a second process runs its own binary again, filtered to one test (its
//! entry, `child_entry` by convention) with the role in [`ROLE_ENV`]. The entry returns at
//! once in a normal run (no role) and otherwise plays the role:
//!
//! ```ignore
//! #[test]
//! fn child_entry() {
//!     let Some(role) = child::role() else { return };
//!     match role.as_str() { "publisher" => publisher(), other => panic!("unknown role {other}") }
//! }
//! ```

use std::collections::HashMap;
use std::process::{Command, Stdio};

/// Children that are killed and reaped when the test ends, passed or failed.
pub struct Children(pub Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The environment variable that names the role a re-executed test binary plays.
pub const ROLE_ENV: &str = "CUFRAMES_CHILD_ROLE";

/// The test that a child runs unless it names another ([`command_for`]).
pub const ENTRY: &str = "child_entry";

/// The arguments `setpriv` takes to run a child as another user (uid 65534) in group 0, the
/// group of the SHM objects and runtime directories the tests make: what the documented
/// setup grants a subscriber of another service.
pub const OTHER_USER_GROUP_0: [&str; 3] = ["--reuid=65534", "--regid=0", "--clear-groups"];

/// The role this process plays: `Some` when a test re-executed its binary as a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// The arguments that make a test binary run only its test `entry`, printing as it goes.
pub fn entry_args(entry: &str) -> [&str; 4] {
    ["--exact", entry, "--nocapture", "--test-threads=1"]
}

/// This test binary, to run again as a child that runs only [`ENTRY`] with `role` in
/// [`ROLE_ENV`]. Callers add what else the role needs (environment, stdio) and spawn it.
pub fn command(role: &str) -> Command {
    command_for(ENTRY, role)
}

/// [`command`] for a child whose entry is the test `entry`.
pub fn command_for(entry: &str, role: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(entry_args(entry)).env(ROLE_ENV, role);
    cmd
}

/// [`command`] run as another user through `setpriv` with `setpriv_args` (for instance
/// [`OTHER_USER_GROUP_0`]).
pub fn command_as(setpriv_args: &[&str], role: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(setpriv_args)
        .arg(std::env::current_exe().unwrap())
        .args(entry_args(ENTRY))
        .env(ROLE_ENV, role);
    cmd
}

/// Give `cmd` the test's key and runtime directory, in `CUFRAMES_TEST_KEY` and
/// `CUFRAMES_RUNTIME_DIR` (the child-process tests' convention).
pub fn in_env<'a>(cmd: &'a mut Command, env: &crate::TestEnv) -> &'a mut Command {
    cmd.env("CUFRAMES_TEST_KEY", &env.key)
        .env("CUFRAMES_RUNTIME_DIR", &env.dir)
}

/// [`command`] in the test's key and runtime directory ([`in_env`]), stdout piped (for its
/// `RESULT` line), stderr inherited. Callers add what else the role needs and spawn it.
pub fn role_command(role: &str, env: &crate::TestEnv) -> Command {
    let mut cmd = command(role);
    in_env(&mut cmd, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// The exit code of a child (None: killed by a signal), the fields of its `RESULT` line (None
/// when it printed none) and its whole stdout.
pub type ChildResult = (Option<i32>, Option<HashMap<String, u64>>, String);

/// Wait for a child that reports one `RESULT k=v k=v …` line on stdout (the child-process
/// tests' convention): its exit code, the fields of that line (a value that is not a number
/// fails the test) and its whole stdout.
pub fn wait_for_result(child: &mut std::process::Child) -> ChildResult {
    use std::io::Read;
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("the child's stdout is piped")
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    (status.code(), result_fields(&out), out)
}

/// The fields of the `RESULT k=v k=v …` line in a child's stdout, None when it printed none;
/// a value that is not a number fails the test.
pub fn result_fields(out: &str) -> Option<HashMap<String, u64>> {
    // The test harness may print on the same line first ("test child_entry ... RESULT …").
    out.lines()
        .find_map(|l| l.find("RESULT ").map(|i| &l[i + "RESULT ".len()..]))
        .map(|line| {
            line.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| {
                    let n = v
                        .parse()
                        .unwrap_or_else(|_| panic!("RESULT field {k}={v} is not a number"));
                    (k.to_owned(), n)
                })
                .collect()
        })
}

/// Run `cmd` (a [`role_command`]) to its end, killed and reaped if the test fails meanwhile:
/// what [`wait_for_result`] says of it.
pub fn run_role(mut cmd: Command) -> ChildResult {
    let mut children = Children(vec![cmd.spawn().unwrap()]);
    wait_for_result(&mut children.0[0])
}
