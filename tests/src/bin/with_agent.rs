//! Benchmark helper: `with_agent COMMAND [ARGS...]` runs the command once with the
//! embedded allocation agent loaded (the same library and report file `--alloc` uses),
//! prints the summed totals to stderr as one line, and exits with the command's code.
//! Used by `benches/alloc/run.sh` to time a run under the agent next to heaptrack and DHAT.
use std::process::Command;
use std::time::Duration;

use sbs_profile::run::instruments::alloc::run_with_agent;

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
                "with_agent: allocs={} frees={} reallocs={} bytes={} peak={} peak_bound={} live_at_exit={} images={}",
                t.allocs,
                t.frees,
                t.reallocs,
                t.bytes,
                t.peak,
                t.peak_bound,
                t.live_at_exit,
                t.images
            );
            std::process::exit(status.code().unwrap_or(2));
        }
        Err(e) => {
            eprintln!("with_agent: {e:#}");
            std::process::exit(2);
        }
    }
}
