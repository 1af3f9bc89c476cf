//! Test helper: run `sbs-profile` against fixture programs and explain failures.
#![allow(dead_code)]

pub mod bench_files;
pub mod registry;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

use sbs_skip::{skip, Need};

/// Path of a fixture binary of this package.
#[macro_export]
macro_rules! fixture {
    ($name:literal) => {
        env!(concat!("CARGO_BIN_EXE_", $name))
    };
}

/// Whether the tests run as root (uprobes and some perf events need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the kernel offers tracefs (mounted or not: sbs-profile mounts it as root).
pub fn kernel_has_tracefs() -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|list| {
        list.lines()
            .any(|l| l.split_whitespace().last() == Some("tracefs"))
    })
}

/// Skip a test that needs uprobes where they cannot be used (not root, or a kernel
/// without tracefs); `true` when the caller must return. `what` completes
/// "... need root".
pub fn skip_without_uprobes(what: &str) -> bool {
    if !is_root() {
        skip!(Need::Root, "{what} need root (CAP_SYS_ADMIN)");
        return true;
    }
    if !kernel_has_tracefs() {
        skip!(
            Need::Tracefs,
            "{what} need tracefs, absent from /proc/filesystems"
        );
        return true;
    }
    false
}

/// The `sbs-profile` binary, built by `cargo test --workspace` into the same target dir.
pub fn sbs_profile() -> PathBuf {
    let dir = PathBuf::from(fixture!("exit_with"));
    let bin = dir.parent().expect("target dir").join("sbs-profile");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds sbs-profile) or \
         `cargo build -p sbs-profile` first",
        bin.display()
    );
    bin
}

/// A finished `sbs-profile` invocation.
pub struct Finished {
    pub args: Vec<String>,
    pub output: Output,
}

impl Finished {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    fn explain(&self) -> String {
        format!(
            "\ncommand: sbs-profile {}\nstatus: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.args.join(" "),
            self.output.status,
            self.stdout(),
            self.stderr()
        )
    }

    /// Assert exit code 0.
    pub fn success(self) -> Self {
        assert_eq!(self.code(), Some(0), "expected success{}", self.explain());
        self
    }

    /// Assert this exit code and a stderr containing `needle`; stderr must be one line.
    pub fn fails_with(self, code: i32, needle: &str) -> Self {
        assert_eq!(
            self.code(),
            Some(code),
            "expected exit code {code}{}",
            self.explain()
        );
        let err = self.stderr();
        assert!(
            err.contains(needle),
            "stderr lacks {needle:?}{}",
            self.explain()
        );
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "expected a one-line error{}",
            self.explain()
        );
        self
    }

    /// Parse stdout as the JSON report.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.output.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON: {e}{}", self.explain()))
    }

    /// Assert with context.
    pub fn check(&self, cond: bool, what: &str) {
        assert!(cond, "{what}{}", self.explain());
    }
}

/// Run `sbs-profile` with these arguments.
pub fn sbs<I, S>(args: I) -> Finished
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    sbs_env(args, &[])
}

/// [`sbs`] with variables added to sbs-profile's own environment.
pub fn sbs_env<I, S>(args: I, env: &[(&str, &OsStr)]) -> Finished
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args
        .into_iter()
        .map(|a| a.as_ref().to_os_string())
        .collect();
    let output = Command::new(sbs_profile())
        .args(&args)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .output()
        .expect("spawn sbs-profile");
    Finished {
        args: args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        output,
    }
}

/// The metric `id` of the first benchmark in a JSON report.
pub fn metric<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["benchmarks"][0]["metrics"]
        .as_array()
        .expect("metrics array")
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no metric {id} in {report:#}"))
}

/// Raw samples of a metric as f64.
pub fn samples(metric: &serde_json::Value) -> Vec<f64> {
    metric["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|v| v.as_f64().expect("number"))
        .collect()
}

/// A tmpfs of a few KiB mounted on a directory of its own, filled to the last byte, and
/// unmounted when dropped: a full disk for the tests of what a failed write loses.
pub struct FullDisk {
    pub dir: PathBuf,
    // Dropped after the unmount.
    _parent: tempfile::TempDir,
}

impl FullDisk {
    /// Mount and fill it; `None` (after a skip) where this cannot mount (not root).
    pub fn mount() -> Option<FullDisk> {
        if !is_root() {
            skip!(
                Need::Root,
                "mounting a small tmpfs as a full disk needs root"
            );
            return None;
        }
        let parent = tempfile::tempdir().expect("temporary directory");
        let dir = parent.path().join("full");
        std::fs::create_dir(&dir).expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "sbs-full-disk"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount -t tmpfs failed as root: {status}");
        let disk = FullDisk {
            dir,
            _parent: parent,
        };
        let mut filler = std::fs::File::create(disk.dir.join("filler")).expect("filler file");
        let block = [0u8; 4096];
        loop {
            use std::io::Write;
            match filler.write_all(&block) {
                Ok(()) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        Some(disk)
    }

    /// The names in it other than the filler.
    pub fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .expect("list the tmpfs")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n != "filler")
            .collect()
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// A directory in which nothing can be created, root included: as root, a read-only
/// tmpfs mounted on it (unmounted when dropped); otherwise a directory of mode 0555
/// (root would pass that one by).
pub struct ReadOnlyDir {
    pub dir: PathBuf,
    mounted: bool,
    // Dropped after the unmount.
    _parent: tempfile::TempDir,
}

impl ReadOnlyDir {
    pub fn new() -> ReadOnlyDir {
        let parent = tempfile::tempdir().expect("temporary directory");
        let dir = parent.path().join("read-only");
        std::fs::create_dir(&dir).expect("the read-only directory");
        let mounted = is_root();
        if mounted {
            let status = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "ro,size=64k", "sbs-read-only"])
                .arg(&dir)
                .status()
                .expect("run mount");
            assert!(
                status.success(),
                "mount -t tmpfs -o ro failed as root: {status}"
            );
        } else {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555))
                .expect("chmod 0555");
        }
        ReadOnlyDir {
            dir,
            mounted,
            _parent: parent,
        }
    }
}

impl Drop for ReadOnlyDir {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o755));
        }
    }
}

/// Pids of the live children of `pid` (from `/proc/*/stat`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            let mut rest = stat.rsplit_once(") ").map_or("", |(_, r)| r).split(' ');
            let (state, ppid) = (rest.next(), rest.next());
            state.is_some_and(|s| s != "Z") && ppid == Some(&pid.to_string())
        })
        .collect()
}

/// Pids of the live descendants of `pid`, children first.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut all = children_of(pid);
    let mut i = 0;
    while i < all.len() {
        let more = children_of(all[i]);
        all.extend(more);
        i += 1;
    }
    all
}

/// Whether valgrind runs here.
pub fn valgrind_installed() -> bool {
    std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether `pid` is gone (or a zombie waiting to be reaped).
pub fn is_gone(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .is_none_or(|(_, rest)| rest.starts_with('Z'))
}

/// Wait until `collector` runs `program` (exec'd, not just forked) in a descendant (the
/// launcher's run parent's child), and return its pid.
pub fn wait_for_child_running(collector: u32, program: &str) -> u32 {
    let start = std::time::Instant::now();
    loop {
        for child in descendants(collector) {
            let exe = std::fs::read_link(format!("/proc/{child}/exe")).unwrap_or_default();
            if exe == std::path::Path::new(program) {
                return child;
            }
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "sbs-profile (pid {collector}) never started {program}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Compile `fixtures/c/NAME.c` with `gcc -O2 -g` and `extra` flags into `dir`; `None`
/// (a recorded skip) when gcc is missing.
pub fn gcc_fixture(dir: &std::path::Path, name: &str, extra: &[&str]) -> Option<PathBuf> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/c/{name}.c"));
    let exe = dir.join(name);
    sbs_skip::build!(
        Need::Gcc,
        Command::new("gcc")
            .args(["-O2", "-g", "-Wall"])
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .current_dir(dir)
    )?;
    Some(exe)
}

/// Builds of one C fixture, `v0`, `v1`, ... in a temporary directory kept alive with
/// them: the two sides of a `pinpoint`.
pub struct Variants(tempfile::TempDir);

impl Variants {
    /// The directory of the builds (for other files of a test).
    pub fn dir(&self) -> &std::path::Path {
        self.0.path()
    }

    /// The build of variant `variant`.
    pub fn exe(&self, variant: u32) -> PathBuf {
        self.0.path().join(format!("v{variant}"))
    }

    /// `sbs-profile pinpoint --previous v<previous> --format json EXTRA -- v<current> ARGS`.
    pub fn pinpoint(&self, previous: u32, current: u32, extra: &[&str], args: &[&str]) -> Finished {
        let mut argv: Vec<String> = vec![
            "pinpoint".into(),
            "--previous".into(),
            self.exe(previous).display().to_string(),
            "--format".into(),
            "json".into(),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        argv.push("--".into());
        argv.push(self.exe(current).display().to_string());
        argv.extend(args.iter().map(|s| s.to_string()));
        sbs(&argv)
    }
}

/// The functions of a pinpoint report's chain, from the inspected one down.
pub fn chain(run: &Finished) -> Vec<String> {
    let v = run.json();
    v["pinpoint"]["chain"]
        .as_array()
        .unwrap_or_else(|| panic!("no chain in {v}"))
        .iter()
        .map(|l| l["function"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Compile `fixtures/c/NAME.c` once per variant `0..variants` (`-DVARIANT=v`, `gcc -O2
/// -g`) into `v0`, `v1`, ... of a new temporary directory; `None` (a recorded skip) when
/// gcc is missing.
pub fn gcc_variants(name: &str, variants: u32) -> Option<Variants> {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/c/{name}.c"));
    for variant in 0..variants {
        sbs_skip::build!(
            Need::Gcc,
            Command::new("gcc")
                .args(["-O2", "-g", "-Wall"])
                .arg(format!("-DVARIANT={variant}"))
                .arg("-o")
                .arg(dir.path().join(format!("v{variant}")))
                .arg(&src)
        )?;
    }
    Some(Variants(dir))
}

/// The real executable of the `python3` in `PATH` (`sys.executable`: not a launcher such as
/// a pyenv shim, which would run several programs of its own first), or `None` (a
/// recorded skip) when there is none.
pub fn python3() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let exe = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if exe.is_file() {
                return Some(exe);
            }
            skip!(
                Need::Python3,
                "python3 names no executable of its own ({})",
                exe.display()
            );
            None
        }
        Ok(out) => {
            skip!(
                Need::Python3,
                "python3 does not run: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            None
        }
        Err(e) => {
            skip!(
                Need::Python3,
                "python3 is not installed ({e}; apt-get install python3)"
            );
            None
        }
    }
}

/// A python 3.11.7 built from source with -O3 and DWARF (pyenv's, under `$PYENV_ROOT`,
/// default `/root/.pyenv`): a real -O3 C library. `None` (a recorded skip) when there is
/// none.
pub fn python_o3() -> Option<PathBuf> {
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root/.pyenv"));
    let exe = root.join("versions/3.11.7/bin/python3.11");
    let lib = root.join("versions/3.11.7/lib/libpython3.11.so.1.0");
    let found =
        exe.exists() && std::fs::read(&lib).is_ok_and(|data| sbs_probes::dwarf::has_dwarf(&data));
    if !found {
        skip!(
            Need::Pyenv311,
            "no python 3.11.7 built from source with debug info under $PYENV_ROOT (/root/.pyenv)"
        );
    }
    found.then_some(exe)
}

/// The path of `fixtures/python/NAME`.
pub fn python_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/python/{name}"))
}

/// The child stderrs that `fixtures/python/close_fds.py` appended to `file`, one per run.
pub fn child_stderrs(file: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Whether this machine has a directory every user can load a library from (`/dev/shm`
/// or the temporary directory: searchable by others all the way down, not mounted
/// `noexec`), where sbs-profile puts a run's preload libraries; a recorded skip when not.
pub fn shared_dir_available() -> bool {
    let problems: Vec<String> = [PathBuf::from("/dev/shm"), std::env::temp_dir()]
        .iter()
        .filter_map(|d| shared_dir_problem(d))
        .collect();
    if problems.len() < 2 {
        return true;
    }
    skip!(
        Need::SharedDir,
        "no directory every user can load a library from: {}",
        problems.join("; ")
    );
    false
}

fn shared_dir_problem(dir: &std::path::Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let dir = match dir.canonicalize() {
        Ok(d) => d,
        Err(e) => return Some(format!("{}: {e}", dir.display())),
    };
    for component in dir.ancestors() {
        let mode = component
            .metadata()
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        if mode & 0o001 == 0 {
            return Some(format!("{}: not searchable by others", component.display()));
        }
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs with a NUL-terminated path and a zeroed struct it fills in.
    let noexec = unsafe {
        let mut fs: libc::statvfs = std::mem::zeroed();
        libc::statvfs(c.as_ptr(), &mut fs) == 0 && fs.f_flag & libc::ST_NOEXEC != 0
    };
    noexec.then(|| format!("{}: mounted noexec", dir.display()))
}

/// The path of the preload library in a run's `LD_PRELOAD` (`printenv` prints it).
pub fn preload_path() -> PathBuf {
    let out = Command::new(sbs_profile())
        .args(["--runs", "1", "--warmup", "0", "--alloc", "--show-output"])
        .args([
            "-f",
            "json",
            "-o",
            "/dev/null",
            "--",
            "printenv",
            "LD_PRELOAD",
        ])
        .output()
        .expect("run sbs-profile");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(stdout.split_whitespace().next().unwrap_or_default())
}
