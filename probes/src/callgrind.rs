//! Inclusive instruction counts per call site: valgrind's callgrind, and its out-file.
//!
//! [`profile_wrapper`] runs a program under callgrind with one position per instruction
//! (`--dump-instr=yes`, no line numbers), names neither compressed nor demangled, and the
//! out-file and log at paths of the caller's choosing. [`parse`] reads that file into,
//! per object file, the inclusive cost of every call site (the instruction address of the
//! `call`, or of a `jmp` that callgrind saw enter another function: a tail call) and the
//! inclusive cost of every call into a function (its start address).
//!
//! Callgrind writes addresses of an object as the object's own virtual addresses (its
//! load offset subtracted), so they compare directly with the ELF symbol table; the
//! caller can check that on the names it records ([`ObjectCosts::callees`]).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;

use crate::valgrind::ValgrindError;

/// The callgrind command: `valgrind` and its options, to be followed by the program and
/// its arguments. The profile goes to `out_file`, valgrind's own messages to `log_file`;
/// children are not followed (the profile is of the program itself).
pub fn profile_wrapper(valgrind: &Path, out_file: &Path, log_file: &Path) -> Vec<OsString> {
    crate::valgrind::to_files(
        valgrind,
        &[
            "--tool=callgrind",
            "--dump-instr=yes",
            "--dump-line=no",
            "--compress-strings=no",
            "--compress-pos=no",
            "--demangle=no",
            "--trace-children=no",
        ],
        ("--callgrind-out-file=", out_file),
        log_file,
    )
}

/// The inclusive cost of the calls made at one site, summed over its callees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SiteCost {
    /// How many calls the site made.
    pub calls: u64,
    /// Instructions executed inside those calls (callee and everything it called).
    pub inclusive: u64,
}

/// What callgrind measured in one object file (the program, or a library).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectCosts {
    /// Call sites in this object: address of the call instruction -> its calls' cost.
    pub sites: HashMap<u64, SiteCost>,
    /// Functions of this object called from anywhere: start address -> cost of the calls
    /// into it (inclusive).
    pub entries: HashMap<u64, SiteCost>,
    /// The raw (mangled) names callgrind gave the functions called in this object, with
    /// their start address: what lets a caller check addresses against symbols.
    pub callees: HashMap<u64, String>,
    /// Calls from this object into its own functions, per call edge: (address of the call
    /// instruction, start of the callee) -> the edge's calls and inclusive cost. What lets
    /// a caller find recursive cycles and the cost that enters them from outside.
    pub edges: HashMap<(u64, u64), SiteCost>,
    /// Instructions executed in this object's own code (exclusive costs).
    pub own: u64,
    /// The same per instruction: address -> times it executed (summed over contexts).
    pub own_at: HashMap<u64, u64>,
}

/// A parsed callgrind out-file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    /// Per object file, as callgrind named it (`ob=` lines).
    pub objects: HashMap<String, ObjectCosts>,
    /// The total of the run (`summary:` or `totals:`).
    pub total: u64,
    /// Calls per arc: from a call site to a function's start, each counted once however
    /// many contexts callgrind wrote it in.
    pub arcs: HashMap<Arc, u64>,
}

/// One caller-callee pair of call site and function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Arc {
    /// The object of the call site (`ob=`), and the site's address in it.
    pub caller_object: String,
    /// Address of the `call` (or tail-call `jmp`).
    pub site: u64,
    /// The callee's object, and its start address in it.
    pub callee_object: String,
    /// The callee's start address.
    pub target: u64,
}

fn number(text: &str) -> Result<u64, ValgrindError> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| ValgrindError::BadNumber {
        text: t.to_string(),
    })
}

/// A name line's value without callgrind's `'2` recursion-depth suffix.
fn strip_recursion(name: &str) -> &str {
    match name.rsplit_once('\'') {
        Some((base, depth)) if !depth.is_empty() && depth.bytes().all(|b| b.is_ascii_digit()) => {
            base
        }
        _ => name,
    }
}

/// One position: absolute (`0x...`), relative to the last (`+N`, `-N`) or the same (`*`).
fn position(text: &str, last: u64) -> Result<u64, ValgrindError> {
    if text == "*" {
        return Ok(last);
    }
    if let Some(n) = text.strip_prefix('+') {
        return Ok(last.wrapping_add(number(n)?));
    }
    if let Some(n) = text.strip_prefix('-') {
        return Ok(last.wrapping_sub(number(n)?));
    }
    number(text)
}

/// Parse a callgrind out-file written with [`profile_wrapper`]'s options (one position
/// column, instruction addresses). The first event (`Ir`) is the cost.
pub fn parse(text: &str) -> Result<Profile, ValgrindError> {
    let mut parser = Parser::default();
    for line in text.lines() {
        let line = line.trim_end();
        match parser.pending.take() {
            Some(call) => parser.call_cost(call, line)?,
            None => parser.line(line)?,
        }
    }
    if !parser.saw_events {
        return Err(ValgrindError::NoSummary {
            pid: None,
            log: text.chars().take(2000).collect(),
        });
    }
    Ok(parser.profile)
}

/// A `calls=` line, whose cost is on the next line.
struct PendingCall {
    count: u64,
    target: u64,
    callee_ob: String,
    callee_name: Option<String>,
}

/// The state of [`parse`] between lines.
#[derive(Default)]
struct Parser {
    profile: Profile,
    /// The current object (`ob=`), and the callee's object and name of the next call.
    ob: String,
    cob: Option<String>,
    cfn: Option<String>,
    pending: Option<PendingCall>,
    /// The last position, for relative ones (`+3`, `-2`, `*`).
    last: u64,
    saw_events: bool,
}

impl Parser {
    /// The cost line after a `calls=` line: the call site's and the callee's inclusive
    /// cost.
    fn call_cost(&mut self, call: PendingCall, line: &str) -> Result<(), ValgrindError> {
        let mut fields = line.split_whitespace();
        let site = position(fields.next().unwrap_or_default(), self.last)?;
        self.last = site;
        let inclusive = match fields.next() {
            Some(c) => number(c)?,
            None => 0,
        };
        let arc = Arc {
            caller_object: self.ob.clone(),
            site,
            callee_object: call.callee_ob.clone(),
            target: call.target,
        };
        *self.profile.arcs.entry(arc).or_default() += call.count;
        let here = self.profile.objects.entry(self.ob.clone()).or_default();
        let s = here.sites.entry(site).or_default();
        s.calls += call.count;
        s.inclusive += inclusive;
        if call.callee_ob == self.ob {
            let edge = here.edges.entry((site, call.target)).or_default();
            edge.calls += call.count;
            edge.inclusive += inclusive;
        }
        let there = self.profile.objects.entry(call.callee_ob).or_default();
        let e = there.entries.entry(call.target).or_default();
        e.calls += call.count;
        e.inclusive += inclusive;
        if let Some(name) = call.callee_name {
            there.callees.entry(call.target).or_insert(name);
        }
        Ok(())
    }

    /// Any other line: a header, a name, a `calls=` line or an own-cost line.
    fn line(&mut self, line: &str) -> Result<(), ValgrindError> {
        if line.is_empty() || line.starts_with('#') {
            return Ok(());
        }
        if let Some(v) = line.strip_prefix("ob=") {
            self.ob = v.to_string();
        } else if let Some(v) = line.strip_prefix("cob=") {
            self.cob = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("cfn=") {
            self.cfn = Some(strip_recursion(v).to_string());
        } else if let Some(v) = line.strip_prefix("calls=") {
            let mut fields = v.split_whitespace();
            let count = number(fields.next().unwrap_or_default())?;
            let target = position(fields.next().unwrap_or_default(), self.last)?;
            let callee_ob = self.cob.take().unwrap_or_else(|| self.ob.clone());
            self.pending = Some(PendingCall {
                count,
                target,
                callee_ob,
                callee_name: self.cfn.take(),
            });
        } else if let Some(v) = line.strip_prefix("events:") {
            self.saw_events = !v.trim().is_empty();
        } else if let Some(v) = line
            .strip_prefix("summary:")
            .or_else(|| line.strip_prefix("totals:"))
        {
            if let Some(first) = v.split_whitespace().next() {
                self.profile.total = self.profile.total.max(number(first)?);
            }
        } else if matches!(line.as_bytes()[0], b'0'..=b'9' | b'+' | b'-' | b'*') {
            let mut fields = line.split_whitespace();
            self.last = position(fields.next().unwrap_or_default(), self.last)?;
            if let Some(c) = fields.next() {
                let cost = number(c)?;
                let here = self.profile.objects.entry(self.ob.clone()).or_default();
                here.own += cost;
                *here.own_at.entry(self.last).or_default() += cost;
            }
        }
        // Other lines (fl=, fi=, fe=, fn=, cfi=, headers, jump lines) carry nothing we use.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "\
# callgrind format
version: 1
creator: callgrind-3.19.0
positions: instr
events: Ir
summary: 1000

ob=/tmp/p
fl=p.c
fn=decoy
0x1390 1
cfn=helper_a
calls=1 0x1370 
0x1390 18007
0x1395 1
cfn=helper_b'2
calls=2 0x1380 
0x1395 30007

fn=grow
0x1408 10
cob=/lib/libc.so.6
cfi=malloc.c
cfn=malloc
calls=10 0x98930 
0x1408 2116
0x1408 30
cob=/lib/libc.so.6
cfn=malloc
calls=30 0x98930 
+0 1230
cfn=decoy
calls=1 0x1390
0x2000 48016
";

    #[test]
    fn sums_calls_per_site_and_per_callee() {
        let p = parse(OUT).unwrap();
        assert_eq!(p.total, 1000);
        let me = &p.objects["/tmp/p"];
        assert_eq!(
            me.sites[&0x1390],
            SiteCost {
                calls: 1,
                inclusive: 18007
            }
        );
        assert_eq!(me.sites[&0x1395].calls, 2);
        // Both malloc calls at 0x1408, the second written as a relative position.
        assert_eq!(
            me.sites[&0x1408],
            SiteCost {
                calls: 40,
                inclusive: 2116 + 1230
            }
        );
        assert_eq!(me.entries[&0x1390].inclusive, 48016);
        assert_eq!(me.callees[&0x1380], "helper_b");
        assert_eq!(me.own, 1 + 1 + 10 + 30);
        let arc = |site, callee_object: &str, target| Arc {
            caller_object: "/tmp/p".into(),
            site,
            callee_object: callee_object.into(),
            target,
        };
        assert_eq!(p.arcs[&arc(0x1408, "/lib/libc.so.6", 0x98930)], 40);
        assert_eq!(p.arcs[&arc(0x1395, "/tmp/p", 0x1380)], 2);
        assert_eq!(p.arcs.len(), 4);
        assert_eq!(me.own_at[&0x1408], 10 + 30);
        assert_eq!(me.own_at[&0x1395], 1);
        // Edges within the object, both recursion levels of helper_b in one; malloc's are
        // in another object.
        assert_eq!(me.edges[&(0x1395, 0x1380)].inclusive, 30007);
        assert_eq!(me.edges[&(0x2000, 0x1390)].inclusive, 48016);
        assert_eq!(me.edges.len(), 3);
        let libc = &p.objects["/lib/libc.so.6"];
        assert_eq!(libc.entries[&0x98930].calls, 40);
        assert_eq!(libc.callees[&0x98930], "malloc");
    }

    #[test]
    fn refuses_what_is_not_a_profile() {
        assert!(parse("hello\n").is_err());
        assert!(matches!(
            parse("events: Ir\nfn=x\n0x12 zz\n"),
            Err(ValgrindError::BadNumber { .. })
        ));
    }

    #[test]
    fn the_wrapper_asks_for_instruction_positions_and_raw_names() {
        let w = profile_wrapper(Path::new("valgrind"), Path::new("/t/o"), Path::new("/t/l"));
        let w: Vec<String> = w.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        for opt in [
            "--tool=callgrind",
            "--dump-instr=yes",
            "--compress-pos=no",
            "--demangle=no",
            "--callgrind-out-file=/t/o",
            "--log-file=/t/l",
            "--vgdb=no",
        ] {
            assert!(w.iter().any(|a| a == opt), "{opt} missing in {w:?}");
        }
    }
}
