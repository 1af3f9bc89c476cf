//! End-to-end count of a C function through tracefs uprobes: main thread, threads and a
//! forked child, checked against the known number of calls. Needs root and a C compiler.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sbs_probes::hits::RunCounters;
use sbs_probes::program::Program;
use sbs_probes::resolve::{match_patterns, DEFAULT_MAX_PROBES};
use sbs_probes::tracefs::{ProbeSet, ProbeTarget, Tracefs};
use sbs_skip::{build, skip, Need};

const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long sink;
void *volatile keep;
__attribute__((noinline)) void counted(long x) { sink += x; __asm__ volatile(""); }
__attribute__((noinline)) void counted_more(long x) { sink -= x; __asm__ volatile(""); }
static long n;
static void *worker(void *arg) { for (long i = 0; i < n; i++) counted(i); return arg; }
int main(int argc, char **argv) {
    n = atol(argv[1]);
    long threads = atol(argv[2]);
    pthread_t t[64];
    for (long i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, 0);
    for (long i = 0; i < threads; i++) pthread_join(t[i], 0);
    for (long i = 0; i < n; i++) counted(i);
    pid_t child = fork();
    if (child == 0) { for (long i = 0; i < n; i++) counted(i); _exit(0); }
    waitpid(child, 0, 0);
    counted_more(1);
    for (long i = 0; i < n; i++) { keep = malloc(16 + i % 7); free(keep); }
    return 0;
}
"#;

/// What this machine lacks for these tests, if anything.
fn skip_reason() -> Option<(Need, &'static str)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some((Need::Root, "uprobes need root"));
    }
    let tracefs = std::fs::read_to_string("/proc/filesystems").is_ok_and(|list| {
        list.lines()
            .any(|l| l.split_whitespace().last() == Some("tracefs"))
    });
    if !tracefs {
        return Some((
            Need::Tracefs,
            "uprobes need tracefs, absent from /proc/filesystems",
        ));
    }
    if Command::new("cc").arg("--version").output().is_err() {
        return Some((Need::Gcc, "no C compiler `cc`"));
    }
    None
}

fn build(dir: &Path) -> PathBuf {
    let src = dir.join("counted.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join("counted");
    // The caller checked that `cc` runs.
    build!(
        Need::Gcc,
        Command::new("cc")
            .args(["-O2", "-g", "-pthread", "-o"])
            .arg(&exe)
            .arg(&src)
    )
    .expect("cc was found before");
    exe
}

/// Run `exe args` held behind a shell `read` so counters open before its exec.
fn count_run(set: &ProbeSet, exe: &Path, args: &[&str]) -> Vec<u64> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg("read _ && exec \"$0\" \"$@\"")
        .arg(exe)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut counters = RunCounters::open(set, child.id() as i32).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    counters.read().unwrap()
}

#[test]
fn counts_are_exact_across_threads_and_fork() {
    if let Some((need, why)) = skip_reason() {
        skip!(need, "{why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let mut target = Program::load(&exe, None).unwrap();
    let m = match_patterns(
        &mut target,
        &["counted".into(), "counted_more".into(), "malloc".into()],
        DEFAULT_MAX_PROBES,
    )
    .unwrap();
    assert_eq!(m[0].functions.len(), 1, "{:?}", m[0].functions);
    assert_eq!(m[1].functions.len(), 1);
    let targets: Vec<ProbeTarget> = m
        .iter()
        .flat_map(|pm| {
            pm.functions.iter().map(|f| ProbeTarget {
                path: f.path.clone(),
                offset: f.probe,
                what: f.label.clone(),
            })
        })
        .collect();
    let tracefs = Tracefs::open_or_mount().unwrap();
    tracefs.clean_stale().unwrap();
    let set = ProbeSet::define(&tracefs, &targets, &|| false).unwrap();
    let group = set.group().to_string();
    for (n, threads) in [(1000u64, 3u64), (2500, 0), (7, 5)] {
        let counts = count_run(&set, &exe, &[&n.to_string(), &threads.to_string()]);
        assert_eq!(counts[0], n * (threads + 2), "n={n} threads={threads}");
        assert_eq!(counts[1], 1);
        // pthread_create allocates each thread's stack metadata with malloc (calloc): at
        // least the program's own start-up allocations are seen.
        // glibc's malloc, found through DT_NEEDED: the program's own n calls, plus any
        // made by glibc itself (thread creation).
        assert!(
            counts[2] >= n && counts[2] <= n + 16 * (threads + 1),
            "{counts:?}"
        );
    }
    drop(set);
    let left: Vec<_> = tracefs
        .our_events()
        .unwrap()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .collect();
    assert!(left.is_empty(), "definitions left behind: {left:?}");
}
