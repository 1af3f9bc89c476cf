//! The exec watch on real processes: it counts every exec of a child and its
//! descendants, nothing else, and says when its rings may have dropped records.

use std::io::Write;
use std::process::{Command, Stdio};

use sbs_probes::execs::{check, ExecWatch};
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
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("read _; {script}"))
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let mut watch = ExecWatch::open(child.id() as i32).expect("open the exec watch");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("release the child");
    drop(stdin);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{script}: {status}");
    let count = watch.count();
    (count.execs, count.saturated)
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
    // one CPU that renames itself 5000 times writes 160 KB into that CPU's ring.
    std::thread::spawn(|| {
        let mut watch = ExecWatch::open(0).expect("open the exec watch on this thread");
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
