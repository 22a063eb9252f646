//! Child processes killed and reaped when a test ends.

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

/// Wait for a child that reports one `RESULT k=v k=v …` line on stdout (the child-process
/// tests' convention): its exit code (None: killed by a signal), the fields of that line (None
/// when it printed none; a value that is not a number fails the test) and its whole stdout.
pub fn wait_for_result(
    child: &mut std::process::Child,
) -> (
    Option<i32>,
    Option<std::collections::HashMap<String, u64>>,
    String,
) {
    use std::io::Read;
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("the child's stdout is piped")
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    // The test harness may print on the same line first ("test child_entry ... RESULT …").
    let fields = out
        .lines()
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
        });
    (status.code(), fields, out)
}

/// The environment variable that names the role a re-executed test binary plays (see
/// [`role_command`]).
pub const ROLE_ENV: &str = "CUFRAMES_CHILD_ROLE";

/// This test binary, run again as a child that runs only its `child_entry` test with `role`
/// in [`ROLE_ENV`] and the test's key and runtime directory in `CUFRAMES_TEST_KEY` and
/// `CUFRAMES_RUNTIME_DIR` (the child-process tests' convention): stdout piped (for its
/// `RESULT` line), stderr inherited. Callers add what else the role needs and spawn it.
pub fn role_command(role: &str, env: &crate::TestEnv) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .env("CUFRAMES_TEST_KEY", &env.key)
        .env("CUFRAMES_RUNTIME_DIR", &env.dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    cmd
}

/// Run `cmd` (a [`role_command`]) to its end, killed and reaped if the test fails meanwhile:
/// what [`wait_for_result`] says of it.
pub fn run_role(
    mut cmd: std::process::Command,
) -> (
    Option<i32>,
    Option<std::collections::HashMap<String, u64>>,
    String,
) {
    let mut children = Children(vec![cmd.spawn().unwrap()]);
    wait_for_result(&mut children.0[0])
}
