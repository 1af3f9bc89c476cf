//! `sbs-profile man`: the manual pages (roff), from the command line's definition
//! (clap_mangen): `sbs-profile(1)`, whose SUBCOMMANDS section refers to one page per
//! subcommand, `sbs-profile-pinpoint(1)` and so on, which `--dir` writes with it and
//! `sbs-profile man pinpoint` prints.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory};

use super::{write_stdout, Cli};

/// Options of `sbs-profile man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print (`pinpoint`: sbs-profile-pinpoint(1)); default:
    /// the main page, sbs-profile(1).
    #[arg(value_name = "SUBCOMMAND")]
    pub page: Option<String>,

    /// Write every page into DIR (created if missing) instead: sbs-profile.1 and one
    /// sbs-profile-SUBCOMMAND.1 per subcommand, e.g. `--dir ~/.local/share/man/man1`.
    #[arg(long, value_name = "DIR", conflicts_with = "page")]
    pub dir: Option<PathBuf>,
}

/// Print one page, or write them all.
pub(super) fn execute(args: &ManArgs) -> anyhow::Result<ExitCode> {
    let cmd = command();
    if let Some(dir) = &args.dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
        for (file, page) in pages(&cmd)? {
            let path = dir.join(&file);
            std::fs::write(&path, page)
                .with_context(|| format!("cannot write the manual page {}", path.display()))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let page = match &args.page {
        None => render(&cmd)?,
        Some(name) => {
            let Some(sub) = cmd.find_subcommand(name) else {
                let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
                anyhow::bail!(
                    "no manual page for `{name}`: the subcommands are {}; \
                     `sbs-profile man` prints the main page",
                    names.join(", ")
                );
            };
            render(sub)?
        }
    };
    write_stdout(&page, "the manual page")
}

/// The command line as the manual shows it: built, so that each subcommand has its page's
/// name (`sbs-profile-pinpoint`), and without clap's `help` subcommand, which has no page.
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The writer of `cmd`'s page, every page with the program's name and version as its
/// source (a subcommand has no version of its own).
fn man(cmd: &clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd.clone()).source(concat!("sbs-profile ", env!("CARGO_PKG_VERSION")))
}

/// The page of `cmd` (the program or one of its subcommands).
fn render(cmd: &clap::Command) -> anyhow::Result<Vec<u8>> {
    let mut page = Vec::new();
    man(cmd)
        .render(&mut page)
        .context("cannot render the manual page")?;
    Ok(page)
}

/// Every page with its file name: `cmd`'s and, recursively, its subcommands'.
fn pages(cmd: &clap::Command) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut all = vec![(man(cmd).get_filename(), render(cmd)?)];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        all.extend(pages(sub)?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_the_main_page_names_is_written() {
        let cmd = command();
        let files: Vec<String> = pages(&cmd).unwrap().into_iter().map(|p| p.0).collect();
        assert_eq!(files[0], "sbs-profile.1");
        let main = String::from_utf8(render(&cmd).unwrap()).unwrap();
        for sub in cmd.get_subcommands() {
            let name = format!("sbs-profile-{}", sub.get_name());
            assert!(files.contains(&format!("{name}.1")), "{files:?}");
            assert!(main.contains(&format!("{}(1)", name.replace('-', "\\-"))));
        }
        assert!(!main.contains("help(1)"), "no page for clap's help");
    }
}
