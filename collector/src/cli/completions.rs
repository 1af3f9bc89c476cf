//! `sbs-profile completions SHELL`: the shell completion script, from the command line's
//! definition (clap_complete), with a repair for bash.

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// The name the script completes.
const BIN: &str = "sbs-profile";

/// The completion script of `sbs-profile` for `shell`.
pub(super) fn script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN, &mut script);
    if shell == Shell::Bash {
        script = repair_bash(&String::from_utf8_lossy(&script)).into_bytes();
    }
    script
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
    fn bash_arms_are_spelt_as_the_loop_sets_them() {
        let script = String::from_utf8(script(Shell::Bash)).unwrap();
        assert!(script.contains(r#"cmd="sbs__profile__subcmd__pinpoint""#));
        assert!(script.contains("\n        sbs__profile__subcmd__pinpoint)\n"));
        assert!(!script.contains("sbs__subcmd__profile"));
    }
}
