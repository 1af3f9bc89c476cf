//! `-P NAME START END [-D STEP]` and `-L NAME a,b,c`: the values of a parameter scan,
//! listed for the plan (see docs/scans.md).

use super::args::RunArgs;
use crate::plan::ScanRequest;

/// The most points a scan may have.
const MAX_SCAN_POINTS: usize = 10_000;

impl RunArgs {
    /// The scan of `-P`/`-L`, its values listed; `None` without either.
    pub fn scan(&self) -> anyhow::Result<Option<ScanRequest>> {
        if let Some(list) = &self.parameter_list {
            let [name, values] = list.as_slice() else {
                anyhow::bail!("-L takes a NAME and VALUES, e.g. -L size 10,100,1000");
            };
            check_parameter_name(name)?;
            let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
            if values.iter().any(String::is_empty) {
                anyhow::bail!(
                    "-L {name}: an empty value in the list; separate values with single commas"
                );
            }
            return Ok(Some(ScanRequest {
                parameter: name.clone(),
                values,
            }));
        }
        let Some(range) = &self.parameter_scan else {
            return Ok(None);
        };
        let [name, start, end] = range.as_slice() else {
            anyhow::bail!("-P takes NAME START END, e.g. -P size 100 1000 -D 100");
        };
        check_parameter_name(name)?;
        let number = |what: &str, v: &str| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| anyhow::anyhow!("-P {name}: {what} `{v}` is not a number"))
        };
        let (a, b) = (number("START", start)?, number("END", end)?);
        let step_text = self.parameter_step_size.as_deref().unwrap_or("1");
        let step = number("STEP", step_text)?;
        if step <= 0.0 {
            anyhow::bail!("-D {step_text}: the step must be positive");
        }
        if b < a {
            anyhow::bail!(
                "-P {name} {start} {end}: END is below START; give them in increasing order"
            );
        }
        let count = ((b - a) / step + 1e-9).floor() + 1.0;
        if count > MAX_SCAN_POINTS as f64 {
            anyhow::bail!(
                "-P {name} {start} {end} with step {step_text} is {count} points, more than \
                 {MAX_SCAN_POINTS}; take a larger -D"
            );
        }
        let integral = [a, b, step].iter().all(|x| x.fract() == 0.0);
        let decimals = step_text.split_once('.').map(|(_, f)| f.len()).unwrap_or(0);
        let values = (0..count as usize)
            .map(|i| {
                let x = a + step * i as f64;
                if integral {
                    format!("{}", x as i64)
                } else {
                    format!("{x:.decimals$}")
                }
            })
            .collect();
        Ok(Some(ScanRequest {
            parameter: name.clone(),
            values,
        }))
    }
}

fn check_parameter_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        anyhow::bail!(
            "`{name}` is not a parameter name; use letters, digits, `_` and `-` (it appears as \
             {{{name}}} in the command)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_of(args: &[&str]) -> anyhow::Result<Option<ScanRequest>> {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(
            ["sbs-profile"]
                .iter()
                .chain(args)
                .chain(&["--", "p", "{n}"]),
        )?;
        cli.run.scan()
    }

    #[test]
    fn scans_list_their_values() {
        let values = |args: &[&str]| scan_of(args).unwrap().unwrap().values;
        assert_eq!(values(&["-P", "n", "1", "5"]), ["1", "2", "3", "4", "5"]);
        assert_eq!(
            values(&["-P", "n", "100", "350", "-D", "100"]),
            ["100", "200", "300"]
        );
        assert_eq!(
            values(&["-P", "n", "0", "1", "-D", "0.25"]),
            ["0.00", "0.25", "0.50", "0.75", "1.00"]
        );
        assert_eq!(values(&["-L", "n", "a,b, c"]), ["a", "b", "c"]);
        assert!(scan_of(&[]).unwrap().is_none());
        for (args, err) in [
            (&["-P", "n", "5", "1"][..], "END is below START"),
            (
                &["-P", "n", "1", "5", "-D", "0"],
                "the step must be positive",
            ),
            (&["-P", "n", "1", "x"], "END `x` is not a number"),
            (&["-P", "n", "1", "1e9"], "more than 10000"),
            (&["-P", "a b", "1", "2"], "is not a parameter name"),
            (&["-L", "n", "1,,2"], "an empty value"),
        ] {
            let e = scan_of(args).unwrap_err().to_string();
            assert!(e.contains(err), "{args:?}: {e}");
        }
    }
}
