//! Other processes for the fault tests: this test binary re-run to execute one test function
//! (a holder to SIGKILL or SIGSTOP, a stale writer), which reports on its stdout. That test
//! does nothing in a normal run; it acts only when its environment variables are set.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The child's stdout, line by line.
pub type ChildLines = Lines<BufReader<ChildStdout>>;

/// Starts this test binary running only `test` of the module at `module_path` (pass
/// `module_path!()`) with `env` set; stdin and stdout piped, killed if the test fails.
pub fn spawn(module_path: &str, test: &str, env: &[(&str, &str)]) -> (Child, ChildLines) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            super::test_path(module_path, test).as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn child test process");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// The child's next message containing `marker`, from the marker to the end of its line
/// (libtest prints "test <name> ... " on the same line as the first message); panics after
/// 30 s or at the end of its output.
pub async fn expect_line(lines: &mut ChildLines, marker: &str) -> String {
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(at) = line.find(marker) {
                return line[at..].to_owned();
            }
        }
        panic!("child exited without printing {marker:?}");
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap_or_else(|_| panic!("child did not print {marker:?} within 30 s"))
}
