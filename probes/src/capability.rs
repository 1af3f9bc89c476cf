//! Which perf events this machine can count, and if not, why and how to fix it.
//!
//! Each event is probed by opening it on the calling process, exactly as it would be
//! opened on a benchmark child (same type, config and scope); the error, if any, is
//! classified into a reason and an exact fix using the machine's PMU list and
//! `perf_event_paranoid` level.

use std::path::Path;

use crate::counters::{builder_for, catalogue, CounterRequest, EventClass};

/// Where the kernel lists its event sources (PMUs).
pub const PMU_DIR: &str = "/sys/bus/event_source/devices";

/// Where the kernel's perf access level lives.
pub const PARANOID_FILE: &str = "/proc/sys/kernel/perf_event_paranoid";

/// Software events that only ever happen in kernel context: with `exclude_kernel` they
/// read 0, so a user-space-only scope is no alternative for them.
const KERNEL_ONLY: &[&str] = &["context-switches", "cpu-migrations"];

/// The machine facts that explain a failure.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MachineFacts {
    /// Names under [`PMU_DIR`] (`cpu`, `software`, `uprobe`...); empty if unreadable.
    pub pmus: Vec<String>,
    /// `perf_event_paranoid`, if readable.
    pub paranoid: Option<i32>,
    /// Whether the process runs with effective uid 0.
    pub root: bool,
}

impl MachineFacts {
    /// Read the facts of this machine.
    pub fn read() -> Self {
        let mut pmus: Vec<String> = std::fs::read_dir(Path::new(PMU_DIR))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        pmus.sort();
        let paranoid = std::fs::read_to_string(PARANOID_FILE)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        MachineFacts {
            pmus,
            paranoid,
            root,
        }
    }

    /// Whether a CPU PMU (the one behind the generic hardware events) is listed: `cpu`
    /// (x86, RISC-V), `cpu_core`/`cpu_atom` (hybrid Intel), `armv8_pmuv3_0`,
    /// `armv8_cortex_a72`, `arm_cortex_a53`… (ARM). Other sources (uncore, power, msr,
    /// tracepoints…) do not count instructions.
    pub fn has_cpu_pmu(&self) -> bool {
        self.pmus.iter().any(|p| {
            p == "cpu" || p.starts_with("cpu_") || p.starts_with("armv") || p.starts_with("arm_")
        })
    }
}

/// Whether an event can be counted here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Opens fine.
    Supported,
    /// Does not open.
    Unsupported {
        /// What is missing.
        reason: String,
        /// The exact step that fixes it (or the alternative).
        fix: String,
    },
}

impl Support {
    /// `true` for [`Support::Supported`].
    pub fn is_supported(&self) -> bool {
        matches!(self, Support::Supported)
    }
}

/// Explain why opening `req` failed with `errno`, given the machine's `facts`.
pub fn classify_open_error(req: &CounterRequest, errno: i32, facts: &MachineFacts) -> Support {
    let name = req.name();
    let hw = req.event.class() == EventClass::Hardware;
    match errno {
        libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP if hw && !facts.has_cpu_pmu() => {
            Support::Unsupported {
                reason: format!(
                    "no CPU PMU: {PMU_DIR} lists only [{}] (typical of a VM without a virtual PMU)",
                    facts.pmus.join(", ")
                ),
                fix: "run on bare metal or in a VM with a virtual PMU (KVM/QEMU: `-cpu host`, \
                      libvirt: `<pmu state='on'/>`); without one, count instructions with \
                      `--instructions valgrind`"
                    .to_string(),
            }
        }
        libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP => Support::Unsupported {
            reason: format!(
                "the PMU does not provide `{name}` (error {})",
                std::io::Error::from_raw_os_error(errno)
            ),
            fix: "choose another event (`sbs-profile --list-counters`); generic cache events \
                  exist only where the CPU's perf driver maps them"
                .to_string(),
        },
        libc::EACCES | libc::EPERM => {
            let level = facts
                .paranoid
                .map(|p| p.to_string())
                .unwrap_or_else(|| "unknown".into());
            let kernel = req.scope.kernel;
            let needed = if kernel { 1 } else { 2 };
            let mut fix = format!(
                "`sudo sysctl -w kernel.perf_event_paranoid={needed}`, or give the tool \
                 CAP_PERFMON: `sudo setcap cap_perfmon+ep \"$(command -v sbs-profile)\"`"
            );
            if kernel {
                let ev = &req.event.name;
                if KERNEL_ONLY.contains(&ev.as_str()) {
                    fix.push_str(&format!(
                        " (`{ev}` happens in the kernel: `{ev}:u` would always read 0)"
                    ));
                } else if req.event.class() == EventClass::Software {
                    fix.push_str(&format!(
                        "; or count user space only: `{ev}:u` (then events taken inside \
                         system calls are not counted)"
                    ));
                } else {
                    fix.push_str(&format!("; or count user space only: `{ev}:u`"));
                }
            }
            Support::Unsupported {
                reason: format!(
                    "permission denied: perf_event_paranoid is {level} and the tool lacks \
                     CAP_PERFMON{}",
                    if kernel {
                        " (kernel-side counting needs level <= 1)"
                    } else {
                        ""
                    }
                ),
                fix,
            }
        }
        libc::EINVAL => Support::Unsupported {
            reason: format!("the kernel rejected `{name}`'s attributes (EINVAL)"),
            fix: "try the event in another scope (`:u`) or without others in its group; \
                  check `perf stat -e` with the same event"
                .to_string(),
        },
        other => Support::Unsupported {
            reason: format!(
                "perf_event_open failed: {}",
                std::io::Error::from_raw_os_error(other)
            ),
            fix: "check `perf stat -e` with the same event on this machine".to_string(),
        },
    }
}

/// Probe one event in its scope by opening it on this process.
pub fn probe(req: &CounterRequest, facts: &MachineFacts) -> Support {
    match builder_for(req).observe_self().build() {
        Ok(_) => Support::Supported,
        Err(e) => match e.raw_os_error() {
            Some(errno) => classify_open_error(req, errno, facts),
            None => Support::Unsupported {
                reason: format!("perf_event_open failed: {e}"),
                fix: "upgrade the kernel, or check `perf stat -e` with the same event".into(),
            },
        },
    }
}

/// Probe every known event in its default scope, in catalogue order.
pub fn probe_all(facts: &MachineFacts) -> Vec<(CounterRequest, Support)> {
    catalogue()
        .into_iter()
        .map(CounterRequest::new)
        .map(|r| {
            let s = probe(&r, facts);
            (r, s)
        })
        .collect()
}

/// Why an exec of `program` would change the process's credentials (setuid or setgid to
/// an id that is not ours, or file capabilities for a user other than root), if it would.
/// At such an exec the kernel ends every perf event of the process (it is no longer
/// dumpable by us), so uprobe counts, counters and sampled stacks read 0 from there on,
/// without an error; the dynamic loader also ignores `LD_PRELOAD`. A script's own mode
/// bits do nothing (the kernel ignores setuid on scripts).
pub fn credential_change(program: &Path) -> std::io::Result<Option<String>> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(program)?;
    let mut magic = [0u8; 2];
    let script = std::fs::File::open(program)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"#!";
    if script {
        return Ok(None);
    }
    let (euid, egid) = crate::sys::effective_ids();
    if meta.mode() & 0o4000 != 0 && meta.uid() != euid {
        return Ok(Some(format!("it is setuid to uid {}", meta.uid())));
    }
    if meta.mode() & 0o2000 != 0 && meta.gid() != egid {
        return Ok(Some(format!("it is setgid to gid {}", meta.gid())));
    }
    if euid != 0 && crate::sys::has_xattr(program, c"security.capability")? {
        return Ok(Some("it carries file capabilities".into()));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::parse_counter;

    fn vm() -> MachineFacts {
        MachineFacts {
            pmus: vec![
                "breakpoint".into(),
                "msr".into(),
                "software".into(),
                "tracepoint".into(),
                "uprobe".into(),
            ],
            paranoid: Some(2),
            root: false,
        }
    }

    #[test]
    fn no_pmu_is_explained_with_the_pmu_list_and_valgrind() {
        let r = parse_counter("instructions").unwrap();
        let Support::Unsupported { reason, fix } = classify_open_error(&r, libc::ENOENT, &vm())
        else {
            panic!("expected unsupported")
        };
        assert!(reason.contains("no CPU PMU"), "{reason}");
        assert!(reason.contains("msr, software"), "{reason}");
        assert!(fix.contains("--instructions valgrind"), "{fix}");
    }

    #[test]
    fn missing_event_on_a_real_pmu_is_not_blamed_on_the_vm() {
        let mut facts = vm();
        facts
            .pmus
            .extend(["power".into(), "uncore_imc_0".into(), "kprobe".into()]);
        assert!(
            !facts.has_cpu_pmu(),
            "uncore and power PMUs do not count instructions"
        );
        for cpu in ["cpu_core", "armv8_pmuv3_0"] {
            let mut f = facts.clone();
            f.pmus.push(cpu.into());
            assert!(f.has_cpu_pmu(), "{cpu}");
        }
        facts.pmus.push("cpu".into());
        assert!(facts.has_cpu_pmu());
        let r = parse_counter("node-prefetch-misses").unwrap();
        let Support::Unsupported { reason, .. } = classify_open_error(&r, libc::ENOENT, &facts)
        else {
            panic!("expected unsupported")
        };
        assert!(
            reason.contains("does not provide `node-prefetch-misses`"),
            "{reason}"
        );
    }

    #[test]
    fn permission_errors_give_the_sysctl_and_capability_fix() {
        let r = parse_counter("context-switches").unwrap();
        let Support::Unsupported { reason, fix } = classify_open_error(&r, libc::EACCES, &vm())
        else {
            panic!("expected unsupported")
        };
        assert!(reason.contains("perf_event_paranoid is 2"), "{reason}");
        assert!(fix.contains("kernel.perf_event_paranoid=1"), "{fix}");
        assert!(fix.contains("cap_perfmon"), "{fix}");
        assert!(
            fix.contains("`context-switches:u` would always read 0"),
            "{fix}"
        );
        let r = parse_counter("page-faults").unwrap();
        let Support::Unsupported { fix, .. } = classify_open_error(&r, libc::EACCES, &vm()) else {
            panic!("expected unsupported")
        };
        assert!(
            fix.contains("count user space only: `page-faults:u`"),
            "{fix}"
        );

        let mut facts = vm();
        facts.paranoid = Some(3);
        let r = parse_counter("cycles").unwrap();
        let Support::Unsupported { fix, .. } = classify_open_error(&r, libc::EPERM, &facts) else {
            panic!("expected unsupported")
        };
        assert!(fix.contains("kernel.perf_event_paranoid=2"), "{fix}");
    }

    #[test]
    fn software_events_open_on_this_machine() {
        // Software events exist on every Linux kernel with perf events.
        let facts = MachineFacts::read();
        let r = parse_counter("page-faults:u").unwrap();
        assert_eq!(probe(&r, &facts), Support::Supported);
    }

    #[test]
    fn hardware_probe_agrees_with_the_pmu_list() {
        let facts = MachineFacts::read();
        let s = probe(&parse_counter("instructions").unwrap(), &facts);
        if facts.has_cpu_pmu() {
            eprintln!("note: a CPU PMU is present ({:?}): {s:?}", facts.pmus);
        } else {
            assert!(!s.is_supported(), "no PMU listed yet instructions opened");
        }
    }
}
