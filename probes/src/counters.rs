//! Perf counters on a benchmark child: the event catalogue, parsing of a `--counters`
//! list, the plan of perf groups and series of runs, and reading with scaling.
//!
//! The kernel side sits behind two small traits, [`CounterBackend`] (open a perf group on
//! a pid) and [`OpenGroup`] (read it), so that grouping, multiplexing and scaling can be
//! tested with scripted readings. [`PerfBackend`] is the live implementation over
//! `perf-event2`.
//!
//! Multiplexing is never silent: every value carries the fraction of the enabled time its
//! group was actually counting; a value read from a group that ran less than all the time
//! is scaled (`raw * enabled / running`) and marked as such.

use std::fmt;

use perf_event::events::{Cache, CacheId, CacheOp, CacheResult, Hardware, Software};
use perf_event::{Builder, Counter, ReadFormat};

/// Prefix of every counter metric id (`counter.instructions`).
pub const METRIC_PREFIX: &str = "counter.";

/// Metric source of hardware (PMU) counters.
pub const SOURCE_HW: &str = "perf-hw";

/// Metric source of software (kernel) counters.
pub const SOURCE_SW: &str = "perf-sw";

/// Default maximum number of hardware events in one perf group. Most x86 cores have 4
/// general-purpose counters per hardware thread (plus fixed ones); a larger group could
/// never be scheduled at once.
pub const DEFAULT_MAX_HW_GROUP: usize = 4;

/// Errors of the counter layer.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// A name in the counter list is not a known event.
    #[error("unknown counter event `{name}`: run `sbs-profile --list-counters` for the events this tool knows")]
    UnknownEvent {
        /// The name as given.
        name: String,
    },
    /// An event modifier other than `u`, `k`, `uk`.
    #[error("bad modifier `:{modifier}` on counter event `{name}`: use `:u` (user space), `:k` (kernel) or `:uk` (both)")]
    BadModifier {
        /// The event name.
        name: String,
        /// The modifier as given.
        modifier: String,
    },
    /// The same event (with the same scope) was listed twice.
    #[error("counter event `{name}` is listed twice in the counter list: list each event once")]
    Duplicate {
        /// The event's metric name.
        name: String,
    },
    /// The counter list was empty.
    #[error("the counter list is empty: name at least one event, e.g. `--counters task-clock,page-faults`")]
    Empty,
    /// `perf_event_open` failed for an event on a process.
    #[error("cannot open perf counter `{event}` on pid {pid}: {source}; run `sbs-profile --list-counters` to see which events this machine supports and why")]
    Open {
        /// The event's metric name.
        event: String,
        /// The observed process.
        pid: i32,
        /// The system error.
        source: std::io::Error,
    },
    /// Reading a perf group failed.
    #[error("cannot read perf counters {events:?}: {source}")]
    Read {
        /// The events of the group.
        events: Vec<String>,
        /// The system error.
        source: std::io::Error,
    },
    /// The kernel returned a reading that does not match the group's members.
    #[error("perf counters {events:?}: the kernel returned {got} values for {expected} events")]
    Mismatch {
        /// The events of the group.
        events: Vec<String>,
        /// Number of members.
        expected: usize,
        /// Number of values read.
        got: usize,
    },
    /// A group was enabled but never got onto the PMU: its counts are missing, not zero.
    #[error("perf counters {events:?} were enabled for {enabled_ns} ns but never counted (the PMU never scheduled their group): use `--no-multiplex`, fewer events, or free counters (e.g. `echo 0 > /proc/sys/kernel/nmi_watchdog`)")]
    NeverScheduled {
        /// The events of the group.
        events: Vec<String>,
        /// Time the group was enabled.
        enabled_ns: u64,
    },
}

/// Which kind of mechanism counts an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventClass {
    /// Counted by the CPU's PMU (hardware and generic cache events).
    Hardware,
    /// Counted by the kernel.
    Software,
}

impl EventClass {
    /// The metric source of this class (`perf-hw`, `perf-sw`).
    pub fn source(self) -> &'static str {
        match self {
            EventClass::Hardware => SOURCE_HW,
            EventClass::Software => SOURCE_SW,
        }
    }
}

/// The perf encoding of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventCode {
    /// `PERF_TYPE_HARDWARE`.
    Hardware(Hardware),
    /// `PERF_TYPE_SOFTWARE`.
    Software(Software),
    /// `PERF_TYPE_HW_CACHE`.
    Cache(CacheId, CacheOp, CacheResult),
}

/// What the values of an event measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventUnit {
    /// A number of events.
    Count,
    /// Nanoseconds (task-clock, cpu-clock); reported in seconds.
    Nanoseconds,
}

/// One event this tool knows, under perf's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDef {
    /// perf's name, e.g. `instructions`, `L1-dcache-load-misses`, `page-faults`.
    pub name: String,
    /// Other accepted names (perf's aliases).
    pub aliases: Vec<String>,
    /// The encoding.
    pub code: EventCode,
    /// What the values measure.
    pub unit: EventUnit,
}

impl EventDef {
    fn new(name: &str, aliases: &[&str], code: EventCode, unit: EventUnit) -> Self {
        EventDef {
            name: name.to_string(),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
            code,
            unit,
        }
    }

    /// Hardware or software.
    pub fn class(&self) -> EventClass {
        match self.code {
            EventCode::Software(_) => EventClass::Software,
            EventCode::Hardware(_) | EventCode::Cache(..) => EventClass::Hardware,
        }
    }

    fn matches(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }

    /// The scope an event is counted in unless the user says otherwise: user space only
    /// for hardware events (like perf's `:u`); user and kernel for software events, which
    /// mostly happen in the kernel (context switches, migrations read 0 otherwise).
    pub fn default_scope(&self) -> Scope {
        match self.class() {
            EventClass::Hardware => Scope::USER,
            EventClass::Software => Scope::ALL,
        }
    }
}

/// Which privilege levels are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scope {
    /// Count in user space.
    pub user: bool,
    /// Count in the kernel.
    pub kernel: bool,
}

impl Scope {
    /// User space only (`:u`).
    pub const USER: Scope = Scope {
        user: true,
        kernel: false,
    };
    /// Kernel only (`:k`).
    pub const KERNEL: Scope = Scope {
        user: false,
        kernel: true,
    };
    /// Both (`:uk`).
    pub const ALL: Scope = Scope {
        user: true,
        kernel: true,
    };

    /// The modifier spelling: `u`, `k` or `uk`.
    pub fn modifier(self) -> &'static str {
        match (self.user, self.kernel) {
            (true, false) => "u",
            (false, true) => "k",
            _ => "uk",
        }
    }
}

/// The generic hardware events.
const HARDWARE: &[(&str, &[&str], Hardware)] = &[
    ("instructions", &[], Hardware::INSTRUCTIONS),
    ("cycles", &["cpu-cycles"], Hardware::CPU_CYCLES),
    (
        "branches",
        &["branch-instructions"],
        Hardware::BRANCH_INSTRUCTIONS,
    ),
    ("branch-misses", &[], Hardware::BRANCH_MISSES),
    ("cache-references", &[], Hardware::CACHE_REFERENCES),
    ("cache-misses", &[], Hardware::CACHE_MISSES),
    ("bus-cycles", &[], Hardware::BUS_CYCLES),
    ("ref-cycles", &[], Hardware::REF_CPU_CYCLES),
    (
        "stalled-cycles-frontend",
        &["idle-cycles-frontend"],
        Hardware::STALLED_CYCLES_FRONTEND,
    ),
    (
        "stalled-cycles-backend",
        &["idle-cycles-backend"],
        Hardware::STALLED_CYCLES_BACKEND,
    ),
];

/// The software events.
const SOFTWARE: &[(&str, &[&str], Software, EventUnit)] = &[
    (
        "task-clock",
        &[],
        Software::TASK_CLOCK,
        EventUnit::Nanoseconds,
    ),
    (
        "cpu-clock",
        &[],
        Software::CPU_CLOCK,
        EventUnit::Nanoseconds,
    ),
    (
        "page-faults",
        &["faults"],
        Software::PAGE_FAULTS,
        EventUnit::Count,
    ),
    (
        "minor-faults",
        &[],
        Software::PAGE_FAULTS_MIN,
        EventUnit::Count,
    ),
    (
        "major-faults",
        &[],
        Software::PAGE_FAULTS_MAJ,
        EventUnit::Count,
    ),
    (
        "context-switches",
        &["cs"],
        Software::CONTEXT_SWITCHES,
        EventUnit::Count,
    ),
    (
        "cpu-migrations",
        &["migrations"],
        Software::CPU_MIGRATIONS,
        EventUnit::Count,
    ),
    (
        "alignment-faults",
        &[],
        Software::ALIGNMENT_FAULTS,
        EventUnit::Count,
    ),
    (
        "emulation-faults",
        &[],
        Software::EMULATION_FAULTS,
        EventUnit::Count,
    ),
];

/// The generic cache events under perf's names, e.g. `L1-dcache-load-misses`: each cache
/// with the operations perf lists for it.
fn cache_events() -> Vec<EventDef> {
    let caches: &[(&str, CacheId, &[CacheOp])] = &[
        (
            "L1-dcache",
            CacheId::L1D,
            &[CacheOp::READ, CacheOp::WRITE, CacheOp::PREFETCH],
        ),
        (
            "L1-icache",
            CacheId::L1I,
            &[CacheOp::READ, CacheOp::PREFETCH],
        ),
        (
            "LLC",
            CacheId::LL,
            &[CacheOp::READ, CacheOp::WRITE, CacheOp::PREFETCH],
        ),
        (
            "dTLB",
            CacheId::DTLB,
            &[CacheOp::READ, CacheOp::WRITE, CacheOp::PREFETCH],
        ),
        ("iTLB", CacheId::ITLB, &[CacheOp::READ]),
        ("branch", CacheId::BPU, &[CacheOp::READ]),
        (
            "node",
            CacheId::NODE,
            &[CacheOp::READ, CacheOp::WRITE, CacheOp::PREFETCH],
        ),
    ];
    let mut out = Vec::new();
    for &(cache, id, ops) in caches {
        for &op in ops {
            let op_name = if op == CacheOp::READ {
                ("loads", "load-misses")
            } else if op == CacheOp::WRITE {
                ("stores", "store-misses")
            } else {
                ("prefetches", "prefetch-misses")
            };
            for (result, suffix) in [
                (CacheResult::ACCESS, op_name.0),
                (CacheResult::MISS, op_name.1),
            ] {
                let name = format!("{cache}-{suffix}");
                out.push(EventDef {
                    name,
                    aliases: Vec::new(),
                    code: EventCode::Cache(id, op, result),
                    unit: EventUnit::Count,
                });
            }
        }
    }
    out
}

/// Every event this tool knows: hardware, generic cache, software.
pub fn catalogue() -> Vec<EventDef> {
    let mut out: Vec<EventDef> = HARDWARE
        .iter()
        .map(|&(n, a, hw)| EventDef::new(n, a, EventCode::Hardware(hw), EventUnit::Count))
        .collect();
    out.extend(cache_events());
    out.extend(
        SOFTWARE
            .iter()
            .map(|&(n, a, sw, unit)| EventDef::new(n, a, EventCode::Software(sw), unit)),
    );
    out
}

/// Look an event up by perf name or alias (ASCII case-insensitive).
pub fn find_event(name: &str) -> Option<EventDef> {
    catalogue().into_iter().find(|d| d.matches(name))
}

/// One event to count, in one scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRequest {
    /// The event.
    pub event: EventDef,
    /// Where it is counted.
    pub scope: Scope,
}

impl CounterRequest {
    /// The event in its default scope.
    pub fn new(event: EventDef) -> Self {
        let scope = event.default_scope();
        CounterRequest { event, scope }
    }

    /// The name in metrics and messages: perf's name, plus `:u`/`:k`/`:uk` when the scope
    /// is not the event's default (so differently scoped counts never share a metric).
    pub fn name(&self) -> String {
        if self.scope == self.event.default_scope() {
            self.event.name.clone()
        } else {
            format!("{}:{}", self.event.name, self.scope.modifier())
        }
    }

    /// `counter.<name>`.
    pub fn metric_id(&self) -> String {
        format!("{METRIC_PREFIX}{}", self.name())
    }

    /// `perf-hw` or `perf-sw`.
    pub fn source(&self) -> &'static str {
        self.event.class().source()
    }
}

impl fmt::Display for CounterRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Parse one `EVENT[:u|:k|:uk]` item.
pub fn parse_counter(item: &str) -> Result<CounterRequest, CounterError> {
    let item = item.trim();
    let (name, modifier) = match item.split_once(':') {
        Some((n, m)) => (n.trim(), Some(m.trim())),
        None => (item, None),
    };
    let event = find_event(name).ok_or_else(|| CounterError::UnknownEvent {
        name: name.to_string(),
    })?;
    let mut req = CounterRequest::new(event);
    if let Some(m) = modifier {
        let user = m.contains('u');
        let kernel = m.contains('k');
        if m.is_empty() || m.chars().any(|c| c != 'u' && c != 'k') {
            return Err(CounterError::BadModifier {
                name: name.to_string(),
                modifier: m.to_string(),
            });
        }
        req.scope = Scope { user, kernel };
    }
    Ok(req)
}

/// Parse a comma-separated counter list such as `instructions,cycles:uk,page-faults`.
pub fn parse_counter_list(list: &str) -> Result<Vec<CounterRequest>, CounterError> {
    let mut out: Vec<CounterRequest> = Vec::new();
    for item in list.split(',').filter(|s| !s.trim().is_empty()) {
        let req = parse_counter(item)?;
        if out.iter().any(|r| r.name() == req.name()) {
            return Err(CounterError::Duplicate { name: req.name() });
        }
        out.push(req);
    }
    if out.is_empty() {
        return Err(CounterError::Empty);
    }
    Ok(out)
}

/// How to lay the requested events out over perf groups and series of runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOptions {
    /// Never let the kernel time-share hardware counters: one perf group per series of
    /// runs, each group small enough to fit the PMU.
    pub no_multiplex: bool,
    /// Maximum number of hardware events in one perf group.
    pub max_hw_group: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            no_multiplex: false,
            max_hw_group: DEFAULT_MAX_HW_GROUP,
        }
    }
}

/// The perf groups opened together on each run of one series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesPlan {
    /// Each inner list is one perf group (read atomically, scheduled as a unit).
    pub perf_groups: Vec<Vec<CounterRequest>>,
}

impl SeriesPlan {
    /// All events of this series.
    pub fn events(&self) -> impl Iterator<Item = &CounterRequest> {
        self.perf_groups.iter().flatten()
    }
}

/// Lay events out over series of runs and perf groups.
///
/// Software events never multiplex: they form one group, measured in the first series.
/// Hardware events are cut into groups of at most `max_hw_group` events (a group is
/// scheduled all or nothing). Without `no_multiplex` all groups share each run and the
/// kernel rotates them if they do not fit together (values then scaled and marked); with
/// it each hardware group gets its own series of runs.
pub fn plan_series(requests: &[CounterRequest], opts: PlanOptions) -> Vec<SeriesPlan> {
    let max = opts.max_hw_group.max(1);
    let sw: Vec<CounterRequest> = requests
        .iter()
        .filter(|r| r.event.class() == EventClass::Software)
        .cloned()
        .collect();
    let hw: Vec<CounterRequest> = requests
        .iter()
        .filter(|r| r.event.class() == EventClass::Hardware)
        .cloned()
        .collect();
    let hw_groups: Vec<Vec<CounterRequest>> = hw.chunks(max).map(<[_]>::to_vec).collect();

    let mut series: Vec<SeriesPlan> = Vec::new();
    if opts.no_multiplex {
        for g in hw_groups {
            series.push(SeriesPlan {
                perf_groups: vec![g],
            });
        }
    } else if !hw_groups.is_empty() {
        series.push(SeriesPlan {
            perf_groups: hw_groups,
        });
    }
    if !sw.is_empty() {
        match series.first_mut() {
            Some(first) => first.perf_groups.push(sw),
            None => series.push(SeriesPlan {
                perf_groups: vec![sw],
            }),
        }
    }
    series
}

/// One reading of a perf group: times and the members' raw counts in member order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupReading {
    /// Nanoseconds the group was enabled.
    pub time_enabled: u64,
    /// Nanoseconds the group was actually counting.
    pub time_running: u64,
    /// Raw counts, aligned with the group's members.
    pub values: Vec<u64>,
}

/// A perf group opened on a process.
pub trait OpenGroup {
    /// Read the whole group atomically.
    fn read(&mut self) -> Result<GroupReading, CounterError>;

    /// The group leader's descriptor, which switches the whole group on and off (for a
    /// harness's measured region); `None` for a backend without descriptors.
    fn leader_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// Opens perf groups on a process: the kernel, or a script in tests.
pub trait CounterBackend {
    /// Open `members` as one group on `pid` (which has not exec'd yet), counting from its
    /// exec, inherited by its threads and children.
    fn open_group(
        &mut self,
        pid: i32,
        members: &[CounterRequest],
    ) -> Result<Box<dyn OpenGroup>, CounterError>;
}

/// A backend whose groups read what a function decides, for the pid and members opened:
/// the kernel stood in for, in tests of everything above it.
pub struct ScriptedBackend<F>(pub F)
where
    F: FnMut(i32, &[CounterRequest]) -> GroupReading;

/// A group of [`ScriptedBackend`]: reads the same values every time.
struct ScriptedGroup(GroupReading);

impl OpenGroup for ScriptedGroup {
    fn read(&mut self) -> Result<GroupReading, CounterError> {
        Ok(self.0.clone())
    }
}

impl<F> CounterBackend for ScriptedBackend<F>
where
    F: FnMut(i32, &[CounterRequest]) -> GroupReading,
{
    fn open_group(
        &mut self,
        pid: i32,
        members: &[CounterRequest],
    ) -> Result<Box<dyn OpenGroup>, CounterError> {
        Ok(Box::new(ScriptedGroup((self.0)(pid, members))))
    }
}

/// One counter's value from one run.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterValue {
    /// Which event.
    pub request: CounterRequest,
    /// The count the kernel returned.
    pub raw: u64,
    /// The value in the metric's unit (seconds for clocks), scaled when multiplexed.
    pub value: f64,
    /// `time_running / time_enabled` of its group (1 when it counted all the time).
    pub running_fraction: f64,
    /// Whether `value` was extrapolated from a partial running time.
    pub scaled: bool,
}

/// Turn a group reading into values: scale when the group ran only part of the time.
pub fn scale_reading(
    members: &[CounterRequest],
    reading: &GroupReading,
) -> Result<Vec<CounterValue>, CounterError> {
    let names = || members.iter().map(CounterRequest::name).collect::<Vec<_>>();
    if reading.values.len() != members.len() {
        return Err(CounterError::Mismatch {
            events: names(),
            expected: members.len(),
            got: reading.values.len(),
        });
    }
    let (enabled, running) = (reading.time_enabled, reading.time_running);
    if enabled > 0 && running == 0 {
        return Err(CounterError::NeverScheduled {
            events: names(),
            enabled_ns: enabled,
        });
    }
    // Never enabled (the child never ran its program): nothing happened, counts are 0.
    let (fraction, scaled) = if enabled == 0 || running >= enabled {
        (1.0, false)
    } else {
        (running as f64 / enabled as f64, true)
    };
    Ok(members
        .iter()
        .zip(&reading.values)
        .map(|(req, &raw)| {
            let count = if scaled {
                (raw as u128 * enabled as u128 / running as u128) as f64
            } else {
                raw as f64
            };
            let value = match req.event.unit {
                EventUnit::Count => count,
                EventUnit::Nanoseconds => count / 1e9,
            };
            CounterValue {
                request: req.clone(),
                raw,
                value,
                running_fraction: fraction,
                scaled,
            }
        })
        .collect())
}

/// The counters of one series of runs, opened anew on each run's child.
pub struct CounterSet {
    plan: SeriesPlan,
    backend: Box<dyn CounterBackend>,
    open: Vec<Box<dyn OpenGroup>>,
}

impl CounterSet {
    /// Counters for `plan`, opened through `backend`.
    pub fn new(plan: SeriesPlan, backend: Box<dyn CounterBackend>) -> Self {
        CounterSet {
            plan,
            backend,
            open: Vec::new(),
        }
    }

    /// The plan of this series.
    pub fn plan(&self) -> &SeriesPlan {
        &self.plan
    }

    /// Open every group on `pid`, held at its start latch before exec.
    pub fn attach(&mut self, pid: i32) -> Result<(), CounterError> {
        self.open.clear();
        for group in &self.plan.perf_groups {
            let g = self.backend.open_group(pid, group)?;
            self.open.push(g);
        }
        Ok(())
    }

    /// The open groups' leader descriptors (see [`OpenGroup::leader_fd`]).
    pub fn leader_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.open.iter().filter_map(|g| g.leader_fd()).collect()
    }

    /// Read every group after the child was reaped, and close them.
    pub fn read(&mut self) -> Result<Vec<CounterValue>, CounterError> {
        let open = std::mem::take(&mut self.open);
        let mut out = Vec::new();
        for (members, mut g) in self.plan.perf_groups.iter().zip(open) {
            let reading = g.read()?;
            out.extend(scale_reading(members, &reading)?);
        }
        Ok(out)
    }

    /// Close the groups of an aborted run.
    pub fn abort(&mut self) {
        self.open.clear();
    }
}

/// Configure a builder for `req` (event, scope) counting on `pid` from its exec, in its
/// threads and descendants.
pub(crate) fn builder_for(req: &CounterRequest) -> Builder<'static> {
    let mut b = match req.event.code {
        EventCode::Hardware(hw) => Builder::new(hw),
        EventCode::Software(sw) => Builder::new(sw),
        EventCode::Cache(which, operation, result) => Builder::new(Cache {
            which,
            operation,
            result,
        }),
    };
    b.exclude_user(!req.scope.user)
        .exclude_kernel(!req.scope.kernel)
        .exclude_hv(true)
        .any_cpu();
    b
}

/// The live backend: `perf_event_open` through `perf-event2`.
#[derive(Debug, Default, Clone, Copy)]
pub struct PerfBackend {
    /// Open the groups disabled and leave them so (no `enable_on_exec`): a harness in the
    /// child switches them on around its measured region.
    pub region: bool,
}

struct PerfGroup {
    names: Vec<String>,
    leader: Counter,
    members: Vec<Counter>,
}

impl OpenGroup for PerfGroup {
    fn leader_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.leader.as_raw_fd())
    }

    fn read(&mut self) -> Result<GroupReading, CounterError> {
        let data = self
            .leader
            .read_group()
            .map_err(|source| CounterError::Read {
                events: self.names.clone(),
                source,
            })?;
        let enabled = data.time_enabled().map(|d| d.as_nanos() as u64);
        let running = data.time_running().map(|d| d.as_nanos() as u64);
        let mut values = Vec::with_capacity(self.members.len() + 1);
        for c in std::iter::once(&self.leader).chain(&self.members) {
            if let Some(e) = data.get(c) {
                values.push(e.value());
            }
        }
        match (enabled, running) {
            (Some(time_enabled), Some(time_running)) => Ok(GroupReading {
                time_enabled,
                time_running,
                values,
            }),
            _ => Err(CounterError::Read {
                events: self.names.clone(),
                source: std::io::Error::other("the kernel returned no enabled/running times"),
            }),
        }
    }
}

impl CounterBackend for PerfBackend {
    fn open_group(
        &mut self,
        pid: i32,
        members: &[CounterRequest],
    ) -> Result<Box<dyn OpenGroup>, CounterError> {
        let names: Vec<String> = members.iter().map(CounterRequest::name).collect();
        let open_err = |req: &CounterRequest, source| CounterError::Open {
            event: req.name(),
            pid,
            source,
        };
        let Some((first, rest)) = members.split_first() else {
            return Err(CounterError::Empty);
        };
        let mut lb = builder_for(first);
        lb.observe_pid(pid)
            .inherit(true)
            .enabled(false)
            .enable_on_exec(!self.region)
            .read_format(
                ReadFormat::GROUP
                    | ReadFormat::ID
                    | ReadFormat::TOTAL_TIME_ENABLED
                    | ReadFormat::TOTAL_TIME_RUNNING,
            );
        let mut leader = lb.build().map_err(|e| open_err(first, e))?;
        let mut others = Vec::with_capacity(rest.len());
        for req in rest {
            let mut mb = builder_for(req);
            // Members start with the leader: enabled here, held back by the disabled leader.
            mb.observe_pid(pid).inherit(true).enabled(true).read_format(
                ReadFormat::GROUP
                    | ReadFormat::ID
                    | ReadFormat::TOTAL_TIME_ENABLED
                    | ReadFormat::TOTAL_TIME_RUNNING,
            );
            let c = mb
                .build_with_group(&mut leader)
                .map_err(|e| open_err(req, e))?;
            others.push(c);
        }
        Ok(Box::new(PerfGroup {
            names,
            leader,
            members: others,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn req(name: &str) -> CounterRequest {
        parse_counter(name).unwrap()
    }

    #[test]
    fn catalogue_names_are_unique_and_cover_the_issue() {
        let cat = catalogue();
        let mut names: Vec<String> = cat
            .iter()
            .flat_map(|d| std::iter::once(d.name.clone()).chain(d.aliases.clone()))
            .map(|n| n.to_ascii_lowercase())
            .collect();
        let before = names.len();
        names.sort();
        names.dedup();
        assert_eq!(before, names.len(), "duplicate event names");
        for n in [
            "instructions",
            "cycles",
            "branches",
            "branch-misses",
            "cache-references",
            "cache-misses",
            "L1-dcache-load-misses",
            "LLC-loads",
            "dTLB-load-misses",
            "task-clock",
            "page-faults",
            "minor-faults",
            "major-faults",
            "context-switches",
            "cpu-migrations",
        ] {
            assert!(find_event(n).is_some(), "{n} missing");
        }
    }

    #[test]
    fn parses_lists_modifiers_and_aliases() {
        let l = parse_counter_list("instructions, cycles:uk ,cs,faults").unwrap();
        let names: Vec<String> = l.iter().map(CounterRequest::name).collect();
        assert_eq!(
            names,
            [
                "instructions",
                "cycles:uk",
                "context-switches",
                "page-faults"
            ]
        );
        assert_eq!(l[0].scope, Scope::USER);
        assert_eq!(l[1].scope, Scope::ALL);
        assert_eq!(l[2].scope, Scope::ALL);
        assert_eq!(l[0].metric_id(), "counter.instructions");
        assert_eq!(l[0].source(), SOURCE_HW);
        assert_eq!(l[3].source(), SOURCE_SW);
        assert_eq!(req("page-faults:u").metric_id(), "counter.page-faults:u");
        assert_eq!(req("INSTRUCTIONS:u").name(), "instructions");
    }

    #[test]
    fn rejects_bad_lists_naming_the_culprit() {
        let e = parse_counter_list("instructions,bogus").unwrap_err();
        assert!(e.to_string().contains("`bogus`"), "{e}");
        assert!(e.to_string().contains("--list-counters"), "{e}");
        let e = parse_counter_list("cycles:x").unwrap_err();
        assert!(matches!(e, CounterError::BadModifier { .. }), "{e}");
        let e = parse_counter_list("cycles:").unwrap_err();
        assert!(matches!(e, CounterError::BadModifier { .. }), "{e}");
        let e = parse_counter_list("cs,context-switches").unwrap_err();
        assert!(matches!(e, CounterError::Duplicate { .. }), "{e}");
        assert!(matches!(
            parse_counter_list(" , ").unwrap_err(),
            CounterError::Empty
        ));
        // The same event in two scopes is two metrics, allowed.
        assert_eq!(parse_counter_list("cycles,cycles:k").unwrap().len(), 2);
    }

    fn names(g: &[CounterRequest]) -> Vec<String> {
        g.iter().map(CounterRequest::name).collect()
    }

    #[test]
    fn plan_keeps_software_together_and_splits_hardware() {
        let l = parse_counter_list(
            "instructions,page-faults,cycles,branches,branch-misses,cache-misses,cs",
        )
        .unwrap();
        let opts = PlanOptions {
            no_multiplex: false,
            max_hw_group: 3,
        };
        let p = plan_series(&l, opts);
        assert_eq!(p.len(), 1, "multiplexing allowed: one series");
        let groups: Vec<Vec<String>> = p[0].perf_groups.iter().map(|g| names(g)).collect();
        assert_eq!(
            groups,
            vec![
                vec!["instructions", "cycles", "branches"],
                vec!["branch-misses", "cache-misses"],
                vec!["page-faults", "context-switches"],
            ]
        );

        let p = plan_series(
            &l,
            PlanOptions {
                no_multiplex: true,
                ..opts
            },
        );
        assert_eq!(p.len(), 2, "no multiplexing: one series per hardware group");
        assert_eq!(p[0].perf_groups.len(), 2);
        assert_eq!(
            names(&p[1].perf_groups[0]),
            ["branch-misses", "cache-misses"]
        );
        assert_eq!(p[1].perf_groups.len(), 1, "software events measured once");
        let all: usize = p.iter().map(|s| s.events().count()).sum();
        assert_eq!(all, l.len(), "every event measured exactly once");

        let sw_only = plan_series(&parse_counter_list("task-clock").unwrap(), opts);
        assert_eq!(sw_only.len(), 1);
        assert_eq!(sw_only[0].perf_groups.len(), 1);
    }

    #[test]
    fn full_running_time_is_not_scaled() {
        let m = parse_counter_list("instructions,task-clock").unwrap();
        let r = GroupReading {
            time_enabled: 1000,
            time_running: 1000,
            values: vec![12345, 2_000_000_000],
        };
        let v = scale_reading(&m, &r).unwrap();
        assert_eq!(v[0].value, 12345.0);
        assert!(!v[0].scaled);
        assert_eq!(v[0].running_fraction, 1.0);
        assert_eq!(v[1].value, 2.0, "task-clock is reported in seconds");
    }

    #[test]
    fn partial_running_time_is_scaled_and_marked() {
        let m = parse_counter_list("instructions,cycles").unwrap();
        let r = GroupReading {
            time_enabled: 1000,
            time_running: 250,
            values: vec![100, 7],
        };
        let v = scale_reading(&m, &r).unwrap();
        assert_eq!(v[0].raw, 100);
        assert_eq!(v[0].value, 400.0);
        assert_eq!(v[1].value, 28.0);
        assert!(v.iter().all(|x| x.scaled && x.running_fraction == 0.25));
    }

    #[test]
    fn never_scheduled_group_is_an_error_not_a_zero() {
        let m = parse_counter_list("instructions").unwrap();
        let r = GroupReading {
            time_enabled: 1000,
            time_running: 0,
            values: vec![0],
        };
        let e = scale_reading(&m, &r).unwrap_err();
        assert!(e.to_string().contains("--no-multiplex"), "{e}");
        // Never enabled: the program never ran; zero is the truth.
        let r = GroupReading {
            time_enabled: 0,
            time_running: 0,
            values: vec![0],
        };
        assert_eq!(scale_reading(&m, &r).unwrap()[0].value, 0.0);
        let r = GroupReading {
            time_enabled: 5,
            time_running: 5,
            values: vec![],
        };
        assert!(matches!(
            scale_reading(&m, &r).unwrap_err(),
            CounterError::Mismatch { .. }
        ));
    }

    type OpenLog = std::rc::Rc<std::cell::RefCell<Vec<(i32, Vec<String>)>>>;

    #[test]
    fn counter_set_scales_each_group_by_its_own_running_time() {
        let l = parse_counter_list("instructions,cycles,branches,page-faults").unwrap();
        let plan = plan_series(
            &l,
            PlanOptions {
                no_multiplex: false,
                max_hw_group: 2,
            },
        );
        assert_eq!(plan.len(), 1);
        let opened: OpenLog = std::rc::Rc::default();
        let mut readings = VecDeque::from(vec![
            GroupReading {
                time_enabled: 100,
                time_running: 50,
                values: vec![10, 20],
            },
            GroupReading {
                time_enabled: 100,
                time_running: 100,
                values: vec![30],
            },
            GroupReading {
                time_enabled: 100,
                time_running: 100,
                values: vec![40],
            },
        ]);
        let log: OpenLog = std::rc::Rc::clone(&opened);
        let script = ScriptedBackend(move |pid, members: &[CounterRequest]| {
            log.borrow_mut().push((pid, names(members)));
            readings.pop_front().expect("script exhausted")
        });
        let mut set = CounterSet::new(plan[0].clone(), Box::new(script));
        set.attach(42).unwrap();
        assert_eq!(opened.borrow().len(), 3);
        assert!(opened.borrow().iter().all(|(pid, _)| *pid == 42));
        let v = set.read().unwrap();
        let got: Vec<(String, f64, bool)> = v
            .iter()
            .map(|c| (c.request.name(), c.value, c.scaled))
            .collect();
        assert_eq!(
            got,
            vec![
                ("instructions".to_string(), 20.0, true),
                ("cycles".to_string(), 40.0, true),
                ("branches".to_string(), 30.0, false),
                ("page-faults".to_string(), 40.0, false),
            ]
        );
    }
}
