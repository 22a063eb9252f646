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
