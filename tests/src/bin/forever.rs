//! Fixture: never ends. With `forever PIDFILE`, forks a child that also never ends and
//! writes the child's pid to PIDFILE, so a test can check the whole group was killed.
fn main() {
    if let Some(pidfile) = std::env::args().nth(1) {
        // SAFETY: single-threaded at this point; the child only sleeps.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        std::fs::write(pidfile, pid.to_string()).expect("write pid file");
    }
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
