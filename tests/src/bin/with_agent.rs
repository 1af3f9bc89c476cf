//! Benchmark helper: `with_agent COMMAND [ARGS...]` runs the command once with the
//! embedded allocation agent loaded (the same library and report file `--alloc` uses),
//! prints the summed totals to stderr as one line, and exits with the command's code.
//! Used by `benches/alloc/run.sh` to time a run under the agent next to heaptrack and DHAT.
//! The line ends with the program's own CPU time and this launcher's (microseconds, user +
//! system), so that a benchmark can tell the agent's cost from the launch's: under
//! `sbs-profile` the collector is already running, and bare runs are launched by it too.
use std::process::Command;
use std::time::Duration;

use sbs_tests::run_with_agent;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(program) = args.first() else {
        eprintln!("usage: with_agent COMMAND [ARGS...]");
        std::process::exit(2);
    };
    let mut command = Command::new(program);
    command.args(&args[1..]);
    match run_with_agent(command, Duration::from_secs(3600)) {
        Ok((status, reports)) => {
            let t = reports.totals();
            eprintln!(
                "with_agent: allocs={} frees={} reallocs={} bytes={} peak={} peak_bound={} live_at_exit={} images={} program_cpu_us={} launcher_cpu_us={}",
                t.allocs,
                t.frees,
                t.reallocs,
                t.bytes,
                t.peak,
                t.peak_bound,
                t.live_at_exit,
                t.images,
                cpu_us(libc::RUSAGE_CHILDREN),
                cpu_us(libc::RUSAGE_SELF)
            );
            std::process::exit(status.code().unwrap_or(2));
        }
        Err(e) => {
            eprintln!("with_agent: {e:#}");
            std::process::exit(2);
        }
    }
}

/// User + system CPU time of `who`, in microseconds (0 if getrusage fails).
fn cpu_us(who: libc::c_int) -> i64 {
    // SAFETY: all-zero is a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a live, writable rusage.
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    us(usage.ru_utime) + us(usage.ru_stime)
}
