//! `--invocations` on the copies GCC makes of a function (`tests/fixtures/c/clones.c`):
//! a split part inlined back into its function (partial inlining), a split part left out
//! of line (`.part.0`, entered from the function's head inlined into its callers),
//! `.constprop` and `.isra` clones, a `.cold` part. Each count equals the count the fixture keeps itself,
//! at -O2 and -O3, and at -O0 (no copies) as a cross-check; and on a python built from
//! source with -O3 and DWARF, when one is installed. Needs root (uprobes) and gcc;
//! skipped with a printed reason otherwise.

mod util;

use std::path::Path;

use util::{metric, samples, sbs, skip_without_uprobes};

/// Details (label -> first sample) of a metric, the engine that counted each row
/// (` [inproc]`, ` [uprobe]`) left out of its label.
fn details(m: &serde_json::Value) -> Vec<(String, f64)> {
    m["details"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| {
                    let label = d["label"].as_str().unwrap();
                    let label = label
                        .strip_suffix(" [inproc]")
                        .or_else(|| label.strip_suffix(" [uprobe]"))
                        .unwrap_or(label);
                    (label.to_string(), samples(d)[0])
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The fixture's symbols whose names start with `prefix`.
fn symbols(exe: &Path, prefix: &str) -> Vec<String> {
    let image = sbs_probes::elf::Image::load(exe).unwrap();
    image
        .functions
        .iter()
        .filter(|f| f.name.starts_with(prefix))
        .map(|f| f.name.clone())
        .collect()
}

/// The patterns, with the calls per round.
const PATTERNS: [(&str, u64); 5] = [
    ("my_malloc", 1),
    ("scale", 1),
    ("area", 1),
    ("check", 1),
    ("total", 3),
];

fn count_all(exe: &Path, n: u64, engine: &str) -> serde_json::Value {
    let arg = n.to_string();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--invocations-engine".as_ref(),
        engine.as_ref(),
        "--runs".as_ref(),
        "1".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--invocations-detail".as_ref(),
    ];
    for (p, _) in PATTERNS {
        args.push("--invocations".as_ref());
        args.push(p.as_ref());
    }
    args.push("--".as_ref());
    args.push(exe.as_os_str());
    args.push(arg.as_ref());
    sbs(args).success().json()
}

#[test]
fn clones_and_split_parts_are_counted_once() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    for opt in ["-O0", "-O2", "-O3"] {
        let dir = tempfile::tempdir().unwrap();
        let Some(exe) = util::gcc_fixture(dir.path(), "clones", &[opt]) else {
            return;
        };
        if opt != "-O0" {
            // The fixture means something only if gcc made the copies it is about.
            if opt == "-O2" {
                assert!(
                    !symbols(&exe, "total.part.").is_empty(),
                    "gcc -O2 split total: {:?}",
                    symbols(&exe, "")
                );
            }
            for (prefix, what) in [
                ("scale.constprop.", "a constprop clone"),
                ("area.isra.", "an isra clone"),
                ("check.cold", "a cold part"),
            ] {
                assert!(
                    !symbols(&exe, prefix).is_empty(),
                    "gcc {opt} made {what}: {:?}",
                    symbols(&exe, "")
                );
            }
            let image = sbs_probes::elf::Image::load(&exe).unwrap();
            let pattern = sbs_probes::pattern::Pattern::parse("my_malloc").unwrap();
            let parts = sbs_probes::dwarf::inlined_instances(image.data(), &pattern).unwrap();
            assert!(
                parts.iter().any(|i| i.split_from.is_some()),
                "gcc {opt} split my_malloc and inlined the part back: {parts:?}"
            );
        }
        // Both engines: the clone analysis decides which sites there are, the engine only
        // how each is counted.
        for (n, engine) in [
            (1u64, "uprobe"),
            (1000, "uprobe"),
            (1, "auto"),
            (1000, "auto"),
        ] {
            let report = count_all(&exe, n, engine);
            let nf = n as f64;
            for (p, per_round) in PATTERNS {
                let m = metric(&report, &format!("invocations.{p}"));
                let want = (per_round * n) as f64;
                assert_eq!(samples(m), vec![want], "{opt} N={n} {engine}: {p}: {m:#}");
            }
            if opt == "-O0" {
                continue;
            }
            // The report says which copy it counted.
            let label = |p: &str| details(metric(&report, &format!("invocations.{p}")));
            assert_eq!(label("scale")[0].0, "scale [clone .constprop.0]", "{opt}");
            assert!(label("area")[0].0.starts_with("area [clone "), "{opt}");
            assert_eq!(
                label("my_malloc"),
                vec![("my_malloc".to_string(), nf)],
                "{opt}"
            );
            let warnings = report["benchmarks"][0]["warnings"].to_string();
            assert!(
                warnings.contains("check [clone .cold], split off by the compiler"),
                "{opt}: {warnings}"
            );
            // At -O2 total's head is inlined into its callers and the rest stays out of
            // line, entered from those inlined heads and from total itself.
            if opt == "-O2" {
                assert!(
                    warnings.contains("total [clone .part.0]"),
                    "{opt}: {warnings}"
                );
            }
        }
    }
}

#[test]
fn python_allocator_split_parts_are_not_counted_twice() {
    if skip_without_uprobes("uprobes") {
        return;
    }
    let Some(python) = util::python_o3() else {
        return;
    };
    let run = sbs([
        "--runs".as_ref(),
        "1".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--invocations-detail".as_ref(),
        "--invocations".as_ref(),
        "_PyObject_Malloc".as_ref(),
        "--invocations".as_ref(),
        "_PyObject_Free".as_ref(),
        "--".as_ref(),
        python.as_os_str(),
        "-c".as_ref(),
        "pass".as_ref(),
    ])
    .success();
    let report = run.json();
    // GCC 12 -O3 split the fallbacks of both functions off and inlined them back; DWARF
    // shows them as inlined instances of the functions themselves, which were counted on
    // top of the functions' entries. What remains: the entries of the out-of-line copies
    // and the real inlined copy of _PyObject_Malloc in _PyObject_Realloc.
    let malloc = metric(&report, "invocations._PyObject_Malloc");
    let rows = details(malloc);
    run.check(
        !rows
            .iter()
            .any(|(l, _)| l.contains("inlined in _PyObject_Malloc")),
        "no row for the split part inlined back into _PyObject_Malloc",
    );
    let entries: f64 = rows
        .iter()
        .filter(|(l, _)| l == "_PyObject_Malloc [libpython3.11.so.1.0]")
        .map(|(_, v)| v)
        .sum();
    let realloc: f64 = rows
        .iter()
        .filter(|(l, _)| l.contains("[inlined in _PyObject_Realloc at Objects/obmalloc.c:2351"))
        .map(|(_, v)| v)
        .sum();
    assert!(entries > 10_000.0, "{malloc:#}");
    // Its fallback is entered from the caller's code and by a jump from its own size
    // check: probed on the way in from the caller, it is counted once per call, exactly.
    let realloc_rows: Vec<&String> = rows
        .iter()
        .map(|(l, _)| l)
        .filter(|l| l.contains("inlined in _PyObject_Realloc"))
        .collect();
    assert_eq!(realloc_rows.len(), 1, "{malloc:#}");
    assert!(!realloc_rows[0].contains("uncertain"), "{malloc:#}");
    assert_eq!(samples(malloc), vec![entries + realloc], "{malloc:#}");
    let free = metric(&report, "invocations._PyObject_Free");
    assert_eq!(
        details(free).len(),
        1,
        "only the out-of-line _PyObject_Free: {free:#}"
    );
}
