//! Instruction counts on any x86-64 machine, the same on every one of them: the
//! benchmark runs under QEMU's user-mode emulator (`qemu-x86_64`, Debian's `qemu-user`)
//! with a pinned CPU model and our TCG plugin (`agent/qemu`, embedded in this binary),
//! which counts every guest instruction per process and per guest thread into a memfd
//! the collector owns (`sbs_agent_abi::qemu`). Nothing goes through the program's
//! descriptors: the plugin opens the area through `/proc/<collector pid>/fd/<n>`, maps it
//! and closes the descriptor, and QEMU loads the plugin the same way.
//!
//! The program sees the argv of a timing run (`-0` gives it the argv[0] the user gave;
//! QEMU runs the resolved path, as it searches no `PATH`), the same environment,
//! descriptors and working directory. The count depends on the CPU model (glibc picks
//! its string functions by CPUID), so the model is part of the metric's source
//! (`qemu:MODEL`): counts of another model or another engine are never compared.
//!
//! A forked child stays under QEMU and is counted in a slot of its own; an `execve` runs
//! the new image natively, outside QEMU: the plugin counts those and the report says
//! they were not measured.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use anyhow::Context;
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use sbs_agent_abi::qemu::{AreaValues, AREA_BYTES, AREA_MAGIC, AREA_WORDS, ENV_REGION_QEMU};
use sbs_reports::model::Unit;

use crate::run::instrument::{
    ChildSetup, ExitKind, InFlight, Instrument, MetricSpec, RunOutcome, Sample,
};

/// The plugin, built by `build.rs` from `agent/qemu` and embedded in this binary.
pub static PLUGIN_LIBRARY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/libsbs_qemu_plugin.so"));

/// Metric id (shared with the other engines; the source tells them apart).
pub const METRIC: &str = "counter.instructions";

/// The engine's name, the start of its metric source.
pub const ENGINE: &str = "qemu";

/// The CPU model counted with unless `--qemu-cpu` says otherwise: Haswell without TSX
/// (AVX2, BMI2, FMA: what glibc's fastest x86-64-v3 string functions need), less the
/// four features QEMU 7.2's TCG does not emulate (it would drop them with a warning on
/// the program's stderr). Every x86-64 host runs it: TCG emulates it in software.
pub const DEFAULT_CPU: &str = "Haswell-v2,-pcid,-x2apic,-tsc-deadline,-invpcid";

/// The package that brings `qemu-x86_64`.
pub const INSTALL_HINT: &str = "sudo apt-get install -y qemu-user";

/// The metric source of counts made with CPU model `cpu`.
pub fn source(cpu: &str) -> String {
    format!("{ENGINE}:{cpu}")
}

/// The error for a machine without `qemu-x86_64`: it names the package.
pub fn not_installed() -> anyhow::Error {
    anyhow::anyhow!(
        "qemu-x86_64 is not installed (not found on PATH): install Debian's package \
         qemu-user (`{INSTALL_HINT}`), or use --instructions valgrind"
    )
}

/// Whether a metric source is the QEMU engine's (any model).
pub fn is_source(source: &str) -> bool {
    source
        .strip_prefix(ENGINE)
        .is_some_and(|rest| rest.starts_with(':'))
}

/// Find `qemu-x86_64`; the error names the package.
pub fn find_qemu() -> anyhow::Result<PathBuf> {
    which::which("qemu-x86_64").map_err(|_| not_installed())
}

/// Check a CPU model name before any run: QEMU reads commas and `=` in it as options.
pub fn check_cpu(cpu: &str) -> anyhow::Result<()> {
    let name = cpu.split(',').next().unwrap_or("");
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        anyhow::bail!(
            "--qemu-cpu `{cpu}`: not a CPU model name; run `qemu-x86_64 -cpu help` to list \
             them (the default is {DEFAULT_CPU})"
        );
    }
    Ok(())
}

fn memfd(name: &std::ffi::CStr, flags: MemFdCreateFlag) -> io::Result<File> {
    Ok(memfd_create(name, flags)?.into())
}

/// Runs the benchmark under QEMU with the plugin and reads its count.
pub struct QemuInstructions {
    qemu: PathBuf,
    cpu: String,
    /// The plugin, in a sealed memfd QEMU loads through `/proc/<our pid>/fd/<n>`.
    plugin: File,
    /// This run's count area.
    area: Option<File>,
    region: bool,
    plan_warnings: Vec<String>,
    /// Processes per run, fewest and most.
    processes: Option<(u64, u64)>,
    /// Images exec'd out of QEMU, most in one run.
    execs: u64,
}

impl QemuInstructions {
    /// Find QEMU and put the plugin where it can load it.
    pub fn new(cpu: &str) -> anyhow::Result<Self> {
        let qemu = find_qemu()?;
        check_cpu(cpu)?;
        let mut plugin = memfd(
            c"sbs-qemu-plugin",
            MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
        )
        .context("creating the in-memory file for the QEMU plugin")?;
        plugin
            .write_all(PLUGIN_LIBRARY)
            .context("writing the QEMU plugin")?;
        let seals = SealFlag::F_SEAL_WRITE
            | SealFlag::F_SEAL_SHRINK
            | SealFlag::F_SEAL_GROW
            | SealFlag::F_SEAL_SEAL;
        fcntl(plugin.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals))
            .context("sealing the QEMU plugin's file")?;
        Ok(QemuInstructions {
            qemu,
            cpu: cpu.to_string(),
            plugin,
            area: None,
            region: false,
            plan_warnings: Vec::new(),
            processes: None,
            execs: 0,
        })
    }

    /// Count only inside a harness's measured region (the harness marks it with the
    /// marker system call around each operation).
    pub fn in_region(mut self) -> Self {
        self.region = true;
        self
    }

    /// Warnings from planning (e.g. why `auto` chose QEMU).
    pub fn with_plan_warnings(mut self, warnings: Vec<String>) -> Self {
        self.plan_warnings = warnings;
        self
    }

    /// The metric this instrument yields with CPU model `cpu`.
    pub fn metric(cpu: &str) -> MetricSpec {
        MetricSpec::new(METRIC, Unit::Count, source(cpu), true)
    }

    fn proc_path(fd: &File) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd())
    }
}

impl Instrument for QemuInstructions {
    fn name(&self) -> &str {
        ENGINE
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        let area = memfd(c"sbs-qemu-counts", MemFdCreateFlag::MFD_CLOEXEC)
            .context("creating the QEMU engine's count area")?;
        area.set_len(AREA_BYTES as u64)
            .and_then(|_| area.write_all_at(&AREA_MAGIC.to_le_bytes(), 0))
            .context("creating the QEMU engine's count area")?;
        let mut plugin_arg = OsString::from(Self::proc_path(&self.plugin));
        plugin_arg.push(",area=");
        plugin_arg.push(Self::proc_path(&area));
        setup.wrapper = vec![
            self.qemu.clone().into_os_string(),
            "-cpu".into(),
            self.cpu.clone().into(),
            "-plugin".into(),
            plugin_arg,
        ];
        setup.argv0_option = Some("-0".into());
        if self.region {
            setup.env.push((ENV_REGION_QEMU.into(), "1".into()));
        }
        self.area = Some(area);
        Ok(())
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let area = self
            .area
            .take()
            .context("qemu instrument: collect without prepare")?;
        if outcome.exit == ExitKind::Signal(libc::SIGILL) {
            anyhow::bail!(
                "the program died of SIGILL under the qemu engine (qemu-x86_64 -cpu {}): it \
                 runs an instruction this CPU model or QEMU cannot emulate (a build for the \
                 host's CPU, e.g. -C target-cpu=native with AVX-512); count with \
                 --instructions valgrind, or choose another model with --qemu-cpu",
                self.cpu
            );
        }
        let mut bytes = vec![0u8; AREA_BYTES];
        area.read_exact_at(&mut bytes, 0)
            .context("reading the QEMU engine's count area")?;
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        debug_assert_eq!(words.len(), AREA_WORDS);
        let values = AreaValues::from_words(&words)
            .context("the QEMU engine's count area was overwritten")?;
        if values.loaded.is_none() {
            anyhow::bail!(
                "{} did not load the counting plugin (run {}, {:?}): the plugin is written \
                 for QEMU's plugin API version 1 (QEMU 7.2, Debian 12's qemu-user); see \
                 QEMU's message on the program's stderr, or use --instructions valgrind",
                self.qemu.display(),
                outcome.pid,
                outcome.exit
            );
        }
        if values.lost > 0 {
            anyhow::bail!(
                "{} processes of the run found no slot in the QEMU engine's count area (it \
                 holds {}): their instructions are missing, so the run has no exact count",
                values.lost,
                sbs_agent_abi::qemu::SLOTS
            );
        }
        if self.region && values.region_lost > 0 {
            anyhow::bail!(
                "{} region markers came from a thread beyond the {} the QEMU engine counts \
                 regions for: the region's count is incomplete",
                values.region_lost,
                sbs_agent_abi::qemu::VCPUS
            );
        }
        if self.region && values.region_marks == 0 && outcome.exit.success() {
            anyhow::bail!(
                "the harness never marked its measured region under the qemu engine (no \
                 marker system call reached the plugin), so the region's count would be 0; \
                 sbs-harness and sbs-profile versions may differ"
            );
        }
        let n = values.process_count;
        self.processes = Some(match self.processes {
            Some((lo, hi)) => (lo.min(n), hi.max(n)),
            None => (n, n),
        });
        self.execs = self.execs.max(values.execs);
        let value = if self.region {
            values.region
        } else {
            values.total
        };
        // An image exec'd in this run ran natively, uncounted: the run's count is not exact.
        let mut metric = Self::metric(&self.cpu);
        metric.exact &= values.execs == 0;
        out.push(Sample::new(metric, value as f64));
        Ok(())
    }

    fn abort_run(&mut self) {
        self.area = None;
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = self.plan_warnings.clone();
        if self.execs > 0 {
            w.push(format!(
                "counter.instructions (qemu): the program exec'd {} image(s) (up to {} in one \
                 run); an exec leaves QEMU and the new image runs natively, so its \
                 instructions were NOT measured: the count covers the processes that ran \
                 under QEMU only (use --instructions valgrind, which follows execs)",
                self.execs, self.execs
            ));
        }
        if let Some((lo, hi)) = self.processes {
            if lo != hi {
                w.push(format!(
                    "counter.instructions (qemu): the number of processes varied between \
                     runs ({lo} to {hi}); counts include every process that ran under QEMU"
                ));
            }
        }
        w
    }

    fn finish(&mut self) {
        self.area = None;
    }

    fn overlaps(&self) -> bool {
        true
    }

    fn park(&mut self) -> InFlight {
        InFlight::new(self.area.take())
    }

    fn resume(&mut self, run: InFlight) {
        self.area = run.take().unwrap_or_default();
    }
}
