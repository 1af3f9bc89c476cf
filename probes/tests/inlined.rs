//! DWARF inlined instances: a function that exists only inlined is reported as such, with
//! the exact number of its `DW_TAG_inlined_subroutine` entries. Needs a C compiler.

use std::process::Command;

use sbs_probes::resolve::{match_patterns, Target, DEFAULT_MAX_PROBES};
use sbs_probes::ProbeError;

const PROGRAM: &str = r#"
static inline __attribute__((always_inline)) int twice(int x) { return x * 2; }
static inline __attribute__((always_inline)) int thrice(int x) { return x * 3; }
__attribute__((noinline)) int thrice_out(int x) { return x * 3 + 1; }
__attribute__((noinline)) int a(int x) { return twice(x) + 1; }
__attribute__((noinline)) int b(int x) { return twice(x) + thrice(x); }
int main(int argc, char **argv) { (void)argv; return a(argc) + b(argc) + twice(argc) + thrice_out(argc); }
"#;

#[test]
fn inlined_only_functions_are_named_with_their_instance_count() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("inl.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.path().join("inl");
    match Command::new("cc")
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            eprintln!("skipped: no C compiler `cc` ({e})");
            return;
        }
    }
    let mut target = Target::load(&exe, None).unwrap();

    // Out of line, never inlined: no warning.
    let m = match_patterns(&mut target, &["a".into()], DEFAULT_MAX_PROBES).unwrap();
    assert_eq!(m[0].functions.len(), 1);
    assert_eq!(m[0].inlined.instances, 0);
    assert_eq!(m[0].inlined_warning(), None);

    // Only inlined: an error that says so, with the count (a, b and main: 3).
    let e = match_patterns(&mut target, &["twice".into()], DEFAULT_MAX_PROBES).unwrap_err();
    assert!(matches!(e, ProbeError::NoMatch { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("exists only inlined: 3 instance(s) of twice"),
        "{msg}"
    );

    let e = match_patterns(&mut target, &["thrice".into()], DEFAULT_MAX_PROBES).unwrap_err();
    assert!(
        e.to_string()
            .contains("exists only inlined: 1 instance(s) of thrice"),
        "{e}"
    );
}
