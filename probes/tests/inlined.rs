//! DWARF inlined instances: found with their call sites, their entry points decoded, a
//! separate debug file found through `.gnu_debuglink`, and a file without debug info
//! said to hide them. Needs a C compiler and rustc (skipped with a reason otherwise).

use std::path::{Path, PathBuf};
use std::process::Command;

use sbs_probes::program::Program;
use sbs_probes::resolve::{match_patterns, PatternMatch, DEFAULT_MAX_PROBES};
use sbs_probes::ProbeError;
use sbs_skip::{build, Need};

const PROGRAM: &str = r#"
static volatile int sink;
static inline __attribute__((always_inline)) int twice(int x) { sink = x; return sink * 2; }
static inline __attribute__((always_inline)) int thrice(int x) { return x * 3; }
__attribute__((noinline)) int thrice_out(int x) { return x * 3 + 1; }
int both(int x) { sink = x + 1; return sink; }
__attribute__((noinline)) int a(int x) { return twice(x) + 1; }
__attribute__((noinline)) int b(int x) { return twice(x) + thrice(x); }
int main(int argc, char **argv) { (void)argv; return a(argc) + b(argc) + twice(argc) + thrice_out(argc) + both(argc); }
"#;

fn build_c(dir: &Path, flags: &[&str]) -> Option<PathBuf> {
    let src = dir.join("inl.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join("inl");
    build!(
        Need::Gcc,
        Command::new("cc").args(flags).arg("-o").arg(&exe).arg(&src)
    )?;
    Some(exe)
}

fn one(target: &mut Program, pattern: &str) -> PatternMatch {
    match_patterns(target, &[pattern.into()], DEFAULT_MAX_PROBES)
        .unwrap()
        .remove(0)
}

#[test]
fn inlined_only_functions_are_probed_at_their_entries() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_c(dir.path(), &["-O2", "-g"]) else {
        return;
    };
    let mut target = Program::load(&exe, None).unwrap();

    // Out of line, never inlined: no inlined site, no warning.
    let m = one(&mut target, "a");
    assert_eq!(m.functions.len(), 1);
    assert!(m.sites.is_empty());
    assert_eq!(m.inlined_warnings(), Vec::<String>::new());

    // Only inlined: a, b and main each hold one instance of twice.
    let m = one(&mut target, "twice");
    assert!(m.functions.is_empty());
    let mut callers: Vec<&str> = m.sites.iter().map(|s| s.caller.as_str()).collect();
    callers.sort_unstable();
    assert_eq!(callers, ["a", "b", "main"], "{:#?}", m.sites);
    for s in &m.sites {
        assert!(!s.points.is_empty());
        let site = s.call_site.as_deref().unwrap_or_default();
        assert!(
            site.ends_with("inl.c:7") || site.ends_with("inl.c:8") || site.ends_with("inl.c:9"),
            "{site}"
        );
    }
    assert_eq!(one(&mut target, "thrice").sites.len(), 1);

    // Exported and inlined into main: the out-of-line copy and the inlined one, apart.
    let m = one(&mut target, "both");
    assert_eq!(m.functions.len(), 1);
    assert_eq!(m.sites.len(), 1, "{:#?}", m.sites);
    assert_eq!(m.sites[0].caller, "main");
}

#[test]
fn separate_debug_file_is_found_and_its_absence_reported() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_c(dir.path(), &["-O2", "-g"]) else {
        return;
    };
    let debug = dir.path().join("inl.debug");
    let steps: [&[&str]; 3] = [
        &["--only-keep-debug", "inl", "inl.debug"],
        &["--strip-debug", "inl"],
        &["--add-gnu-debuglink=inl.debug", "inl"],
    ];
    for args in steps {
        if build!(
            Need::Binutils,
            Command::new("objcopy").args(args).current_dir(dir.path())
        )
        .is_none()
        {
            return;
        }
    }
    let mut target = Program::load(&exe, None).unwrap();
    assert_eq!(target.debug_file(0), Some(debug.canonicalize().unwrap()));
    assert_eq!(one(&mut target, "twice").sites.len(), 3);

    // Without the debug file: no inlined instance can be seen, and the error says why.
    std::fs::remove_file(&debug).unwrap();
    let mut target = Program::load(&exe, None).unwrap();
    assert!(!target.has_debug_info(0));
    let e = match_patterns(&mut target, &["twice".into()], DEFAULT_MAX_PROBES).unwrap_err();
    assert!(matches!(e, ProbeError::NoMatch { .. }), "{e}");
    assert!(e.to_string().contains("has no debug info"), "{e}");
    let m = one(&mut target, "a");
    assert!(
        m.inlined_warnings()
            .iter()
            .any(|w| w.contains("calls inlined into it cannot be seen")),
        "{:?}",
        m.inlined_warnings()
    );
}

/// The release fixture `tests/fixtures/rust/inlined.rs`, built with rustc at opt-level 3.
pub fn build_rust_fixture(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/rust/inlined.rs");
    let exe = dir.join("inlined");
    build!(
        Need::Rustc,
        sbs_skip::rustc_release().arg("-o").arg(&exe).arg(src)
    )?;
    Some(exe)
}

#[test]
fn release_rust_fixture_sites_have_their_call_lines() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_rust_fixture(dir.path()) else {
        return;
    };
    let mut target = Program::load(&exe, None).unwrap();
    let lines = |m: &PatternMatch| {
        let mut l: Vec<String> = m
            .sites
            .iter()
            .filter_map(|s| s.call_site.as_deref())
            .filter(|s| s.contains("fixtures/rust/inlined.rs:"))
            .map(|s| s.rsplit(':').next().unwrap_or_default().to_string())
            .collect();
        l.sort_unstable();
        l
    };
    let push = one(&mut target, "Vec::push");
    assert!(
        push.functions.is_empty(),
        "no out-of-line Vec::push at opt-level 3"
    );
    assert_eq!(lines(&push), ["19", "26", "28", "37", "40", "57"]);
    // std holds instances that were optimised away: counted in a warning, not probed.
    assert!(
        push.not_counted
            .iter()
            .any(|(why, _)| why.contains("no code")),
        "{:?}",
        push.not_counted
    );
    let bump = one(&mut target, "bump");
    assert_eq!(lines(&bump), ["61", "64", "66"]);
    for s in &bump.sites {
        // Each bump site is a loop body or straight-line code: a single entry.
        assert_eq!(s.points.len(), 1, "{s:#?}");
        assert_eq!(s.caller, "inlined::main");
        assert_eq!(s.uncertain, None);
    }
}
