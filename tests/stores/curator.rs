//! Curator on the wire: Apache Curator's own `InterProcessMutex` (Debian's Curator 5.4 jars, a
//! small Java driver in `curator/CuratorMutex.java` compiled here with `javac`) and a dlock
//! client lock one path of one ZooKeeper, each way round: each excludes the other, and each
//! wakes when the other releases. Both name their children as Curator's protected mode does.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock::testing::{zookeeper_available, ZkServer};
use dlock::LockClient;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::both::ZK_SESSION;

/// Debian's Curator jars and what they need (`libcurator-recipes-java`, which `.ci/run`
/// installs); `None` when one is missing.
fn curator_classpath() -> Option<String> {
    let jars = [
        "curator-recipes",
        "curator-framework",
        "curator-client",
        "zookeeper",
        "guava",
        "slf4j-api",
    ];
    let paths: Vec<PathBuf> = jars
        .iter()
        .map(|j| Path::new("/usr/share/java").join(format!("{j}.jar")))
        .collect();
    if paths.iter().any(|p| !p.exists()) {
        return None;
    }
    let mut cp: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    // Guava's split-off class, where Debian ships it separately.
    let failure = Path::new("/usr/share/java/failureaccess.jar");
    if failure.exists() {
        cp.push(failure.display().to_string());
    }
    Some(cp.join(":"))
}

/// The Java driver, compiled into a temporary directory.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    _classes: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Driver {
    async fn start(classpath: &str, connect: &str, lock_path: &str, mode: &str) -> Driver {
        let dir = std::env::temp_dir().join(format!("dlock-curator-{}", rand_suffix()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let classes = TempDir(dir.clone());
        let source =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stores/curator/CuratorMutex.java");
        let javac = Command::new("javac")
            .arg("-cp")
            .arg(classpath)
            .arg("-d")
            .arg(&dir)
            .arg(&source)
            .status()
            .await
            .expect("run javac");
        assert!(javac.success(), "javac failed on {}", source.display());
        let mut child = Command::new("java")
            .arg("-cp")
            .arg(format!("{}:{classpath}", dir.display()))
            .arg("CuratorMutex")
            .arg(connect)
            .arg(lock_path)
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start java");
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut driver = Driver {
            child,
            stdin,
            lines,
            _classes: classes,
        };
        assert_eq!(driver.next_line(Duration::from_secs(20)).await, "READY");
        driver
    }

    async fn next_line(&mut self, within: Duration) -> String {
        match tokio::time::timeout(within, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(other) => panic!("the Curator driver ended: {other:?}"),
            Err(_) => panic!("the Curator driver said nothing within {within:?}"),
        }
    }

    async fn send(&mut self, command: &str) {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .expect("write to the Curator driver");
        self.stdin.flush().await.expect("flush");
    }

    async fn ask(&mut self, command: &str) -> String {
        self.send(command).await;
        self.next_line(Duration::from_secs(20)).await
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn rand_suffix() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    )
}

/// Whether `child` is named as Curator's protected mode names a mutex's children:
/// `_c_<36-char uuid>-lock-<10 digits>`.
fn curator_named(child: &str) -> bool {
    let Some(rest) = child.strip_prefix("_c_") else {
        return false;
    };
    let (uuid, tail) = rest.split_at(36.min(rest.len()));
    let uuid_ok = uuid.len() == 36
        && uuid.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    let seq = tail.strip_prefix("-lock-").unwrap_or("");
    uuid_ok && seq.len() == 10 && seq.chars().all(|c| c.is_ascii_digit())
}

/// A dlock client of `server`, with the tests' short session.
async fn client_of(server: &ZkServer) -> LockClient {
    LockClient::builder(server.url())
        .zookeeper_session_timeout(ZK_SESSION)
        .build()
        .await
        .expect("connect")
}

/// Waits until the server's own list of ephemeral nodes (`dump`) shows `n` children under
/// `parent`, whoever made them: a waiter is in line. Bounded (10 s); fails the test otherwise.
async fn until_children(server: &ZkServer, parent: &str, n: usize) {
    let count = || {
        let dump = server.four_letter("dump").expect("dump");
        dump.matches(&format!("{parent}/_c_")).count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while count() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count(), n, "never {n} children in line under {parent}");
}

/// The Curator jars' classpath where ZooKeeper, the jars and `javac` are all there; else the
/// test says what it skipped.
fn curator_ready() -> Option<String> {
    if !zookeeper_available() {
        super::common::skipped("Curator interop", "no ZooKeeper server");
        return None;
    }
    let Some(classpath) = curator_classpath() else {
        super::common::skipped(
            "Curator interop",
            "no Curator jars (libcurator-recipes-java)",
        );
        return None;
    };
    if std::process::Command::new("javac")
        .arg("-version")
        .output()
        .is_err()
    {
        super::common::skipped("Curator interop", "no javac");
        return None;
    }
    Some(classpath)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_dlock_exclude_and_wake_each_other_on_one_path() {
    let Some(classpath) = curator_ready() else {
        return;
    };
    let server = ZkServer::start().expect("start ZooKeeper");
    let client = client_of(&server).await;
    let lock = client.lock("stores:curator");
    // dlock's node for the lock `stores:curator` with the default prefix.
    let path = "/dlock:{stores:curator}";
    let mut java = Driver::start(&classpath, &server.connect_string(), path, "mutex").await;

    // Curator holds: dlock is kept out, queues behind it, and is woken by its release.
    assert_eq!(java.ask("acquire").await, "HELD");
    assert!(
        lock.try_acquire().await.expect("try").is_none(),
        "dlock got in beside Curator"
    );
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock.wait(Duration::from_secs(20)).acquire().await;
            (Instant::now(), guard)
        }
    });
    // Both children in line, each named as Curator names them.
    let deadline = Instant::now() + Duration::from_secs(10);
    let children = loop {
        let line = java.ask("children").await;
        let children: Vec<String> = line
            .strip_prefix("CHILDREN ")
            .unwrap_or("")
            .split(',')
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect();
        if children.len() == 2 || Instant::now() > deadline {
            break children;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(children.len(), 2, "{children:?}");
    assert!(children.iter().all(|c| curator_named(c)), "{children:?}");
    let released = Instant::now();
    assert_eq!(java.ask("release").await, "RELEASED");
    let (got_at, guard) = waiting.await.expect("waiter task");
    let guard = guard.expect("dlock after Curator's release");
    let woke = got_at - released;
    assert!(
        woke < Duration::from_secs(2),
        "dlock woke {woke:?} after Curator's release"
    );

    // dlock holds: Curator is kept out, queues, and is woken by dlock's release.
    assert_eq!(java.ask("try").await, "BUSY");
    java.send("acquire").await;
    // Curator in line behind dlock.
    until_children(&server, path, 2).await;
    let released = Instant::now();
    guard.release().await.expect("release");
    assert_eq!(java.next_line(Duration::from_secs(10)).await, "HELD");
    let woke = released.elapsed();
    assert!(
        woke < Duration::from_secs(2),
        "Curator woke {woke:?} after dlock's release"
    );
    assert!(
        lock.try_acquire().await.expect("try").is_none(),
        "dlock got in beside Curator"
    );
    assert_eq!(java.ask("release").await, "RELEASED");
    let again = lock.try_acquire().await.expect("try").expect("free again");
    again.release().await.expect("release");
}

/// Curator's `InterProcessReadWriteLock` and dlock's read-write lock on one path: readers of
/// both share, a writer of either keeps the other's readers and writers out, and a Curator
/// writer queued behind dlock's reader is woken by its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_dlock_read_write_locks_share_and_exclude_on_one_path() {
    let Some(classpath) = curator_ready() else {
        return;
    };
    let server = ZkServer::start().expect("start ZooKeeper");
    let client = client_of(&server).await;
    let rw = client.read_write_lock("stores:curator:rw");
    // The read-write lock's node: its key (`dlock:{stores:curator:rw}:rw`) under `/`.
    let path = &format!("/{}", rw.read().key());
    assert_eq!(path, "/dlock:{stores:curator:rw}:rw");
    let connect = server.connect_string();
    let mut reader = Driver::start(&classpath, &connect, path, "read").await;
    let mut writer = Driver::start(&classpath, &connect, path, "write").await;

    // Curator reads: dlock reads beside it, dlock's writer is kept out.
    assert_eq!(reader.ask("acquire").await, "HELD");
    let read = rw
        .read()
        .try_acquire()
        .await
        .expect("try")
        .expect("readers share");
    assert!(
        rw.write().try_acquire().await.expect("try").is_none(),
        "dlock wrote beside a Curator reader"
    );
    assert_eq!(reader.ask("release").await, "RELEASED");
    // dlock still reads: Curator's writer is kept out, queues, and is woken by the release.
    assert_eq!(writer.ask("try").await, "BUSY");
    writer.send("acquire").await;
    until_children(&server, path, 2).await;
    let released = Instant::now();
    read.release().await.expect("release");
    assert_eq!(writer.next_line(Duration::from_secs(10)).await, "HELD");
    let woke = released.elapsed();
    assert!(
        woke < Duration::from_secs(2),
        "Curator's writer woke {woke:?} after dlock's release"
    );
    // Curator writes: dlock's reader and writer are kept out.
    assert!(
        rw.read().try_acquire().await.expect("try").is_none(),
        "dlock read beside a Curator writer"
    );
    assert!(
        rw.write().try_acquire().await.expect("try").is_none(),
        "dlock wrote beside a Curator writer"
    );
    assert_eq!(writer.ask("release").await, "RELEASED");
    // dlock writes: Curator's reader is kept out.
    let write = rw.write().try_acquire().await.expect("try").expect("free");
    assert_eq!(reader.ask("try").await, "BUSY");
    write.release().await.expect("release");
    assert_eq!(reader.ask("try").await, "HELD");
    assert_eq!(reader.ask("release").await, "RELEASED");
}

/// Curator's `InterProcessSemaphoreV2` and dlock's semaphore on one path, 2 permits: a lease
/// of each fills it, a third of either is refused, and a Curator waiter is woken when dlock's
/// permit is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_dlock_semaphores_share_their_permits_on_one_path() {
    let Some(classpath) = curator_ready() else {
        return;
    };
    let server = ZkServer::start().expect("start ZooKeeper");
    let client = client_of(&server).await;
    let sem = client.semaphore("stores:curator:sem", 2);
    // The semaphore's node: its key, `dlock:{stores:curator:sem}:sem`, under `/`.
    let path = "/dlock:{stores:curator:sem}:sem";
    let connect = server.connect_string();
    let mut first = Driver::start(&classpath, &connect, path, "semaphore:2").await;
    let mut second = Driver::start(&classpath, &connect, path, "semaphore:2").await;

    assert_eq!(first.ask("acquire").await, "HELD");
    let mine = sem
        .try_acquire()
        .await
        .expect("try")
        .expect("the second permit");
    assert!(
        sem.try_acquire().await.expect("try").is_none(),
        "dlock took a third of 2"
    );
    assert_eq!(second.ask("try").await, "BUSY");
    second.send("acquire").await;
    // Curator's waiter has its lease child in (a third, over the count) and watches.
    until_children(&server, &format!("{path}/leases"), 3).await;
    let released = Instant::now();
    mine.release().await.expect("release");
    assert_eq!(second.next_line(Duration::from_secs(10)).await, "HELD");
    let woke = released.elapsed();
    assert!(
        woke < Duration::from_secs(2),
        "Curator's waiter woke {woke:?} after the release"
    );
    assert!(
        sem.try_acquire().await.expect("try").is_none(),
        "dlock took a third of 2"
    );
    assert_eq!(first.ask("release").await, "RELEASED");
    let again = sem
        .try_acquire()
        .await
        .expect("try")
        .expect("a permit given back");
    again.release().await.expect("release");
    assert_eq!(second.ask("release").await, "RELEASED");
}

/// The inspector on a path Curator and dlock share: Curator's child (its data the JVM host's
/// address, no owner id) is listed by its node name as the holder, and dlock's waiter behind it
/// by its owner id; the listing of every lock does not trip over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_locks_list_a_curator_holder_by_its_child_name() {
    let Some(classpath) = curator_ready() else {
        return;
    };
    let server = ZkServer::start().expect("start ZooKeeper");
    let client = client_of(&server).await;
    let path = "/dlock:{stores:curator:listed}";
    let mut java = Driver::start(&classpath, &server.connect_string(), path, "mutex").await;
    assert_eq!(java.ask("acquire").await, "HELD");
    let waiting = tokio::spawn({
        let lock = client
            .lock("stores:curator:listed")
            .wait(Duration::from_secs(20));
        async move { lock.acquire().await.map(drop) }
    });
    until_children(&server, path, 2).await;

    let all = dlock::inspect::stored_locks(&client, None)
        .await
        .expect("stored_locks beside a Curator child");
    let lock = all
        .iter()
        .find(|l| l.key == "dlock:{stores:curator:listed}")
        .unwrap_or_else(|| panic!("not listed: {all:?}"));
    assert_eq!(lock.holders.len(), 1, "{lock:?}");
    assert!(curator_named(&lock.holders[0].owner), "{lock:?}");
    assert_eq!(lock.queue.len(), 1, "{lock:?}");
    assert!(
        lock.queue[0].starts_with(&format!("{}:", client.client_id())),
        "{lock:?}"
    );

    assert_eq!(java.ask("release").await, "RELEASED");
    waiting
        .await
        .unwrap()
        .expect("dlock gets the lock after Curator");
}
