//! Metric ids, typed: `FAMILY.NAME[/op][.empty|.calibrated][@KEY=VALUE]`.
//!
//! The report model keeps ids as the strings the JSON, the history and the user's
//! `--threshold` patterns use; every reading of their structure goes through
//! [`MetricId::parse`] and every id built from another one through its methods, so the
//! grammar lives here and nowhere else.
//!
//! - `FAMILY` is one of [`Family::ALL`]: what measured it.
//! - `NAME` is the rest (`wall`, `count`, `Vec::push`, `libpython3.11.so:f`); it may
//!   contain dots and colons.
//! - `/op` marks a count inside a harness's measured region divided by its operations;
//!   `time.op` and `time.first` are per operation by themselves.
//! - `.empty` is the same metric measured on the empty operation, `.calibrated` the raw
//!   value minus the empty one's; both only on per-operation metrics.
//! - `@KEY=VALUE` is a size probe (the benchmark's size parameter doubled), only on
//!   per-operation metrics.

use std::fmt;

/// The first segment of a metric id: what measured it. Each instrument reports metrics
/// of one or more families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Wall, user and system times; a harness's time per operation.
    Time,
    /// Resident set sizes.
    Rss,
    /// The allocation agent's counts and amounts.
    Alloc,
    /// The allocation agent's live-heap sizes.
    Heap,
    /// Calls of functions matched by name.
    Invocations,
    /// Allocations of boxed values (`Box::new`).
    Boxing,
    /// perf_event and valgrind counters.
    Counter,
    /// Sampled CPU times per function (`--profile-time`).
    Profile,
}

impl Family {
    /// Every family, in the order reports list them.
    pub const ALL: [Family; 8] = [
        Family::Time,
        Family::Rss,
        Family::Alloc,
        Family::Heap,
        Family::Invocations,
        Family::Boxing,
        Family::Counter,
        Family::Profile,
    ];

    /// The family's name, the id's first segment (`time`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Time => "time",
            Family::Rss => "rss",
            Family::Alloc => "alloc",
            Family::Heap => "heap",
            Family::Invocations => "invocations",
            Family::Boxing => "boxing",
            Family::Counter => "counter",
            Family::Profile => "profile",
        }
    }

    /// What every id of the family starts with (`time.`).
    pub fn prefix(self) -> &'static str {
        match self {
            Family::Time => "time.",
            Family::Rss => "rss.",
            Family::Alloc => "alloc.",
            Family::Heap => "heap.",
            Family::Invocations => "invocations.",
            Family::Boxing => "boxing.",
            Family::Counter => "counter.",
            Family::Profile => "profile.",
        }
    }

    /// The family of an id or of an id pattern (`alloc.*` -> `Alloc`), if it has one.
    pub fn of(id: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| id.starts_with(f.prefix()))
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which measurement of a per-operation metric an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The benchmark's operation.
    Raw,
    /// The empty operation (`.empty`): what the harness costs.
    Empty,
    /// The raw value minus the empty one's, run by run (`.calibrated`).
    Calibrated,
}

impl Variant {
    fn suffix(self) -> &'static str {
        match self {
            Variant::Raw => "",
            Variant::Empty => ".empty",
            Variant::Calibrated => ".calibrated",
        }
    }
}

/// A metric id, parsed. `Display` writes it back exactly as parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MetricId {
    family: Family,
    name: String,
    per_op: bool,
    variant: Variant,
    probe: Option<String>,
}

/// An id whose first segment is no family.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{id}` is not a metric id: it must start with one of {}", families())]
pub struct UnknownFamily {
    /// The id as given.
    pub id: String,
}

fn families() -> String {
    Family::ALL.map(Family::prefix).join(", ")
}

impl MetricId {
    /// The per-run metric `NAME` of `family` (`MetricId::new(Family::Alloc, "count")` is
    /// `alloc.count`).
    pub fn new(family: Family, name: impl Into<String>) -> Self {
        MetricId {
            family,
            name: name.into(),
            per_op: false,
            variant: Variant::Raw,
            probe: None,
        }
    }

    /// Parse an id. The suffixes are read only where the grammar allows them, so a
    /// function named `f.empty` counted by `--invocations` stays one name.
    pub fn parse(id: &str) -> Result<Self, UnknownFamily> {
        let family = Family::of(id).ok_or_else(|| UnknownFamily { id: id.into() })?;
        let rest = &id[family.prefix().len()..];
        let (body, probe) = match rest.rsplit_once('@') {
            Some((head, probe)) if per_operation(family, split_variant(family, head).0) => {
                (head, Some(probe.to_string()))
            }
            _ => (rest, None),
        };
        let (base, variant) = split_variant(family, body);
        let (name, per_op) = match base.strip_suffix("/op") {
            Some(name) => (name, true),
            None => (base, false),
        };
        Ok(MetricId {
            family,
            name: name.to_string(),
            per_op,
            variant,
            probe,
        })
    }

    /// What measured it.
    pub fn family(&self) -> Family {
        self.family
    }

    /// The name after the family, without suffixes (`count` of `alloc.count/op.empty`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which measurement of a per-operation metric it is.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// The size probe it was counted at (`n=20000`), if any.
    pub fn probe(&self) -> Option<&str> {
        self.probe.as_deref()
    }

    /// Whether it is a per-run total turned per operation (`/op`).
    pub fn is_per_op(&self) -> bool {
        self.per_op
    }

    /// Whether it is a cost per operation of a harnessed benchmark: an `/op` metric or the
    /// harness's own `time.op`, `time.first`.
    pub fn is_per_operation(&self) -> bool {
        self.per_op || per_operation(self.family, &self.name)
    }

    /// The same metric per operation (`alloc.count` -> `alloc.count/op`).
    pub fn per_op(mut self) -> Self {
        self.per_op = true;
        self
    }

    /// The same metric as another measurement (`time.op` -> `time.op.empty`).
    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// The same metric at a size probe (`counter.instructions/op@n=2000`).
    pub fn at(mut self, probe: impl Into<String>) -> Self {
        self.probe = Some(probe.into());
        self
    }

    /// The same metric without a size probe and as the raw measurement: what `.empty`,
    /// `.calibrated` and `@KEY=VALUE` are variants of.
    pub fn base(&self) -> Self {
        MetricId {
            variant: Variant::Raw,
            probe: None,
            ..self.clone()
        }
    }

    /// Whether it measures a quantity that cannot be negative (a duration, a size, a
    /// count), so that the lower bound of its interval is cut at 0 and a saved negative
    /// value is corruption. `heap.live_at_exit` is not one (a process may free more than
    /// the agent saw it allocate), nor a calibrated value, which is a difference: an
    /// interval across 0 is what "indistinguishable from zero" means.
    pub fn never_negative(&self) -> bool {
        let size_or_count = match self.family {
            Family::Heap => self.name.starts_with("peak") || self.name.starts_with("tree_peak"),
            _ => true,
        };
        size_or_count && self.variant != Variant::Calibrated
    }
}

fn per_operation(family: Family, base: &str) -> bool {
    base.ends_with("/op") || (family == Family::Time && matches!(base, "op" | "first"))
}

fn split_variant(family: Family, body: &str) -> (&str, Variant) {
    for variant in [Variant::Empty, Variant::Calibrated] {
        if let Some(base) = body.strip_suffix(variant.suffix()) {
            if per_operation(family, base) {
                return (base, variant);
            }
        }
    }
    (body, Variant::Raw)
}

impl fmt::Display for MetricId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.family.prefix(), self.name)?;
        if self.per_op {
            f.write_str("/op")?;
        }
        f.write_str(self.variant.suffix())?;
        if let Some(probe) = &self.probe {
            write!(f, "@{probe}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for MetricId {
    type Err = UnknownFamily;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MetricId::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_the_collector_writes_reads_back_as_written() {
        for id in [
            "time.wall",
            "time.op",
            "time.op.empty",
            "time.op.calibrated",
            "time.first.empty",
            "alloc.count/op",
            "alloc.count/op.empty",
            "alloc.count/op.calibrated",
            "counter.instructions/op@n=20000",
            "counter.instructions/op.calibrated@n=2",
            "invocations.Vec::push",
            "invocations.libpython3.11.so.1.0:_json_scan",
            "invocations.f.empty",
            "invocations.user@host",
            "profile.inclusive.main",
            "heap.tree_peak",
        ] {
            let parsed = MetricId::parse(id).unwrap();
            assert_eq!(parsed.to_string(), id);
        }
    }

    #[test]
    fn suffixes_are_read_only_where_the_grammar_has_them() {
        let id = MetricId::parse("alloc.count/op.empty").unwrap();
        assert_eq!(
            (id.family(), id.name(), id.is_per_op(), id.variant()),
            (Family::Alloc, "count", true, Variant::Empty)
        );
        assert_eq!(id.base().to_string(), "alloc.count/op");
        let time = MetricId::parse("time.op.calibrated").unwrap();
        assert!(!time.is_per_op() && time.is_per_operation());
        assert_eq!(time.variant(), Variant::Calibrated);
        // A function named like a suffix, and an `@` in a name, are names.
        let f = MetricId::parse("invocations.f.empty").unwrap();
        assert_eq!((f.name(), f.variant()), ("f.empty", Variant::Raw));
        let at = MetricId::parse("invocations.user@host").unwrap();
        assert_eq!((at.name(), at.probe()), ("user@host", None));
        let probe = MetricId::parse("counter.instructions/op@n=20000").unwrap();
        assert_eq!(probe.probe(), Some("n=20000"));
        assert_eq!(
            probe.base(),
            MetricId::new(Family::Counter, "instructions").per_op()
        );
    }

    #[test]
    fn built_ids_match_the_strings_the_reports_use() {
        let alloc = MetricId::new(Family::Alloc, "count");
        assert_eq!(alloc.clone().per_op().to_string(), "alloc.count/op");
        assert_eq!(
            alloc.per_op().with_variant(Variant::Empty).to_string(),
            "alloc.count/op.empty"
        );
        assert_eq!(
            MetricId::new(Family::Counter, "instructions")
                .per_op()
                .at("n=4")
                .to_string(),
            "counter.instructions/op@n=4"
        );
    }

    #[test]
    fn an_id_of_no_family_is_refused_with_the_families() {
        let e = MetricId::parse("wall").unwrap_err();
        assert!(e.to_string().contains("time., rss."), "{e}");
    }

    #[test]
    fn peaks_and_counts_are_never_negative_a_difference_may_be() {
        for id in [
            "time.wall",
            "heap.peak",
            "heap.tree_peak",
            "rss.tree_peak",
            "alloc.count/op",
        ] {
            assert!(MetricId::parse(id).unwrap().never_negative(), "{id}");
        }
        for id in ["heap.live_at_exit", "alloc.count/op.calibrated"] {
            assert!(!MetricId::parse(id).unwrap().never_negative(), "{id}");
        }
    }
}
