//! `sbs-profile completions SHELL`: the shell completion script, from the command line's
//! definition (clap_complete), with a repair for bash and one hook: the value of `--bench`
//! is completed with the bench targets of the cargo workspace the shell is in, which the
//! hidden `sbs-profile bench-targets` lists from `cargo metadata`. (clap_complete's static
//! scripts can only complete fixed values; its dynamic completion would replace the whole
//! script with calls into the program for every word.)

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap_complete::Shell;

/// The name the script completes.
const BIN: &str = "sbs-profile";

/// The hidden subcommand that lists the bench targets.
pub const BENCH_TARGETS: &str = "bench-targets";

/// The completion script of `sbs-profile` for `shell`.
pub(super) fn script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut super::help::command(), BIN, &mut script);
    let text = String::from_utf8_lossy(&script).into_owned();
    match shell {
        Shell::Bash => bench_hook_bash(&repair_bash(&text)).into_bytes(),
        Shell::Zsh => bench_hook_zsh(&text).into_bytes(),
        Shell::Fish => bench_hook_fish(&text).into_bytes(),
        _ => script,
    }
}

/// The command that prints the bench targets, silent where there are none.
fn lister() -> String {
    format!("{BIN} {BENCH_TARGETS} 2>/dev/null")
}

/// bash: the `--bench` arm offers the bench targets instead of file names.
fn bench_hook_bash(script: &str) -> String {
    let files =
        "                --bench)\n                    COMPREPLY=($(compgen -f \"${cur}\"))";
    let targets = format!(
        "                --bench)\n                    COMPREPLY=($(compgen -W \"$({})\" -- \"${{cur}}\"))",
        lister()
    );
    script.replace(files, &targets)
}

/// zsh: the action of `--bench=` lists the bench targets.
fn bench_hook_zsh(script: &str) -> String {
    script
        .lines()
        .map(|line| match line.contains("--bench=[") {
            true => line.replacen(
                ":NAME:_default'",
                &format!(":NAME:{{compadd -- $({})}}'", lister()),
                1,
            ),
            false => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// fish: `--bench` takes no file names, and its values are the bench targets.
fn bench_hook_fish(script: &str) -> String {
    script
        .lines()
        .map(
            |line| match line.contains(" -l bench ") && line.ends_with(" -r") {
                true => format!("{line} -f -a \"({})\"", lister()),
                false => line.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// `sbs-profile bench-targets`: the bench targets of the workspace in the current
/// directory (`cargo metadata --no-deps`), one per line, sorted, for the completions.
pub(super) fn bench_targets() -> anyhow::Result<ExitCode> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(&cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .stderr(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run {cargo:?} metadata; is cargo installed?"))?;
    if !out.status.success() {
        anyhow::bail!(
            "`cargo metadata` failed ({}): not in a cargo project?",
            out.status
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("cannot read cargo metadata's output")?;
    let mut names = bench_names(&meta);
    names.sort();
    names.dedup();
    let mut text = names.join("\n");
    text.push('\n');
    if names.is_empty() {
        text.clear();
    }
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.context("cannot write the bench targets")?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The names of the `bench` targets of every package in `cargo metadata`'s output.
fn bench_names(meta: &serde_json::Value) -> Vec<String> {
    let packages = meta["packages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    packages
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bench"))
        })
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// clap_complete's bash script tracks the subcommand being completed in a variable, set
/// by a loop over the words and then matched by one arm per subcommand. For a program
/// whose name has a hyphen the two spell it differently (clap-rs/clap#6421): the loop
/// writes `sbs__profile__subcmd__pinpoint`, the arm matches
/// `sbs__subcmd__profile__subcmd__pinpoint`, so no subcommand's options were ever
/// completed. Spell the arms as the loop does; a script without the misspelling (a fixed
/// clap_complete) is left as it is.
fn repair_bash(script: &str) -> String {
    let sep = "__subcmd__";
    let wrong = format!("{}{sep}", BIN.replace('-', sep));
    let right = format!("{}{sep}", BIN.replace('-', "__"));
    script.replace(&wrong, &right)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_is_completed_with_the_bench_targets_in_every_shell() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(script(shell)).unwrap();
            let hooks = script.matches(&lister()).count();
            // The run and `compare` both take --bench.
            assert_eq!(hooks, 2, "{shell}: {hooks} hooks");
        }
    }

    #[test]
    fn bench_names_are_the_bench_targets() {
        let meta = serde_json::json!({"packages": [
            {"targets": [{"name": "lib", "kind": ["lib"]}, {"name": "b1", "kind": ["bench"]}]},
            {"targets": [{"name": "b2", "kind": ["bench"]}, {"name": "t", "kind": ["test"]}]},
        ]});
        assert_eq!(bench_names(&meta), ["b1", "b2"]);
    }

    #[test]
    fn bash_arms_are_spelt_as_the_loop_sets_them() {
        let script = String::from_utf8(script(Shell::Bash)).unwrap();
        assert!(script.contains(r#"cmd="sbs__profile__subcmd__pinpoint""#));
        assert!(script.contains("\n        sbs__profile__subcmd__pinpoint)\n"));
        assert!(!script.contains("sbs__subcmd__profile"));
    }
}
