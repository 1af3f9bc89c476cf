//! Live counters on real child processes.
//!
//! The child is `sh -c 'read _; exec PROGRAM'`: it waits on its stdin while the counters
//! are opened on its pid with `enable_on_exec`, so counting starts exactly at the exec of
//! PROGRAM (the shell's own start-up is not counted).

use std::io::Write;
use std::process::{Child, Command, Stdio};

use sbs_probes::capability::{probe, MachineFacts};
use sbs_probes::counters::{
    parse_counter_list, plan_series, CounterSet, CounterValue, PerfBackend, PlanOptions,
};
use sbs_skip::{skip, Need};

fn latched(program: &str) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("read _; exec {program}"))
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh")
}

fn count(list: &str, program: &str) -> Vec<CounterValue> {
    let reqs = parse_counter_list(list).unwrap();
    let plan = plan_series(&reqs, PlanOptions::default());
    assert_eq!(plan.len(), 1);
    let mut set = CounterSet::new(plan[0].clone(), Box::new(PerfBackend::default()));
    let mut child = latched(program);
    set.attach(child.id() as i32)
        .expect("open counters on child");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{program}: {status}");
    set.read().expect("read counters")
}

/// Skip (with the reason) when the kernel refuses these events to us.
fn unavailable(list: &str) -> Option<String> {
    let facts = MachineFacts::read();
    parse_counter_list(list)
        .unwrap()
        .iter()
        .map(|r| (r.name(), probe(r, &facts)))
        .find(|(_, s)| !s.is_supported())
        .map(|(n, s)| format!("{n}: {s:?}"))
}

fn value(v: &[CounterValue], name: &str) -> f64 {
    v.iter()
        .find(|c| c.request.name() == name)
        .unwrap_or_else(|| panic!("{name} not in {v:?}"))
        .value
}

#[test]
fn software_counters_see_the_child_from_exec() {
    let list = "task-clock,page-faults,minor-faults,major-faults,context-switches,cpu-migrations";
    if let Some(reason) = unavailable(list) {
        skip!(Need::PerfEvents, "{reason}");
        return;
    }
    let v = count(list, "sleep 0.05");
    for c in &v {
        eprintln!("{:<18} {}", c.request.name(), c.value);
    }
    assert!(
        v.iter().all(|c| !c.scaled && c.running_fraction == 1.0),
        "{v:?}"
    );
    let clock = value(&v, "task-clock");
    assert!(
        clock > 0.0 && clock < 0.05,
        "task-clock {clock} s (sleep is not CPU time)"
    );
    assert!(value(&v, "page-faults") >= 10.0, "{v:?}");
    assert_eq!(
        value(&v, "page-faults"),
        value(&v, "minor-faults") + value(&v, "major-faults")
    );
    // sleep blocks once at least: a voluntary context switch.
    assert!(value(&v, "context-switches") >= 1.0, "{v:?}");
}

#[test]
fn counters_are_inherited_by_children() {
    if let Some(reason) = unavailable("page-faults") {
        skip!(Need::PerfEvents, "{reason}");
        return;
    }
    // The shell forks three `true`s: their page faults add to the shell's.
    let one = value(&count("page-faults", "sh -c true"), "page-faults");
    let three = value(
        &count(
            "page-faults",
            "sh -c 'true; /bin/true; /bin/true; /bin/true'",
        ),
        "page-faults",
    );
    assert!(
        three > one + 2.0 * 20.0,
        "children's faults not inherited: one child {one}, three children {three}"
    );
}

#[test]
fn hardware_counters_where_a_pmu_exists() {
    let facts = MachineFacts::read();
    let reqs = parse_counter_list("instructions,cycles").unwrap();
    if let Some(s) = reqs
        .iter()
        .map(|r| probe(r, &facts))
        .find(|s| !s.is_supported())
    {
        skip!(
            Need::Pmu,
            "hardware counters unavailable on this machine: {s:?}"
        );
        return;
    }
    let v = count("instructions,cycles", "/bin/true");
    let ins = value(&v, "instructions");
    assert!(ins > 10_000.0, "instructions {ins}");
    assert!(value(&v, "cycles") > 0.0);
}
