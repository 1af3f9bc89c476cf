//! Builds the allocation agent (`agent/`) and the in-process counting library
//! (`agent/inproc/`) as preload libraries and leaves them in `OUT_DIR`, where
//! `src/run/instruments/alloc.rs` and `src/run/instruments/invocations/inproc.rs` embed
//! them with `include_bytes!`; and the launcher (`agent/launcher/`), a static program with
//! no libc that every run starts through (`src/run/launcher.rs`). A user who installs
//! `sbs-profile` alone (`cargo install --path collector`) so gets a working `--alloc`.
//!
//! Why rustc and not a nested `cargo build`: the agent must be a `no_std` cdylib built
//! with `panic=abort`, which the workspace profiles (`panic=unwind`, needed by the other
//! crates) cannot give to one package; a nested cargo would also contend for the build
//! directory and package-cache locks of the outer one. The agent and its ABI crate have
//! no dependencies, so a few rustc invocations (about a second) are all it takes, and
//! they work offline from a clean checkout.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let agent = manifest.join("../agent");
    let abi_src = agent.join("abi/src/lib.rs");
    let agent_src = agent.join("src/lib.rs");
    let inproc_src = agent.join("inproc/src/lib.rs");
    let launcher_lib = agent.join("launcher/src/lib.rs");
    let launcher_main = agent.join("launcher/src/main.rs");
    let qemu_src = agent.join("qemu/src/lib.rs");
    for dir in [
        agent.join("src"),
        agent.join("abi/src"),
        agent.join("inproc/src"),
        agent.join("launcher/src"),
        agent.join("qemu/src"),
    ] {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    if [
        &abi_src,
        &agent_src,
        &inproc_src,
        &launcher_lib,
        &launcher_main,
        &qemu_src,
    ]
    .iter()
    .any(|p| !p.exists())
    {
        panic!(
            "the allocation agent's sources are missing ({}); build sbs-profile from its \
             workspace checkout (cargo install --path collector)",
            agent.display()
        );
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = env::var("TARGET").expect("cargo sets TARGET");

    compile(
        &rustc,
        &target,
        &out,
        &abi_src,
        "sbs_agent_abi",
        "rlib",
        &[],
    );
    let extern_abi = format!(
        "sbs_agent_abi={}",
        out.join("libsbs_agent_abi.rlib").display()
    );
    // The two preload libraries and the QEMU plugin are linked without the C start files
    // (`-nostartfiles`):
    // crtbegin's destructor would call `__cxa_finalize` as the library is unloaded, one
    // call the program's count of it would include. Their `.init_array` constructors need
    // none of crti/crtbegin.
    let preloaded = [
        "--extern",
        &extern_abi,
        "-C",
        "strip=debuginfo",
        "-C",
        "link-arg=-nostartfiles",
    ];
    compile(
        &rustc,
        &target,
        &out,
        &agent_src,
        "sbs_agent",
        "cdylib",
        &preloaded,
    );
    // The in-process counting library (`--invocations-engine inproc`), built the same way.
    compile(
        &rustc,
        &target,
        &out,
        &inproc_src,
        "sbs_inproc",
        "cdylib",
        &preloaded,
    );
    // The TCG plugin of `--instructions qemu` (`agent/qemu`), loaded by qemu-x86_64: its
    // QEMU functions stay undefined until QEMU loads it (QEMU exports them).
    compile(
        &rustc,
        &target,
        &out,
        &qemu_src,
        "sbs_qemu_plugin",
        "cdylib",
        &preloaded,
    );
    // The launcher every measured child starts through (`src/run/launcher.rs`): a static
    // program with no libc, so that it maps a few pages (about 3 KB of file).
    compile(
        &rustc,
        &target,
        &out,
        &launcher_lib,
        "sbs_launcher",
        "rlib",
        &["--extern", &extern_abi],
    );
    let extern_launcher = format!(
        "sbs_launcher={}",
        out.join("libsbs_launcher.rlib").display()
    );
    compile(
        &rustc,
        &target,
        &out,
        &launcher_main,
        "sbs_launcher_bin",
        "bin",
        &[
            "--extern",
            &extern_launcher,
            "--extern",
            &extern_abi,
            "-C",
            "relocation-model=static",
            "-C",
            "target-feature=+crt-static",
            "-C",
            "link-arg=-nostartfiles",
            "-C",
            "link-arg=-nostdlib",
            "-C",
            "link-arg=-static",
            "-C",
            "strip=symbols",
        ],
    );
    for name in [
        "libsbs_agent.so",
        "libsbs_inproc.so",
        "libsbs_qemu_plugin.so",
        "sbs_launcher_bin",
    ] {
        let lib = out.join(name);
        assert!(lib.exists(), "rustc did not produce {}", lib.display());
    }
}

fn compile(
    rustc: &std::ffi::OsStr,
    target: &str,
    out: &Path,
    src: &Path,
    name: &str,
    kind: &str,
    extra: &[&str],
) {
    let status = Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            kind,
            "--crate-name",
            name,
        ])
        .args(["--target", target])
        .args([
            "-C",
            "opt-level=3",
            "-C",
            "panic=abort",
            "-C",
            "debuginfo=0",
        ])
        .args(["--cap-lints", "warn"])
        .arg("-L")
        .arg(format!("dependency={}", out.display()))
        .arg("--out-dir")
        .arg(out)
        .args(extra)
        .arg(src)
        // The outer build's flags (e.g. coverage instrumentation) would bring a runtime
        // and TLS into the agent; it is built on its own terms.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run rustc ({rustc:?}) to build the allocation agent: {e}")
        });
    assert!(
        status.success(),
        "rustc failed to build the allocation agent ({name} from {}); see its errors above",
        src.display()
    );
}
