//! Binaries built with sbs-harness (`--bench NAME`, `--harness`, `--list`): build a cargo
//! bench target, ask the binary for its benchmarks, and the arguments that run one of
//! them in a child process. The per-run side is `run::instruments::per_op`.

use std::ffi::OsString;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use sbs_agent_abi::harness::{ARG_LIST, ARG_RUN};

use super::HarnessBinary;

/// One benchmark a harness binary lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Its default parameters, `key=value,...`.
    pub params: String,
    /// Its size parameters: those the operation's cost must depend on.
    pub sizes: Vec<String>,
}

impl Listed {
    /// The size probes of this benchmark with parameter overrides `params`: each size
    /// parameter doubled from its effective value (`KEY=VALUE`), for the constant-input
    /// check. A size whose value is not a whole number has none.
    pub fn size_probes(&self, params: &[String]) -> Vec<String> {
        self.sizes
            .iter()
            .filter_map(|key| {
                let overridden = params.iter().rev().find_map(|p| {
                    p.split_once('=')
                        .filter(|(k, _)| k.trim() == key)
                        .map(|(_, v)| v.trim())
                });
                let default = self.params.split(',').find_map(|kv| {
                    kv.split_once('=')
                        .filter(|(k, _)| k == key)
                        .map(|(_, v)| v.trim())
                });
                let value: u64 = overridden.or(default)?.parse().ok()?;
                Some(format!("{key}={}", value.saturating_mul(2).max(1)))
            })
            .collect()
    }
}

/// Parse `--list` output: `NAME<TAB>PARAMS<TAB>SIZES` per line (the last two optional),
/// or criterion's `NAME: benchmark` (sbs-criterion's bench binaries list as criterion's do).
pub fn parse_list(text: &str) -> Vec<Listed> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut fields = l.split('\t');
            let name = fields.next().unwrap_or_default();
            let name = if l.contains('\t') {
                name
            } else {
                name.strip_suffix(": benchmark").unwrap_or(name)
            };
            let params = fields.next().unwrap_or_default();
            let sizes = fields.next().unwrap_or_default();
            Listed {
                name: name.to_string(),
                params: params.trim().to_string(),
                sizes: sizes
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
            }
        })
        .collect()
}

/// Ask `program` for its benchmarks (those whose name contains one of `filters`).
pub fn list(
    program: &Path,
    filters: &[OsString],
    env: &[(OsString, OsString)],
) -> anyhow::Result<Vec<Listed>> {
    let out = Command::new(program)
        .arg(ARG_LIST)
        .args(filters)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{} {ARG_LIST}`", program.display()))?;
    if !out.status.success() {
        bail!(
            "`{} {ARG_LIST}` failed ({}): {}; is it a benchmark binary built with sbs-harness?",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let listed = parse_list(&String::from_utf8_lossy(&out.stdout));
    if listed.is_empty() {
        bail!(
            "`{} {ARG_LIST}` lists no benchmark{}; check the filter, or that its main calls \
             sbs_harness::Suite::main",
            program.display(),
            if filters.is_empty() {
                String::new()
            } else {
                format!(" matching {filters:?}")
            }
        );
    }
    Ok(listed)
}

/// Every `--param KEY=VALUE` must name a parameter one of the `listed` benchmarks
/// declares: checked before any run.
pub fn check_params(params: &[String], listed: &[Listed]) -> anyhow::Result<()> {
    for p in params {
        let Some((key, _)) = p.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
            bail!("--param {p}: write KEY=VALUE, e.g. --param size=5000");
        };
        let declares = |l: &Listed| {
            l.params
                .split(',')
                .any(|kv| kv.split_once('=').is_some_and(|(k, _)| k == key.trim()))
        };
        if !listed.iter().any(declares) {
            let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
            let declared: Vec<&str> = listed
                .iter()
                .filter(|l| !l.params.is_empty())
                .map(|l| l.params.as_str())
                .collect();
            bail!(
                "parameter `{}` is not declared by {}; declared parameters (with defaults): {}",
                key.trim(),
                names.join(", "),
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            );
        }
    }
    Ok(())
}

/// The child's arguments that run benchmark `name` of `program` once.
pub fn child_args(
    program: &Path,
    name: &str,
    params: &[String],
    samples: usize,
    extra: &[String],
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![program.into(), ARG_RUN.into(), name.into()];
    for p in params {
        args.push("--param".into());
        args.push(p.into());
    }
    args.push("--samples".into());
    args.push(samples.to_string().into());
    args.extend(extra.iter().map(OsString::from));
    args
}

/// The harness binary itself: built from its cargo bench target, or found as `execvp`
/// would find it (in the collector's own `PATH`).
pub fn locate(binary: &HarnessBinary) -> anyhow::Result<PathBuf> {
    match binary {
        HarnessBinary::Bench { name, cargo_args } => build_bench(name, cargo_args),
        HarnessBinary::Path(program) => {
            let path_var = std::env::var_os("PATH");
            super::resolve_program(program, path_var.as_deref())
        }
    }
}

/// Build cargo bench target `name` (release, debug info and symbols kept so probes find
/// functions) and return its executable. `cargo_args` go to cargo as they are.
fn build_bench(name: &str, cargo_args: &[String]) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(&cargo)
        .args([
            "bench",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(["--bench", name])
        .args(cargo_args)
        // Symbols and DWARF for --invocations, whatever the project's profile says.
        .env("CARGO_PROFILE_BENCH_DEBUG", "true")
        .env("CARGO_PROFILE_BENCH_STRIP", "none")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {:?}; is cargo installed?", cargo))?;
    let stdout = child.stdout.take().context("cargo's stdout")?;
    let mut executable = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading cargo's output")?;
        if let Some(exe) = bench_executable(&line, name) {
            executable = Some(exe);
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!(
            "`cargo bench --no-run --bench {name}` failed ({status}); see cargo's messages \
             above. Run sbs-profile from the directory of the package that has the bench \
             target, or name the package with -p PACKAGE"
        );
    }
    executable.with_context(|| {
        format!("cargo built no executable for bench target `{name}`; is it declared as [[bench]] name = \"{name}\"?")
    })
}

/// The executable of bench target `name` from one cargo JSON message, if it is one.
fn bench_executable(line: &str, name: &str) -> Option<PathBuf> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let target = v.get("target")?;
    let is_bench = target
        .get("kind")?
        .as_array()?
        .iter()
        .any(|k| k.as_str() == Some("bench"));
    if !is_bench || target.get("name")?.as_str()? != name {
        return None;
    }
    Some(PathBuf::from(v.get("executable")?.as_str()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_lines() {
        let c = parse_list("g/f/1: benchmark\nhex_encode: benchmark\n");
        assert_eq!(
            c.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
            ["g/f/1", "hex_encode"],
            "criterion's list"
        );
        assert!(c.iter().all(|l| l.params.is_empty() && l.sizes.is_empty()));
        let l = parse_list("a/b\tn=1,k=2\tn\nplain\n\n");
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].name, "a/b");
        assert_eq!(l[0].params, "n=1,k=2");
        assert_eq!(l[0].sizes, ["n"]);
        assert_eq!(l[1].params, "");
        assert!(l[1].sizes.is_empty());
    }

    #[test]
    fn size_probes_double_the_effective_value() {
        let l = &parse_list("a\tn=1000,k=2,s=big\tn,s")[0];
        assert_eq!(l.size_probes(&[]), ["n=2000"]);
        assert_eq!(l.size_probes(&["n=5".into(), "n=7".into()]), ["n=14"]);
        assert_eq!(l.size_probes(&["n=0".into()]), ["n=1"]);
        assert!(parse_list("b\tk=2\t")[0].size_probes(&[]).is_empty());
    }

    #[test]
    fn params_are_checked_against_the_declarations() {
        let l = parse_list("a\tn=1,k=2\nb\t\n");
        assert!(check_params(&["k=5".into(), "n=0".into()], &l).is_ok());
        let e = check_params(&["size=5".into()], &l)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`size` is not declared by a, b") && e.contains("n=1,k=2"),
            "{e}"
        );
        assert!(check_params(&["=5".into()], &l).is_err());
    }

    #[test]
    fn cargo_messages() {
        let msg = r#"{"reason":"compiler-artifact","target":{"kind":["bench"],"name":"wf"},"executable":"/t/release/deps/wf-123"}"#;
        assert_eq!(
            bench_executable(msg, "wf"),
            Some(PathBuf::from("/t/release/deps/wf-123"))
        );
        assert_eq!(bench_executable(msg, "other"), None);
        let lib = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"wf"},"executable":null}"#;
        assert_eq!(bench_executable(lib, "wf"), None);
        assert_eq!(bench_executable("not json", "wf"), None);
    }

    #[test]
    fn child_arguments() {
        let a = child_args(
            Path::new("/b"),
            "x/y",
            &["n=3".into()],
            7,
            &["--cov=0.1".into()],
        );
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert_eq!(
            a,
            [
                "/b",
                "--sbs-run",
                "x/y",
                "--param",
                "n=3",
                "--samples",
                "7",
                "--cov=0.1"
            ]
        );
    }
}
