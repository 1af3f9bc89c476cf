//! `sbs-profile compare`: every positional argument is one command, split into words the
//! way a shell would (no shell runs it); the commands run interleaved and each later one
//! is judged against the first.

use std::ffi::OsString;

use anyhow::{bail, Context};

use super::{harness_target, shell_argv, RunArgs};
use crate::plan::Target;

/// The commands of `compare`, each with its name (given with `-n`, or its text; the same
/// command twice, an A/A test, gets distinct names).
pub(super) fn targets(args: &RunArgs) -> anyhow::Result<Vec<Target>> {
    if args.parameter_scan.is_some() || args.parameter_list.is_some() {
        bail!(
            "compare does not scan parameters; scan each command in a run of its own \
             (sbs-profile -P ... -- CMD {{NAME}}), and compare them through the history"
        );
    }
    if args.command.len() < 2 {
        bail!(
            "compare needs at least two commands, each one quoted argument, e.g. \
             sbs-profile compare './old --n 100' './new --n 100'"
        );
    }
    if !args.name.is_empty() && args.name.len() != args.command.len() {
        bail!(
            "compare got {} --name for {} commands: name every command, in order, or none",
            args.name.len(),
            args.command.len()
        );
    }
    if let Some(dup) = args
        .name
        .iter()
        .enumerate()
        .find_map(|(i, n)| args.name[..i].contains(n).then_some(n))
    {
        bail!("compare got the name `{dup}` twice; each command needs its own name");
    }
    if args.replay.is_some() {
        bail!("--replay does not apply to compare; replay one build with --save and compare it with the next through --baseline");
    }
    let mut texts: Vec<&str> = Vec::new();
    let mut targets = Vec::new();
    for (i, command) in args.command.iter().enumerate() {
        let text = command.to_str().with_context(|| {
            format!("command {command:?} is not valid UTF-8; compare takes commands as text")
        })?;
        let words: Vec<OsString> = if args.shell.is_some() {
            if args.bench.is_some() || args.harness {
                bail!(
                    "--shell does not apply to --bench or --harness: their binary is run directly"
                );
            }
            shell_argv(args, text)?
        } else {
            shlex::split(text)
                .with_context(|| format!("cannot split `{text}` into words: check its quotes"))?
                .into_iter()
                .map(OsString::from)
                .collect()
        };
        if words.is_empty() {
            bail!(
                "command {} of compare is empty: give each command as one quoted argument \
                 naming its program, e.g. sbs-profile compare './old --n 100' './new --n 100'",
                i + 1
            );
        }
        let text = text.trim();
        let earlier = texts.iter().filter(|t| **t == text).count();
        texts.push(text);
        let name = if let Some(name) = args.name.get(i) {
            name.clone()
        } else if earlier == 0 {
            text.to_string()
        } else {
            format!("{text} #{}", earlier + 1)
        };
        targets.push(if args.bench.is_some() || args.harness {
            let mut one = args.clone();
            one.command = words;
            Target::Harness(harness_target(&one)?)
        } else {
            Target::Command {
                argv: words,
                name: Some(name),
            }
        });
    }
    Ok(targets)
}
