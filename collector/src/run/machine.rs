//! What the machine was doing while the runs ran: the load average, the CPU time other
//! processes and the hypervisor took, the frequency governor and turbo, a virtual machine.
//! Read from `/proc` and `/sys` before the first run and after the last one (two reads of
//! every process's CPU time, a few milliseconds), so that a report says why its times are
//! noisy and a saved entry why it differs from another. What cannot be read is left out.

use std::collections::HashMap;
use std::time::Instant;

use procfs::{Current, CurrentSI};
use sbs_reports::model::Machine;

/// A share of one CPU a process must take to be named among the busiest.
const NAMED_SHARE: f64 = 0.10;

/// The state of the machine before the first run.
pub struct Before {
    at: Instant,
    load: f64,
    steal: u64,
    /// CPU time of every process in nanoseconds, by pid.
    times: HashMap<i32, u64>,
}

/// Read the machine before the first run.
pub fn before() -> Before {
    Before {
        at: Instant::now(),
        load: load_average(),
        steal: steal_ticks(),
        times: process_times(),
    }
}

impl Before {
    /// Read it again after the last run: what it was like in between.
    pub fn after(self) -> Machine {
        let elapsed = self.at.elapsed().as_secs_f64().max(1e-3);
        let cpus = procfs::CpuInfo::current()
            .map(|c| c.num_cores())
            .unwrap_or(1)
            .max(1);
        let hz = procfs::ticks_per_second() as f64;
        let ours = own_tree();
        let mut busy: Vec<(f64, i32)> = Vec::new();
        let mut others = 0.0;
        for (pid, now) in process_times() {
            let Some(then) = self.times.get(&pid) else {
                continue;
            };
            if ours.contains(&pid) {
                continue;
            }
            let share = now.saturating_sub(*then) as f64 / 1e9 / elapsed;
            others += share;
            if share >= NAMED_SHARE {
                busy.push((share, pid));
            }
        }
        busy.sort_by(|a, b| b.0.total_cmp(&a.0));
        let steal = steal_ticks().saturating_sub(self.steal) as f64 / hz / elapsed;
        Machine {
            cpus,
            load_start: self.load,
            load_end: load_average(),
            others: others / cpus as f64,
            steal: steal / cpus as f64,
            busy: busy
                .into_iter()
                .take(3)
                .map(|(share, pid)| format!("{} ({pid}) {:.0}%", process_name(pid), share * 100.0))
                .collect(),
            governor: governor(),
            turbo: turbo(),
            virtual_machine: virtual_machine(),
        }
    }
}

/// The machine over two spells of runs (the first runs, then the confirmation runs): the
/// load average from the first's start to the later's end, and the busier of the two for
/// what other processes and the hypervisor took (a busy spell spoils its runs however
/// quiet the other was), with the busiest processes of both.
pub fn and_then(first: Machine, later: Machine) -> Machine {
    let mut busy = first.busy;
    for name in later.busy {
        if !busy.contains(&name) {
            busy.push(name);
        }
    }
    Machine {
        load_start: first.load_start,
        others: first.others.max(later.others),
        steal: first.steal.max(later.steal),
        busy,
        ..later
    }
}

/// What the machine did to the times, when it was not quiet: said after a warning about
/// noisy times (outliers, a wide spread), which it explains. A busy machine whose times
/// stayed steady gets no warning: the footer still shows it.
pub fn busy_cause(m: &Machine) -> Option<String> {
    let mut took = Vec::new();
    if m.others >= Machine::BUSY_SHARE {
        let names = match m.busy.is_empty() {
            true => String::new(),
            false => format!(" (busiest: {})", m.busy.join(", ")),
        };
        took.push(format!(
            "other processes took {:.0}% of the {} CPUs' time during the runs{names}",
            m.others * 100.0,
            m.cpus
        ));
    }
    if m.steal >= Machine::BUSY_SHARE / 2.0 {
        took.push(format!(
            "the hypervisor took {:.0}% of it (steal time)",
            m.steal * 100.0
        ));
    }
    (!took.is_empty()).then(|| format!("The machine was busy: {}.", took.join("; ")))
}

fn load_average() -> f64 {
    procfs::LoadAverage::current().map_or(0.0, |l| l.one as f64)
}

fn steal_ticks() -> u64 {
    procfs::KernelStats::current()
        .ok()
        .and_then(|k| k.total.steal)
        .unwrap_or(0)
}

/// The CPU time (user + system, all its threads) of every process now, in nanoseconds,
/// by pid. Read by hand from `/proc/PID/stat`, three system calls a process (open, read,
/// close): the `procfs` crate's `all_processes` and `stat()` made nine (it opens and
/// stats each process's directory first), and two such reads over a hundred processes
/// cost about as much as a hundred runs of `/bin/true` spend in the launcher
/// (BENCHMARKS.md, "Timing runs at hyperfine's cost"). `/proc/PID/schedstat` would be
/// cheaper to make for the kernel, but it counts the main thread only.
fn process_times() -> HashMap<i32, u64> {
    let mut times = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return times;
    };
    let ns_per_tick = 1e9 / procfs::ticks_per_second() as f64;
    let mut buf = [0u8; 1024];
    let mut path = String::with_capacity(32);
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(pid_number) = pid.parse::<i32>() else {
            continue;
        };
        // `None`: gone since the listing.
        if let Some((_, ticks)) = read_proc(&mut path, pid, "stat", &mut buf).and_then(parse_stat) {
            times.insert(pid_number, (ticks as f64 * ns_per_tick) as u64);
        }
    }
    times
}

/// The start of `/proc/PID/FILE` (what fits in `buf`), with open, read and close.
fn read_proc<'b>(path: &mut String, pid: &str, file: &str, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    use std::io::Read;
    path.clear();
    path.push_str("/proc/");
    path.push_str(pid);
    path.push('/');
    path.push_str(file);
    let n = std::fs::File::open(&*path).ok()?.read(buf).ok()?;
    buf.get(..n)
}

/// The name of process `pid` (`/proc/PID/comm`), or `?` once it is gone.
fn process_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// The name and the user + system ticks from the text of `/proc/PID/stat`: `pid (comm)
/// state ...`, where utime and stime are the 12th and 13th fields after the name (the
/// name may hold spaces and parentheses: it ends at the last `)`).
fn parse_stat(text: &[u8]) -> Option<(String, u64)> {
    let open = text.iter().position(|&b| b == b'(')?;
    let close = text.iter().rposition(|&b| b == b')')?;
    let comm = String::from_utf8_lossy(text.get(open + 1..close)?).into_owned();
    let rest = std::str::from_utf8(text.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

/// This process and its launcher: their CPU time is the measurement's own.
fn own_tree() -> Vec<i32> {
    let mut ours = vec![std::process::id() as i32];
    ours.extend(crate::run::launcher::server_pid().map(|p| p.as_raw()));
    ours
}

/// The cpufreq governors of the CPUs, joined when they differ.
fn governor() -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    let cpus = std::fs::read_dir("/sys/devices/system/cpu").ok()?;
    for entry in cpus.flatten() {
        let path = entry.path().join("cpufreq/scaling_governor");
        if let Ok(g) = std::fs::read_to_string(path) {
            let g = g.trim().to_string();
            if !seen.contains(&g) {
                seen.push(g);
            }
        }
    }
    seen.sort();
    (!seen.is_empty()).then(|| seen.join("/"))
}

/// Whether turbo is on: intel_pstate's `no_turbo`, or the generic `boost`.
fn turbo() -> Option<bool> {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim() == "1");
    read("/sys/devices/system/cpu/intel_pstate/no_turbo")
        .map(|no| !no)
        .or_else(|| read("/sys/devices/system/cpu/cpufreq/boost"))
}

/// The hypervisor, when the CPU says it runs under one (the `hypervisor` flag), named by
/// its CPUID signature (leaf 0x40000000), else by the firmware's vendor strings.
fn virtual_machine() -> Option<String> {
    let info = procfs::CpuInfo::current().ok()?;
    let flagged = info.flags(0).is_some_and(|f| f.contains(&"hypervisor"));
    if !flagged {
        return None;
    }
    let dmi = |f: &str| {
        std::fs::read_to_string(format!("/sys/class/dmi/id/{f}"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let name = hypervisor_signature()
        .or_else(|| dmi("sys_vendor"))
        .unwrap_or_else(|| "a hypervisor".to_string());
    Some(name)
}

/// The hypervisor's name from its CPUID signature, for the common ones.
#[cfg(target_arch = "x86_64")]
fn hypervisor_signature() -> Option<String> {
    let r = core::arch::x86_64::__cpuid(0x4000_0000);
    let mut bytes = Vec::with_capacity(12);
    for word in [r.ebx, r.ecx, r.edx] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    let signature = String::from_utf8_lossy(&bytes);
    let name = match signature.trim_end_matches('\0') {
        "KVMKVMKVM" => "KVM",
        "TCGTCGTCGTCG" => "QEMU",
        "Microsoft Hv" => "Hyper-V",
        "VMwareVMware" => "VMware",
        "XenVMMXenVMM" => "Xen",
        "VBoxVBoxVBox" => "VirtualBox",
        "ACRNACRNACRN" => "ACRN",
        "bhyve bhyve " => "bhyve",
        " lrpepyh  vr" => "Parallels",
        _ => return None,
    };
    Some(name.to_string())
}

#[cfg(not(target_arch = "x86_64"))]
fn hypervisor_signature() -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_machine_is_no_cause_and_a_busy_one_is() {
        let quiet = Machine {
            cpus: 2,
            ..Machine::default()
        };
        assert_eq!(busy_cause(&quiet), None);
        let busy = Machine {
            others: 0.45,
            busy: vec!["rustc (42) 90%".into()],
            ..quiet.clone()
        };
        let w = busy_cause(&busy).unwrap();
        assert!(
            w.contains("took 45% of the 2 CPUs") && w.contains("rustc (42) 90%"),
            "{w}"
        );
        let stolen = Machine {
            steal: 0.2,
            ..quiet
        };
        assert!(busy_cause(&stolen).unwrap().contains("steal"));
    }

    #[test]
    fn two_spells_of_runs_keep_the_busier_and_both_ends() {
        let first = Machine {
            cpus: 2,
            load_start: 0.5,
            load_end: 1.0,
            others: 0.4,
            busy: vec!["rustc (42) 80%".into()],
            ..Machine::default()
        };
        let later = Machine {
            cpus: 2,
            load_start: 1.0,
            load_end: 2.5,
            others: 0.05,
            steal: 0.1,
            busy: vec!["cc1 (7) 10%".into(), "rustc (42) 80%".into()],
            ..Machine::default()
        };
        let m = and_then(first, later);
        assert_eq!((m.load_start, m.load_end), (0.5, 2.5));
        assert_eq!((m.others, m.steal), (0.4, 0.1));
        assert_eq!(m.busy, ["rustc (42) 80%", "cc1 (7) 10%"]);
    }

    #[test]
    fn a_stat_line_gives_its_name_and_ticks() {
        let line =
            b"4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 99 1000 10\n";
        assert_eq!(parse_stat(line), Some(("a (b) c".to_string(), 22)));
        assert_eq!(parse_stat(b"4242 (x) S 1"), None);
        let me = std::process::id() as i32;
        let before = process_times()[&me];
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        assert!(process_times()[&me] > before, "{x}");
        let name = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(process_name(me), name.trim_end());
    }

    #[test]
    fn the_machine_is_read() {
        let m = before().after();
        assert!(m.cpus >= 1);
        assert!(m.others >= 0.0 && m.load_start >= 0.0);
    }
}
