//! Fixture: dies from a signal: `crash segv` (default) or `crash abort`.
fn main() {
    let how = std::env::args().nth(1).unwrap_or_else(|| "segv".into());
    let sig = if how == "abort" {
        libc::SIGABRT
    } else {
        libc::SIGSEGV
    };
    // SAFETY: raise just delivers a signal to this process; the default action ends it.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    unreachable!("signal {sig} did not end the process");
}
