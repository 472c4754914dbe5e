//! Where the ZooKeeper server is: a `java` and a classpath holding
//! `org.apache.zookeeper.server.quorum.QuorumPeerMain`, found once per process.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::testing::bins;

/// Debian's `libzookeeper-java` (pulled in by the `zookeeper` package): the server jar, whose
/// manifest `Class-Path` names every library it needs under `/usr/share/java`.
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";
/// An SLF4J binding from Debian's `libslf4j-java` (a dependency of `libzookeeper-java`), which
/// the jar's manifest leaves out: without one the server logs nothing, and a start-up error
/// would have no lines to show. It writes to stderr, which goes to the server's log file.
const DEBIAN_SLF4J_SIMPLE: &str = "/usr/share/java/slf4j-simple.jar";
/// Netty jars of Debian's `libnetty-java` (a dependency of `libzookeeper-java`) that the jar's
/// manifest leaves out and a TLS port needs (`ZkServer::start_tls`): the Netty connection
/// factory's `SslHandler` is a `ByteToMessageDecoder` of netty-codec, and its transport wants
/// netty-resolver and the native Unix classes beside the epoll ones the manifest lists.
const DEBIAN_NETTY_EXTRA: [&str; 3] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];
/// `java -version` and `VersionInfoMain` take ~0.1 s; the margin is for a loaded machine.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// How to run the server: `java -cp <classpath> ...`, and the version it reported.
#[derive(Debug)]
pub(crate) struct Install {
    pub(crate) java: PathBuf,
    pub(crate) classpath: String,
    /// "3.8.0", from `org.apache.zookeeper.version.VersionInfoMain`.
    pub(crate) version: String,
}

/// The install, or why there is none (the text every start then fails with).
pub(crate) fn install() -> io::Result<&'static Install> {
    static INSTALL: OnceLock<Result<Install, String>> = OnceLock::new();
    INSTALL
        .get_or_init(|| {
            let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
            let classpath = find_classpath(&env)?;
            let java = find_java(&env)?;
            let version = probe_version(&java, &classpath)?;
            Ok(Install {
                java,
                classpath,
                version,
            })
        })
        .as_ref()
        .map_err(|why| io::Error::new(io::ErrorKind::NotFound, why.clone()))
}

/// Whether a ZooKeeper server and a `java` to run it were found (see [`ZkServer`] for where
/// the harness looks). Tests print `skipped: ...` and return when not; CI installs Debian's
/// `zookeeper` package.
///
/// [`ZkServer`]: super::ZkServer
pub fn zookeeper_available() -> bool {
    install().is_ok()
}

/// The version of the ZooKeeper server the harness starts, as its jar reports it (`3.8.0` for
/// Debian 12's package); the error says why no server was found.
pub fn zookeeper_version() -> io::Result<String> {
    install().map(|install| install.version.clone())
}

/// `$ZOOKEEPER_CLASSPATH` as given; else `$ZK_HOME`'s `conf/`, `lib/*` and `*` (the layout of
/// Apache's binary release); else Debian's jar and an SLF4J binding.
pub(crate) fn find_classpath(env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    if let Some(classpath) = env("ZOOKEEPER_CLASSPATH") {
        return Ok(classpath);
    }
    if let Some(home) = env("ZK_HOME") {
        let home = PathBuf::from(home);
        if !has_server_jar(&home.join("lib")) && !has_server_jar(&home) {
            return Err(format!(
                "ZK_HOME={} holds no zookeeper-<version>.jar in lib/ or at its top; point it at \
                 an unpacked apache-zookeeper-<version>-bin release, or set ZOOKEEPER_CLASSPATH",
                home.display()
            ));
        }
        // `dir/*` is java's own wildcard: every jar in `dir`. conf/ first: it holds the
        // release's logback.xml, which logs to the console (our log file).
        return Ok([
            home.join("conf").display().to_string(),
            home.join("lib").join("*").display().to_string(),
            home.join("*").display().to_string(),
        ]
        .join(":"));
    }
    if Path::new(DEBIAN_JAR).is_file() {
        let mut classpath = DEBIAN_JAR.to_owned();
        if Path::new(DEBIAN_SLF4J_SIMPLE).is_file() {
            classpath.push(':');
            classpath.push_str(DEBIAN_SLF4J_SIMPLE);
        }
        for jar in DEBIAN_NETTY_EXTRA {
            if Path::new(jar).is_file() {
                classpath.push(':');
                classpath.push_str(jar);
            }
        }
        return Ok(classpath);
    }
    Err(format!(
        "no ZooKeeper server: $ZOOKEEPER_CLASSPATH and $ZK_HOME are unset and {DEBIAN_JAR} is \
         missing; install it (apt-get install -y zookeeper) or set ZK_HOME to an unpacked \
         Apache release"
    ))
}

/// Whether `dir` holds the server's jar (`zookeeper-3.8.4.jar`, or Debian's `zookeeper.jar`),
/// not only its sibling artifacts (`zookeeper-jute-...`, `zookeeper-prometheus-...`).
fn has_server_jar(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name().to_string_lossy().into_owned();
        name == "zookeeper.jar"
            || name
                .strip_prefix("zookeeper-")
                .and_then(|rest| rest.strip_suffix(".jar"))
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// `$JAVA_HOME/bin/java`, else `java` from `PATH`.
fn find_java(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
    if let Some(home) = env("JAVA_HOME") {
        let java = Path::new(&home).join("bin").join("java");
        return if java.is_file() {
            Ok(java)
        } else {
            Err(format!("JAVA_HOME={home} holds no bin/java"))
        };
    }
    Ok(PathBuf::from("java"))
}

/// Runs the jar's own version printer: proves that `java` runs and that the classpath holds
/// ZooKeeper, before any server is started with it.
fn probe_version(java: &Path, classpath: &str) -> Result<String, String> {
    let out = bins::run(
        Command::new(java).args([
            "-Xshare:auto",
            "-cp",
            classpath,
            "org.apache.zookeeper.version.VersionInfoMain",
        ]),
        PROBE_TIMEOUT,
    )
    .map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            format!(
                "no `{}` to run ZooKeeper with: install a Java runtime (apt-get install -y \
                 zookeeper brings one) or set JAVA_HOME",
                java.display()
            )
        } else {
            format!("running `{}`: {e}", java.display())
        }
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = parse_version(&text);
    match version {
        Some(version) if out.status.success() => Ok(version),
        _ => Err(format!(
            "the classpath {classpath} holds no runnable ZooKeeper \
             (org.apache.zookeeper.version.VersionInfoMain exited with {}): {}{}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// "Apache ZooKeeper, version 3.8.0 2024-12-29 17:54 UTC" -> "3.8.0" (a release's own build
/// says "3.8.4-9316c2a7a97e1666d8f4593f34dd6fc36ecc436c").
pub(crate) fn parse_version(text: &str) -> Option<String> {
    let after = text.split("version ").nth(1)?;
    let word = after.split_whitespace().next()?;
    let version = word.split('-').next()?.trim_end_matches(',');
    version
        .starts_with(|c: char| c.is_ascii_digit())
        .then(|| version.to_owned())
}
