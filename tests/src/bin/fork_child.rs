//! Fixture: forks a child that exits with code 0 after a short pause, waits for it, and
//! exits with the child's exit code (`fork_child CODE` makes the child exit with CODE).
fn main() {
    let code: i32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    // SAFETY: the process is single-threaded; the child only sleeps and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        // SAFETY: _exit ends the child without running the parent's handlers twice.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child into a live local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    std::process::exit(libc::WEXITSTATUS(status));
}
