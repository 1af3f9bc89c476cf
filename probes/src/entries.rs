//! Entry points of inlined instances: the instructions where control enters an
//! instance's code from outside it. A uprobe on each entry counts the instance's
//! invocations; the lowest address of its ranges is not one of them in general (it can
//! be an alignment NOP that never runs, or code reached only from inside).
//!
//! The enclosing function is decoded from its symbol's start (`iced-x86`), so every
//! probe lies on an instruction boundary, inside the symbol, inside an executable
//! segment. An instruction of the instance is an entry when
//! - it is the function's first instruction (reached by a call), or
//! - the instruction before it lies outside the instance and can fall through to it, or
//! - a direct jump or call from outside the instance targets it, or an indirect jump
//!   from outside it does through a jump table read from the file
//!   ([`crate::jumptable`]).
//!
//! What can make the sum differ from the number of calls is reported as `uncertain`:
//! a jump from inside the instance back to one of its entries (a loop whose head the
//! compiler attributed to the instance: each iteration counts), blocks of the instance
//! that nothing falls into and no jump targets (landing pads, targets of a jump table
//! that cannot be read: not probed), code of the instance outside its enclosing symbol (a split-off cold
//! part), and two kept entries one of which can reach the other (one call could pass
//! both and count twice).
//!
//! One call often passes several places where control enters the instance's ranges:
//! hoisted set-up code before a loop, an alignment NOP before a loop head, caller code
//! (a loop counter) scheduled between two pieces of the instance. A candidate entry from
//! which every path reaches another kept entry, before it leaves the function or comes
//! back to itself, is counted there and not probed; this is what makes loops exact. A
//! kept candidate reached only right after leaving the instance, from places that only
//! other kept candidates lead to inside it, continues their pass and is dropped too (a
//! slow path that skips the second piece of the instance). NOP padding after a jump or
//! return that nothing targets never runs and falls into nothing. No probe is ever put
//! on a NOP: on kernel 6.18 a uprobe there is not hit.
//!
//! Nor on an instruction the kernel's x86 uprobes refuse ([`uprobe_refuses`]: a LOCK or
//! an ES/CS/SS/DS segment prefix): such a probe never fires when the program maps its file
//! after the probe exists, so it would count 0. An entry there moves to the next
//! instruction when that one runs exactly once per pass ([`step_over`]); otherwise the
//! instance is not counted. [`call_probe`] applies the same rule to a function's first
//! instruction.

use std::collections::{HashMap, HashSet};

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind};

use crate::elf::{safe_offset, Function, Image};

/// One probe point of an inlined instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPoint {
    /// Virtual address of the instruction.
    pub address: u64,
    /// Its file offset: what the uprobe definition needs.
    pub offset: u64,
    /// It starts a landing pad, entered only by the unwinder (a panic passing a call): a
    /// pass there may continue a call counted already, or be one.
    pub unwinding: bool,
}

/// The entry analysis of one inlined instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entries {
    /// Demangled name of the enclosing (caller) function.
    pub caller: String,
    /// Where to probe; empty when the instance cannot be counted (see `uncertain`).
    pub points: Vec<EntryPoint>,
    /// Why the count may differ from the number of calls, if it may.
    pub uncertain: Option<String>,
    /// A call may pass no probe (a doubt in `uncertain` that no bound covers: code not
    /// probed, a target missed); without it every call is counted at least once.
    pub misses: bool,
    /// A pass at a probe may continue a call counted already (two entries one call may
    /// both pass, a jump back to an entry): each call counts at least once, maybe more.
    pub repeats: bool,
}

#[derive(Clone)]
struct Insn {
    ip: u64,
    len: u64,
    flow: FlowControl,
    target: Option<u64>,
    /// Where an indirect jump's table sends it, when [`decode_in`] could read the table.
    table: Vec<u64>,
    /// A NOP or INT3: alignment padding when nothing reaches it.
    padding: bool,
    /// Why a uprobe cannot sit on it, if it cannot.
    refused: Option<UprobeRefusal>,
    /// `lock add`, `add`: for messages.
    name: String,
    /// Bytes it stores to memory from a vector register (0 for anything else): values the
    /// optimizer packed together, up to one per byte.
    vector_store: u64,
}

impl Insn {
    /// Every place it jumps or calls to that is known: its direct target and its table's.
    fn targets(&self) -> impl Iterator<Item = u64> + '_ {
        self.target.into_iter().chain(self.table.iter().copied())
    }

    fn new(i: &Instruction, code: &[u8], start: u64) -> Insn {
        let target = match i.flow_control() {
            FlowControl::UnconditionalBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Call => Some(i.near_branch_target()).filter(|&t| t != 0),
            _ => None,
        };
        let from = usize::try_from(i.ip() - start).unwrap_or(usize::MAX);
        let bytes = code.get(from..).unwrap_or_default();
        let bytes = &bytes[..i.len().min(bytes.len())];
        let mnemonic = format!("{:?}", i.mnemonic()).to_lowercase();
        Insn {
            ip: i.ip(),
            len: i.len() as u64,
            flow: i.flow_control(),
            target,
            table: Vec::new(),
            padding: matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3),
            refused: uprobe_refuses(bytes),
            name: if i.has_lock_prefix() {
                format!("lock {mnemonic}")
            } else {
                mnemonic
            },
            vector_store: vector_store_bytes(i),
        }
    }
}

/// The bytes `i` stores to memory from a vector register (`movdqu %xmm0,(%rax)`: 16,
/// `movd %xmm0,0x1(%rax)`: 4), 0 when it is no such store.
fn vector_store_bytes(i: &Instruction) -> u64 {
    let stores = i.op_count() >= 2
        && i.op0_kind() == OpKind::Memory
        && (1..i.op_count())
            .any(|k| i.op_kind(k) == OpKind::Register && i.op_register(k).is_vector_register());
    if stores {
        i.memory_size().size() as u64
    } else {
        0
    }
}

/// Why the kernel's x86 uprobes refuse an instruction ([`uprobe_refuses`]); written as it
/// reads after "the instruction is".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UprobeRefusal {
    /// `LOCK-prefixed`.
    Lock,
    /// `with an ES, CS, SS or DS segment prefix`.
    SegmentPrefix,
}

impl std::fmt::Display for UprobeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UprobeRefusal::Lock => "LOCK-prefixed",
            UprobeRefusal::SegmentPrefix => "with an ES, CS, SS or DS segment prefix",
        })
    }
}

/// Why the kernel's x86 uprobes refuse the instruction starting with `bytes`, if they do.
/// They will not single-step an instruction with a LOCK prefix or an ES, CS, SS or DS
/// segment prefix (measured on 6.18: such a probe never fires when the program maps the
/// file after the probe was made, and a counter on it fails with ENOTSUPP when the file is
/// mapped already). The kernel refuses some other instructions too (some VEX-encoded
/// ones, depending on the opcode); those are left to it: [`crate::hits::Anchors::open`]
/// makes it say so before any run.
pub fn uprobe_refuses(bytes: &[u8]) -> Option<UprobeRefusal> {
    for &b in bytes {
        match b {
            0xf0 => return Some(UprobeRefusal::Lock),
            0x26 | 0x2e | 0x36 | 0x3e => return Some(UprobeRefusal::SegmentPrefix),
            // Other legacy prefixes, which the kernel accepts.
            0x64 | 0x65 | 0x66 | 0x67 | 0xf2 | 0xf3 => {}
            _ => return None,
        }
    }
    None
}

/// Decode a whole function (`code` starting at `start`); an error names the first address
/// that does not decode.
fn decode(code: &[u8], start: u64) -> Result<Vec<Insn>, String> {
    let mut insns = Vec::new();
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    while decoder.can_decode() {
        let i = decoder.decode();
        if i.is_invalid() {
            return Err(format!(
                "does not decode as x86-64 at {:#x}: instruction boundaries unknown",
                i.ip()
            ));
        }
        insns.push(Insn::new(&i, code, start));
    }
    Ok(insns)
}

/// `function`'s instructions ([`decode`]), each indirect jump with the entries of its jump
/// table where [`crate::jumptable::jump_tables`] can read them from `image`.
fn decode_in(image: &Image, function: &Function, code: &[u8]) -> Result<Vec<Insn>, String> {
    let mut insns = decode(code, function.address)?;
    if !insns.iter().any(|i| i.flow == FlowControl::IndirectBranch) {
        return Ok(insns);
    }
    let full: Vec<Instruction> = Decoder::with_ip(64, code, function.address, DecoderOptions::NONE)
        .iter()
        .collect();
    let segments = image.load_segments();
    let read = |vaddr: u64, len: usize| image.read_at(&segments, vaddr, len);
    let mut tables = crate::jumptable::jump_tables(&full, &read);
    for insn in insns
        .iter_mut()
        .filter(|i| i.flow == FlowControl::IndirectBranch)
    {
        insn.table = tables.remove(&insn.ip).unwrap_or_default();
    }
    Ok(insns)
}

/// The instruction after `k`, when it can count the passes through `k` in its place
/// because control reaches it only by falling through from `k`: `k` is no branch (nor
/// the end of the code), and the next instruction takes a uprobe (not refused, not a NOP)
/// and is the target of no direct jump or call in `targeted`. Else why not.
///
/// What this cannot see: an indirect jump to the next instruction (a jump table pointing
/// there, which a compiler has no reason to build for the instruction after a plain one).
fn step_over(insns: &[Insn], k: usize, targeted: &HashSet<u64>) -> Result<usize, String> {
    if insns[k].flow != FlowControl::Next {
        return Err("it is a branch, so no other instruction runs once per pass".into());
    }
    let Some(next) = insns.get(k + 1) else {
        return Err("nothing follows it in the function".into());
    };
    if next.padding {
        return Err(format!(
            "the next instruction (`{}`) is one a uprobe does not count",
            next.name
        ));
    }
    if let Some(why) = next.refused {
        return Err(format!(
            "the next instruction (`{}`) is {why} too",
            next.name
        ));
    }
    if targeted.contains(&next.ip) {
        return Err("a jump also reaches the next instruction, so it can run more often".into());
    }
    Ok(k + 1)
}

/// Why the calls of a function cannot be counted at its start nor right after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRefusal {
    /// The first instruction (`lock add`, with its bytes).
    pub instruction: String,
    /// Why a uprobe cannot sit on it (`LOCK-prefixed`).
    pub why: UprobeRefusal,
    /// Why the next instruction cannot stand in for it.
    pub next: String,
}

/// The address at which a uprobe counts the calls of `function`: its first instruction,
/// or, when a uprobe cannot sit there ([`uprobe_refuses`]), the next instruction if it
/// runs exactly once per call ([`step_over`], with the jumps of the whole function and of
/// its split-off `.cold` parts).
pub fn call_probe(image: &Image, function: &Function) -> Result<u64, EntryRefusal> {
    let Some(code) = image.code_of(function) else {
        return Ok(function.address);
    };
    let mut decoder = Decoder::with_ip(64, code, function.address, DecoderOptions::NONE);
    let first = decoder.decode();
    if first.is_invalid() {
        // Not code this crate understands; the kernel will judge the probe.
        return Ok(function.address);
    }
    let first = Insn::new(&first, code, function.address);
    let Some(why) = first.refused else {
        return Ok(function.address);
    };
    let shown: Vec<String> = code[..first.len as usize]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let refusal = |next: String| EntryRefusal {
        instruction: format!("{} ({})", first.name, shown.join(" ")),
        why,
        next,
    };
    let insns = decode_in(image, function, code).map_err(|e| {
        refusal(format!(
            "the function {e}, so the instruction after the first cannot be shown to run once per call"
        ))
    })?;
    let mut targeted: HashSet<u64> = insns.iter().flat_map(Insn::targets).collect();
    targeted.extend(cold_part_targets(image, function).map_err(|e| {
        refusal(format!(
            "{e}, so the instruction after the first cannot be shown to run once per call"
        ))
    })?);
    step_over(&insns, 0, &targeted)
        .map(|k| insns[k].ip)
        .map_err(refusal)
}

/// The direct jump and call targets in the parts GCC splits off `function`
/// (`NAME.cold`, `NAME.cold.N`), which jump back into it.
fn cold_part_targets(image: &Image, function: &Function) -> Result<HashSet<u64>, String> {
    let cold = format!("{}.cold", function.name);
    let mut targets = HashSet::new();
    for part in image.functions.iter().filter(|f| {
        f.name == cold
            || f.name
                .strip_prefix(&cold)
                .is_some_and(|r| r.starts_with('.'))
    }) {
        if let Some(code) = image.code_of(part) {
            let insns = decode(code, part.address)
                .map_err(|e| format!("its cold part {} {e}", part.name))?;
            targets.extend(insns.iter().filter_map(|i| i.target));
        }
    }
    Ok(targets)
}

/// The bytes a site's fingerprint covers: its first instruction is at most 15 bytes.
pub const SITE_BYTES: usize = 16;

/// The bytes of `image` at `address` inside `function` (a symbol start), at most
/// [`SITE_BYTES`] and never past the function's end; what a resolved site's cache entry
/// keeps to recognise it.
pub fn site_bytes(image: &Image, function: u64, address: u64) -> Option<Vec<u8>> {
    let f = image.functions.iter().find(|f| f.address == function)?;
    let code = image.code_of(f)?;
    let from = usize::try_from(address.checked_sub(f.address)?).ok()?;
    let to = from.checked_add(SITE_BYTES)?.min(code.len());
    Some(code.get(from..to)?.to_vec())
}

/// Check a site kept from an earlier resolution against `image` as it is now, with the
/// rules the resolver applied: `function` is the start of a function symbol and
/// `address` lies in it on an instruction boundary of its code (decoded from its start);
/// `offset` is where the loader maps `address` from (an executable segment of the file);
/// the bytes there are `bytes`; and a function's entry site is where [`call_probe`]
/// counts its calls. Else why not.
pub fn verify_site(
    image: &Image,
    function: u64,
    address: u64,
    offset: u64,
    entry: bool,
    bytes: &[u8],
) -> Result<(), String> {
    let f = image
        .functions
        .iter()
        .find(|f| f.address == function)
        .ok_or_else(|| format!("no function starts at {function:#x}"))?;
    if address < f.address || address >= f.address + f.size {
        return Err(format!("{address:#x} is outside `{}`", f.name));
    }
    if safe_offset(&image.exec_segments, address, 1) != Some(offset) {
        return Err(format!(
            "file offset {offset:#x} is not where {address:#x} is loaded from"
        ));
    }
    if site_bytes(image, function, address).as_deref() != Some(bytes) {
        return Err(format!("the bytes at {address:#x} differ"));
    }
    if entry {
        let probe = call_probe(image, f).map_err(|r| r.why.to_string())?;
        return match probe == address {
            true => Ok(()),
            false => Err(format!("`{}` is counted at {probe:#x}", f.name)),
        };
    }
    let code = image
        .code_of(f)
        .ok_or_else(|| format!("the bytes of `{}` are not in the file", f.name))?;
    let insns = decode(code, f.address).map_err(|e| format!("`{}` {e}", f.name))?;
    match insns.binary_search_by_key(&address, |i| i.ip) {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "{address:#x} is inside an instruction of `{}`",
            f.name
        )),
    }
}

/// Find the entries of the instance with code `ranges` (sorted, half-open) in `image`.
pub fn entries(image: &Image, ranges: &[(u64, u64)]) -> Entries {
    entries_among(image, ranges, None)
}

/// [`entries`], keeping only the candidate entries at `only` when given.
fn entries_among(image: &Image, ranges: &[(u64, u64)], only: Option<&HashSet<u64>>) -> Entries {
    let none = |caller: String, why: String| Entries {
        caller,
        points: Vec::new(),
        uncertain: Some(why),
        misses: true,
        repeats: false,
    };
    if ranges.is_empty() {
        return none(String::new(), "it has no code".into());
    }
    // The function holding most of its code (a split-off cold part may come first).
    let mut holders: Vec<(&crate::elf::Function, u64)> = Vec::new();
    for &(b, e) in ranges {
        if let Some(f) = image.function_at(b) {
            match holders.iter_mut().find(|(h, _)| h.address == f.address) {
                Some((_, bytes)) => *bytes += e - b,
                None => holders.push((f, e - b)),
            }
        }
    }
    let Some(function) = holders
        .iter()
        .max_by_key(|(f, bytes)| (*bytes, std::cmp::Reverse(f.address)))
        .map(|(f, _)| *f)
    else {
        // No address in the reason: instances with the same cause are summed in the
        // report's warning.
        let file = image.path.file_name().map_or_else(
            || image.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let why = if image.stripped {
            format!(
                "its code lies in no exported function of {file}, whose symbol table is stripped"
            )
        } else {
            format!("its code lies in no function symbol of {file}")
        };
        return none(String::new(), why);
    };
    let caller = crate::demangle::demangle(&function.name).label;
    let Some(code) = image.code_of(function) else {
        return none(caller, "its function's bytes are not in the file".into());
    };
    let insns = decode_in(image, function, code);
    // Landing pads: only the unwinder enters them. When they cannot be read, blocks that
    // nothing leads to stay unknown.
    let pads: HashSet<u64> = crate::lsda::landing_pads(image, function.address)
        .map(|p| p.into_iter().collect())
        .unwrap_or_default();
    let run = |insns: Vec<Insn>, more: &HashSet<u64>| {
        analyze(insns, function.address, ranges, more, only, &pads)
    };
    let mut found = insns.clone().and_then(|insns| run(insns, &HashSet::new()));
    if found.as_ref().is_ok_and(|a| a.stepped) {
        // A probe moved past a refused instruction: check again with the jumps of the
        // function's split-off parts, which could reach the place it moved to.
        found = match cold_part_targets(image, function) {
            Ok(more) => insns.and_then(|insns| run(insns, &more)),
            Err(e) => Err(e),
        };
    }
    let Analysis {
        points,
        mut reasons,
        unwinding,
        mut misses,
        repeats,
        ..
    } = match found {
        Ok(found) => found,
        Err(why) => return none(caller, format!("{}: {why}", function.name)),
    };
    let mut probes = Vec::new();
    for (a, len) in points {
        match safe_offset(&image.exec_segments, a, len) {
            Some(offset) => probes.push(EntryPoint {
                address: a,
                offset,
                unwinding: unwinding.contains(&a),
            }),
            None => {
                reasons.push(format!("entry {a:#x} is outside an executable segment"));
                misses = true;
            }
        }
    }
    Entries {
        caller,
        misses: misses || probes.is_empty(),
        repeats,
        points: probes,
        uncertain: (!reasons.is_empty()).then(|| reasons.join("; ")),
    }
}

/// The entries of code without a call line that several inlined instances of one
/// function share (`shared`: a merged tail, hoisted or sunk common code; DWARF gives it
/// `DW_AT_call_line` 0), given the code of the function's other instances in the same
/// caller (`others`) and their probe points (`other_points`). A place where control enters
/// the shared code belongs to a call counted elsewhere when every way into it comes from
/// the others' code (a tail they continue into), or when every path from it reaches one
/// of their points (code hoisted before them). `None` when every entry is such: the code
/// is no call of its own. Otherwise a call may start there: the code's entries where
/// control comes in from elsewhere (whose passes may yet continue a call: the caller
/// marks them so).
pub fn shared_entries(
    image: &Image,
    shared: &[(u64, u64)],
    others: &[(u64, u64)],
    other_points: &[u64],
) -> Option<Entries> {
    let function = shared.first().and_then(|&(b, _)| image.function_at(b));
    let code = function.and_then(|f| image.code_of(f).map(|c| (f, c)));
    let Some((function, code)) = code else {
        return Some(entries(image, shared));
    };
    let Ok(insns) = decode_in(image, function, code) else {
        return Some(entries(image, shared));
    };
    let flow = Flow::new(insns, shared);
    let (candidates, _) = flow.candidates(&mut Vec::new());
    let in_others: Vec<bool> = flow
        .insns
        .iter()
        .map(|i| others.iter().any(|&(b, e)| i.ip >= b && i.ip < e))
        .collect();
    let points: Vec<usize> = other_points
        .iter()
        .filter_map(|&a| flow.insns.binary_search_by_key(&a, |i| i.ip).ok())
        .collect();
    let starts_a_call = |c: usize| {
        let continued = feeders(&flow.preds, &in_others, c).is_some_and(|f| !f.is_empty());
        let hoisted = !points.is_empty() && flow.graph.always_reaches(c, &points);
        !continued && !hoisted
    };
    let starts: HashSet<u64> = candidates
        .iter()
        .filter(|&&c| starts_a_call(c))
        .map(|&c| flow.insns[c].ip)
        .collect();
    if starts.is_empty() {
        return None;
    }
    // Only where control comes in from elsewhere: the places the others lead to continue
    // their calls.
    Some(entries_among(image, shared, Some(&starts)))
}

/// The probe points (of `points`) of the instance with code `ranges` that control reaches
/// only from code several calls of its function share (`shared`: copies without a call
/// line, or inside a merged copy), where several ways join: every instruction leading to
/// the point from outside the instance lies in that code, and control enters that code
/// from two places or more. A point like that is the end of the shared code's path
/// that DWARF gave this instance's line (regex-automata's `nfa.rs:1334`, a `jmp` back to
/// the loop that every push of the loop passes, was counted 9 times for 2 calls): its
/// passes may be calls of the other lines that share the code. Empty when the function
/// cannot be read.
pub fn fed_by_shared(
    image: &Image,
    ranges: &[(u64, u64)],
    points: &[u64],
    shared: &[(u64, u64)],
) -> Vec<u64> {
    if shared.is_empty() || points.is_empty() {
        return Vec::new();
    }
    let Some(function) = ranges.first().and_then(|&(b, _)| image.function_at(b)) else {
        return Vec::new();
    };
    let Some(Ok(insns)) = image
        .code_of(function)
        .map(|c| decode_in(image, function, c))
    else {
        return Vec::new();
    };
    let flow = Flow::new(insns, ranges);
    let in_shared = |k: usize| {
        let ip = flow.insns[k].ip;
        shared.iter().any(|&(b, e)| ip >= b && ip < e)
    };
    points
        .iter()
        .copied()
        .filter(|&a| {
            let Ok(k) = flow.insns.binary_search_by_key(&a, |i| i.ip) else {
                return false;
            };
            let from_outside: Vec<usize> = flow.preds[k]
                .iter()
                .copied()
                .filter(|&p| !flow.inside[p])
                .collect();
            if k == 0 || from_outside.is_empty() || !from_outside.iter().all(|&p| in_shared(p)) {
                return false;
            }
            // A tail: several ways join in the shared code before it. Shared code with one
            // way in is set-up hoisted before this copy (`escape`'s capacity check in
            // `tests/fixtures/rust/shapes.rs`), part of its calls.
            let mut ways = HashSet::new();
            let mut seen: HashSet<usize> = from_outside.iter().copied().collect();
            let mut stack = from_outside;
            while let Some(j) = stack.pop() {
                if j == 0 {
                    ways.insert(usize::MAX);
                }
                for &p in &flow.preds[j] {
                    if in_shared(p) && !flow.inside[p] {
                        if seen.insert(p) {
                            stack.push(p);
                        }
                    } else {
                        ways.insert(p);
                    }
                }
            }
            ways.len() >= 2
        })
        .collect()
}

/// Whether passes through other copies of the function in the same caller (`others`:
/// their code) may continue into one of the `points` of the instance with code `ranges`:
/// control reaches the point only right after leaving the instance or those copies (never
/// from the function's start, nor from code that nothing leads to), and some of it from
/// those copies. The optimizer leaves that when it merges the tails of two calls into code
/// that DWARF gives one of their call lines: the other call, counted at its own entry,
/// passes this entry too (regex-syntax's `Drop for Ast`: 10 counted at one line where 9
/// were made). `false` when the function cannot be read.
pub fn continues_others(
    image: &Image,
    ranges: &[(u64, u64)],
    points: &[u64],
    others: &[(u64, u64)],
) -> bool {
    let Some(function) = points.first().and_then(|&a| image.function_at(a)) else {
        return false;
    };
    let Some(Ok(insns)) = image
        .code_of(function)
        .map(|c| decode_in(image, function, c))
    else {
        return false;
    };
    let flow = Flow::new(insns, ranges);
    let in_others: Vec<bool> = flow
        .insns
        .iter()
        .map(|i| others.iter().any(|&(b, e)| i.ip >= b && i.ip < e))
        .collect();
    // Backwards from the point through code of neither: every way must start in the
    // instance or in the others, some in each (the instance's own pass leaves it and comes
    // back there, as do the others'; a copy that merely runs before this one is no tail).
    let fed_by_others = |k: usize| {
        let mut seen = vec![false; flow.preds.len()];
        let mut stack = vec![k];
        let (mut own, mut theirs) = (false, false);
        while let Some(j) = stack.pop() {
            if j == 0 || flow.preds[j].is_empty() {
                return false;
            }
            for &p in &flow.preds[j] {
                if in_others[p] {
                    theirs = true;
                } else if flow.inside[p] {
                    own |= j != k;
                } else if !seen[p] {
                    seen[p] = true;
                    stack.push(p);
                }
            }
        }
        own && theirs
    };
    points
        .iter()
        .filter_map(|&a| flow.insns.binary_search_by_key(&a, |i| i.ip).ok())
        .filter(|&k| !in_others[k])
        .any(fed_by_others)
}

/// How many calls one pass through an inlined instance may make when its code repeats
/// one source line in pieces starting at `starts`, the line's code lying in `spans`: when
/// every pass through the first piece goes through each next one in turn, each as often
/// (copies one after the other, as a loop the optimizer unrolled leaves, whole or in
/// part; not alternative paths, not set-up hoisted out of a loop), the number of
/// instructions of that line (each copy of the call has at least one), a store from a
/// vector register counted as many times as it stores bytes (the vectorizer packs the
/// values of several calls into one: `for k in 0..8u8 { v.push(s * (k + 1)) }` stores 4
/// of them with one `movd`, `for k in 0..8u32` all 8 with two `movdqu`). `None`
/// otherwise, or when the function cannot be read.
pub fn unrolled_calls(image: &Image, starts: &[u64], spans: &[(u64, u64)]) -> Option<u64> {
    let function = image.function_at(*starts.first()?)?;
    let insns = decode_in(image, function, image.code_of(function)?).ok()?;
    let graph = Graph::new(&insns);
    let index: Vec<usize> = starts
        .iter()
        .map(|&a| insns.binary_search_by_key(&a, |i| i.ip).ok())
        .collect::<Option<_>>()?;
    // In turn on every pass, and as often: a piece inside a loop that the piece before
    // it is outside of is that loop's code, the one before hoisted set-up (counted once
    // per loop by the entries, rightly).
    let in_turn = |a: usize, b: usize| {
        graph.always_reaches(a, &[b]) && (!graph.reaches(b, b) || graph.reaches(b, a))
    };
    if index.len() < 2 || index.windows(2).any(|w| !in_turn(w[0], w[1])) {
        return None;
    }
    let most = insns
        .iter()
        .filter(|i| !i.padding && spans.iter().any(|&(b, e)| i.ip >= b && i.ip < e))
        .map(|i| i.vector_store.max(1))
        .sum::<u64>();
    (most >= 2).then_some(most)
}

/// When the whole code of an instance (its `ranges`, in order) is straight-line code made
/// of `k` copies, one after the other, of one piece (the same instructions with the same
/// registers, differing only in displacements and immediates): `k`. A loop the optimizer
/// unrolled completely leaves that (regex-automata's `Pool::new` pushes 8 values in a
/// `for` loop over a `Vec::with_capacity(8)`, compiled to 8 copies of 5 stores under one
/// inlined `Vec::push` whose one entry runs once for 8 calls), and its one source line
/// gives [`unrolled_calls`] nothing to see. A piece of one instruction must repeat at
/// least 4 times (two or three equal stores are as often one value's fields); `None`
/// otherwise, or when the code cannot be read.
pub fn repeated_copies(image: &Image, ranges: &[(u64, u64)]) -> Option<u64> {
    let function = image.function_at(ranges.first()?.0)?;
    let code = image.code_of(function)?;
    let mut shapes = Vec::new();
    for &(begin, end) in ranges {
        let from = usize::try_from(begin.checked_sub(function.address)?).ok()?;
        let to = usize::try_from(end.checked_sub(function.address)?).ok()?;
        let mut decoder = Decoder::with_ip(64, code.get(from..to)?, begin, DecoderOptions::NONE);
        while decoder.can_decode() {
            let i = decoder.decode();
            if i.is_invalid() || i.flow_control() != FlowControl::Next {
                return None;
            }
            shapes.push(shape(&i));
        }
    }
    let n = shapes.len();
    (1..=n / 2)
        .filter(|&p| n % p == 0 && n / p >= if p == 1 { 4 } else { 2 })
        .find(|&p| shapes.chunks(p).all(|c| c == &shapes[..p]))
        .map(|p| (n / p) as u64)
}

/// An instruction without its displacements and immediates: what copies of one piece of
/// code share.
fn shape(i: &Instruction) -> (iced_x86::Code, Vec<iced_x86::Register>) {
    let mut registers: Vec<iced_x86::Register> =
        (0..i.op_count()).map(|k| i.op_register(k)).collect();
    registers.extend([i.memory_base(), i.memory_index()]);
    (i.code(), registers)
}

/// What [`analyze`] found.
#[derive(Debug, Default)]
struct Analysis {
    /// The probe points, as (address, length).
    points: Vec<(u64, u64)>,
    /// Reasons for doubt; with no points, why the instance cannot be counted.
    reasons: Vec<String>,
    /// A point moved past an instruction that uprobes refuse ([`step_over`]).
    stepped: bool,
    /// The points that only landing pads lead to.
    unwinding: HashSet<u64>,
    /// A call may pass no point (see [`Entries::misses`]).
    misses: bool,
    /// A pass at a point may continue a call counted already (see [`Entries::repeats`]).
    repeats: bool,
}

/// The kept entries of the instance with code `ranges` in the function whose bytes `code`
/// start at `start`, and the reasons for doubt; an error when the function does not
/// decode. `more_targets`: jump targets from outside the function (its `.cold` parts);
/// `pads`: the function's landing pads.
///
/// A block of the instance that only the unwinder enters (a landing pad) is probed apart
/// from the kept entries: a pass there, while a panic unwinds, may continue a call counted
/// already or be one, so its points are marked `unwinding` (they bound the calls from none
/// to their count) and they take no part in the one-pass rule.
fn analyze(
    insns: Vec<Insn>,
    start: u64,
    ranges: &[(u64, u64)],
    more_targets: &HashSet<u64>,
    only: Option<&HashSet<u64>>,
    pads: &HashSet<u64>,
) -> Result<Analysis, String> {
    let end = insns.last().map_or(start, |i| i.ip + i.len);
    let mut found = Analysis::default();
    if ranges.iter().any(|&(b, e)| b < start || e > end) {
        found.reasons.push(
            "part of its code lies outside its function's symbol (a split-off cold part is not probed)"
                .to_string(),
        );
        found.misses = true;
    }
    let flow = Flow::new(insns, ranges);
    let before = found.reasons.len();
    let (mut candidates, orphans) = flow.candidates(&mut found.reasons);
    // A jump into the middle of an instruction: a way in that is not probed.
    found.misses |= found.reasons.len() > before;
    let (unwinders, orphans): (Vec<usize>, Vec<usize>) = orphans
        .into_iter()
        .partition(|&k| pads.contains(&flow.insns[k].ip));
    if let Some(only) = only {
        candidates.retain(|&c| only.contains(&flow.insns[c].ip));
    }
    let (kept, counted_elsewhere) = flow.one_pass(&candidates);
    let moved = flow.moves_to_edges(&kept, &counted_elsewhere);
    let before = found.reasons.len();
    flow.doubts(&kept, &moved, &mut found.reasons);
    found.repeats = found.reasons.len() > before;
    if !unwinders.is_empty() {
        found.reasons.push(format!(
            "{} of its blocks are landing pads, entered only while a panic unwinds: probed, a pass there may or may not be a call of its own",
            unwinders.len()
        ));
    }
    if !orphans.is_empty() {
        found.reasons.push(format!(
            "{} of its blocks are reached by no direct jump nor fall-through (landing pads that cannot be read, or targets of a jump table that cannot be read): not probed",
            orphans.len()
        ));
        found.misses = true;
    }
    flow.place_probes(&kept, &unwinders, &moved, more_targets, found)
}

/// One function's decoded instructions, its control flow, and which instructions belong
/// to the instance being analysed.
struct Flow {
    insns: Vec<Insn>,
    /// The instance's code: half-open ranges.
    ranges: Vec<(u64, u64)>,
    /// Per instruction: part of the instance.
    inside: Vec<bool>,
    /// Per instruction: padding that never runs (a NOP after a jump or return that no jump
    /// targets; GCC pads before out-of-line slow paths of an instance).
    dead: Vec<bool>,
    /// Targets of the function's direct jumps and calls.
    targeted: HashSet<u64>,
    graph: Graph,
    /// Predecessors by index; dead padding falls into nothing.
    preds: Vec<Vec<usize>>,
}

impl Flow {
    fn new(insns: Vec<Insn>, ranges: &[(u64, u64)]) -> Flow {
        let inside: Vec<bool> = insns
            .iter()
            .map(|i| ranges.iter().any(|&(b, e)| i.ip >= b && i.ip < e))
            .collect();
        let targeted: HashSet<u64> = insns.iter().flat_map(Insn::targets).collect();
        let mut dead = vec![false; insns.len()];
        for k in 1..insns.len() {
            let prev = &insns[k - 1];
            dead[k] = insns[k].padding
                && !targeted.contains(&insns[k].ip)
                && (!falls_through(prev.flow) || dead[k - 1]);
        }
        let graph = Graph::new(&insns);
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); insns.len()];
        for (k, succ) in graph.succ.iter().enumerate() {
            if k + 1 < insns.len() && succ.contains(&(k + 1)) && dead[k] {
                continue;
            }
            for &s in succ {
                preds[s].push(k);
            }
        }
        Flow {
            insns,
            ranges: ranges.to_vec(),
            inside,
            dead,
            targeted,
            graph,
            preds,
        }
    }

    /// Candidate entries, where control comes in from outside the instance (sorted), and
    /// the blocks of the instance that nothing falls into and no direct jump targets (their
    /// first instructions, sorted; padding is no such block).
    fn candidates(&self, reasons: &mut Vec<String>) -> (Vec<usize>, Vec<usize>) {
        let insns = &self.insns;
        let mut candidates: Vec<usize> = Vec::new();
        let mut orphans = Vec::new();
        for (k, insn) in insns.iter().enumerate().filter(|&(k, _)| self.inside[k]) {
            match k.checked_sub(1) {
                None => candidates.push(k),
                Some(p) if falls_through(insns[p].flow) && !self.dead[p] => {
                    if !self.inside[p] {
                        candidates.push(k);
                    }
                }
                // Nothing falls into it: reached by a direct jump, else by an indirect one
                // (a jump table) or the unwinder, which this analysis cannot follow.
                Some(_) => {
                    if !insn.padding && !self.targeted.contains(&insn.ip) {
                        orphans.push(k);
                    }
                }
            }
        }
        let index_of = |a: u64| insns.binary_search_by_key(&a, |i| i.ip).ok();
        let in_ranges = |a: u64| self.ranges.iter().any(|&(b, e)| a >= b && a < e);
        for (_, insn) in insns.iter().enumerate().filter(|&(k, _)| !self.inside[k]) {
            for t in insn.targets().filter(|&t| in_ranges(t)) {
                match index_of(t) {
                    Some(k) => candidates.push(k),
                    None => reasons.push(format!(
                        "a jump at {:#x} targets {t:#x}, not an instruction boundary",
                        insn.ip
                    )),
                }
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        (candidates, orphans)
    }

    /// The candidates kept so that one call passes one of them once, and those dropped by
    /// the first rule (counted where they always lead).
    fn one_pass(&self, candidates: &[usize]) -> (Vec<usize>, Vec<usize>) {
        // One call can pass several candidates: hoisted set-up code before a loop, an
        // alignment NOP before the loop head, or caller code interleaved with the
        // instance's. A candidate from which every path reaches another kept candidate
        // (before it comes back to itself or leaves the function) is counted there, so it
        // is dropped.
        let graph = &self.graph;
        let mut kept = candidates.to_vec();
        for &a in candidates {
            let others: Vec<usize> = kept.iter().copied().filter(|&k| k != a).collect();
            if !others.is_empty() && graph.always_reaches(a, &others) {
                kept.retain(|&k| k != a);
            }
        }
        let counted_elsewhere: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|c| !kept.contains(c))
            .collect();
        // A kept entry that control reaches only right after leaving the instance, from
        // places that only other kept entries lead to without leaving it, continues their
        // pass (caller code between two pieces of one call, on a path the first rule could
        // not see through, e.g. next to a slow path that skips the second piece).
        for &b in &kept.clone() {
            let Some(feeders) = feeders(&self.preds, &self.inside, b) else {
                continue;
            };
            let mut sources: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|&c| {
                    feeders
                        .iter()
                        .any(|&x| graph.reaches_inside(c, x, &self.inside))
                })
                .collect();
            sources.sort_unstable();
            if !sources.is_empty() && sources.iter().all(|&c| c != b && kept.contains(&c)) {
                kept.retain(|&k| k != b);
            }
        }
        (kept, counted_elsewhere)
    }

    /// The kept entries whose probes move to the caller's instructions before them, with
    /// those instructions ([`edge_probes`]).
    fn moves_to_edges(
        &self,
        kept: &[usize],
        counted_elsewhere: &[usize],
    ) -> HashMap<usize, Vec<usize>> {
        // A kept entry that a jump from inside the instance also reaches counts the passes
        // of that jump again (GCC's inlined `_PyObject_Malloc` in `_PyObject_Realloc`
        // jumps from its size check to its fallback, which the caller's code also falls
        // into). When every way in from outside is an instruction of the caller that leads
        // to the entry and nowhere else, those instructions count the entries from outside
        // instead.
        let moved: HashMap<usize, Vec<usize>> = kept
            .iter()
            .filter_map(|&b| {
                let edges = edge_probes(&self.insns, &self.graph, &self.preds, &self.inside, b)?;
                Some((b, edges))
            })
            .collect();
        // The candidates dropped by the first rule are counted where they lead: they must
        // still reach a probe on every path, else the move is not made.
        let probed = probes_of(kept, &moved);
        if counted_elsewhere
            .iter()
            .any(|&c| !self.graph.always_reaches(c, &probed))
        {
            return HashMap::new();
        }
        moved
    }

    /// The reasons to doubt that one call passes one probe once.
    fn doubts(
        &self,
        kept: &[usize],
        moved: &HashMap<usize, Vec<usize>>,
        reasons: &mut Vec<String>,
    ) {
        let insns = &self.insns;
        let probed = probes_of(kept, moved);
        for &a in &probed {
            if let Some(&b) = probed.iter().find(|&&b| b != a && self.graph.reaches(a, b)) {
                reasons.push(format!(
                    "entries {:#x} and {:#x} can both run: if one call passes both, it counts twice",
                    insns[a].ip, insns[b].ip
                ));
                break;
            }
        }
        for (_, insn) in insns.iter().enumerate().filter(|&(k, _)| self.inside[k]) {
            if let Some(t) = insn.targets().find(|&t| {
                kept.iter()
                    .any(|&k| insns[k].ip == t && !moved.contains_key(&k))
            }) {
                reasons.push(format!(
                    "a jump from inside it ({:#x}) goes back to its entry {t:#x}: each pass counts",
                    insn.ip
                ));
                break;
            }
        }
    }

    /// Where the uprobes go: a kept entry's own instruction, the first real instruction
    /// after it when it is padding, the next instruction when uprobes refuse it, or the
    /// caller's instructions it moved to; the same for the landing pads `unwinders`, whose
    /// points are `unwinding` unless a kept entry has the same point. `more_targets`: jump
    /// targets from outside the function. `found` holds the doubts so far. An instance
    /// with an entry that no instruction can count gets no points.
    fn place_probes(
        &self,
        kept: &[usize],
        unwinders: &[usize],
        moved: &HashMap<usize, Vec<usize>>,
        more_targets: &HashSet<u64>,
        mut found: Analysis,
    ) -> Result<Analysis, String> {
        let insns = &self.insns;
        let inside = |j: usize| self.inside[j];
        // A uprobe on a NOP is never hit on this kernel (6.18: a probe on an alignment NOP
        // that runs once counted 0 while the next instruction counted every pass): an
        // entry on padding moves to the first real instruction after it.
        let mut targeted = self.targeted.clone();
        targeted.extend(more_targets);
        let mut stepped = false;
        let mut points: Vec<(u64, u64)> = Vec::new();
        let reasons = &mut found.reasons;
        for (n, &k) in kept.iter().chain(unwinders).enumerate() {
            let unwinding = n >= kept.len();
            if let Some(edges) = moved.get(&k).filter(|_| !unwinding) {
                for &p in edges {
                    if !points.iter().any(|&(a, _)| a == insns[p].ip) {
                        points.push((insns[p].ip, insns[p].len));
                    }
                }
                continue;
            }
            let mut j = k;
            while j < insns.len() && insns[j].padding && inside(j) {
                j += 1;
            }
            if j == insns.len() || !inside(j) {
                reasons.push(format!(
                    "its entry {:#x} is only NOPs, which uprobes do not count: not probed",
                    insns[k].ip
                ));
                found.misses = true;
                continue;
            }
            if j != k && targeted.contains(&insns[j].ip) && !kept.contains(&j) {
                reasons.push(format!(
                    "its entry {:#x} is a NOP, probed at {:#x}, which a jump also reaches",
                    insns[k].ip, insns[j].ip
                ));
                found.repeats = true;
            }
            if let Some(why) = insns[j].refused {
                // A uprobe would never fire there: the next instruction counts the passes
                // instead when it runs exactly once per pass; else the instance cannot be
                // counted at all (the calls entering there would read 0).
                let next = step_over(insns, j, &targeted).and_then(|n| {
                    if kept.contains(&n) || points.iter().any(|&(a, _)| a == insns[n].ip) {
                        Err("the next instruction is an entry of its own".to_string())
                    } else {
                        Ok(n)
                    }
                });
                match next {
                    Ok(n) => {
                        j = n;
                        stepped = true;
                    }
                    Err(next) => {
                        let why = format!(
                            "an entry is `{}`, {why}, on which uprobes never fire, and {next}",
                            insns[j].name
                        );
                        return Ok(Analysis {
                            reasons: vec![why],
                            misses: true,
                            ..Analysis::default()
                        });
                    }
                }
            }
            if !points.iter().any(|&(a, _)| a == insns[j].ip) {
                points.push((insns[j].ip, insns[j].len));
                if unwinding {
                    found.unwinding.insert(insns[j].ip);
                }
            }
        }
        found.points = points;
        found.stepped = stepped;
        Ok(found)
    }
}

/// The instructions probed for the kept entries: their own, or those they moved to.
fn probes_of(kept: &[usize], moved: &HashMap<usize, Vec<usize>>) -> Vec<usize> {
    kept.iter()
        .flat_map(|b| moved.get(b).cloned().unwrap_or_else(|| vec![*b]))
        .collect()
}

/// The instructions outside the instance that count the entries into its kept entry `b`
/// from outside, when `b` is also reached from inside (so a probe on `b` would count
/// those passes again): every predecessor of `b` outside the instance, each of which must
/// lead to `b` and nowhere else (it falls through into `b` or jumps to it) and take a
/// uprobe (no NOP, nothing refused), and `b` must lie on no cycle. `None` when `b` needs
/// no such move or cannot have it.
fn edge_probes(
    insns: &[Insn],
    graph: &Graph,
    preds: &[Vec<usize>],
    inside: &[bool],
    b: usize,
) -> Option<Vec<usize>> {
    // On a cycle through `b`, the jump from inside may be the caller's loop, one call per
    // pass (the instance's code at the loop head): moving would count one per loop.
    if b == 0 || !preds[b].iter().any(|&p| inside[p]) || graph.reaches(b, b) {
        return None;
    }
    let outside: Vec<usize> = preds[b].iter().copied().filter(|&p| !inside[p]).collect();
    let only_to_b = |p: usize| {
        graph.succ[p] == [b]
            && !graph.exits[p]
            && !insns[p].padding
            && insns[p].refused.is_none()
            && matches!(
                insns[p].flow,
                FlowControl::Next | FlowControl::UnconditionalBranch
            )
    };
    (!outside.is_empty() && outside.iter().all(|&p| only_to_b(p))).then_some(outside)
}

/// Whether control can pass from an instruction to the next one in memory.
fn falls_through(flow: FlowControl) -> bool {
    !matches!(
        flow,
        FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::Return
            | FlowControl::Exception
    )
}

/// The instructions of the instance from which control leaves it and, through code
/// outside it only, reaches `entry`; `None` when `entry` can also be reached another way
/// (from the function's start, or from code that nothing in the function leads to).
fn feeders(preds: &[Vec<usize>], inside: &[bool], entry: usize) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    let mut seen = vec![false; preds.len()];
    let mut stack: Vec<usize> = Vec::new();
    for &p in &preds[entry] {
        if inside[p] {
            continue; // a jump back from inside: not an entry edge
        }
        if !seen[p] {
            seen[p] = true;
            stack.push(p);
        }
    }
    if stack.is_empty() {
        return None;
    }
    while let Some(k) = stack.pop() {
        if k == 0 || preds[k].is_empty() {
            return None;
        }
        for &p in &preds[k] {
            if inside[p] {
                out.push(p);
            } else if !seen[p] {
                seen[p] = true;
                stack.push(p);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// The control flow between the instructions of one function (successors by index);
/// leaving the function (return, tail call, indirect jump, its end) is an exit.
struct Graph {
    succ: Vec<Vec<usize>>,
    exits: Vec<bool>,
}

impl Graph {
    fn new(insns: &[Insn]) -> Graph {
        let index_of = |a: u64| insns.binary_search_by_key(&a, |i| i.ip).ok();
        let mut succ = vec![Vec::new(); insns.len()];
        let mut exits = vec![false; insns.len()];
        for (k, insn) in insns.iter().enumerate() {
            if falls_through(insn.flow) {
                if k + 1 < insns.len() {
                    succ[k].push(k + 1);
                } else {
                    exits[k] = true;
                }
            }
            match insn.flow {
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                    match insn.target.and_then(index_of) {
                        Some(t) => succ[k].push(t),
                        None => exits[k] = true,
                    }
                }
                // A jump whose table is known goes only where the table says.
                FlowControl::IndirectBranch if !insn.table.is_empty() => {
                    let targets: Option<Vec<usize>> =
                        insn.table.iter().map(|&t| index_of(t)).collect();
                    match targets {
                        Some(targets) => succ[k].extend(targets),
                        None => exits[k] = true,
                    }
                }
                FlowControl::Return | FlowControl::IndirectBranch => exits[k] = true,
                _ => {}
            }
        }
        Graph { succ, exits }
    }

    /// Whether every path from `from` reaches one of `targets` before it leaves the
    /// function or comes back to `from`.
    fn always_reaches(&self, from: usize, targets: &[usize]) -> bool {
        let mut seen = vec![false; self.succ.len()];
        let mut stack = vec![from];
        seen[from] = true;
        while let Some(k) = stack.pop() {
            if self.exits[k] {
                return false;
            }
            for &s in &self.succ[k] {
                if s == from {
                    return false;
                }
                if targets.contains(&s) || seen[s] {
                    continue;
                }
                seen[s] = true;
                stack.push(s);
            }
        }
        true
    }

    /// Whether a path inside the instance (`inside`) leads from `from` to `to`.
    fn reaches_inside(&self, from: usize, to: usize, inside: &[bool]) -> bool {
        if from == to {
            return true;
        }
        let mut seen = vec![false; self.succ.len()];
        let mut stack = vec![from];
        seen[from] = true;
        while let Some(k) = stack.pop() {
            for &s in &self.succ[k] {
                if s == to {
                    return true;
                }
                if inside[s] && !seen[s] {
                    seen[s] = true;
                    stack.push(s);
                }
            }
        }
        false
    }

    /// Whether some path leads from `from` to `to` without passing `from` again.
    fn reaches(&self, from: usize, to: usize) -> bool {
        let mut seen = vec![false; self.succ.len()];
        let mut stack = vec![from];
        seen[from] = true;
        while let Some(k) = stack.pop() {
            for &s in &self.succ[k] {
                if s == to {
                    return true;
                }
                if !seen[s] {
                    seen[s] = true;
                    stack.push(s);
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(code: &[u8], ranges: &[(u64, u64)]) -> (Vec<u64>, Vec<String>) {
        let found = analyze(
            decode(code, 0).unwrap(),
            0,
            ranges,
            &HashSet::new(),
            None,
            &HashSet::new(),
        )
        .unwrap();
        (
            found.points.into_iter().map(|(a, _)| a).collect(),
            found.reasons,
        )
    }

    #[test]
    fn a_landing_pad_inside_the_instance_is_probed_apart() {
        let code = [
            0x31, 0xc0, // 0x0 xor eax,eax
            0xff, 0xc0, // 0x2 inc eax (instance; entered by fall-through)
            0xc3, // 0x4 ret
            0xff, 0xc1, // 0x5 inc ecx (instance; nothing leads here: a landing pad)
            0xc3, // 0x7 ret
        ];
        let analysed = |pads: HashSet<u64>| {
            analyze(
                decode(&code, 0).unwrap(),
                0,
                &[(0x2, 0x8)],
                &HashSet::new(),
                None,
                &pads,
            )
            .unwrap()
        };
        // Unknown: not probed, a call there would be missed.
        let unknown = analysed(HashSet::new());
        assert_eq!(unknown.points, vec![(0x2, 2)]);
        assert!(unknown.misses && !unknown.repeats, "{:?}", unknown.reasons);
        // A landing pad: probed, marked, and nothing is missed.
        let pad = analysed(HashSet::from([0x5]));
        assert_eq!(pad.points, vec![(0x2, 2), (0x5, 2)]);
        assert_eq!(pad.unwinding, HashSet::from([0x5]));
        assert!(!pad.misses && !pad.repeats, "{:?}", pad.reasons);
        assert!(pad.reasons[0].contains("landing pads"), "{:?}", pad.reasons);
    }

    #[test]
    fn alignment_nop_before_a_loop_head_is_not_an_entry() {
        let code = [
            0x31, 0xc0, // 0x0 xor eax,eax
            0x90, // 0x2 nop            (instance)
            0x48, 0xff, 0xc0, // 0x3 inc rax   (instance, loop head)
            0x48, 0x39, 0xf8, // 0x6 cmp rax,rdi
            0x75, 0xf8, // 0x9 jne 0x3
            0xc3, // 0xb ret
        ];
        assert_eq!(kept(&code, &[(0x2, 0x6)]), (vec![0x3], vec![]));
    }

    #[test]
    fn caller_code_between_two_pieces_counts_one_pass() {
        let code = [
            0x48, 0x8b, 0x0f, // 0x0 mov rcx,[rdi]  (instance)
            0x48, 0xff, 0xc0, // 0x3 inc rax        (caller)
            0x48, 0x89, 0x0e, // 0x6 mov [rsi],rcx  (instance)
            0x48, 0x39, 0xf8, // 0x9 cmp rax,rdi
            0x75, 0xf2, // 0xc jne 0x0
            0xc3, // 0xe ret
        ];
        assert_eq!(kept(&code, &[(0x0, 0x3), (0x6, 0x9)]), (vec![0x6], vec![]));
    }

    #[test]
    fn second_piece_skipped_by_a_slow_path_is_one_pass() {
        // GCC's vector::push_back in a loop: capacity check, store, the caller's counter,
        // then the rest of push_back; the slow path leaves without the rest.
        let code = [
            0x31, 0xc9, // 0x0 xor ecx,ecx
            0x48, 0x39, 0xf7, // 0x2 cmp rdi,rsi     (instance)
            0x74, 0x08, // 0x5 je 0xf              (instance)
            0x48, 0x89, 0x07, // 0x7 mov [rdi],rax   (instance)
            0xff, 0xc1, // 0xa inc ecx             (caller)
            0xff, 0xc0, // 0xc inc eax             (instance)
            0xc3, // 0xe ret
            0x31, 0xd2, // 0xf xor edx,edx         (instance, slow path)
            0xc3, // 0x11 ret
        ];
        let ranges = [(0x2, 0xa), (0xc, 0xe), (0xf, 0x11)];
        assert_eq!(kept(&code, &ranges), (vec![0x2], vec![]));
    }

    #[test]
    fn exclusive_branches_are_both_kept() {
        let code = [
            0x85, 0xff, // 0x0 test edi,edi
            0x74, 0x04, // 0x2 je 0x8
            0x31, 0xc0, // 0x4 xor eax,eax  (instance)
            0xeb, 0x02, // 0x6 jmp 0xa
            0x31, 0xc0, // 0x8 xor eax,eax  (instance)
            0xc3, // 0xa ret
        ];
        assert_eq!(
            kept(&code, &[(0x4, 0x6), (0x8, 0xa)]),
            (vec![0x4, 0x8], vec![])
        );
    }

    #[test]
    fn a_jump_back_to_an_entry_from_inside_is_uncertain() {
        let code = [
            0x31, 0xc0, // 0x0 xor eax,eax
            0xff, 0xc0, // 0x2 inc eax   (instance)
            0x75, 0xfc, // 0x4 jne 0x2   (instance)
            0xc3, // 0x6 ret
        ];
        let (points, reasons) = kept(&code, &[(0x2, 0x6)]);
        assert_eq!(points, vec![0x2]);
        assert!(
            reasons[0].contains("goes back to its entry 0x2"),
            "{reasons:?}"
        );
        // Every call passes the entry, some passes may be more of one: bounded.
        let found = analyze(
            decode(&code, 0).unwrap(),
            0,
            &[(0x2, 0x6)],
            &HashSet::new(),
            None,
            &HashSet::new(),
        )
        .unwrap();
        assert!(found.repeats && !found.misses);
    }

    #[test]
    fn an_entry_also_reached_from_inside_is_counted_on_the_way_in() {
        // GCC's inlined _PyObject_Malloc in _PyObject_Realloc: the fallback (0xc) is
        // entered from the caller's code (0xa) and by a jump from the instance's own size
        // check (0x7). A probe on 0xc would count the calls through 0x4 that jump there
        // twice; the caller's instruction before it counts the entries from outside.
        let code = [
            0x85, 0xff, // 0x0 test edi,edi
            0x74, 0x06, // 0x2 je 0xa
            0x83, 0xfe, 0x40, // 0x4 cmp esi,0x40  (instance)
            0x77, 0x03, // 0x7 ja 0xc              (instance)
            0xc3, // 0x9 ret                       (instance)
            0x31, 0xc0, // 0xa xor eax,eax         (caller, only before 0xc)
            0x31, 0xd2, // 0xc xor edx,edx         (instance, fallback)
            0xc3, // 0xe ret
        ];
        assert_eq!(
            kept(&code, &[(0x4, 0xa), (0xc, 0xe)]),
            (vec![0x4, 0xa], vec![])
        );
        // Entered from outside by a conditional jump, which also runs when not taken:
        // no instruction counts only the entries; the doubt stays.
        let code = [
            0x85, 0xff, // 0x0 test edi,edi
            0x74, 0x06, // 0x2 je 0xa
            0x83, 0xfe, 0x40, // 0x4 cmp esi,0x40  (instance)
            0x77, 0x03, // 0x7 ja 0xc              (instance)
            0xc3, // 0x9 ret                       (instance)
            0x75, 0x00, // 0xa jne 0xc             (caller)
            0x31, 0xd2, // 0xc xor edx,edx         (instance)
            0xc3, // 0xe ret
        ];
        let (points, reasons) = kept(&code, &[(0x4, 0xa), (0xc, 0xe)]);
        assert_eq!(points, vec![0x4, 0xc]);
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("goes back to its entry 0xc")),
            "{reasons:?}"
        );
    }

    #[test]
    fn never_a_probe_inside_an_instruction() {
        let code = [
            0x48, 0xff, 0xc0, // 0x0 inc rax: the instance's range starts at 0x1
            0xc3, // 0x3 ret
        ];
        assert_eq!(kept(&code, &[(0x1, 0x3)]), (vec![], vec![]));
    }

    #[test]
    fn an_entry_on_a_nop_is_probed_after_it() {
        let code = [
            0x31, 0xc0, // 0x0 xor eax,eax
            0x0f, 0x1f, 0x40, 0x00, // 0x2 nopl 0x0(%rax)  (instance)
            0xff, 0xc0, // 0x6 inc eax  (instance)
            0xc3, // 0x8 ret
        ];
        assert_eq!(kept(&code, &[(0x2, 0x8)]), (vec![0x6], vec![]));
        // An instance that is only a NOP has nothing a uprobe counts.
        let (points, reasons) = kept(&code, &[(0x2, 0x6)]);
        assert_eq!(points, Vec::<u64>::new());
        assert!(reasons[0].contains("only NOPs"), "{reasons:?}");
    }

    #[test]
    fn dead_padding_falls_into_nothing() {
        let code = [
            0x85, 0xff, // 0x0 test edi,edi    (instance)
            0x74, 0x04, // 0x2 je 0x8          (instance)
            0xc3, // 0x4 ret
            0x0f, 0x1f, 0x00, // 0x5 nopl (%rax): dead padding after a ret
            0x31, 0xc0, // 0x8 xor eax,eax  (instance's slow path)
            0xc3, // 0xa ret
        ];
        // 0x8 is entered only by the jump from inside: not an entry, no doubt.
        assert_eq!(kept(&code, &[(0x0, 0x4), (0x8, 0xa)]), (vec![0x0], vec![]));
    }

    #[test]
    fn prefixes_that_uprobes_refuse() {
        assert_eq!(
            uprobe_refuses(&[0xf0, 0x48, 0x83, 0x07, 0x01]),
            Some(UprobeRefusal::Lock)
        );
        assert_eq!(
            uprobe_refuses(&[0x66, 0xf0, 0x83, 0x07, 0x01]),
            Some(UprobeRefusal::Lock)
        );
        assert_eq!(
            uprobe_refuses(&[0x2e, 0x48, 0x89, 0xf8]),
            Some(UprobeRefusal::SegmentPrefix),
            "cs"
        );
        assert!(uprobe_refuses(&[0x3e, 0xff, 0xe0]).is_some(), "notrack jmp");
        assert_eq!(UprobeRefusal::Lock.to_string(), "LOCK-prefixed");
        assert_eq!(
            uprobe_refuses(&[0x64, 0x48, 0x8b, 0x04, 0x25]),
            None,
            "fs: is fine"
        );
        assert_eq!(uprobe_refuses(&[0xf3, 0x0f, 0x1e, 0xfa]), None, "endbr64");
        assert_eq!(
            uprobe_refuses(&[0x48, 0x87, 0x07]),
            None,
            "xchg locks without a prefix"
        );
    }

    #[test]
    fn a_locked_entry_is_counted_at_the_next_instruction() {
        // GCC's inlined atomic increment at a loop head.
        let code = [
            0x31, 0xc0, // 0x0 xor eax,eax
            0xf0, 0x48, 0x83, 0x07, 0x01, // 0x2 lock add qword [rdi],1 (instance)
            0x48, 0xff, 0xc0, // 0x7 inc rax
            0x48, 0x39, 0xf0, // 0xa cmp rax,rsi
            0x75, 0xf3, // 0xd jne 0x2
            0xc3, // 0xf ret
        ];
        let found = analyze(
            decode(&code, 0).unwrap(),
            0,
            &[(0x2, 0x7)],
            &HashSet::new(),
            None,
            &HashSet::new(),
        )
        .unwrap();
        assert_eq!(found.points, vec![(0x7, 3)]);
        assert!(found.stepped);
        // ... unless a jump from elsewhere (a cold part) reaches that instruction too.
        let found = analyze(
            decode(&code, 0).unwrap(),
            0,
            &[(0x2, 0x7)],
            &HashSet::from([0x7]),
            None,
            &HashSet::new(),
        )
        .unwrap();
        assert_eq!(found.points, vec![]);
        assert!(
            found.reasons[0].contains("a jump also reaches"),
            "{:?}",
            found.reasons
        );
    }

    #[test]
    fn a_locked_entry_without_a_substitute_is_not_counted() {
        let code = [
            0x48, 0x85, 0xf6, // 0x0 test rsi,rsi
            0x74, 0x05, // 0x3 je 0xa
            0xf0, 0x48, 0x83, 0x07, 0x01, // 0x5 lock add qword [rdi],1 (instance)
            0xc3, // 0xa ret: also reached by the jump
        ];
        let (points, reasons) = kept(&code, &[(0x5, 0xa)]);
        assert_eq!(points, Vec::<u64>::new());
        assert!(
            reasons[0].starts_with("an entry is `lock add`, LOCK-prefixed"),
            "{reasons:?}"
        );
        // Two locked instructions in a row.
        let code = [
            0x31, 0xc0, // 0x0 xor eax,eax
            0xf0, 0x48, 0x83, 0x07, 0x01, // 0x2 lock add (instance)
            0xf0, 0x48, 0x83, 0x06, 0x01, // 0x7 lock add qword [rsi],1
            0xc3, // 0xc ret
        ];
        let (points, reasons) = kept(&code, &[(0x2, 0x7)]);
        assert_eq!(points, Vec::<u64>::new());
        assert!(reasons[0].contains("is LOCK-prefixed too"), "{reasons:?}");
    }

    #[test]
    fn undecodable_code_is_refused() {
        assert!(
            decode(&[0x06], 0).is_err(),
            "push es is invalid in 64-bit mode"
        );
    }
}
