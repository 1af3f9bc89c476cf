//! `sbs-profile man`: the manual pages (roff), from the command line's definition
//! (clap_mangen, with the headings of [`super::help`]): `sbs-profile(1)`, whose SUBCOMMANDS
//! section refers to one page per subcommand, `sbs-profile-pinpoint(1)` and so on, which
//! `--dir` writes with it and `sbs-profile man pinpoint` prints. On a terminal the page is
//! shown through `man -l -` (which pages it); into a pipe or a file it is printed as roff.
//! The SYNOPSIS lists the forms of the command line, not every option (the option sections
//! do that, one per heading).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context;
use clap::Args;

use super::write_stdout;

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
    if std::io::stdout().is_terminal() && show(&page)? {
        return Ok(ExitCode::SUCCESS);
    }
    write_stdout(&page, "the manual page")
}

/// Show `page` through `man -l -` (formatted, in the user's pager); false where `man`
/// cannot be started, so the caller prints the roff instead.
fn show(page: &[u8]) -> anyhow::Result<bool> {
    let child = Command::new("man")
        .args(["-l", "-"])
        .stdin(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("sbs-profile: `man` could not be started, so the page is printed as roff");
        return Ok(false);
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A pager the user quits early closes the pipe: not an error.
        match stdin.write_all(page) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.context("cannot hand the manual page to `man`")?,
        }
    }
    let status = child.wait().context("waiting for `man`")?;
    if !status.success() {
        anyhow::bail!(
            "`man -l -` failed ({status}); `sbs-profile man | less` shows the page's roff"
        );
    }
    Ok(true)
}

/// The command line as the manual shows it: built, so that each subcommand has its page's
/// name (`sbs-profile-pinpoint`), and without clap's `help` subcommand, which has no page.
fn command() -> clap::Command {
    let mut cmd = super::help::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The writer of `cmd`'s page, every page with the program's name and version as its
/// source (a subcommand has no version of its own).
fn man(cmd: &clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd.clone()).source(concat!("sbs-profile ", env!("CARGO_PKG_VERSION")))
}

/// The page of `cmd` (the program or one of its subcommands): clap_mangen's sections, with
/// a SYNOPSIS of the command line's forms instead of one line of every option.
fn render(cmd: &clap::Command) -> anyhow::Result<Vec<u8>> {
    let m = man(cmd);
    let mut page = Vec::new();
    (|| -> std::io::Result<()> {
        m.render_title(&mut page)?;
        m.render_name_section(&mut page)?;
        page.extend_from_slice(b".SH SYNOPSIS\n");
        for (i, form) in synopsis(cmd).iter().enumerate() {
            if i > 0 {
                page.extend_from_slice(b".br\n");
            }
            page.extend_from_slice(roff_synopsis(form).as_bytes());
            page.push(b'\n');
        }
        m.render_description_section(&mut page)?;
        if cmd.get_arguments().any(|a| !a.is_hide_set()) {
            m.render_options_section(&mut page)?;
        }
        if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
            m.render_subcommands_section(&mut page)?;
        }
        if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
            m.render_extra_section(&mut page)?;
        }
        if cmd.get_version().is_some() {
            m.render_version_section(&mut page)?;
        }
        Ok(())
    })()
    .context("cannot render the manual page")?;
    // Each section clap_mangen renders apart starts with the same two-line preamble; the
    // page needs it once.
    let preamble = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";
    let text = String::from_utf8_lossy(&page).into_owned();
    let mut once = String::with_capacity(text.len());
    let mut rest = text.as_str();
    if let Some(at) = rest.find(preamble) {
        once.push_str(&rest[..at + preamble.len()]);
        rest = &rest[at + preamble.len()..];
    }
    once.push_str(&rest.replace(preamble, ""));
    Ok(once.into_bytes())
}

/// The forms of `cmd`'s command line, one per line of the SYNOPSIS: `NAME [OPTIONS]` and its
/// positional arguments; for the program itself, also its harness forms and each
/// subcommand's form.
fn synopsis(cmd: &clap::Command) -> Vec<String> {
    let name = cmd
        .get_bin_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    let form = |c: &clap::Command, prefix: &str| {
        let mut line = format!("{prefix} [OPTIONS]");
        for p in c.get_positionals().filter(|p| !p.is_hide_set()) {
            let value = p
                .get_value_names()
                .and_then(|v| v.first())
                .map_or_else(|| p.get_id().to_string(), |v| v.to_string());
            let many = p.get_num_args().is_some_and(|n| n.max_values() > 1);
            let value = if many { format!("{value}...") } else { value };
            match p.is_required_set() {
                true => line.push_str(&format!(" {value}")),
                false if many && c.get_subcommands().next().is_some() => {
                    line.push_str(&format!(" [--] {value}"))
                }
                false => line.push_str(&format!(" [{value}]")),
            }
        }
        line
    };
    let mut forms = vec![form(cmd, &name)];
    if cmd.get_arguments().any(|a| a.get_id() == "bench") && cmd.get_subcommands().next().is_some()
    {
        forms.push(format!("{name} [OPTIONS] --bench NAME [-- FILTER...]"));
        forms.push(format!(
            "{name} [OPTIONS] --harness [--] BINARY [FILTER...]"
        ));
    }
    let mut subs: Vec<&clap::Command> =
        cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    subs.sort_by_key(|s| s.get_display_order());
    for sub in subs {
        forms.push(form(sub, &format!("{name} {}", sub.get_name())));
    }
    forms
}

/// One form of the SYNOPSIS in roff: words in capitals (the values to fill in) in italics,
/// the program, subcommands and options in bold, brackets and dots in roman.
fn roff_synopsis(form: &str) -> String {
    let mut out = String::new();
    let mut chars = form.chars().peekable();
    while let Some(&c) = chars.peek() {
        let word: String = if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            let mut w = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    w.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            w
        } else {
            chars.next();
            out.push(c);
            continue;
        };
        let escaped = word.replace('-', "\\-");
        let capitals = word.chars().any(|c| c.is_ascii_uppercase())
            && !word.chars().any(|c| c.is_ascii_lowercase());
        match capitals {
            true => out.push_str(&format!("\\fI{escaped}\\fR")),
            false => out.push_str(&format!("\\fB{escaped}\\fR")),
        }
    }
    out
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
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = format!("sbs-profile-{}", sub.get_name());
            assert!(files.contains(&format!("{name}.1")), "{files:?}");
            assert!(main.contains(&format!("{}(1)", name.replace('-', "\\-"))));
        }
        assert!(!main.contains("help(1)"), "no page for clap's help");
    }

    #[test]
    fn the_synopsis_shows_the_forms_not_every_option() {
        let cmd = command();
        let main = String::from_utf8(render(&cmd).unwrap()).unwrap();
        let synopsis =
            &main[main.find(".SH SYNOPSIS").unwrap()..main.find(".SH DESCRIPTION").unwrap()];
        assert!(synopsis.lines().count() <= 20, "{synopsis}");
        assert!(!synopsis.contains("export"), "{synopsis}");
        assert!(
            synopsis.contains(
                "\\fBsbs\\-profile\\fR [\\fIOPTIONS\\fR] [\\fB\\-\\-\\fR] \\fICOMMAND\\fR..."
            ),
            "{synopsis}"
        );
        assert!(
            synopsis.contains("\\fB\\-\\-bench\\fR \\fINAME\\fR"),
            "{synopsis}"
        );
        assert!(synopsis.contains("\\fBcompare\\fR"), "{synopsis}");
        // The options come in one section per heading.
        assert!(main.contains(".SH \"WHAT TO MEASURE\""), "{main:.3000}");
        assert!(main.contains(".SH HISTORY"), "{main:.3000}");
    }
}
