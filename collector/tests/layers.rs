//! The collector's layers import only downwards, and only the command layer knows clap:
//! `cli` > `output` > `plan` > `check` > `pinpoint` > `run` > `judge` > `history`. A file that imports a layer
//! above its own, or names clap outside `cli/` and `main.rs`, fails here with its path.

use std::path::{Path, PathBuf};

/// Layers from the top; a file may import its own layer and those after it.
const LAYERS: [&str; 8] = [
    "cli", "output", "plan", "check", "pinpoint", "run", "judge", "history",
];

fn layer_of(relative: &Path) -> Option<usize> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    LAYERS.iter().position(|l| *l == name)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read collector/src") {
        let path = entry.expect("list collector/src").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file, without line comments (doc comments may name any layer).
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .expect("read a source file")
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn layers_import_only_downwards_and_only_the_command_layer_knows_clap() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "collector/src holds {} files",
        files.len()
    );
    let mut problems = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(&src).expect("under src");
        let text = code(path);
        let in_command_layer = relative.starts_with("cli") || relative == Path::new("main.rs");
        if !in_command_layer && text.contains("clap") {
            problems.push(format!(
                "{}: names clap below the command layer",
                relative.display()
            ));
        }
        let Some(own) = layer_of(relative) else {
            continue;
        };
        for name in LAYERS.iter().take(own) {
            if text.contains(&format!("crate::{name}")) {
                problems.push(format!(
                    "{}: layer `{}` imports `crate::{name}`, a layer above it",
                    relative.display(),
                    LAYERS[own]
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_sees_a_violation() {
    // The scan itself: a file under judge/ that imports the plan is caught.
    assert_eq!(layer_of(Path::new("judge/compare/mod.rs")), Some(6));
    assert_eq!(layer_of(Path::new("pinpoint/search.rs")), Some(4));
    assert_eq!(layer_of(Path::new("output.rs")), Some(1));
    assert_eq!(layer_of(Path::new("lib.rs")), None);
}
