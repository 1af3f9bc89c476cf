//! The exec watch on real processes: it counts every exec of a child and its
//! descendants, nothing else, and says when its rings may have dropped records.

use std::io::Write;
use std::process::{Command, Stdio};

use sbs_probes::execs::{check, ExecCount, ExecWatch};
use sbs_skip::{skip, Need};

/// Skip (with the reason) where the kernel refuses the watch to us.
fn unavailable() -> bool {
    match check() {
        Ok(()) => false,
        Err(e) => {
            skip!(Need::PerfEvents, "{e}; {}", e.fix());
            true
        }
    }
}

/// Run `script` in `sh`, held at a `read` until the watch is open on it; the number of
/// execs the watch saw, and whether it may have missed some.
fn execs_of(script: &str) -> (u64, bool) {
    let count = watched(script, ExecWatch::open);
    (count.execs, count.saturated)
}

/// Run `script` in `sh` under the watch `open` makes.
fn watched(
    script: &str,
    open: fn(i32) -> Result<ExecWatch, sbs_probes::execs::ExecWatchError>,
) -> ExecCount {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("read _; {script}"))
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let mut watch = open(child.id() as i32).expect("open the exec watch");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("release the child");
    drop(stdin);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{script}: {status}");
    watch.count()
}

/// A program exec'd by a descendant that is setuid to another user: the kernel ends the
/// process's perf events at that exec. The following watch names it, and only it: the
/// same program without the setuid bit, static and dynamic programs, scripts, and
/// programs that exit at once are followed.
#[test]
fn an_exec_that_changes_credentials_is_named_and_no_other() {
    if unavailable() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip!(
            Need::Root,
            "making a program setuid to another user needs root"
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let copy = |name: &str, mode: u32| {
        let path = dir.path().join(name);
        std::fs::copy("/usr/bin/true", &path).expect("copy /usr/bin/true");
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path.display().to_string()
    };
    let setuid = copy("setuid-true", 0o4755);
    let plain = copy("plain-true", 0o755);
    let script = dir.path().join("script");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write the script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let script = script.display();

    let seen = watched(
        &format!("{plain}; (exec {plain}); {script}; /bin/true; {setuid}; {plain}"),
        ExecWatch::following,
    );
    assert_eq!(seen.execs, 6, "{seen:?}");
    assert!(!seen.saturated, "{seen:?}");
    assert_eq!(seen.unfollowed, vec!["setuid-true".to_string()], "{seen:?}");

    // Without the setuid bit it is followed; the plain watch never looks.
    let seen = watched(&format!("{plain}; {plain}"), ExecWatch::following);
    assert_eq!((seen.execs, seen.unfollowed.len()), (2, 0), "{seen:?}");
    let seen = watched(&setuid, ExecWatch::open);
    assert_eq!((seen.execs, seen.unfollowed.len()), (1, 0), "{seen:?}");
}

#[test]
fn every_exec_of_the_child_and_its_descendants_counts_once() {
    if unavailable() {
        return;
    }
    // No exec: builtins only.
    assert_eq!(execs_of("true"), (0, false));
    // One exec by the child itself, then two programs run by the new shell (forked and
    // exec'd, the last one possibly exec'd in place): three in all.
    assert_eq!(execs_of("exec sh -c '/bin/true; /bin/true'"), (3, false));
    // A grandchild in a subshell, and an exec that fails (not counted).
    assert_eq!(
        execs_of("(/bin/true); /nonexistent/program 2>/dev/null; :"),
        (1, false)
    );
}

#[test]
fn a_ring_that_fills_up_is_reported() {
    if unavailable() {
        return;
    }
    // Name changes write comm records too (without the exec flag). A thread pinned to
    // one CPU that renames itself 5000 times writes 160 KB into that CPU's ring, read
    // only at the end here (a watch's own thread would empty it as it fills).
    std::thread::spawn(|| {
        let mut watch = ExecWatch::read_at_end(0).expect("open the exec watch on this thread");
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: the CPU number is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(current_cpu(), &mut set) };
        // SAFETY: `set` is a valid cpu_set_t of the size given; 0 is this thread.
        let pinned =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        assert_eq!(pinned, 0, "{}", std::io::Error::last_os_error());
        for i in 0..5000 {
            let name = std::ffi::CString::new(format!("rename{i}")).expect("no NUL");
            // SAFETY: PR_SET_NAME reads a NUL-terminated string that outlives the call.
            unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
        }
        let count = watch.count();
        assert_eq!(count.execs, 0);
        assert!(count.saturated, "{count:?}");
    })
    .join()
    .expect("renaming thread");
}

fn current_cpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).expect("sched_getcpu")
}
