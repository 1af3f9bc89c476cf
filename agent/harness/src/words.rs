//! The command line of a bench binary as cargo bench and libtest pass it, for the
//! criterion and divan drop-ins: `--flag value`, `--flag=value`, short flags (also
//! grouped), and every other word, as everything after `--`, a filter. Each drop-in
//! decides what its flags mean; errors end in the advice to run with `--help`.

/// One word of the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// A flag, written `--name` or `-c` whatever form it came in.
    Flag(String),
    /// A filter (a positional word, or one after `--`).
    Filter(String),
}

/// The words of a command line, read one at a time.
pub struct Words {
    parser: lexopt::Parser,
}

impl Words {
    /// The words of `args` (without the program's name).
    pub fn new(args: &[String]) -> Words {
        Words {
            parser: lexopt::Parser::from_args(args),
        }
    }

    /// The next word; `None` at the end.
    pub fn next_word(&mut self) -> Result<Option<Word>, String> {
        let arg = self
            .parser
            .next()
            .map_err(|e| format!("{e}; run with --help for the options"))?;
        Ok(arg.map(|arg| match arg {
            lexopt::Arg::Long(name) => Word::Flag(format!("--{name}")),
            lexopt::Arg::Short(c) => Word::Flag(format!("-{c}")),
            lexopt::Arg::Value(v) => Word::Filter(v.to_string_lossy().into_owned()),
        }))
    }

    /// The value of `flag`, just read: the next word, or what followed its `=`.
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        match self.parser.value() {
            Ok(v) => Ok(v.to_string_lossy().into_owned()),
            Err(_) => Err(format!(
                "{flag} needs a value; run with --help for the options"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_values_grouped_shorts_and_filters() {
        let args: Vec<String> = ["--bench", "--skip=a", "--exact", "b", "-hq", "--", "--c"]
            .map(String::from)
            .to_vec();
        let mut w = Words::new(&args);
        let flag = |s: &str| Some(Word::Flag(s.into()));
        assert_eq!(w.next_word().unwrap(), flag("--bench"));
        assert_eq!(w.next_word().unwrap(), flag("--skip"));
        assert_eq!(w.value("--skip").unwrap(), "a");
        assert_eq!(w.next_word().unwrap(), flag("--exact"));
        assert_eq!(w.next_word().unwrap(), Some(Word::Filter("b".into())));
        assert_eq!(w.next_word().unwrap(), flag("-h"));
        assert_eq!(w.next_word().unwrap(), flag("-q"));
        assert_eq!(w.next_word().unwrap(), Some(Word::Filter("--c".into())));
        assert_eq!(w.next_word().unwrap(), None);
        let mut w = Words::new(&["--skip".to_string()]);
        w.next_word().unwrap();
        assert!(w
            .value("--skip")
            .unwrap_err()
            .contains("--skip needs a value"));
    }
}
