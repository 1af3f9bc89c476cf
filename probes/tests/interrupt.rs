//! An interrupted definition of uprobes removes what it defined (its own test binary, so
//! that no other test of this process holds definitions or lock files meanwhile). Needs
//! root.

use sbs_probes::tracefs::{ProbeSet, ProbeTarget, Tracefs};
use sbs_skip::{skip, Need};

/// `true` (with the skip recorded) when this machine cannot run the test.
fn skipped() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip!(Need::Root, "uprobes need root");
        return true;
    }
    let tracefs = std::fs::read_to_string("/proc/filesystems").is_ok_and(|list| {
        list.lines()
            .any(|l| l.split_whitespace().last() == Some("tracefs"))
    });
    if !tracefs {
        skip!(
            Need::Tracefs,
            "uprobes need tracefs, absent from /proc/filesystems"
        );
        return true;
    }
    false
}

#[test]
fn an_interrupted_definition_removes_what_it_defined() {
    if skipped() {
        return;
    }
    // This test program's own `main`, 40 times over: what matters is how many are defined.
    let image = sbs_probes::elf::Image::load(&std::env::current_exe().unwrap()).unwrap();
    let main = image.functions.iter().find(|f| f.name == "main").unwrap();
    let targets: Vec<ProbeTarget> = (0..40)
        .map(|_| ProbeTarget {
            path: image.path.clone(),
            offset: main.offset,
            what: "`main`".into(),
        })
        .collect();
    let tracefs = Tracefs::open_or_mount().unwrap();
    let asked = std::cell::Cell::new(0);
    let stop = || {
        asked.set(asked.get() + 1);
        asked.get() > 7
    };
    let err = ProbeSet::define(&tracefs, &targets, &stop).unwrap_err();
    assert!(
        matches!(
            err,
            sbs_probes::ProbeError::Interrupted {
                defined: 7,
                total: 40
            }
        ),
        "{err}"
    );
    // Nothing of this process is left: neither definitions nor lock files.
    let prefix = format!("sbs_profile_{}_", std::process::id());
    let left: Vec<_> = tracefs
        .our_events()
        .unwrap()
        .into_iter()
        .filter(|(g, _)| g.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "definitions left behind: {left:?}");
    let locks: Vec<_> = std::fs::read_dir("/run/sbs-profile")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(locks.is_empty(), "lock files left behind: {locks:?}");
}
