//! The stack sampler (`sbs_probes::sample` + `sbs_probes::unwind`) on real children with a
//! known call chain: `fixtures/c/timepin.c` (main -> outer -> middle -> walk) built with
//! and without frame pointers, and the Rust release fixture `fixtures/rust/pinpoint`
//! (main -> outer -> middle -> deep), which has no frame pointers and unwinds through its
//! CFI. Needs perf events and gcc (rustc for the Rust fixture); skipped with a printed
//! reason without them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sbs_probes::elf::Image;
use sbs_probes::sample::{SampleConfig, SampleError, Sampling};
use sbs_probes::unwind::{unwind, Unwound};
use sbs_skip::{skip, Need};

/// Run `exe` under the sampler: a shell waits for a line on its stdin, then execs the
/// program, so the events (opened on the shell, enabled on exec) cover the program from
/// its first instruction.
fn sample(exe: &Path, args: &[&str]) -> Result<Unwound, SampleError> {
    let mut child = Command::new("sh")
        .args(["-c", "read _ && exec \"$0\" \"$@\""])
        .arg(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start sh");
    let sampling = Sampling::start(child.id() as i32, SampleConfig::default());
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"go\n");
    }
    let status = child.wait().expect("wait");
    let sampling = sampling?;
    assert!(status.success(), "{} failed: {status}", exe.display());
    let recorded = sampling.finish();
    assert_eq!(recorded.lost, 0, "samples lost");
    Ok(unwind(&recorded))
}

/// For the samples whose innermost frame in `exe` is in `leaf`, the names of the
/// program's functions on the stack, innermost first.
fn chains_through(unwound: &Unwound, exe: &Path, leaf: &str) -> Vec<Vec<String>> {
    let image = Image::load(exe).expect("load");
    let wanted = exe.canonicalize().expect("exe");
    let ours: Vec<bool> = unwound
        .objects
        .iter()
        .map(|o| o.canonicalize().is_ok_and(|p| p == wanted))
        .collect();
    assert!(
        ours.contains(&true),
        "the program is not among {:?}",
        unwound.objects
    );
    let name = |a: u64| {
        image
            .function_at(a)
            .map(|f| sbs_probes::demangle::demangle(&f.name).label)
    };
    unwound
        .stacks
        .iter()
        .filter_map(|s| {
            let names: Vec<String> = s
                .frames
                .iter()
                .flatten()
                .filter(|f| ours[f.object])
                .filter_map(|f| name(f.address))
                .collect();
            (names.first().map(String::as_str) == Some(leaf)).then_some(names)
        })
        .collect()
}

/// Check that nearly every sample in `leaf` unwinds through `expected` (innermost
/// first) to its root.
fn assert_chain(unwound: &Unwound, exe: &Path, expected: &[&str]) {
    let chains = chains_through(unwound, exe, expected[0]);
    assert!(
        chains.len() >= 20,
        "only {} samples in {} ({} in all)",
        chains.len(),
        expected[0],
        unwound.stacks.len()
    );
    let whole = chains
        .iter()
        .filter(|c| c.len() >= expected.len() && c[..expected.len()] == *expected)
        .count();
    assert!(
        whole * 100 >= chains.len() * 95,
        "{whole} of {} samples in {} show {expected:?}; e.g. {:?}",
        chains.len(),
        expected[0],
        chains.iter().find(|c| c[..] != *expected)
    );
    let incomplete = unwound.incomplete();
    assert!(
        incomplete * 100 <= unwound.stacks.len() * 5,
        "{incomplete} of {} samples not unwound to their root",
        unwound.stacks.len()
    );
}

fn build_c(dir: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/timepin.c");
    let exe = dir.join(name);
    sbs_skip::build!(
        Need::Gcc,
        Command::new("gcc")
            .args(["-O2", "-g", "-DVARIANT=1"])
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
    )?;
    Some(exe)
}

fn skip_without_sampling(result: Result<Unwound, SampleError>) -> Option<Unwound> {
    match result {
        Ok(u) => Some(u),
        Err(e) => {
            skip!(Need::PerfEvents, "cannot sample: {e}");
            None
        }
    }
}

#[test]
fn c_stacks_unwind_with_and_without_frame_pointers() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, flags) in [
        ("fp", ["-fno-omit-frame-pointer"]),
        ("nofp", ["-fomit-frame-pointer"]),
    ] {
        let Some(exe) = build_c(dir.path(), name, &flags) else {
            return;
        };
        let Some(unwound) = skip_without_sampling(sample(&exe, &[])) else {
            return;
        };
        assert_chain(&unwound, &exe, &["walk", "middle", "outer", "main"]);
        // The other branch of main: steady -> spin.
        let spin = chains_through(&unwound, &exe, "spin");
        assert!(
            spin.iter()
                .any(|c| c.starts_with(&["spin", "steady", "main"].map(String::from))),
            "{name}: {spin:?}"
        );
    }
}

#[test]
fn a_rust_release_build_without_frame_pointers_unwinds_through_cfi() {
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust/pinpoint/Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let Some(()) = sbs_skip::build!(
        Need::Rustc,
        Command::new(cargo)
            .args([
                "build",
                "--release",
                "--quiet",
                "--offline",
                "--features",
                "slow,repeat",
                "--manifest-path"
            ])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(dir.path())
    ) else {
        return;
    };
    let exe = dir.path().join("release/pinpoint-fixture");
    // No frame pointers: deep's code never sets up rbp as a frame pointer.
    let image = Image::load(&exe).expect("load");
    let deep = image
        .functions
        .iter()
        .find(|f| f.name.contains("pinpoint_fixture4deep"))
        .expect("deep");
    let code = image.code_of(deep).expect("deep's code");
    assert!(
        !code.windows(3).any(|w| w == [0x48, 0x89, 0xe5]),
        "deep sets up a frame pointer (mov rbp, rsp)"
    );
    let Some(all) = skip_without_sampling(sample(&exe, &[])) else {
        return;
    };
    let chains = chains_through(&all, &exe, "pinpoint_fixture::deep");
    let whole = chains
        .iter()
        .filter(|c| {
            c.starts_with(&[
                "pinpoint_fixture::deep".to_string(),
                "pinpoint_fixture::middle".to_string(),
                "pinpoint_fixture::outer".to_string(),
                "pinpoint_fixture::main".to_string(),
            ])
        })
        .count();
    assert!(
        chains.len() >= 20,
        "{} samples in deep; leaves: {:?}",
        chains.len(),
        all.stacks
            .iter()
            .take(20)
            .map(|s| &s.frames)
            .collect::<Vec<_>>()
    );
    assert!(
        whole * 100 >= chains.len() * 95,
        "{whole} of {} samples in deep unwind to main: {:?}",
        chains.len(),
        chains.first()
    );
}
