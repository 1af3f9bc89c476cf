//! `sbs-profile pinpoint` on a real crate nobody here wrote: serde_json 1.0.145 from the
//! registry (util::registry), parsing a generated document into `Value`s, built by cargo
//! in release with debug info three times: as published, with a checksum loop planted in
//! `ValueVisitor::visit_u64` (inlined into the recursive `Value::deserialize`), and with
//! one extra allocation planted in `SliceRead::parse_str_bytes` (inlined into
//! `StrRead::parse_str`). From `main`, pinpoint must name the planted function and its
//! lines, in one run per build; the published build against itself names nothing.
//! The sources and builds are kept in the test cache, outside the clone. Needs valgrind;
//! skipped with a printed reason without it.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sbs_skip::{skip, Need};
use util::registry::{self, RegistryCrate};
use util::{chain, sbs, Finished};

const VERSION: &str = "1.0.145";

/// The driver: a document of `N` objects (numbers, strings, nested arrays and objects),
/// parsed `ROUNDS` times into `Value`s.
const DRIVER: &str = r#"use serde_json::Value;

#[inline(never)]
fn build_doc(n: usize) -> String {
    let mut doc = String::from("[");
    for i in 0..n {
        if i > 0 {
            doc.push(',');
        }
        doc.push_str(&format!(
            "{{\"id\":{i},\"name\":\"item{i}\",\"tags\":[\"a\",\"b\",{}],\"pos\":[{},{}],\"nested\":{{\"depth\":[{i},[{}]]}}}}",
            i * 7 + 1,
            i * 3 + 11,
            i * 5 + 13,
            i + 100
        ));
    }
    doc.push(']');
    doc
}

#[inline(never)]
fn parse_values(doc: &str, rounds: usize) -> usize {
    let mut total = 0;
    for _ in 0..rounds {
        let v: Value = serde_json::from_str(doc).expect("valid JSON");
        total += v.as_array().map_or(0, |a| a.len());
    }
    total
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    let rounds: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let doc = build_doc(n);
    println!("{} {}", doc.len(), parse_values(&doc, rounds));
}
"#;

/// A change planted in serde_json: `added` after the line `anchor` of `file`.
struct Plant {
    suffix: &'static str,
    file: &'static str,
    anchor: &'static str,
    added: &'static str,
}

/// 60 rounds of a checksum per integer parsed, in a function inlined in release.
const CHECKSUM: Plant = Plant {
    suffix: "checksum",
    file: "src/value/de.rs",
    anchor: "            fn visit_u64<E>(self, value: u64) -> Result<Value, E> {",
    added: "                let mut check = value;
                for round in 0..60u64 {
                    check = core::hint::black_box(check.rotate_left(5) ^ round);
                }
                core::hint::black_box(check);",
};

/// One more allocation per string parsed, in a function inlined in release.
const EXTRA_BLOCK: Plant = Plant {
    suffix: "extra-block",
    file: "src/read.rs",
    anchor: "        let mut start = self.index;",
    added: "        core::hint::black_box(Vec::<u8>::with_capacity(8));",
};

/// The three builds, and where the planted copies are.
struct Builds {
    published: PathBuf,
    checksum: PathBuf,
    extra_block: PathBuf,
    /// The published build copied to another path (an A/A pair of files).
    published_copy: PathBuf,
    checksum_dir: PathBuf,
    extra_block_dir: PathBuf,
}

/// Write `text` to `path` unless it holds it already (a cached build stays fresh).
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).expect("write a driver file");
    }
}

/// Build the driver against `dependency` (a manifest line), in a package and a target
/// directory of its own under `root`: the builds share the package's name, so that their
/// functions have the same names, and the executable's path.
fn build_driver(root: &Path, variant: &str, dependency: &str) -> PathBuf {
    let dir = root.join(variant);
    std::fs::create_dir_all(dir.join("src")).expect("create the driver package");
    write_if_changed(
        &dir.join("Cargo.toml"),
        &format!(
            "[package]\nname = \"jsondriver\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\n{dependency}\n\n[profile.release]\ndebug = true\n\n[workspace]\n"
        ),
    );
    write_if_changed(&dir.join("src/main.rs"), DRIVER);
    let target = root.join(format!("target-{variant}"));
    let built = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "-q", "--release", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo");
    assert!(
        built.status.success(),
        "cargo build of the serde_json driver ({variant}; crates.io must be reachable the \
         first time): {}",
        String::from_utf8_lossy(&built.stderr)
    );
    target.join("release/jsondriver")
}

fn path_dependency(dir: &Path) -> String {
    format!("serde_json = {{ path = \"{}\" }}", dir.display())
}

fn make_builds() -> Builds {
    let krate: RegistryCrate = registry::fetch("serde_json", VERSION);
    let plant = |p: &Plant| krate.planted(p.suffix, p.file, p.anchor, p.added);
    let (checksum_dir, extra_block_dir) = (plant(&CHECKSUM), plant(&EXTRA_BLOCK));
    let root = krate
        .dir
        .parent()
        .expect("the checkout's directory")
        .join("pinpoint-drivers");
    let published = build_driver(&root, "published", &format!("serde_json = \"={VERSION}\""));
    let published_copy = root.join("published-copy");
    std::fs::copy(&published, &published_copy).expect("copy the published build");
    Builds {
        checksum: build_driver(&root, "checksum", &path_dependency(&checksum_dir)),
        extra_block: build_driver(&root, "extra-block", &path_dependency(&extra_block_dir)),
        published,
        published_copy,
        checksum_dir,
        extra_block_dir,
    }
}

/// The builds (made once for all the tests of this file), or `None` (a recorded skip).
fn builds() -> Option<&'static Builds> {
    let installed = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        skip!(
            Need::Valgrind,
            "valgrind is not installed (sudo apt-get install -y valgrind)"
        );
        return None;
    }
    static BUILDS: OnceLock<Builds> = OnceLock::new();
    Some(BUILDS.get_or_init(make_builds))
}

fn pinpoint(previous: &Path, current: &Path, metric: &str) -> Finished {
    sbs([
        "pinpoint".as_ref(),
        "--metric".as_ref(),
        metric.as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--previous".as_ref(),
        previous.as_os_str(),
        "--".as_ref(),
        current.as_os_str(),
    ])
}

/// The lines `plant` added, as `file:line` endings of its planted copy.
fn planted_lines(dir: &Path, plant: &Plant) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(plant.file)).expect("the planted file");
    let first = 1 + text
        .lines()
        .position(|l| l == plant.anchor)
        .expect("the anchor");
    let n = plant.added.lines().count();
    (first + 1..=first + n)
        .map(|l| format!("{}:{l}", plant.file))
        .collect()
}

/// The `what` of each place inside the bottleneck.
fn inside(run: &Finished) -> Vec<String> {
    let v = run.json();
    v["pinpoint"]["inside"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["what"].as_str().map(str::to_string))
        .collect()
}

/// Whether the report was made from one run per build (the counts repeated).
fn one_run_each(run: &Finished) -> bool {
    let v = run.json();
    v["pinpoint"]["runs"] == 1 && v["pinpoint"]["repeated"] == true
}

#[test]
fn instructions_name_the_inlined_function_of_serde_json_and_its_planted_lines() {
    let Some(b) = builds() else { return };
    let run = pinpoint(&b.published, &b.checksum, "instructions");
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let c = chain(&run);
    run.check(
        c.first().is_some_and(|m| m == "jsondriver::main") && c.len() >= 4,
        "the chain starts at the driver's main",
    );
    run.check(one_run_each(&run), "one run per build");
    let v = run.json();
    let p = &v["pinpoint"];
    // The recursion is one node: the bottleneck is Value::deserialize, whose own code
    // holds the inlined visitor.
    run.check(
        p["bottleneck"]
            .as_str()
            .is_some_and(|b| b.ends_with("Value>::deserialize")),
        "Value::deserialize is the bottleneck",
    );
    run.check(p["stop"] == "own_code", "its own code changed");
    let places = inside(&run);
    run.check(
        places.iter().any(|w| {
            w.starts_with("inlined ") && w.contains("ValueVisitor") && w.contains("visit_u64")
        }),
        "the steps reach the inlined visit_u64",
    );
    let lines = planted_lines(&b.checksum_dir, &CHECKSUM);
    let named: Vec<&String> = places
        .iter()
        .filter(|w| lines.iter().any(|l| w.ends_with(l.as_str())))
        .collect();
    run.check(
        named.len() >= 2,
        &format!("the planted lines ({lines:?}) are named"),
    );
}

#[test]
fn allocations_name_the_inlined_function_of_serde_json_and_its_planted_line() {
    let Some(b) = builds() else { return };
    let run = pinpoint(&b.published, &b.extra_block, "alloc");
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    run.check(
        chain(&run).first().is_some_and(|m| m == "jsondriver::main"),
        "the chain starts at the driver's main",
    );
    run.check(one_run_each(&run), "one run per build");
    let v = run.json();
    let p = &v["pinpoint"];
    run.check(
        p["bottleneck"]
            .as_str()
            .is_some_and(|b| b.ends_with("StrRead as serde_json::read::Read>::parse_str")),
        "StrRead::parse_str is the bottleneck",
    );
    run.check(
        p["stop"] == "call_list_changed",
        "it calls the allocator more",
    );
    let places = inside(&run);
    run.check(
        places.contains(&"inlined serde_json::read::SliceRead::parse_str_bytes".to_string()),
        "the steps reach the inlined parse_str_bytes",
    );
    let line = &planted_lines(&b.extra_block_dir, &EXTRA_BLOCK)[0];
    run.check(
        places.iter().any(|w| w.ends_with(line.as_str())),
        &format!("the planted line ({line}) is named"),
    );
}

#[test]
fn the_published_build_against_itself_names_nothing() {
    let Some(b) = builds() else { return };
    for metric in ["instructions", "alloc"] {
        let run = pinpoint(&b.published, &b.published_copy, metric);
        assert_eq!(run.code(), Some(0), "{metric}: {}", run.stderr());
        let v = run.json();
        run.check(v["pinpoint"]["bottleneck"].is_null(), "no bottleneck");
        run.check(chain(&run) == ["jsondriver::main"], "main alone");
        run.check(one_run_each(&run), "one run per build");
    }
}
