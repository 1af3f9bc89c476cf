//! From a command and patterns to the functions to probe: finds the ELF file behind the
//! command (following a script's `#!` line), loads it and the libraries it loads, and
//! matches every pattern against their demangled function names.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::clones::{clone_name, References};
use crate::demangle::{demangle, Demangled};
use crate::dwarf::{inlined_instances, InlinedInstance, InlinedMatch, SplitFrom};
use crate::elf::Image;
use crate::entries::{call_probe, entries, shared_entries, Entries, EntryPoint, EntryRefusal};
use crate::error::ProbeError;
use crate::pattern::{edit_distance, Pattern};
use crate::program::Program;

/// The default limit of functions one pattern may match.
pub const DEFAULT_MAX_PROBES: usize = 1000;

/// One inlined instance that is counted: its entry points are probed, their hits summed.
#[derive(Debug, Clone)]
pub struct InlinedSite {
    /// The file holding it.
    pub path: PathBuf,
    /// Index into [`Program::images`] (0 = the executable).
    pub image: usize,
    /// Demangled name of the inlined function.
    pub function: String,
    /// Demangled name of the function it was inlined into.
    pub caller: String,
    /// The call site, `file:line`, when the DWARF says.
    pub call_site: Option<String>,
    /// The call site with the file's whole path, when it has a line (see
    /// [`crate::dwarf::InlinedInstance::call_line`]).
    pub call_line: Option<String>,
    /// Where to probe (at least one).
    pub points: Vec<EntryPoint>,
    /// Why its count may differ from its calls, if it may.
    pub uncertain: Option<String>,
    /// At most this many calls per counted pass, when one pass may make several (an
    /// unrolled loop); the count is then a lower bound.
    pub calls_per_pass: Option<u64>,
    /// For code without a call line that several calls of the function share: the call
    /// lines (whole paths) of those calls, written in the same body, where the calls it
    /// counts were made.
    pub shared_by: Vec<String>,
    /// A pass through it may continue a call counted at another site rather than start
    /// one: the count is an upper bound of its own calls (shared code also entered from
    /// elsewhere, entries one call may pass twice). A point marked
    /// [`EntryPoint::unwinding`] is such on its own.
    pub may_continue: bool,
    /// Its count may be off in a way no bound can be given: a call may pass none of its
    /// probes ([`Entries::misses`]). The other reasons in `uncertain` bound it: an unrolled
    /// loop, shared code, entries one call may pass twice, landing pads.
    pub unbounded: bool,
}

impl InlinedSite {
    /// The site of `instance` (in image `i`, `image`) with the entries `e` found for it.
    fn new(
        image: &Image,
        i: usize,
        instance: InlinedInstance,
        e: Entries,
        calls_per_pass: Option<u64>,
    ) -> InlinedSite {
        InlinedSite {
            path: image.path.clone(),
            image: i,
            function: instance.demangled,
            caller: e.caller,
            call_site: instance.call_site,
            call_line: instance.call_line,
            points: e.points,
            unbounded: e.misses,
            uncertain: e.uncertain,
            calls_per_pass,
            shared_by: Vec::new(),
            // Every call passes a probe; a pass may be part of a call counted already.
            may_continue: e.repeats,
        }
    }
}

/// One function a pattern matched.
#[derive(Debug, Clone)]
pub struct MatchedFunction {
    /// The file holding it.
    pub path: PathBuf,
    /// Index into [`Program::images`] (0 = the executable).
    pub image: usize,
    /// Raw symbol name(s); aliases at the same address are joined with ` = `.
    pub raw: String,
    /// Demangled name.
    pub demangled: Demangled,
    /// File offset of its first instruction.
    pub offset: u64,
    /// File offset of the instruction whose uprobe counts its calls: the first one, or
    /// the one after it when a uprobe cannot sit on the first (a LOCK prefix; see
    /// [`crate::entries::call_probe`]).
    pub probe: u64,
    /// Row label: demangled name, a hash or address when needed to tell rows apart,
    /// the clone (`[clone .constprop.0]`) when it is one, and `[library]` when not in the
    /// executable.
    pub label: String,
    /// Virtual address and size of its code.
    pub code: (u64, u64),
    /// The demangled name of the function it is a copy of (its own name when it is no
    /// clone).
    pub origin: String,
    /// The clone suffix (`.constprop.0`, `.part.0`, `.cold`), when it is a clone, and
    /// whether it is a piece (a part split off a function, entered from its copies).
    pub clone: Option<(String, bool)>,
    /// Why its count may differ from the calls of the function, if it may.
    pub uncertain: Option<String>,
}

/// What one pattern matched.
#[derive(Debug, Clone)]
pub struct PatternMatch {
    /// The pattern.
    pub pattern: Pattern,
    /// The functions to probe, sorted by label.
    pub functions: Vec<MatchedFunction>,
    /// Inlined instances of matching functions, which probes do not count.
    pub inlined: InlinedMatch,
    /// DWARF that could not be read (so inlined instances are unknown), per file.
    pub dwarf_errors: Vec<String>,
    /// The inlined instances that are counted.
    pub sites: Vec<InlinedSite>,
    /// Inlined instances that are not counted, with the reason (e.g. no code of their
    /// own), most frequent first: (reason, instances).
    pub not_counted: Vec<(String, usize)>,
    /// Files without any debug info, in which inlined instances cannot be seen.
    pub no_debug_info: Vec<String>,
    /// Parts split off a function (`F.part.0`, `F.cold`) that only its copies enter:
    /// not probed, their entries continue calls counted already (labels).
    pub pieces: Vec<String>,
    /// Parts split off a function and inlined back into a copy of it (DWARF shows them as
    /// inlined instances of the function itself), found to be entered only from that
    /// copy: counted with it, not as calls of their own.
    pub split_parts: usize,
    /// Instances without a call line (code the optimizer shares between several calls,
    /// such as a merged tail) entered only from other instances of the function: part of
    /// the calls that enter them, not counted again.
    pub merged_tails: usize,
    /// Inlined instances inside the dynamic loader (its own minimal allocator and string
    /// functions, used before the program runs): not calls of the program, not counted,
    /// and left out of the warnings; with the loader's file name.
    pub in_loader: Option<(String, usize)>,
}

impl PatternMatch {
    /// Warnings for the report: inlined instances not counted, entry analyses that are
    /// uncertain, files whose inlined calls cannot be seen.
    pub fn inlined_warnings(&self) -> Vec<String> {
        let p = self.pattern.as_str();
        let mut out = Vec::new();
        let missed: usize = self.not_counted.iter().map(|(_, n)| n).sum();
        if missed > 0 {
            let reasons: Vec<String> = self
                .not_counted
                .iter()
                .take(3)
                .map(|(r, n)| format!("{n}: {r}"))
                .collect();
            out.push(format!(
                "`{p}`: {missed} inlined instance(s) are not counted ({}{})",
                reasons.join("; "),
                if self.not_counted.len() > 3 {
                    "; ..."
                } else {
                    ""
                }
            ));
        }
        let uncertain: Vec<&InlinedSite> = self
            .sites
            .iter()
            .filter(|s| s.uncertain.is_some())
            .collect();
        if let Some(first) = uncertain.first() {
            out.push(format!(
                "`{p}`: the entries of {} of {} inlined site(s) are uncertain, their counts may be off (rows marked `uncertain` with --invocations-detail); e.g. {} in {}",
                uncertain.len(),
                self.sites.len(),
                first.uncertain.as_deref().unwrap_or_default(),
                short(&first.caller, 80),
            ));
        }
        if !self.pieces.is_empty() {
            out.push(format!(
                "`{p}`: not counted as calls: {}, split off by the compiler and entered only from the function's own copies (each entry there continues a call counted already)",
                self.pieces.join(", ")
            ));
        }
        for f in self.functions.iter().filter(|f| f.uncertain.is_some()) {
            out.push(format!(
                "`{p}`: {} is counted as calls, but it is a part split off the function, and may continue calls counted already: {}",
                f.label,
                f.uncertain.as_deref().unwrap_or_default()
            ));
        }
        for file in &self.no_debug_info {
            out.push(format!(
                "`{p}`: {file} has no debug info (nor a separate debug file under /usr/lib/debug): calls inlined into it cannot be seen; build with debug info (`debug = 1` or `-C debuginfo=1`) to count them"
            ));
        }
        out
    }

    /// How many probes this pattern needs.
    pub fn probe_points(&self) -> usize {
        self.functions.len() + self.sites.iter().map(|s| s.points.len()).sum::<usize>()
    }
}

/// `name` cut to about `max` characters, with `...` in the middle.
fn short(name: &str, max: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= max {
        return name.to_string();
    }
    let half = max / 2;
    let head: String = chars[..half].iter().collect();
    let tail: String = chars[chars.len() - half..].iter().collect();
    format!("{head}...{tail}")
}

/// Match `patterns` against the functions of `target`. A pattern that matches nothing
/// or more than `max_probes` functions is an error.
pub fn match_patterns(
    target: &mut Program,
    patterns: &[String],
    max_probes: usize,
) -> Result<Vec<PatternMatch>, ProbeError> {
    let parsed: Vec<Pattern> = patterns
        .iter()
        .map(|p| Pattern::parse(p))
        .collect::<Result<_, _>>()?;
    for pattern in &parsed {
        if let Some(library) = pattern.library() {
            target.library(library)?;
        }
    }
    let mut out = Vec::with_capacity(parsed.len());
    let mut references: HashMap<usize, References> = HashMap::new();
    for pattern in parsed {
        let (functions, label_errors) = find_functions(target, &pattern)?;
        let mut found = Inlined {
            dwarf_errors: label_errors,
            ..Inlined::default()
        };
        for i in 0..target.images.len() {
            if target.searches(&pattern, i) {
                found.scan_image(target, i, &pattern);
            }
        }
        let (functions, pieces) = judge_pieces(target, functions, &found.copies, &mut references);
        let Inlined {
            inlined,
            mut dwarf_errors,
            sites,
            not_counted,
            no_debug_info,
            split_parts,
            merged_tails,
            in_loader,
            ..
        } = found;
        let mut not_counted: Vec<(String, usize)> = not_counted.into_iter().collect();
        not_counted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut seen = std::collections::HashSet::new();
        dwarf_errors.retain(|e| seen.insert(e.clone()));
        if functions.is_empty() && sites.is_empty() {
            return Err(no_match(
                target,
                &pattern,
                &inlined,
                &no_debug_info,
                &dwarf_errors,
            ));
        }
        check_limit(&pattern, &functions, &sites, max_probes)?;
        out.push(PatternMatch {
            pattern,
            functions,
            inlined,
            dwarf_errors,
            sites,
            not_counted,
            no_debug_info,
            pieces,
            split_parts,
            merged_tails,
            in_loader,
        });
    }
    Ok(out)
}

/// An error when the probes a pattern needs exceed `max_probes`.
fn check_limit(
    pattern: &Pattern,
    functions: &[MatchedFunction],
    sites: &[InlinedSite],
    max_probes: usize,
) -> Result<(), ProbeError> {
    let points = functions.len() + sites.iter().map(|s| s.points.len()).sum::<usize>();
    if points <= max_probes {
        return Ok(());
    }
    let mut examples: Vec<&str> = functions.iter().map(|f| f.label.as_str()).collect();
    examples.extend(sites.iter().map(|s| s.function.as_str()));
    examples.dedup();
    examples.truncate(3);
    Err(ProbeError::TooMany {
        pattern: pattern.as_str().to_string(),
        count: points,
        limit: max_probes,
        examples: examples.join(", "),
    })
}

/// Whether image `i` of `target` is the program's dynamic loader (its `PT_INTERP`).
fn is_loader(target: &Program, i: usize) -> bool {
    let Some(interp) = target.images.first().and_then(|p| p.interpreter.as_ref()) else {
        return false;
    };
    i > 0 && target.images[i].path.file_name() == interp.file_name()
}

/// What one pattern names among the inlined instances of a target's files.
#[derive(Default)]
struct Inlined {
    inlined: InlinedMatch,
    dwarf_errors: Vec<String>,
    sites: Vec<InlinedSite>,
    /// Reason -> instances not counted for it.
    not_counted: BTreeMap<String, usize>,
    no_debug_info: Vec<String>,
    /// (image, demangled name) -> the code of its inlined copies.
    copies: HashMap<(usize, String), Vec<(u64, u64)>>,
    /// (image, demangled name, call line) -> the code of its inlined copies called there.
    copies_at: HashMap<(usize, String, String), Vec<(u64, u64)>>,
    /// Split parts counted with the copy they were split from.
    split_parts: usize,
    /// Instances without a call line counted with the calls that enter them.
    merged_tails: usize,
    /// Whether the image being scanned is the dynamic loader.
    loader: bool,
    /// The loader's file name and its instances not counted.
    in_loader: Option<(String, usize)>,
}

impl Inlined {
    /// Read the inlined instances of image `i` that `pattern` names.
    fn scan_image(&mut self, target: &mut Program, i: usize, pattern: &Pattern) {
        let path = target.images[i].path.clone();
        let found = match target.inlined_of(i) {
            Ok(index) => {
                let m = index.matching(pattern);
                self.inlined.instances += m.instances;
                self.inlined.functions.extend(m.functions);
                if index.split_units > 0 {
                    self.dwarf_errors.push(format!(
                        "{}: {} of its units are split into .dwo/.dwp files (-gsplit-dwarf, split-debuginfo), which are not read; build without split debug info",
                        path.display(),
                        index.split_units
                    ));
                }
                m.instances
            }
            Err(e) => {
                self.dwarf_errors.push(format!("{}: {e}", path.display()));
                0
            }
        };
        if let Some(why) = target.unusable_debug_file(i) {
            self.dwarf_errors.push(format!("{}: {why}", path.display()));
        } else if i == 0 && !target.has_debug_info(0) {
            self.no_debug_info.push(target.images[0].file_name());
        }
        if found == 0 {
            return;
        }
        self.loader = is_loader(target, i);
        let data = target.dwarf_data(i).unwrap_or(&[]);
        match inlined_instances(data, pattern) {
            Ok(instances) => self.add_instances(&target.images[i], i, instances),
            Err(e) => self.dwarf_errors.push(format!("{}: {e}", path.display())),
        }
    }

    /// An inlined instance not counted, for `why`; inside the dynamic loader, counted apart.
    fn miss(&mut self, image: &Image, why: String) {
        if self.loader {
            let entry = self.in_loader.get_or_insert_with(|| (image.file_name(), 0));
            entry.1 += 1;
        } else {
            *self.not_counted.entry(why).or_default() += 1;
        }
    }

    /// Analyse the entries of the inlined instances of image `i`.
    fn add_instances(&mut self, image: &Image, i: usize, instances: Vec<InlinedInstance>) {
        let instances = fold_split_parts(instances);
        let first = self.sites.len();
        let mut shared = Vec::new();
        // (function body, inlined function) -> the call lines of its calls there.
        let mut lines_in: HashMap<(u64, String), Vec<String>> = HashMap::new();
        // (function body, inlined function) -> the code its calls there share.
        let mut shared_in: HashMap<(u64, String), Vec<(u64, u64)>> = HashMap::new();
        for instance in &instances {
            if instance.no_call_line || instance.in_merged {
                shared_in
                    .entry((instance.parent, instance.demangled.clone()))
                    .or_default()
                    .extend(&instance.ranges);
            }
            self.copies
                .entry((i, instance.demangled.clone()))
                .or_default()
                .extend(&instance.ranges);
            if let Some(line) = &instance.call_line {
                self.copies_at
                    .entry((i, instance.demangled.clone(), line.clone()))
                    .or_default()
                    .extend(&instance.ranges);
                let lines = lines_in
                    .entry((instance.parent, instance.demangled.clone()))
                    .or_default();
                if !lines.contains(line) {
                    lines.push(line.clone());
                }
            }
        }
        if self.loader {
            // Never the program's calls, whatever their entries (the loader's symbols from
            // its debug file would let them be found).
            for _ in &instances {
                self.miss(image, String::new());
            }
            return;
        }
        for instance in instances {
            let e = if let Some(SplitFrom::Function(copy)) = &instance.split_from {
                // A part split off an out-of-line copy and inlined back into it: its
                // calls are counted at that copy's entry, unless control reaches it from
                // elsewhere.
                match split_part_entries(image, copy, &instance.ranges) {
                    Ok(None) => {
                        self.split_parts += 1;
                        continue;
                    }
                    Ok(Some(e)) => e,
                    Err(why) => {
                        self.miss(image, why);
                        continue;
                    }
                }
            } else if instance.ranges.is_empty() {
                self.miss(
                    image,
                    "no code of their own (optimised away or merged)".into(),
                );
                continue;
            } else if instance.no_call_line || instance.in_merged {
                // Judged once the instances with a call line have their entries: code
                // without a call line, or inside an instance without one (its call line
                // names one of the calls merged into it).
                shared.push(instance);
                continue;
            } else {
                let e = entries(image, &instance.ranges);
                if e.points.is_empty() {
                    let why = e.uncertain.unwrap_or_else(|| "no entry found".into());
                    self.miss(image, why);
                    continue;
                }
                e
            };
            let unbounded = e.misses;
            let key = (instance.parent, instance.demangled.clone());
            let tail = match (&instance.split_from, shared_in.get(&key)) {
                (None, Some(shared)) => {
                    let points: Vec<u64> = e.points.iter().map(|p| p.address).collect();
                    !crate::entries::fed_by_shared(image, &instance.ranges, &points, shared)
                        .is_empty()
                }
                _ => false,
            };
            let (e, calls_per_pass) = unrolled(image, e, &instance);
            let mut site = InlinedSite::new(image, i, instance, e, calls_per_pass);
            // The doubts of its entries, not the unrolled loop's, which has a bound.
            site.unbounded = unbounded;
            if tail {
                // The end of code that the calls at `lines` share, which DWARF gave this
                // copy's line: a pass may be any of their calls. It stands for them all,
                // and bounds its own from none to its count.
                let why = "control reaches it only from code that the optimizer shares \
                           between calls of the function: a pass may continue one of those \
                           calls";
                site.uncertain = Some(match site.uncertain.take() {
                    Some(more) => format!("{why}; {more}"),
                    None => why.to_string(),
                });
                site.may_continue = true;
                site.shared_by = lines_in.get(&key).cloned().unwrap_or_default();
            }
            self.sites.push(site);
        }
        for k in first..self.sites.len() {
            self.merged_into(image, k);
        }
        for instance in shared {
            let lines = lines_in
                .get(&(instance.parent, instance.demangled.clone()))
                .cloned()
                .unwrap_or_default();
            self.add_shared(image, i, instance, lines);
        }
    }

    /// Site `k` (of `image`, with a call line) when passes through copies of its function
    /// at other lines of the same caller may continue into its entries
    /// ([`crate::entries::continues_others`]: their tails merged into code that DWARF
    /// gives this line): a pass there may be no call of its own, so its count bounds its
    /// calls from none to itself.
    fn merged_into(&mut self, image: &Image, k: usize) {
        let s = &self.sites[k];
        let Some(line) = &s.call_line else {
            return;
        };
        let Some(function) = s.points.first().and_then(|p| image.function_at(p.address)) else {
            return;
        };
        let (lo, hi) = (function.address, function.address + function.size);
        let own = &self.copies_at[&(s.image, s.function.clone(), line.clone())];
        // The copies at other call lines (code without one is walked through: it may be
        // the merged tail itself).
        let others: Vec<(u64, u64)> = self
            .copies_at
            .iter()
            .filter(|((image, function, at), _)| {
                *image == s.image && *function == s.function && at != line
            })
            .flat_map(|(_, ranges)| ranges)
            .filter(|r| r.0 >= lo && r.0 < hi && !own.contains(r))
            .copied()
            .collect();
        let points: Vec<u64> = s.points.iter().map(|p| p.address).collect();
        if others.is_empty() || !crate::entries::continues_others(image, own, &points, &others) {
            return;
        }
        let why = "calls of the function at other lines of its caller continue into its \
                   entries (their tails merged into its code): a pass there may be no call \
                   of its own";
        let s = &mut self.sites[k];
        s.may_continue = true;
        s.uncertain = Some(match s.uncertain.take() {
            Some(more) => format!("{why}; {more}"),
            None => why.to_string(),
        });
    }

    /// An instance without a call line: code the optimizer shares between calls of the
    /// function written at `lines` (see [`shared_entries`]), counted only where a call may
    /// start in it. When no other instance of the function has code in the same function,
    /// the shared code is all there is of those calls: each entry starts one.
    fn add_shared(
        &mut self,
        image: &Image,
        i: usize,
        instance: InlinedInstance,
        lines: Vec<String>,
    ) {
        let Some(function) = instance
            .ranges
            .first()
            .and_then(|&(b, _)| image.function_at(b))
        else {
            self.miss(image, "its code lies in no function symbol".into());
            return;
        };
        let (lo, hi) = (function.address, function.address + function.size);
        let within = |a: u64| a >= lo && a < hi;
        let own = |r: &(u64, u64)| instance.ranges.contains(r);
        // Code merged out of calls at one line (inside a merged copy of the function that
        // makes them) continues only the calls at that line; code without a call line,
        // any call of the function.
        let copies = match &instance.call_line {
            Some(line) => &self.copies_at[&(i, instance.demangled.clone(), line.clone())],
            None => &self.copies[&(i, instance.demangled.clone())],
        };
        let others: Vec<(u64, u64)> = copies
            .iter()
            .filter(|r| within(r.0) && !own(r))
            .copied()
            .collect();
        let points: Vec<u64> = self
            .sites
            .iter()
            .filter(|s| s.image == i && s.function == instance.demangled)
            .flat_map(|s| s.points.iter().map(|p| p.address))
            .filter(|&a| within(a))
            .collect();
        let alone = others.is_empty();
        let e = match alone {
            true => Some(entries(image, &instance.ranges)),
            false => shared_entries(image, &instance.ranges, &others, &points),
        };
        let e = match e {
            None => {
                self.merged_tails += 1;
                return;
            }
            Some(e) if e.points.is_empty() => {
                let why = e.uncertain.unwrap_or_else(|| "no entry found".into());
                self.miss(image, why);
                return;
            }
            Some(e) => e,
        };
        let mut site = InlinedSite::new(image, i, instance, e, None);
        site.may_continue |= !alone;
        if !alone {
            let why = "code that the optimizer shares between calls of the function (without \
                       a call line, or inside a merged copy of its caller), entered also from \
                       elsewhere: a call may or may not start there";
            site.uncertain = Some(match site.uncertain.take() {
                Some(more) => format!("{why}; {more}"),
                None => why.to_string(),
            });
            self.share_doubt(i, &site.function, &site.caller, &lines);
        }
        site.shared_by = lines;
        self.sites.push(site);
    }

    /// The instances of `function` in `caller` called at `lines` share code with one
    /// where a call may start: some of their calls may be counted there, not at theirs.
    fn share_doubt(&mut self, i: usize, function: &str, caller: &str, lines: &[String]) {
        let why = "it shares code without a call line with other calls of the function, \
                   where some of its calls may be counted instead";
        for s in self.sites.iter_mut().filter(|s| {
            s.image == i
                && s.function == function
                && s.caller == caller
                && s.call_line.as_ref().is_some_and(|l| lines.contains(l))
        }) {
            s.uncertain = Some(match s.uncertain.take() {
                Some(more) if !more.contains(why) => format!("{why}; {more}"),
                Some(more) => more,
                None => why.to_string(),
            });
        }
    }
}

/// An instance whose code repeats one source line in pieces that every pass runs one
/// after the other may be a loop the optimizer unrolled: one pass through its entries
/// makes up to as many calls as that line has instructions (each copy of the call has at
/// least one). So may an instance whose whole code is copies of one piece of machine
/// code, one after the other, on one line ([`crate::entries::repeated_copies`]): up to as
/// many calls as copies. Its entries stay; it is marked uncertain with that bound.
fn unrolled(image: &Image, mut e: Entries, instance: &InlinedInstance) -> (Entries, Option<u64>) {
    let from_lines = instance.repeated_line.as_ref().and_then(|repeated| {
        let most = crate::entries::unrolled_calls(image, &repeated.starts, &repeated.spans)?;
        Some((
            format!(
                "{} pieces of its code, one after the other on every pass, start at the same \
                 source line, as in a loop the optimizer unrolled: one counted pass may make \
                 up to {most} calls",
                repeated.starts.len()
            ),
            most,
        ))
    });
    let from_code = || {
        let copies = crate::entries::repeated_copies(image, &instance.ranges)?;
        Some((
            format!(
                "its code is {copies} copies of one piece, one after the other, as a loop the \
                 optimizer unrolled completely leaves: one counted pass may make up to \
                 {copies} calls"
            ),
            copies,
        ))
    };
    let Some((why, most)) = from_lines.or_else(from_code) else {
        return (e, None);
    };
    e.uncertain = Some(match e.uncertain.take() {
        Some(more) => format!("{why}; {more}"),
        None => why,
    });
    (e, Some(most))
}

/// Split parts inlined back into an inlined instance of their function belong to that
/// instance's pass: their code joins its ranges (DWARF nests them, so it is usually
/// there already) and they are no instances of their own.
fn fold_split_parts(mut instances: Vec<InlinedInstance>) -> Vec<InlinedInstance> {
    for k in 0..instances.len() {
        if let Some(SplitFrom::Instance(mut outer)) = instances[k].split_from {
            // A part of a part: into the copy the first was split from. DWARF nests
            // children after their parents, so `outer < k` and this ends.
            while let Some(SplitFrom::Instance(o)) = instances[outer].split_from {
                if o >= outer {
                    break;
                }
                outer = o;
            }
            let more = instances[k].ranges.clone();
            let ranges = &mut instances[outer].ranges;
            ranges.extend(more);
            ranges.sort_unstable();
            ranges.dedup();
        }
    }
    instances.retain(|i| !matches!(i.split_from, Some(SplitFrom::Instance(_))));
    instances
}

/// The entries of a split part (`part`) inlined back into an out-of-line copy of its
/// function (`copy`) that are not the copy's own: `None` when control enters the part
/// only from the copy (the analysis of the copy with and without the part finds the same
/// entries), else the extra entries, marked uncertain. An error when it cannot be told.
fn split_part_entries(
    image: &Image,
    copy: &[(u64, u64)],
    part: &[(u64, u64)],
) -> Result<Option<Entries>, String> {
    let mut both: Vec<(u64, u64)> = copy.iter().chain(part).copied().collect();
    both.sort_unstable();
    let with = entries(image, &both);
    let without = entries(image, copy);
    if with.points.is_empty() {
        return Err(with
            .uncertain
            .unwrap_or_else(|| "its function's code has no entry".into()));
    }
    let in_part = |a: u64| part.iter().any(|&(b, e)| a >= b && a < e);
    let extra: Vec<EntryPoint> = with
        .points
        .iter()
        .filter(|p| in_part(p.address) && !without.points.contains(p))
        .copied()
        .collect();
    if extra.is_empty() {
        return Ok(None);
    }
    Ok(Some(Entries {
        caller: with.caller,
        points: extra,
        uncertain: Some(
            "a part GCC split off its function, entered from outside the copy it was split from"
                .into(),
        ),
        misses: true,
        repeats: false,
    }))
}

/// Whether the pieces among `functions` (`F.part.N`, `F.cold`: code split off `F` and
/// entered from `F`'s code) make calls of their own. A piece that only `F`'s copies lead
/// to (its out-of-line copies, its clones and its inlined instances, in `copies`) carries
/// on a call counted there: it is not probed, and its label goes into the second list. A
/// piece that something else may reach is probed, marked uncertain with the reason.
fn judge_pieces(
    target: &Program,
    functions: Vec<MatchedFunction>,
    copies: &HashMap<(usize, String), Vec<(u64, u64)>>,
    references: &mut HashMap<usize, References>,
) -> (Vec<MatchedFunction>, Vec<String>) {
    let mut kept = Vec::new();
    let mut pieces = Vec::new();
    for mut f in functions {
        if !f.clone.as_ref().is_some_and(|(_, piece)| *piece) {
            kept.push(f);
            continue;
        }
        let image = &target.images[f.image];
        // The out-of-line copies of its function: every symbol that is it or a clone.
        let origin_raw = clone_name(&f.raw).map_or(f.raw.as_str(), |c| c.origin);
        let mut code: Vec<(u64, u64)> = image
            .functions
            .iter()
            .filter(|g| clone_name(&g.name).map_or(g.name.as_str(), |c| c.origin) == origin_raw)
            .map(|g| (g.address, g.address + g.size))
            .collect();
        if let Some(inlined) = copies.get(&(f.image, f.origin.clone())) {
            code.extend(inlined);
        }
        let refs = references
            .entry(f.image)
            .or_insert_with(|| References::scan(image));
        let (begin, size) = f.code;
        match refs.reached_only_from(image, begin, begin + size, &code) {
            Ok(()) => pieces.push(f.label),
            Err(why) => {
                let suffix = f.clone.as_ref().map_or("", |(s, _)| s.as_str());
                let marked = format!("[clone {suffix}, uncertain]");
                f.label = f.label.replacen(&format!("[clone {suffix}]"), &marked, 1);
                f.uncertain = Some(why);
                kept.push(f);
            }
        }
    }
    (kept, pieces)
}

/// Whether the raw name may contain `ident` (mangled names keep identifiers verbatim);
/// a cheap filter before demangling.
fn may_match(raw: &str, pattern: &Pattern) -> bool {
    let last = pattern.last_segment();
    let ident = !last.is_empty() && last.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    !ident || raw.contains(last) || raw == pattern.as_str()
}

/// What DWARF says the clones that `pattern` may name are copies of: (image, address) ->
/// raw origin name, for the symbols with a clone suffix whose suffix-less name matches;
/// and the DWARF errors met.
fn clone_origins(
    target: &mut Program,
    pattern: &Pattern,
) -> (HashMap<(usize, u64), String>, Vec<String>) {
    let mut out = HashMap::new();
    let mut errors = Vec::new();
    for i in 0..target.images.len() {
        if !target.searches(pattern, i) {
            continue;
        }
        let addresses: std::collections::HashSet<u64> = target.images[i]
            .functions
            .iter()
            .filter(|f| may_match(&f.name, pattern))
            .filter_map(|f| {
                let c = clone_name(&f.name)?;
                pattern
                    .matches(c.origin, &demangle(c.origin).label)
                    .then_some(f.address)
            })
            .collect();
        if addresses.is_empty() || !target.has_debug_info(i) {
            continue;
        }
        let data = target.dwarf_data(i).unwrap_or(&[]);
        match crate::dwarf::copy_origins(data, &addresses) {
            Ok(names) => out.extend(names.into_iter().map(|(a, n)| ((i, a), n))),
            Err(e) => errors.push(format!("{}: {e}", target.images[i].path.display())),
        }
    }
    (out, errors)
}

/// The functions `pattern` matches, and the DWARF errors met while labelling them; an
/// error for a function whose calls a uprobe cannot count.
fn find_functions(
    target: &mut Program,
    pattern: &Pattern,
) -> Result<(Vec<MatchedFunction>, Vec<String>), ProbeError> {
    let (origins, mut label_errors) = clone_origins(target, pattern);
    let (mut functions, refused) = matching_symbols(target, pattern, &origins);
    label_errors.extend(label_functions(target, &mut functions));
    functions.sort_by(|a, b| a.label.cmp(&b.label));
    if let Some(e) = first_refusal(&functions, &refused) {
        return Err(e);
    }
    Ok((functions, label_errors))
}

/// The function symbols `pattern` matches (clones by the function they copy, `origins`
/// naming them from DWARF), unlabelled, one per (image, offset): aliases at one address
/// are probed once. And those whose calls a uprobe cannot count, with why.
#[allow(clippy::type_complexity)]
fn matching_symbols(
    target: &Program,
    pattern: &Pattern,
    origins: &HashMap<(usize, u64), String>,
) -> (Vec<MatchedFunction>, BTreeMap<(usize, u64), EntryRefusal>) {
    let mut found: BTreeMap<(usize, u64), MatchedFunction> = BTreeMap::new();
    let mut refused: BTreeMap<(usize, u64), EntryRefusal> = BTreeMap::new();
    for (i, image) in target.images.iter().enumerate() {
        if !target.searches(pattern, i) {
            continue;
        }
        // The dynamic loader's own functions (its memcpy, strlen, minimal malloc: in its
        // separate debug file's symbol table) serve the loader, not the program.
        let loader = is_loader(target, i);
        for f in &image.functions {
            if !may_match(&f.name, pattern) || (loader && !f.exported) {
                continue;
            }
            let mut d = demangle(&f.name);
            let mut origin = d.label.clone();
            let clone = clone_name(&f.name);
            if let Some(c) = &clone {
                // The function it copies: as DWARF names it, else as its name says.
                let raw = origins
                    .get(&(i, f.address))
                    .map_or(c.origin, String::as_str);
                let o = demangle(raw);
                if !pattern.matches(&f.name, &d.label) && !pattern.matches(raw, &o.label) {
                    continue;
                }
                origin = o.label.clone();
                d = Demangled {
                    label: format!("{} [clone {}]", o.label, c.suffix),
                    ..o
                };
            } else if !pattern.matches(&f.name, &d.label) {
                continue;
            }
            found
                .entry((i, f.offset))
                .and_modify(|m| {
                    if !m.raw.split(" = ").any(|r| r == f.name) {
                        m.raw = format!("{} = {}", m.raw, f.name);
                    }
                })
                .or_insert_with(|| {
                    let probe = match call_probe(image, f) {
                        Ok(address) => f.offset + (address - f.address),
                        Err(why) => {
                            refused.insert((i, f.offset), why);
                            f.offset
                        }
                    };
                    MatchedFunction {
                        path: image.path.clone(),
                        image: i,
                        raw: f.name.clone(),
                        demangled: d,
                        offset: f.offset,
                        probe,
                        label: String::new(),
                        code: (f.address, f.size),
                        origin,
                        clone: clone.map(|c| (c.suffix.to_string(), c.piece)),
                        uncertain: None,
                    }
                });
        }
    }
    (found.into_values().collect(), refused)
}

/// Give `functions` labels that are unique within the pattern; returns the DWARF errors
/// met (rows then fall back to their hashes).
fn label_functions(target: &mut Program, functions: &mut [MatchedFunction]) -> Vec<String> {
    let mut label_errors = Vec::new();
    // Labels: unique within the pattern. Legacy Rust monomorphizations share a demangled
    // name; DWARF often names them with their generic arguments (`generic_step<u32>`).
    let mut counts: BTreeMap<(usize, String), usize> = BTreeMap::new();
    for f in functions.iter() {
        *counts
            .entry((f.image, f.demangled.label.clone()))
            .or_default() += 1;
    }
    let mut wanted: BTreeMap<usize, std::collections::HashSet<String>> = BTreeMap::new();
    for f in functions.iter() {
        if counts[&(f.image, f.demangled.label.clone())] > 1 && f.demangled.hash.is_some() {
            wanted.entry(f.image).or_default().insert(f.raw.clone());
        }
    }
    let mut generic: HashMap<(usize, String), String> = HashMap::new();
    for (image, raws) in wanted {
        let data = target
            .dwarf_data(image)
            .unwrap_or(target.images[image].data());
        match crate::dwarf::generic_names(data, &raws) {
            Ok(names) => generic.extend(names.into_iter().map(|(raw, name)| ((image, raw), name))),
            // Rows fall back to their hashes; the reader learns why.
            Err(e) => label_errors.push(format!("{}: {e}", target.images[image].path.display())),
        }
    }
    for f in functions.iter_mut() {
        let mut label = f.demangled.label.clone();
        if counts[&(f.image, label.clone())] > 1 {
            label = match (generic.get(&(f.image, f.raw.clone())), &f.demangled.hash) {
                // `alloc::vec::Vec<T,A>::push` + `push<u32, alloc::alloc::Global>` gives
                // `alloc::vec::Vec::push<u32, alloc::alloc::Global>`.
                (Some(name), _) => match label.rsplit_once("::") {
                    Some((prefix, _)) => {
                        let paths = crate::pattern::name_paths(prefix);
                        match paths.as_slice() {
                            [one] if !prefix.starts_with('<') => {
                                format!("{}::{name}", one.join("::"))
                            }
                            _ => format!("{prefix}::{name}"),
                        }
                    }
                    None => name.clone(),
                },
                (None, Some(h)) => format!("{label} [{h}]"),
                (None, None) => format!("{label} [@{:#x}]", f.offset),
            };
        }
        if f.image != 0 {
            label = format!("{label} [{}]", target.images[f.image].file_name());
        }
        f.label = label;
    }
    // Still equal (DWARF names without arguments): the offset tells them apart.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for f in functions.iter() {
        *seen.entry(f.label.clone()).or_default() += 1;
    }
    for f in functions.iter_mut() {
        if seen[&f.label] > 1 {
            f.label = format!("{} [@{:#x}]", f.label, f.offset);
        }
    }
    label_errors
}

/// The error for the first function (by label) whose calls a uprobe cannot count.
fn first_refusal(
    functions: &[MatchedFunction],
    refused: &BTreeMap<(usize, u64), EntryRefusal>,
) -> Option<ProbeError> {
    let (f, why) = functions
        .iter()
        .find_map(|f| Some((f, refused.get(&(f.image, f.offset))?)))?;
    Some(ProbeError::UnprobeableEntry {
        function: f.label.clone(),
        path: f.path.clone(),
        offset: f.offset,
        instruction: why.instruction.clone(),
        reason: format!(
            "{}, on which the kernel's x86 uprobes never fire, and {}",
            why.why, why.next
        ),
    })
}

fn no_match(
    target: &Program,
    pattern: &Pattern,
    inlined: &InlinedMatch,
    no_debug_info: &[String],
    dwarf_errors: &[String],
) -> ProbeError {
    let exe = target.exe();
    if let Some(script) = &target.script {
        // The functions wanted are most likely in the program the script runs, not in
        // its interpreter: say that first, and leave out the interpreter's own details.
        let (context, shell) = script_context(script, &exe.path);
        let closest = closest_names(target, pattern);
        let closest = if shell || closest.is_empty() {
            String::new()
        } else {
            format!("; closest names in it: {}", closest.join(", "))
        };
        return ProbeError::NoMatch {
            pattern: pattern.as_str().to_string(),
            target: exe.path.clone(),
            context,
            closest,
        };
    }
    let mut context = String::new();
    if inlined.instances > 0 {
        context.push_str(&format!(
            " (it exists only inlined: {} instance(s) of {}, none with code that can be probed; build with less inlining, e.g. #[inline(never)] or opt-level=1)",
            inlined.instances,
            inlined.functions.first().map(String::as_str).unwrap_or("?"),
        ));
    }
    for file in no_debug_info {
        context.push_str(&format!(
            "; {file} has no debug info (nor a separate debug file under /usr/lib/debug), so functions inlined into it cannot be seen: build with debug info (`debug = 1`)"
        ));
    }
    for e in dwarf_errors {
        context.push_str(&format!(
            "; inlined copies cannot be seen where the debug info is unreadable: {e}"
        ));
    }
    if exe.stripped {
        let exported = exe.functions.iter().filter(|f| f.exported).count();
        let debug = match &exe.debug_file_problem {
            // Said once: the DWARF errors above may carry it already.
            Some(why) if dwarf_errors.iter().any(|e| e.contains(why.as_str())) => {
                "install the separate debug file of this build, or rebuild without stripping"
                    .into()
            }
            Some(why) => format!(
                "its separate debug file is not used ({why}): install the one of this build, or rebuild without stripping"
            ),
            None => "no separate debug file was found (by build id under /usr/lib/debug/.build-id/, nor by its .gnu_debuglink): install its debug package, or rebuild without stripping".into(),
        };
        context.push_str(&format!(
            "; {} is stripped (no .symtab): only its {exported} exported functions and the functions of its shared libraries can be probed; {debug}",
            exe.file_name()
        ));
    }
    if pattern.library().is_none() && !exe.is_static {
        context.push_str(
            "; a function of a library the program loads at run time (dlopen) is found when \
             the pattern names the library: LIBRARY:NAME, e.g. `/usr/lib/x86_64-linux-gnu/libz.so.1:inflate`",
        );
    }
    if exe.is_static {
        context.push_str(&format!(
            "; {} is statically linked: it loads no shared libraries, so only functions linked into it can be probed",
            exe.file_name()
        ));
    }
    if !target.libraries.missing.is_empty() {
        context.push_str(&format!(
            "; libraries not found (set LD_LIBRARY_PATH?): {}",
            target.libraries.missing.join(", ")
        ));
    }
    let closest = closest_names(target, pattern);
    let closest = if closest.is_empty() {
        String::new()
    } else {
        format!("; closest names: {}", closest.join(", "))
    };
    ProbeError::NoMatch {
        pattern: pattern.as_str().to_string(),
        target: exe.path.clone(),
        context,
        closest,
    }
}

/// Version managers whose commands on `PATH` are shims: scripts that exec the real
/// program, which `TOOL which NAME` prints.
const SHIM_MANAGERS: [&str; 6] = ["pyenv", "rbenv", "nodenv", "goenv", "jenv", "plenv"];

/// What to say when a pattern matched nothing in `interpreter`, which runs `script`: the
/// program is a script, which runs another program (and how to name that one); and whether
/// the interpreter is a shell (then its own function names are no help).
fn script_context(script: &Path, interpreter: &Path) -> (String, bool) {
    use std::io::Read;
    let mut text = Vec::new();
    let _ = std::fs::File::open(script).and_then(|f| f.take(64 * 1024).read_to_end(&mut text));
    let text = String::from_utf8_lossy(&text);
    let shebang = text.lines().next().unwrap_or_default().trim();
    let name = script
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let shell = interpreter.file_name().is_some_and(|f| {
        ["sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox"]
            .iter()
            .any(|s| f == *s)
    });
    let how = match SHIM_MANAGERS
        .iter()
        .find(|m| text.contains(&format!("{m} exec")) || text.contains(&format!("libexec/{m}")))
    {
        Some(manager) => format!(
            "it is a {manager} shim: pass the real executable, which `{manager} which {name}` \
             prints (e.g. `sbs-profile ... -- \"$({manager} which {name})\" ARGS`)"
        ),
        None if shell => "pass the executable the script runs instead of the script".into(),
        None => "if the script runs another program, pass that executable instead".into(),
    };
    let runs = if shell || how.contains(" shim") {
        ", which runs another program"
    } else {
        ""
    };
    (
        format!(
            ": {} is a script run by {} (`{shebang}`){runs}; {how}",
            script.display(),
            interpreter.display()
        ),
        shell,
    )
}

/// Up to 5 existing function names whose last segment is closest to the pattern's.
pub fn closest_names(target: &Program, pattern: &Pattern) -> Vec<String> {
    let want = pattern.last_segment().to_lowercase();
    let limit = (want.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, usize, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (index, image) in target.images.iter().enumerate() {
        for f in &image.functions {
            let d = demangle(&f.name).label;
            let paths = crate::pattern::name_paths(&d);
            let Some(last) = paths.first().and_then(|p| p.last()) else {
                continue;
            };
            let last = last.to_lowercase();
            let close_len = last.len() * 2 >= want.len() && want.len() * 2 >= last.len();
            let dist = if close_len && (last.contains(&want) || want.contains(&last)) {
                last.len().abs_diff(want.len()).min(limit)
            } else {
                edit_distance(&last, &want)
            };
            if dist <= limit && seen.insert(d.clone()) {
                // The program's own functions before its libraries'.
                scored.push((dist, usize::from(index > 0), d));
            }
        }
    }
    scored.sort_by(|a, b| (a.0, a.1, a.2.len(), &a.2).cmp(&(b.0, b.1, b.2.len(), &b.2)));
    scored.into_iter().take(5).map(|(_, _, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn own_target() -> Program {
        Program::load(&std::env::current_exe().unwrap(), None).unwrap()
    }

    #[inline(never)]
    fn probe_me_resolve_unique() -> u32 {
        std::hint::black_box(7)
    }

    #[test]
    fn matches_own_function_and_malloc() {
        assert_eq!(probe_me_resolve_unique(), 7);
        let mut t = own_target();
        let m = match_patterns(
            &mut t,
            &["probe_me_resolve_unique".into(), "malloc".into()],
            DEFAULT_MAX_PROBES,
        )
        .unwrap();
        assert_eq!(m[0].functions.len(), 1);
        assert_eq!(m[0].functions[0].image, 0);
        assert!(m[0].functions[0]
            .label
            .ends_with("tests::probe_me_resolve_unique"));
        assert!(
            m[1].functions
                .iter()
                .any(|f| f.label == "malloc [libc.so.6]"),
            "{:?}",
            m[1].functions
        );
    }

    #[inline(never)]
    fn probe_me_generic<T: Into<u64>>(x: T) -> u64 {
        std::hint::black_box(x.into())
    }

    #[test]
    fn monomorphizations_are_labelled_with_their_generic_arguments() {
        assert_eq!(probe_me_generic(1u32) + probe_me_generic(2u64), 3);
        let mut t = own_target();
        let m = match_patterns(&mut t, &["probe_me_generic".into()], 10).unwrap();
        let labels: Vec<&str> = m[0].functions.iter().map(|f| f.label.as_str()).collect();
        assert_eq!(
            labels,
            vec![
                "sbs_probes::resolve::tests::probe_me_generic<u32>",
                "sbs_probes::resolve::tests::probe_me_generic<u64>"
            ]
        );
    }

    #[test]
    fn split_parts_fold_into_the_copy_they_were_split_from() {
        let instance = |ranges: Vec<(u64, u64)>, split_from| InlinedInstance {
            no_call_line: false,
            repeated_line: None,
            raw: "f".into(),
            demangled: "f".into(),
            ranges,
            call_site: None,
            call_line: None,
            split_from,
            parent: 0,
            in_merged: false,
        };
        let folded = fold_split_parts(vec![
            instance(vec![(0x10, 0x20)], None),
            // A part nested in the copy, partly outside its ranges.
            instance(vec![(0x18, 0x28)], Some(SplitFrom::Instance(0))),
            // A part of that part.
            instance(vec![(0x30, 0x38)], Some(SplitFrom::Instance(1))),
            instance(
                vec![(0x40, 0x48)],
                Some(SplitFrom::Function(vec![(0x40, 0x60)])),
            ),
        ]);
        assert_eq!(folded.len(), 2, "{folded:?}");
        assert_eq!(
            folded[0].ranges,
            vec![(0x10, 0x20), (0x18, 0x28), (0x30, 0x38)]
        );
        assert!(matches!(folded[1].split_from, Some(SplitFrom::Function(_))));
    }

    #[test]
    fn no_match_lists_closest_names() {
        let mut t = own_target();
        let e = match_patterns(&mut t, &["probe_me_resolve_uniqe".into()], 10).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("matches no function"), "{msg}");
        assert!(msg.contains("probe_me_resolve_unique"), "{msg}");
    }

    #[test]
    fn too_many_is_refused() {
        let mut t = own_target();
        let e = match_patterns(&mut t, &["fmt".into()], 3).unwrap_err();
        assert!(matches!(e, ProbeError::TooMany { limit: 3, .. }), "{e}");
        assert!(e.to_string().contains("--max-probes"));
    }

    #[test]
    fn script_follows_shebang() {
        let dir = crate::elf::tests::tempfile_dir();
        let s = dir.join("script.sh");
        std::fs::write(&s, "#!/bin/sh\necho hi\n").unwrap();
        let t = Program::load(&s, None).unwrap();
        assert_eq!(t.script.as_deref(), Some(s.as_path()));
        assert_eq!(t.exe().path, Path::new("/bin/sh").canonicalize().unwrap());
        let bad = dir.join("bad.sh");
        std::fs::write(&bad, "#!/nonexistent/interp\n").unwrap();
        let e = Program::load(&bad, None).unwrap_err();
        assert!(matches!(e, ProbeError::Interpreter { .. }), "{e}");
        let env = dir.join("env.sh");
        std::fs::write(&env, "#!/usr/bin/env sh\n").unwrap();
        assert!(Program::load(&env, None).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
