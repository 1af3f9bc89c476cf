//! Benchmark parameters: declared with defaults at registration, overridden from the
//! command line with `--param KEY=VALUE`.

use std::str::FromStr;

use crate::error::HarnessError;

/// The parameter values one benchmark runs with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    bench: String,
    values: Vec<(String, String)>,
}

impl Params {
    /// Defaults of `bench`, with `overrides` applied (keys it does not declare are
    /// ignored here; the command line checks them against all selected benchmarks).
    pub(crate) fn resolve(
        bench: &str,
        defaults: &[(String, String)],
        overrides: &[(String, String)],
    ) -> Params {
        let values = defaults
            .iter()
            .map(|(k, v)| {
                let value = overrides
                    .iter()
                    .rev()
                    .find(|(ok, _)| ok == k)
                    .map_or(v, |(_, ov)| ov);
                (k.clone(), value.clone())
            })
            .collect();
        Params {
            bench: bench.to_string(),
            values,
        }
    }

    /// The value of `key` as text, if declared.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key` parsed as `T`, or an error that says which parameter is wrong.
    pub fn try_get<T: FromStr>(&self, key: &str) -> Result<T, HarnessError> {
        let raw = self.raw(key).ok_or_else(|| HarnessError::UndeclaredParam {
            key: key.to_string(),
            bench: self.bench.clone(),
        })?;
        raw.trim().parse().map_err(|_| HarnessError::BadParam {
            key: key.to_string(),
            value: raw.to_string(),
            bench: self.bench.clone(),
            ty: std::any::type_name::<T>(),
        })
    }

    /// The value of `key` parsed as `T`. Panics with [`Params::try_get`]'s message when
    /// the parameter is undeclared or its value does not parse: a set-up cannot go on.
    pub fn get<T: FromStr>(&self, key: &str) -> T {
        match self.try_get(key) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    /// `key=value` pairs, comma-separated (empty when there are none).
    pub fn describe(&self) -> String {
        describe(&self.values)
    }

    /// The pairs.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.values
    }
}

/// `key=value` pairs, comma-separated.
pub(crate) fn describe(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parse `KEY=VALUE`.
pub(crate) fn parse_assignment(text: &str) -> Result<(String, String), HarnessError> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(HarnessError::Usage(format!(
            "--param {text}: write KEY=VALUE, e.g. --param size=5000"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn overrides_replace_defaults_last_one_wins() {
        let p = Params::resolve(
            "b",
            &pairs(&[("size", "10"), ("mode", "a")]),
            &pairs(&[("size", "20"), ("other", "x"), ("size", "30")]),
        );
        assert_eq!(p.get::<usize>("size"), 30);
        assert_eq!(p.raw("mode"), Some("a"));
        assert_eq!(p.raw("other"), None);
        assert_eq!(p.describe(), "size=30,mode=a");
    }

    #[test]
    fn bad_values_name_the_parameter() {
        let p = Params::resolve("b", &pairs(&[("size", "big")]), &[]);
        let e = p.try_get::<usize>("size").unwrap_err().to_string();
        assert!(e.contains("size=big") && e.contains("usize"), "{e}");
        let e = p.try_get::<usize>("n").unwrap_err().to_string();
        assert!(e.contains(".param(\"n\""), "{e}");
        assert!(parse_assignment("=3").is_err());
        assert_eq!(
            parse_assignment("k=a=b").unwrap(),
            ("k".to_string(), "a=b".to_string())
        );
    }
}
