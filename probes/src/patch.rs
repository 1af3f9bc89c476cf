//! In-process counting: which sites can be redirected to a counting trampoline, and the
//! trampoline code for them (decoded and relocated with `iced-x86`). The counting library
//! in the child (`agent/inproc`) only copies this code next to the module, applies the
//! fixups (32-bit fields relative to the module, which moves with ASLR) and writes a
//! `jmp rel32` over each site.
//!
//! A site is patched only when that is provably safe ([`displace`]):
//! - the displaced bytes (at least 5, for the `jmp rel32`) are whole instructions of the
//!   enclosing function, decoded from its start, none of them a return, indirect jump,
//!   interrupt or system call, so that each runs the same from the trampoline (a
//!   RIP-relative operand or a direct jump is re-encoded for its new place and fixed up
//!   for the load address; an unconditional jump or a call only as the last one, so that
//!   every other displaced instruction is entered by falling through from the one
//!   before; after a jump shorter than the patch, the patch also covers the bytes up to
//!   5, which never run from the trampoline, if no landing pad is among them
//!   ([`crate::lsda`]));
//! - a call is not executed from the trampoline: the stub pushes the return address the
//!   call would have pushed (the instruction after it, in the module) and jumps to the
//!   callee, which returns into the function itself. The callee, an unwinder or a
//!   profiler walking the stack from inside it sees exactly the stack of the original
//!   call. A call whose operand uses `rsp` is not moved (the push would move what it
//!   reads);
//! - no direct branch of the function or of its split-off `.cold` parts, and no return
//!   address (the end of a call), lands inside the displaced bytes other than at the site
//!   itself;
//! - the function has no indirect jump other than a tail call through a RIP-relative
//!   slot (`jmp [rip+X]`): a jump table or a computed goto could land anywhere.
//! - no other function symbol starts inside the displaced bytes: calls of it would land
//!   in the middle of the jump (hand-written code whose symbols overlap, or a function
//!   that falls through into the next one).
//!
//! An `endbr64` at a function's start stays in place and the patch goes after it (so
//! indirect calls still land on it); nothing may then jump to the instruction after it.
//!
//! Stubs: each thread counts in a block of counters of its own (issue 32; the layout and
//! the fork rules are in `sbs_agent_abi::inproc`). At a function entry the flags are dead
//! and nothing lives below the stack pointer, so the stub is: save `rax`, load this
//! thread's slot address from the counting library's TLS word (`fs:[offset]`, fixed up
//! by the library), the block's address from the slot, a plain `inc qword [rax+8k]`,
//! restore `rax`, the displaced instructions and `jmp` back. A thread without a block
//! (its first counted call, or the first in a forked child, whose slots the kernel wiped)
//! takes an out-of-line path after the stub: a call to the module's *claim routine* at
//! the start of its trampoline code (`lock xadd` on the next-block word; see
//! [`claim_code`]), then the `inc`, or, when no block is left, a `lock inc` of the shared
//! counter. Inside a function (the entry of an inlined copy) the flags may be live and
//! the 128-byte red zone below `rsp` may hold data, so the stub steps over the red zone
//! and saves the flags around all of it. Without blocks (`LiveLayout::blocks` 0) the
//! stubs count with `lock inc` of the shared counters only, as before issue 32. A signal
//! handler that counts between a claim and its store into the TLS word claims a block of
//! its own; the one left behind is still read by the collector, so counts stay exact.
//!
//! A patch may count more than one site ([`Patch`]): a site lying at one of the
//! instructions another site's patch displaces is counted by that stub right before it
//! runs the instruction, with the careful form (red zone and flags), since the
//! instructions before it may have set the flags. Which sites share a patch is decided by
//! [`crate::overlap`].

use std::collections::HashSet;

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Instruction,
    InstructionBlock, MemoryOperand, Mnemonic, OpKind, Register,
};
use sbs_agent_abi::inproc::{pages, Fixup, FixupKind, LiveLayout, SiteRecord, JMP_LEN, MAX_PATCH};

use crate::elf::{Function, Image};
use crate::lsda::LsdaError;
pub use crate::refusal::PatchRefusal;

/// Where a site lies in its function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteKind {
    /// A function's first instruction (reached by a call: flags dead, no red zone).
    Entry,
    /// An instruction inside a function (an inlined copy's entry).
    Inside,
}

/// A site that can be patched: the instructions the `jmp` displaces.
#[derive(Debug, Clone)]
pub struct Displaced {
    /// Link-time address where the patch starts (after an `endbr64`, if any).
    pub address: u64,
    /// The displaced bytes, as in the file.
    pub original: Vec<u8>,
    /// The displaced instructions, decoded at their link-time addresses.
    instructions: Vec<Instruction>,
    kind: SiteKind,
}

impl Displaced {
    /// Link-time address just past the displaced bytes.
    pub fn end(&self) -> u64 {
        self.address + self.original.len() as u64
    }

    /// How the stub enters: as a function's entry (flags dead, no red zone) or inside one.
    pub fn kind(&self) -> SiteKind {
        self.kind
    }

    /// The index of the displaced instruction that starts at `address`, if the stub runs
    /// one there (bytes after a jump that the patch covers are not run).
    pub fn instruction_at(&self, address: u64) -> Option<usize> {
        self.instructions.iter().position(|i| i.ip() == address)
    }
}

/// One `jmp` written over the code and the stub it leads to, which counts one or more
/// sites. A second site can be counted by the patch of a site a few bytes before it when
/// control reaches it only by running the displaced instructions before it (no branch
/// lands inside the displaced bytes: [`displace`] checked that), so the stub counts it
/// right before it runs the instruction the site starts at (see [`crate::overlap`]).
#[derive(Debug, Clone)]
pub struct Patch {
    /// The displaced instructions.
    pub displaced: Displaced,
    /// Per counted site, in the order of its counters: the index of the displaced
    /// instruction before which the stub counts it (0: on entering the stub).
    pub counts: Vec<usize>,
}

impl Patch {
    /// The patch of one site, counted on entering the stub.
    pub fn single(displaced: Displaced) -> Patch {
        Patch {
            displaced,
            counts: vec![0],
        }
    }
}

/// Check that the site at `address` of `function` (in `image`) can be patched, and take
/// its displaced instructions.
pub fn displace(
    image: &Image,
    function: &Function,
    address: u64,
    kind: SiteKind,
) -> Result<Displaced, PatchRefusal> {
    let code = image.code_of(function).ok_or(PatchRefusal::CodeNotInFile)?;
    let cold = cold_parts(image, function);
    let segments = image.load_segments();
    let read = |vaddr: u64, len: usize| image.read_at(&segments, vaddr, len);
    let landing_pads = || crate::lsda::landing_pads(image, function.address);
    let displaced = displace_in(
        code,
        function.address,
        &cold,
        &read,
        &landing_pads,
        address,
        kind,
    )?;
    // Calls of another function that starts inside the displaced bytes (hand-written code
    // whose symbols overlap, or a function that falls through into the next one) would
    // land in the middle of the jump: the branches of this function do not show them.
    if let Some(other) = image
        .functions
        .iter()
        .find(|f| f.address > displaced.address && f.address < displaced.end())
    {
        return Err(PatchRefusal::SymbolInside {
            name: other.name.clone(),
            at: other.address,
            len: displaced.original.len(),
        });
    }
    Ok(displaced)
}

/// The possible targets of the function's indirect jumps, if they can be bounded: every
/// address a RIP-relative `lea` of the function loads that lies inside it (a label taken
/// for a computed goto), and every entry of each table of 32-bit offsets relative to an
/// address such a `lea` loads (how compilers lay out jump tables in position-independent
/// code), read while the entries land on instructions of the function (a superset of the
/// table's real entries). `None` when the function's indirect jumps cannot be bounded
/// this way (an indirect jump through memory other than a RIP-relative slot, which is a
/// tail call through the GOT).
pub(crate) fn indirect_targets<'d>(
    insns: &[Instruction],
    read: &dyn Fn(u64, usize) -> Option<&'d [u8]>,
) -> Result<Vec<u64>, PatchRefusal> {
    let indirect: Vec<&Instruction> = insns
        .iter()
        .filter(|i| i.flow_control() == FlowControl::IndirectBranch)
        .collect();
    if let Some(i) = indirect
        .iter()
        .find(|i| i.op0_kind() == OpKind::Memory && !i.is_ip_rel_memory_operand())
    {
        return Err(PatchRefusal::IndirectJumpThroughMemory { at: i.ip() });
    }
    if !indirect.iter().any(|i| i.op0_kind() == OpKind::Register) {
        return Ok(Vec::new());
    }
    let boundaries: HashSet<u64> = insns.iter().map(|i| i.ip()).collect();
    let (lo, hi) = (
        insns.first().map_or(0, |i| i.ip()),
        insns.last().map_or(0, |i| i.next_ip()),
    );
    let mut out = Vec::new();
    for lea in insns
        .iter()
        .filter(|i| i.mnemonic() == Mnemonic::Lea && i.is_ip_rel_memory_operand())
    {
        let base = lea.ip_rel_memory_address();
        if (lo..hi).contains(&base) {
            out.push(base);
            continue;
        }
        out.extend(crate::jumptable::table_entries(base, read, &boundaries));
    }
    Ok(out)
}

/// [`displace`] on the bytes of a function at `function_address` and of its split-off
/// cold parts (address, bytes); `read(address, len)` gives the file's bytes at a
/// link-time address (for jump tables).
pub fn displace_in<'d>(
    code: &[u8],
    function_address: u64,
    cold: &[(u64, &[u8])],
    read: &dyn Fn(u64, usize) -> Option<&'d [u8]>,
    landing_pads: &dyn Fn() -> Result<Vec<u64>, LsdaError>,
    address: u64,
    kind: SiteKind,
) -> Result<Displaced, PatchRefusal> {
    let end = function_address + code.len() as u64;
    let insns = decode(code, function_address)?;
    let targets = branch_targets(&insns, cold, read)?;
    let mut k = insns
        .iter()
        .position(|i| i.ip() == address)
        .ok_or(PatchRefusal::NotABoundary { at: address })?;
    let mut start = address;
    // A function start that a jump inside the function also reaches (a loop made of a
    // tail call) may be entered with live flags or data in the red zone: the careful stub.
    let kind = if kind == SiteKind::Entry && targets.contains(&address) {
        SiteKind::Inside
    } else {
        kind
    };
    if kind == SiteKind::Entry && insns[k].mnemonic() == Mnemonic::Endbr64 {
        k += 1;
        start = insns.get(k).map(|i| i.ip()).unwrap_or(end);
        if targets.contains(&start) {
            return Err(PatchRefusal::BranchAfterEndbr { at: start });
        }
    }
    let (taken, dead) = take_instructions(&insns[k..])?;
    let len: usize = taken.iter().map(Instruction::len).sum::<usize>() + dead;
    if dead > 0 {
        let end = start + len as u64;
        let pads = landing_pads().map_err(|why| PatchRefusal::LandingPadsUnknown { dead, why })?;
        if let Some(&pad) = pads.iter().find(|&&p| p > start && p < end) {
            return Err(PatchRefusal::LandingPadInside { at: pad, len });
        }
    }
    if len > MAX_PATCH {
        return Err(PatchRefusal::TooLong { len });
    }
    if let Some(&t) = targets
        .iter()
        .find(|&&t| t > start && t < start + len as u64)
    {
        return Err(PatchRefusal::BranchInside { at: t, len });
    }
    let from = usize::try_from(start - function_address)
        .map_err(|e| PatchRefusal::Encoding { why: e.to_string() })?;
    Ok(Displaced {
        address: start,
        original: code[from..from + len].to_vec(),
        instructions: taken,
        kind,
    })
}

/// The instructions from the first of `insns` that a 5-byte jump displaces: whole
/// instructions that can run from a trampoline, a jump or a call only as the last; and,
/// after a jump shorter than the patch, how many bytes of the instructions after it the
/// patch also covers (they never run from the trampoline).
fn take_instructions(insns: &[Instruction]) -> Result<(Vec<Instruction>, usize), PatchRefusal> {
    let mut taken = Vec::new();
    let mut len = 0usize;
    let mut next = insns.iter();
    while len < JMP_LEN {
        let Some(i) = next.next() else {
            return Err(PatchRefusal::FunctionEnds { len });
        };
        let movable = match i.flow_control() {
            FlowControl::Next => true,
            // A direct jump: re-encoded with a 32-bit displacement and fixed up. Only as
            // the last displaced instruction, so that every other one is reached by
            // falling through from the one before.
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch => {
                i.is_jcc_short_or_near() || i.is_jmp_short_or_near()
            }
            // A call: emulated (see the module documentation), as the last one too.
            FlowControl::Call | FlowControl::IndirectCall => is_movable_call(i),
            _ => false,
        };
        if !movable || matches!(i.mnemonic(), Mnemonic::Syscall | Mnemonic::Xbegin) {
            return Err(PatchRefusal::Unmovable {
                at: i.ip(),
                what: unmovable_words(i),
                mnemonic: format!("{:?}", i.mnemonic()).to_lowercase(),
            });
        }
        len += i.len();
        taken.push(*i);
        if ends_block(i) && len < JMP_LEN {
            if is_call(i) {
                return Err(PatchRefusal::CallEndsBlock { at: i.ip(), len });
            }
            // Nothing falls into the bytes after an unconditional jump: the patch may
            // cover them if no branch, return or landing pad leads there (checked by the
            // caller).
            let mut dead = 0;
            while len + dead < JMP_LEN {
                let Some(d) = next.next() else {
                    return Err(PatchRefusal::JumpEndsFunction { at: i.ip(), len });
                };
                dead += d.len();
            }
            return Ok((taken, dead));
        }
    }
    Ok((taken, 0))
}

/// Every address control can reach other than by falling through: the direct branch and
/// call targets of the function (`insns`) and of its `cold` parts, return addresses, and
/// what [`indirect_targets`] finds.
fn branch_targets<'d>(
    insns: &[Instruction],
    cold: &[(u64, &[u8])],
    read: &dyn Fn(u64, usize) -> Option<&'d [u8]>,
) -> Result<HashSet<u64>, PatchRefusal> {
    let direct = |i: &Instruction| {
        matches!(
            i.flow_control(),
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch | FlowControl::Call
        )
    };
    let mut targets: HashSet<u64> = HashSet::new();
    for i in insns {
        if direct(i) {
            targets.insert(i.near_branch_target());
        }
        if is_call(i) {
            targets.insert(i.next_ip());
        }
    }
    targets.extend(indirect_targets(insns, read)?);
    for &(at, bytes) in cold {
        targets.extend(
            decode(bytes, at)?
                .iter()
                .filter(|i| direct(i))
                .map(|i| i.near_branch_target()),
        );
    }
    Ok(targets)
}

fn decode(code: &[u8], address: u64) -> Result<Vec<Instruction>, PatchRefusal> {
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut out = Vec::new();
    while decoder.can_decode() {
        let i = decoder.decode();
        if i.is_invalid() {
            return Err(PatchRefusal::Undecodable { at: i.ip() });
        }
        out.push(i);
    }
    Ok(out)
}

/// The parts GCC splits off `function` (`NAME.cold`, `NAME.cold.N`), which jump back
/// into it: (address, bytes).
fn cold_parts<'a>(image: &'a Image, function: &Function) -> Vec<(u64, &'a [u8])> {
    let cold = format!("{}.cold", function.name);
    image
        .functions
        .iter()
        .filter(|f| {
            f.name == cold
                || f.name
                    .strip_prefix(&cold)
                    .is_some_and(|r| r.starts_with('.'))
        })
        .filter_map(|part| Some((part.address, image.code_of(part)?)))
        .collect()
}

/// The trampoline code of one module and what the library needs to place it.
#[derive(Debug, Clone)]
pub struct ModuleCode {
    /// The code, encoded for a trampoline at [`ModuleCode::code_pages`] before the live
    /// region; its fields relative to the module are fixed up by the library.
    pub code: Vec<u8>,
    /// Bytes reserved for the code (whole pages).
    pub code_pages: u64,
    /// The 32-bit fields to fix up.
    pub fixups: Vec<Fixup>,
    /// One record per patch, in the order given.
    pub sites: Vec<SiteRecord>,
}

/// Build the trampolines of one module: one stub per `(patch, first counter index)`; the
/// patch's `n`th count uses the counter of index `first + n`, which lies at byte
/// `counters_at + 8 (first + n)` of the live region (`layout`), and, with per-thread
/// blocks, at `8 (first + n)` of each block.
pub fn module_code(
    image: &Image,
    sites: &[(Patch, usize)],
    layout: &LiveLayout,
) -> Result<ModuleCode, PatchRefusal> {
    let top = image
        .exec_segments
        .iter()
        .map(|&(vaddr, size, _)| vaddr + size)
        .max()
        .unwrap_or(0);
    module_code_at(top, sites, layout)
}

/// [`module_code`] for a module whose code ends at link-time address `top`.
pub fn module_code_at(
    top: u64,
    sites: &[(Patch, usize)],
    layout: &LiveLayout,
) -> Result<ModuleCode, PatchRefusal> {
    // Encoded as if the trampoline lay just past the module's code, so that RIP-relative
    // operands into the module stay in 32-bit reach; the library fixes them up for where
    // it really lies.
    let base = pages(top) + (16 << 20);
    let first = encode_all(sites, base, 0, layout)?;
    let code_pages = pages(first.code.len() as u64).max(4096);
    let out = encode_all(sites, base, code_pages, layout)?;
    if out.code.len() != first.code.len() {
        return Err(encoding("the trampoline's length changed between passes"));
    }
    Ok(out)
}

/// Where an instruction of a stub comes from, for its fixups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Moved or emulated from the module: its jump target or RIP-relative operand refers
    /// to the module.
    Module,
    /// The stub's own, relative only to the trampoline area.
    Own,
    /// The stub's own, reading or writing the counting library's TLS word (`fs:[disp32]`).
    ThreadPointer,
}

/// An instruction of a stub and where it comes from.
type Placed = (Instruction, Origin);

/// Where the stubs of one trampoline area count (addresses as encoded).
#[derive(Debug, Clone, Copy)]
struct Counters {
    /// Address of the shared counter 0.
    shared: u64,
    /// Address of the claim routine, with per-thread blocks.
    claim: Option<u64>,
}

impl Counters {
    /// Address of shared counter `k`.
    fn shared(&self, k: u64) -> u64 {
        self.shared + 8 * k
    }
}

/// One pass of [`module_code_at`]: the claim routine (with per-thread blocks) and every
/// stub, encoded for code at `base` with the live region `code_pages` after it.
fn encode_all(
    sites: &[(Patch, usize)],
    base: u64,
    code_pages: u64,
    layout: &LiveLayout,
) -> Result<ModuleCode, PatchRefusal> {
    let mut code = Vec::new();
    let mut fixups = Vec::new();
    let mut records = Vec::new();
    let live = base + code_pages;
    let mut counters = Counters {
        shared: live + layout.counters_at,
        claim: None,
    };
    if layout.blocks > 0 {
        let (bytes, fx) = claim_code(base, live, layout)?;
        code.extend_from_slice(&bytes);
        fixups.extend(fx);
        pad16(&mut code);
        counters.claim = Some(base);
    }
    for (patch, first) in sites {
        let d = &patch.displaced;
        let stub = code.len() as u64;
        let at: Vec<(usize, u64)> = patch
            .counts
            .iter()
            .enumerate()
            .map(|(n, &at)| (at, (*first + n) as u64))
            .collect();
        let (bytes, mut fx) = stub_code(d, base + stub, &at, &counters)?;
        for f in &mut fx {
            f.field += stub as u32;
            f.end += stub as u32;
        }
        code.extend_from_slice(&bytes);
        fixups.extend(fx);
        let mut original = [0u8; MAX_PATCH];
        original[..d.original.len()].copy_from_slice(&d.original);
        records.push(SiteRecord {
            address: d.address,
            len: d.original.len() as u8,
            stub: stub as u32,
            original,
        });
        pad16(&mut code);
    }
    Ok(ModuleCode {
        code,
        code_pages,
        fixups,
        sites: records,
    })
}

/// Stubs start on 16 bytes (int3 between them: never executed).
fn pad16(code: &mut Vec<u8>) {
    while code.len() % 16 != 0 {
        code.push(0xcc);
    }
}

/// One patch's stub, encoded at `rip`, and its fixups (offsets relative to the stub).
/// `at` lists (index of the displaced instruction to count before, counter index).
fn stub_code(
    d: &Displaced,
    rip: u64,
    at: &[(usize, u64)],
    counters: &Counters,
) -> Result<(Vec<u8>, Vec<Fixup>), PatchRefusal> {
    let e = |e: iced_x86::IcedError| PatchRefusal::Encoding { why: e.to_string() };
    if at.iter().any(|&(n, _)| n >= d.instructions.len()) {
        return Err(encoding(
            "a site is counted past the displaced instructions",
        ));
    }
    let mut labels = Labels::default();
    let mut list: Vec<Placed> = Vec::new();
    // The slow paths of the per-thread counting, after the end of the stub.
    let mut slow: Vec<Placed> = Vec::new();
    for (n, moved) in d.instructions.iter().enumerate() {
        let here: Vec<u64> = at
            .iter()
            .filter(|&&(i, _)| i == n)
            .map(|&(_, k)| k)
            .collect();
        // At a function's entry the flags are dead and nothing lives below the stack
        // pointer; past the first instruction, or inside a function, both may be live.
        let careful = n > 0 || d.kind == SiteKind::Inside;
        let (inline, out_of_line) = counting(&here, careful, counters, &mut labels).map_err(e)?;
        list.extend(inline);
        slow.extend(out_of_line);
        list.push((*moved, Origin::Module));
    }
    let call = match list.last() {
        Some((last, _)) if is_call(last) => list.pop(),
        _ => None,
    };
    if let Some((call, _)) = call {
        list.extend(
            emulated_call(&call, d.end())
                .map_err(e)?
                .into_iter()
                .map(|i| (i, Origin::Module)),
        );
    }
    let jumps_away = d
        .instructions
        .last()
        .is_some_and(|i| i.flow_control() == FlowControl::UnconditionalBranch);
    if call.is_none() && !jumps_away {
        // The jump back to the instruction after the displaced ones (otherwise the callee
        // returns there, or the moved jump leaves).
        let back = Instruction::with_branch(Code::Jmp_rel32_64, d.end()).map_err(e)?;
        list.push((back, Origin::Module));
    }
    list.extend(slow);
    let (list, origins): (Vec<Instruction>, Vec<Origin>) = list.into_iter().unzip();
    encode_placed(&list, &origins, rip)
}

/// Encode a stub's instructions at `rip`, with their fixups.
fn encode_placed(
    list: &[Instruction],
    origins: &[Origin],
    rip: u64,
) -> Result<(Vec<u8>, Vec<Fixup>), PatchRefusal> {
    let block = InstructionBlock::new(list, rip);
    let result = BlockEncoder::encode(
        64,
        block,
        BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS
            | BlockEncoderOptions::RETURN_CONSTANT_OFFSETS,
    )
    .map_err(|err| PatchRefusal::Relocation {
        why: err.to_string(),
    })?;
    let fixups = moved_fixups(list, origins, &result)?;
    Ok((result.code_buffer, fixups))
}

/// Instruction addresses for the branches between a stub's own instructions: far above
/// user space, so that none is a module address a moved jump could mean.
#[derive(Debug)]
struct Labels(u64);

impl Default for Labels {
    fn default() -> Labels {
        Labels(0xffff_ff00_0000_0000)
    }
}

impl Labels {
    /// A fresh label.
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// An instruction placed at label `ip`.
fn at_label(mut i: Instruction, ip: u64) -> Instruction {
    i.set_ip(ip);
    i
}

/// `[reg + displ]`, `[rip + address]` with `Register::RIP`.
fn mem(base: Register, displ: i64) -> MemoryOperand {
    MemoryOperand::with_base_displ(base, displ)
}

/// `fs:[disp32]`, the counting library's TLS word once fixed up: 64-bit addressing (a
/// displacement size of 8 to iced, encoded as a sign-extended 32-bit field; 4 would be
/// 32-bit addressing, an address-size prefix and a zero-extended offset).
fn tls_word() -> MemoryOperand {
    MemoryOperand::new(Register::None, Register::None, 1, 0, 8, false, Register::FS)
}

/// The instructions that count `ks` (counter indices) before a displaced instruction:
/// inline and out of line (after the stub's end). Nothing when there is no counter.
///
/// With per-thread blocks (`counters.claim`), inline: load this thread's slot address
/// from the TLS word, the block address from the slot, and a plain `inc` of the block's
/// counters; the out-of-line path, taken when the thread has no block yet (or a forked
/// child's slot was wiped), calls the claim routine and counts in the new block, or with
/// `lock inc` in the shared counters when there are no blocks left. Without blocks,
/// `lock inc` of the shared counters inline. With `careful` the 128-byte red zone is
/// stepped over and the flags are saved around all of it.
fn counting(
    ks: &[u64],
    careful: bool,
    counters: &Counters,
    labels: &mut Labels,
) -> Result<(Vec<Placed>, Vec<Placed>), iced_x86::IcedError> {
    let own = |i: Instruction| (i, Origin::Own);
    let lock_inc = |k: u64| -> Result<Instruction, iced_x86::IcedError> {
        let mut inc = Instruction::with1(
            Code::Inc_rm64,
            mem(Register::RIP, counters.shared(k) as i64),
        )?;
        inc.set_has_lock_prefix(true);
        Ok(inc)
    };
    if ks.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut inline = Vec::new();
    let mut slow = Vec::new();
    match counters.claim {
        None => {
            for &k in ks {
                inline.push(own(lock_inc(k)?));
            }
        }
        Some(claim) => {
            let (to_slow, to_count, to_done) = (labels.next(), labels.next(), labels.next());
            inline.extend([
                own(Instruction::with1(Code::Push_r64, Register::RAX)?),
                (
                    Instruction::with2(Code::Mov_r64_rm64, Register::RAX, tls_word())?,
                    Origin::ThreadPointer,
                ),
                own(Instruction::with2(
                    Code::Test_rm64_r64,
                    Register::RAX,
                    Register::RAX,
                )?),
                own(Instruction::with_branch(Code::Je_rel32_64, to_slow)?),
                own(Instruction::with2(
                    Code::Mov_r64_rm64,
                    Register::RAX,
                    mem(Register::RAX, 0),
                )?),
                own(Instruction::with2(
                    Code::Test_rm64_r64,
                    Register::RAX,
                    Register::RAX,
                )?),
                own(Instruction::with_branch(Code::Je_rel32_64, to_slow)?),
            ]);
            for (n, &k) in ks.iter().enumerate() {
                let inc = Instruction::with1(Code::Inc_rm64, mem(Register::RAX, 8 * k as i64))?;
                inline.push(own(if n == 0 { at_label(inc, to_count) } else { inc }));
            }
            let pop = Instruction::with1(Code::Pop_r64, Register::RAX)?;
            inline.push(own(at_label(pop, to_done)));
            let call = Instruction::with_branch(Code::Call_rel32_64, claim)?;
            slow.extend([
                own(at_label(call, to_slow)),
                own(Instruction::with2(
                    Code::Test_rm64_r64,
                    Register::RAX,
                    Register::RAX,
                )?),
                own(Instruction::with_branch(Code::Jne_rel32_64, to_count)?),
            ]);
            for &k in ks {
                slow.push(own(lock_inc(k)?));
            }
            slow.push(own(Instruction::with_branch(Code::Jmp_rel32_64, to_done)?));
        }
    }
    if !careful {
        return Ok((inline, slow));
    }
    let red_zone =
        |delta: i64| Instruction::with2(Code::Lea_r64_m, Register::RSP, mem(Register::RSP, delta));
    let mut out = vec![own(red_zone(-128)?), own(Instruction::with(Code::Pushfq))];
    out.extend(inline);
    out.extend([own(Instruction::with(Code::Popfq)), own(red_zone(128)?)]);
    Ok((out, slow))
}

/// The claim routine at the start of a module's trampoline code (at `rip`), called from a
/// stub's slow path with the stub's `rax` saved and the flags free: claims the next
/// per-thread block (`lock xadd` on the next-block word), stores its address in the slot
/// of the same index and the slot's address in the thread's TLS word, and returns the
/// block's address in `rax`; 0 when no block is left (then no atomic operation is made).
/// Keeps every other register. `live` is the address of the live region as encoded; the
/// slots follow it.
fn claim_code(
    rip: u64,
    live: u64,
    layout: &LiveLayout,
) -> Result<(Vec<u8>, Vec<Fixup>), PatchRefusal> {
    let e = |e: iced_x86::IcedError| PatchRefusal::Encoding { why: e.to_string() };
    let imm = |v: u64| {
        i32::try_from(v).map_err(|_| encoding(&format!("{v} does not fit the claim routine")))
    };
    let (blocks, block_bytes) = (imm(layout.blocks)?, imm(layout.block_bytes)?);
    let next = mem(Register::RIP, (live + layout.next_block_at) as i64);
    let mut labels = Labels::default();
    let (to_none, to_done) = (labels.next(), labels.next());
    let build = || -> Result<Vec<Placed>, iced_x86::IcedError> {
        let own = |i: Instruction| (i, Origin::Own);
        let mut xadd = Instruction::with2(Code::Xadd_rm64_r64, next, Register::RAX)?;
        xadd.set_has_lock_prefix(true);
        let slot_at =
            MemoryOperand::new(Register::RCX, Register::RAX, 8, 0, 0, false, Register::None);
        let xor = Instruction::with2(Code::Xor_r32_rm32, Register::EAX, Register::EAX)?;
        Ok(vec![
            own(Instruction::with1(Code::Push_r64, Register::RCX)?),
            own(Instruction::with1(Code::Push_r64, Register::RDX)?),
            own(xor),
            own(Instruction::with2(Code::Cmp_rm64_imm32, next, blocks)?),
            own(Instruction::with_branch(Code::Jae_rel32_64, to_done)?),
            own(Instruction::with2(
                Code::Mov_r32_imm32,
                Register::EAX,
                1u32,
            )?),
            own(xadd),
            own(Instruction::with2(
                Code::Cmp_rm64_imm32,
                Register::RAX,
                blocks,
            )?),
            own(Instruction::with_branch(Code::Jae_rel32_64, to_none)?),
            own(Instruction::with2(
                Code::Lea_r64_m,
                Register::RCX,
                mem(Register::RIP, (live + layout.len) as i64),
            )?),
            own(Instruction::with2(Code::Lea_r64_m, Register::RCX, slot_at)?),
            own(Instruction::with3(
                Code::Imul_r64_rm64_imm32,
                Register::RAX,
                Register::RAX,
                block_bytes,
            )?),
            own(Instruction::with2(
                Code::Lea_r64_m,
                Register::RDX,
                mem(Register::RIP, (live + layout.blocks_at) as i64),
            )?),
            own(Instruction::with2(
                Code::Add_r64_rm64,
                Register::RAX,
                Register::RDX,
            )?),
            own(Instruction::with2(
                Code::Mov_rm64_r64,
                mem(Register::RCX, 0),
                Register::RAX,
            )?),
            (
                Instruction::with2(Code::Mov_rm64_r64, tls_word(), Register::RCX)?,
                Origin::ThreadPointer,
            ),
            own(Instruction::with_branch(Code::Jmp_rel32_64, to_done)?),
            own(at_label(xor, to_none)),
            own(at_label(
                Instruction::with1(Code::Pop_r64, Register::RDX)?,
                to_done,
            )),
            own(Instruction::with1(Code::Pop_r64, Register::RCX)?),
            own(Instruction::with(Code::Retnq)),
        ])
    };
    let (list, origins): (Vec<Instruction>, Vec<Origin>) = build().map_err(e)?.into_iter().unzip();
    encode_placed(&list, &origins, rip)
}

/// The fixups of the instructions of `list` as `result` encoded them: each jump target
/// and RIP-relative operand of an instruction from the module ([`Origin::Module`]: the
/// displaced ones, the emulated call, the jump back) refers to the module; each access
/// to the TLS word ([`Origin::ThreadPointer`]) gets the library's offset from `%fs`.
fn moved_fixups(
    list: &[Instruction],
    origins: &[Origin],
    result: &iced_x86::BlockEncoderResult,
) -> Result<Vec<Fixup>, PatchRefusal> {
    let bytes = &result.code_buffer;
    let mut fixups = Vec::new();
    for (n, i) in list.iter().enumerate() {
        if origins[n] == Origin::Own {
            continue;
        }
        let at = result.new_instruction_offsets[n];
        if at == u32::MAX {
            return Err(encoding("an instruction had to be rewritten to be moved"));
        }
        let end = result
            .new_instruction_offsets
            .get(n + 1)
            .copied()
            .filter(|&e| e != u32::MAX && e > at)
            .unwrap_or(bytes.len() as u32);
        let end = next_boundary(bytes, at, end);
        if origins[n] == Origin::ThreadPointer {
            let offsets = result.constant_offsets[n];
            if !offsets.has_displacement() || offsets.displacement_size() != 4 {
                return Err(encoding("a TLS access without a 32-bit displacement"));
            }
            fixups.push(Fixup {
                field: at + offsets.displacement_offset() as u32,
                end,
                target: 0,
                kind: FixupKind::ThreadPointer,
            });
            continue;
        }
        if i.is_jcc_short_or_near() || i.is_jmp_short_or_near() {
            // Re-encoded near (the encoding address lies far from the target): the
            // displacement is the instruction's last 4 bytes.
            let moved = Decoder::with_ip(
                64,
                &bytes[at as usize..end as usize],
                0,
                DecoderOptions::NONE,
            )
            .decode();
            if !(moved.is_jcc_near() || moved.is_jmp_near()) || moved.len() != (end - at) as usize {
                return Err(encoding("a moved jump was not re-encoded as a near jump"));
            }
            fixups.push(Fixup::module(end - 4, end, i.near_branch_target()));
            continue;
        }
        if !i.is_ip_rel_memory_operand() {
            continue;
        }
        let offsets = result.constant_offsets[n];
        if !offsets.has_displacement() || offsets.displacement_size() != 4 {
            return Err(encoding(
                "a RIP-relative operand without a 32-bit displacement",
            ));
        }
        fixups.push(Fixup::module(
            at + offsets.displacement_offset() as u32,
            end,
            i.ip_rel_memory_address(),
        ));
    }
    Ok(fixups)
}

/// The end of the instruction at `at` of `bytes`: `end`, the next instruction's start,
/// unless that lies past the instruction (then the decoded length).
fn next_boundary(bytes: &[u8], at: u32, end: u32) -> u32 {
    let len = Decoder::with_ip(64, &bytes[at as usize..], 0, DecoderOptions::NONE)
        .decode()
        .len() as u32;
    end.min(at + len)
}

/// An internal failure to encode a trampoline.
fn encoding(why: &str) -> PatchRefusal {
    PatchRefusal::Encoding { why: why.into() }
}

fn is_call(i: &Instruction) -> bool {
    matches!(
        i.flow_control(),
        FlowControl::Call | FlowControl::IndirectCall
    )
}

/// Whether `i` must be the last displaced instruction: an unconditional jump or a call.
fn ends_block(i: &Instruction) -> bool {
    i.flow_control() == FlowControl::UnconditionalBranch || is_call(i)
}

/// A near call, direct or through a register or memory operand that does not involve
/// `rsp` (the emulation pushes before it jumps).
fn is_movable_call(i: &Instruction) -> bool {
    if i.is_call_near() {
        return true;
    }
    if !i.is_call_near_indirect() {
        return false;
    }
    match i.op0_kind() {
        OpKind::Register => i.op0_register() != Register::RSP,
        OpKind::Memory => {
            i.memory_base() != Register::RSP
                && i.memory_index() != Register::RSP
                && i.segment_prefix() == Register::None
        }
        _ => false,
    }
}

/// The call `call` made from a trampoline: push `ret` (the address after the original
/// call, in the module) the way the call would have, then jump where it would have gone.
/// Leaves every register and the flags as the call would.
fn emulated_call(call: &Instruction, ret: u64) -> Result<Vec<Instruction>, iced_x86::IcedError> {
    let jump = if call.is_call_near() {
        Instruction::with_branch(Code::Jmp_rel32_64, call.near_branch_target())?
    } else {
        let mut jump = *call;
        jump.set_code(Code::Jmp_rm64);
        jump
    };
    Ok(vec![
        // The return address's slot, then rax saved above it.
        Instruction::with1(Code::Push_r64, Register::RAX)?,
        Instruction::with1(Code::Push_r64, Register::RAX)?,
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RAX,
            MemoryOperand::with_base_displ(Register::RIP, ret as i64),
        )?,
        Instruction::with2(
            Code::Mov_rm64_r64,
            MemoryOperand::with_base_displ(Register::RSP, 8),
            Register::RAX,
        )?,
        Instruction::with1(Code::Pop_r64, Register::RAX)?,
        jump,
    ])
}

/// What an instruction that cannot be moved is, in words for the note ("an indirect
/// call").
fn unmovable_words(i: &Instruction) -> &'static str {
    if i.mnemonic() == Mnemonic::Syscall {
        return "a system call";
    }
    match i.flow_control() {
        FlowControl::Next => "an instruction that cannot be re-encoded",
        FlowControl::UnconditionalBranch => "a far jump",
        FlowControl::IndirectBranch => "an indirect jump",
        FlowControl::ConditionalBranch => "a short-only jump (`loop`, `jrcxz`)",
        FlowControl::Return => "a return",
        FlowControl::Call => "a call",
        FlowControl::IndirectCall => "an indirect call",
        FlowControl::Interrupt => "an interrupt",
        FlowControl::XbeginXabortXend => "a transaction boundary",
        FlowControl::Exception => "an invalid instruction",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(code: &[u8], address: u64, kind: SiteKind) -> Result<Displaced, PatchRefusal> {
        displace_in(
            code,
            0x1000,
            &[],
            &|_, _| None,
            &|| Ok(Vec::new()),
            address,
            kind,
        )
    }

    fn mnemonics(code: &[u8]) -> Vec<Mnemonic> {
        decode(code, 0)
            .unwrap()
            .iter()
            .map(|i| i.mnemonic())
            .collect()
    }

    #[test]
    fn a_plain_prologue_is_displaced_and_relocated() {
        // push rbp; mov rbp,rsp; lea rax,[rip+0x100]; ret
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x8d, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3,
        ];
        let d = site(&code, 0x1000, SiteKind::Entry).unwrap();
        // push rbp (1) + mov (3) + lea (7): 11 bytes, the first run of >= 5.
        assert_eq!(d.original, &code[..11]);
        let m =
            module_code_at(0x2000, &[(Patch::single(d), 3)], &LiveLayout::new(1, 8, 0)).unwrap();
        let first = decode(&m.code, 0).unwrap();
        assert_eq!(first[0].mnemonic(), Mnemonic::Inc);
        assert!(first[0].has_lock_prefix());
        assert_eq!(
            &mnemonics(&m.code)[1..5],
            [Mnemonic::Push, Mnemonic::Mov, Mnemonic::Lea, Mnemonic::Jmp]
        );
        // The lea's displacement and the jump back are fixed up for the module.
        assert_eq!(m.fixups.len(), 2);
        assert_eq!(m.fixups[0].target, 0x1000 + 11 + 0x100);
        assert_eq!(m.fixups[1].target, 0x1000 + 11);
        assert_eq!(m.code[m.fixups[1].field as usize - 1], 0xe9);
        assert_eq!(m.fixups[1].end, m.fixups[1].field + 4);
        assert_eq!(m.sites[0].address, 0x1000);
        assert_eq!(m.sites[0].len, 11);
        // Applying the fixups for a trampoline at T and a module at bias B gives a lea
        // that reaches the same data and a jump back after the displaced bytes.
        let (t, bias) = (0x7000_0000u64, 0x6000_0000u64);
        let mut placed = m.code.clone();
        for f in &m.fixups {
            let v = sbs_agent_abi::inproc::rel32(t + f.end as u64, bias + f.target).unwrap();
            placed[f.field as usize..f.field as usize + 4].copy_from_slice(&v.to_le_bytes());
        }
        let moved = decode(&placed, t).unwrap();
        assert_eq!(moved[3].ip_rel_memory_address(), bias + 0x1000 + 11 + 0x100);
        assert_eq!(moved[4].near_branch_target(), bias + 0x1000 + 11);
        // The counter: after the code pages, in the live region's counters.
        assert_eq!(
            moved[0].ip_rel_memory_address(),
            t + m.code_pages + 64 + 8 * 3
        );
    }

    #[test]
    fn unsafe_sites_are_refused() {
        // A loop back into the first bytes:
        // xor eax,eax; inc eax; cmp eax,10; jne 0x1002; ret
        let back_into = [0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x0a, 0x75, 0xf9, 0xc3];
        let err = site(&back_into, 0x1000, SiteKind::Entry)
            .unwrap_err()
            .to_string();
        assert!(err.contains("lands at 0x1002"), "{err}");
        // A loop back to the site itself is fine: each pass counts, as a uprobe would.
        let to_site = [0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x0a, 0x75, 0xf7, 0xc3];
        assert!(site(&to_site, 0x1000, SiteKind::Entry).is_ok());

        // Shorter than the jump: xor eax,eax; ret.
        let err = site(&[0x31, 0xc0, 0xc3], 0x1000, SiteKind::Entry)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a return (`ret`)"), "{err}");
        // Function ends before 5 bytes.
        let err = site(&[0x31, 0xc0, 0x31, 0xc9], 0x1000, SiteKind::Entry)
            .unwrap_err()
            .to_string();
        assert!(err.contains("shorter"), "{err}");

        // An absolute jump table: mov rax,rdi; mov rcx,rax; jmp [rax*8+0x2000].
        let table = [
            0x48, 0x89, 0xf8, 0x48, 0x89, 0xc1, 0xff, 0x24, 0xc5, 0, 0x20, 0, 0,
        ];
        let err = site(&table, 0x1000, SiteKind::Entry)
            .unwrap_err()
            .to_string();
        assert!(err.contains("indirect jump"), "{err}");

        // A tail call through a GOT slot is not a jump table.
        let tail = [0x48, 0x89, 0xf8, 0x48, 0x89, 0xc1, 0xff, 0x25, 0, 0, 0, 0];
        assert!(site(&tail, 0x1000, SiteKind::Entry).is_ok());

        // A call that does not end the block cannot move (the callee would return into
        // the patch): call rax; nop; nop; nop.
        let call = [0xff, 0xd0, 0x90, 0x90, 0x90, 0xc3];
        let err = site(&call, 0x1000, SiteKind::Entry)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the call at 0x1000 ends the block 2 bytes"),
            "{err}"
        );
        // Nor one whose operand is relative to rsp: call [rsp+8]; nop.
        let call = [0xff, 0x54, 0x24, 0x08, 0x90, 0xc3];
        let err = site(&call, 0x1000, SiteKind::Entry)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is an indirect call (`call`)"), "{err}");

        // A return address inside the patch of an inside site: call; mov; mov; ret,
        // patching 2 bytes before the call's end is impossible, at its end fine.
        let after_call = [0x31, 0xc0, 0xe8, 0, 0, 0, 0, 0xb8, 2, 0, 0, 0, 0xc3];
        assert!(site(&after_call, 0x1007, SiteKind::Inside).is_ok());

        // A jump from a cold part into the first bytes.
        let body = [0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x0a, 0xc3];
        let cold = [0xe9, 0xfd, 0xef, 0xff, 0xff]; // at 0x2000: jmp 0x1002
        let err = displace_in(
            &body,
            0x1000,
            &[(0x2000, &cold)],
            &|_, _| None,
            &|| Ok(Vec::new()),
            0x1000,
            SiteKind::Entry,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("0x1002"), "{err}");
    }

    /// The offset of the library's TLS word from `%fs` that [`placed`] applies.
    const TP: i32 = -0x48;

    /// `code` at 0x1000 with `m`'s fixups applied for a trampoline at T and the module at
    /// bias B (and [`TP`] for the TLS word), decoded at T.
    fn placed(m: &ModuleCode, t: u64, bias: u64) -> Vec<Instruction> {
        let mut placed = m.code.clone();
        for f in &m.fixups {
            let v = match f.kind {
                FixupKind::Module => {
                    sbs_agent_abi::inproc::rel32(t + f.end as u64, bias + f.target).unwrap()
                }
                FixupKind::ThreadPointer => TP,
            };
            placed[f.field as usize..f.field as usize + 4].copy_from_slice(&v.to_le_bytes());
        }
        decode(&placed, t).unwrap()
    }

    #[test]
    fn a_call_ending_the_displaced_bytes_is_emulated() {
        let (t, bias) = (0x7000_0000u64, 0x6000_0000u64);
        // call 0x1015; nop; ret: the stub pushes 0x1005 and jumps to 0x1015.
        let mut code = vec![0xe8, 0x10, 0, 0, 0, 0x90, 0xc3];
        code.resize(0x20, 0xc3);
        let d = site(&code, 0x1000, SiteKind::Entry).unwrap();
        assert_eq!(d.original, &code[..5]);
        let m =
            module_code_at(0x2000, &[(Patch::single(d), 0)], &LiveLayout::new(1, 8, 0)).unwrap();
        let moved = placed(&m, t, bias);
        let stub: Vec<Mnemonic> = moved.iter().take(7).map(|i| i.mnemonic()).collect();
        assert_eq!(
            stub,
            [
                Mnemonic::Inc,
                Mnemonic::Push,
                Mnemonic::Push,
                Mnemonic::Lea,
                Mnemonic::Mov,
                Mnemonic::Pop,
                Mnemonic::Jmp
            ]
        );
        assert_eq!(moved[3].ip_rel_memory_address(), bias + 0x1005);
        assert_eq!(moved[4].memory_base(), Register::RSP);
        assert_eq!(moved[4].memory_displacement64(), 8);
        assert_eq!(moved[6].near_branch_target(), bias + 0x1015);
        // No jump back: the callee returns into the function.
        assert!(moved[7..].iter().all(|i| i.mnemonic() == Mnemonic::Int3));

        // call [rip+0x100]: jumps through the same slot.
        let mut code = vec![0xff, 0x15, 0, 1, 0, 0, 0xc3];
        code.resize(0x20, 0xc3);
        let d = site(&code, 0x1000, SiteKind::Entry).unwrap();
        let m =
            module_code_at(0x2000, &[(Patch::single(d), 0)], &LiveLayout::new(1, 8, 0)).unwrap();
        let moved = placed(&m, t, bias);
        assert_eq!(moved[3].ip_rel_memory_address(), bias + 0x1006);
        assert_eq!(moved[6].mnemonic(), Mnemonic::Jmp);
        assert_eq!(moved[6].ip_rel_memory_address(), bias + 0x1006 + 0x100);
    }

    #[test]
    fn a_conditional_jump_among_the_displaced_bytes_is_relocated() {
        // Inside: test edi,edi; je +0x20 (short); mov eax,1; ret ... site at the test.
        let mut code = vec![0x85, 0xff, 0x74, 0x20, 0xb8, 1, 0, 0, 0, 0xc3];
        code.resize(0x40, 0xcc);
        let d = site(&code, 0x1000, SiteKind::Inside).unwrap();
        assert_eq!(d.original.len(), 9);
        let m =
            module_code_at(0x2000, &[(Patch::single(d), 0)], &LiveLayout::new(1, 8, 0)).unwrap();
        let moved = decode(&m.code, 0).unwrap();
        assert_eq!(moved[6].mnemonic(), Mnemonic::Je);
        assert!(moved[6].is_jcc_near());
        // Fixed up for a trampoline at T and the module at bias B, the je reaches the
        // same target.
        let (t, bias) = (0x7000_0000u64, 0x6000_0000u64);
        let mut placed = m.code.clone();
        for f in &m.fixups {
            let v = sbs_agent_abi::inproc::rel32(t + f.end as u64, bias + f.target).unwrap();
            placed[f.field as usize..f.field as usize + 4].copy_from_slice(&v.to_le_bytes());
        }
        let placed = decode(&placed, t).unwrap();
        assert_eq!(placed[6].near_branch_target(), bias + 0x1004 + 0x20);
        assert_eq!(placed[8].near_branch_target(), bias + 0x1009);
        // A jump into the displaced bytes is still refused.
        let into = [0x85, 0xff, 0x74, 0xfe, 0xb8, 1, 0, 0, 0, 0xc3];
        assert!(site(&into, 0x1000, SiteKind::Inside).is_err());
    }

    #[test]
    fn the_patch_covers_bytes_after_a_short_jump_only_where_nothing_leads() {
        // xor eax,eax; jmp +0x10 (short); nop; nop; nop; ...: the patch takes the xor and
        // the jmp (4 bytes) and covers the first nop, which nothing reaches.
        let mut code = vec![0x31, 0xc0, 0xeb, 0x10, 0x90, 0x90, 0x90];
        code.resize(0x20, 0xc3);
        let d = site(&code, 0x1000, SiteKind::Inside).unwrap();
        assert_eq!(d.original, &code[..5]);
        assert_eq!(d.instructions.len(), 2, "the covered nop is not moved");
        let m =
            module_code_at(0x2000, &[(Patch::single(d), 0)], &LiveLayout::new(1, 8, 0)).unwrap();
        let (t, bias) = (0x7000_0000u64, 0x6000_0000u64);
        let moved = placed(&m, t, bias);
        assert_eq!(moved[6].mnemonic(), Mnemonic::Jmp);
        assert_eq!(moved[6].near_branch_target(), bias + 0x1014);
        // No jump back after a jump.
        assert!(moved[7..].iter().all(|i| i.mnemonic() == Mnemonic::Int3));

        let with_pads = |pads: Vec<u64>| {
            let pads = move || Ok(pads.clone());
            displace_in(
                &code,
                0x1000,
                &[],
                &|_, _| None,
                &pads,
                0x1000,
                SiteKind::Inside,
            )
        };
        // A landing pad on the covered byte: refused.
        let err = with_pads(vec![0x1004]).unwrap_err().to_string();
        assert!(err.contains("landing pad is at 0x1004"), "{err}");
        // Elsewhere: fine.
        assert!(with_pads(vec![0x1005, 0x1000]).is_ok());
        // Unknown landing pads: refused.
        let unknown = || Err(LsdaError::Read("no table".into()));
        let err = displace_in(
            &code,
            0x1000,
            &[],
            &|_, _| None,
            &unknown,
            0x1000,
            SiteKind::Inside,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("landing pads are unknown: no table"), "{err}");
        // A branch to the covered byte: refused.
        let mut to_it = code.clone();
        to_it[0x10..0x12].copy_from_slice(&[0xeb, 0xf2]); // at 0x1010: jmp 0x1004
        let err = site(&to_it, 0x1000, SiteKind::Inside)
            .unwrap_err()
            .to_string();
        assert!(err.contains("lands at 0x1004"), "{err}");
        // The function ends before 5 bytes: refused.
        let err = site(&code[..4], 0x1000, SiteKind::Inside)
            .unwrap_err()
            .to_string();
        assert!(err.contains("the function ends before"), "{err}");
    }

    #[test]
    fn jump_table_entries_count_as_branch_targets() {
        // 0x1000: mov eax,edi (2); lea rcx,[rip+0xf7] (7, -> 0x1100); movsxd rax,[rcx+rax*4]
        // (4); add rax,rcx (3); jmp rax (2); then nops up to 0x1020 and ret.
        let mut code = vec![
            0x89, 0xf8, 0x48, 0x8d, 0x0d, 0xf7, 0x00, 0x00, 0x00, 0x48, 0x63, 0x04, 0x81, 0x48,
            0x01, 0xc8, 0xff, 0xe0,
        ];
        code.resize(0x20, 0x90);
        code.push(0xc3);
        // The table at 0x1100: entries relative to it.
        let entries = |targets: &[u64]| -> Vec<u8> {
            targets
                .iter()
                .flat_map(|&t| ((t as i64 - 0x1100) as i32).to_le_bytes())
                .chain([0xff; 4])
                .collect()
        };
        // A table entry lands at 0x1001 (inside the patch at 0x1000): refused.
        let table = entries(&[0x1020, 0x1002]);
        let read = |vaddr: u64, len: usize| -> Option<&[u8]> {
            let from = usize::try_from(vaddr.checked_sub(0x1100)?).ok()?;
            table.get(from..from + len)
        };
        let none = || Ok(Vec::new());
        let err = displace_in(&code, 0x1000, &[], &read, &none, 0x1000, SiteKind::Entry)
            .unwrap_err()
            .to_string();
        assert!(err.contains("lands at 0x1002"), "{err}");
        // Entries elsewhere: patchable.
        let table2 = entries(&[0x1020, 0x1010]);
        let read2 = |vaddr: u64, len: usize| -> Option<&[u8]> {
            let from = usize::try_from(vaddr.checked_sub(0x1100)?).ok()?;
            table2.get(from..from + len)
        };
        assert!(displace_in(&code, 0x1000, &[], &read2, &none, 0x1000, SiteKind::Entry).is_ok());
    }

    #[test]
    fn endbr64_stays_and_a_lock_prefixed_start_is_moved() {
        // endbr64; lock add qword [rdi],1; ret
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0xf0, 0x48, 0x83, 0x07, 0x01, 0xc3];
        let d = site(&code, 0x1000, SiteKind::Entry).unwrap();
        assert_eq!(d.address, 0x1004);
        assert_eq!(d.original, &code[4..9]);
        // lock add; ret: the lock add alone is 5 bytes, moved as it is.
        let code = [0xf0, 0x48, 0x83, 0x07, 0x01, 0xc3];
        let d = site(&code, 0x1000, SiteKind::Entry).unwrap();
        let m =
            module_code_at(0x2000, &[(Patch::single(d), 0)], &LiveLayout::new(1, 8, 0)).unwrap();
        let moved = decode(&m.code, 0).unwrap();
        assert_eq!(moved[1].mnemonic(), Mnemonic::Add);
        assert!(moved[1].has_lock_prefix());
    }

    #[test]
    fn with_blocks_a_thread_counts_in_its_own_block_and_claims_one_out_of_line() {
        // push rbp; mov rbp,rsp; lea rax,[rip+0x100]; ret
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x8d, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3,
        ];
        let d = site(&code, 0x1000, SiteKind::Entry).unwrap();
        let layout = LiveLayout::new(1, 8, 4);
        let m = module_code_at(0x2000, &[(Patch::single(d), 3)], &layout).unwrap();
        let (t, bias, tp) = (0x7000_0000u64, 0x6000_0000u64, TP);
        let all = placed(&m, t, bias);
        let live = t + m.code_pages;
        // The claim routine first: a lock xadd on the next-block word, the slot after
        // the live region, the block, and the TLS word written.
        let claim: Vec<Mnemonic> = all.iter().take(21).map(|i| i.mnemonic()).collect();
        use Mnemonic::*;
        assert_eq!(
            claim,
            [
                Push, Push, Xor, Cmp, Jae, Mov, Xadd, Cmp, Jae, Lea, Lea, Imul, Lea, Add, Mov, Mov,
                Jmp, Xor, Pop, Pop, Ret
            ]
        );
        assert!(all[6].has_lock_prefix());
        assert_eq!(all[6].ip_rel_memory_address(), live + layout.next_block_at);
        assert_eq!(all[9].ip_rel_memory_address(), live + layout.len);
        assert_eq!(all[12].ip_rel_memory_address(), live + layout.blocks_at);
        assert_eq!(all[11].immediate32() as u64, layout.block_bytes);
        assert_eq!(all[15].segment_prefix(), Register::FS);
        assert_eq!(all[15].memory_displacement64() as i64, tp as i64);
        assert_eq!(all[15].memory_displ_size(), 8, "64-bit addressing");
        // The stub, on 16 bytes: TLS word, slot, plain inc of the block's counter 3.
        let ret = all.iter().position(|i| i.mnemonic() == Ret).unwrap();
        let stub_at = ret
            + 1
            + all[ret + 1..]
                .iter()
                .take_while(|i| i.mnemonic() == Int3)
                .count();
        let stub = &all[stub_at..];
        assert_eq!(stub[0].ip() % 16, 0);
        let names: Vec<Mnemonic> = stub.iter().take(18).map(|i| i.mnemonic()).collect();
        assert_eq!(
            names,
            [
                Push, Mov, Test, Je, Mov, Test, Je, Inc, Pop, Push, Mov, Lea, Jmp, Call, Test, Jne,
                Inc, Jmp
            ]
        );
        assert_eq!(stub[1].segment_prefix(), Register::FS);
        assert_eq!(stub[1].memory_displacement64() as i64, tp as i64);
        assert_eq!(stub[1].memory_displ_size(), 8, "64-bit addressing");
        assert!(!stub[7].has_lock_prefix());
        assert_eq!(
            (stub[7].memory_base(), stub[7].memory_displacement64()),
            (Register::RAX, 24)
        );
        // Out of line: the claim, then back to the inc, or a lock inc of the shared
        // counter and back to the pop.
        assert_eq!(stub[3].near_branch_target(), stub[13].ip());
        assert_eq!(stub[13].near_branch_target(), t);
        assert_eq!(stub[15].near_branch_target(), stub[7].ip());
        assert!(stub[16].has_lock_prefix());
        assert_eq!(
            stub[16].ip_rel_memory_address(),
            live + layout.counters_at + 24
        );
        assert_eq!(stub[17].near_branch_target(), stub[8].ip());
        // The displaced instructions and the jump back, fixed up for the module.
        assert_eq!(stub[11].ip_rel_memory_address(), bias + 0x1000 + 11 + 0x100);
        assert_eq!(stub[12].near_branch_target(), bias + 0x1000 + 11);
        let tls = m
            .fixups
            .iter()
            .filter(|f| f.kind == FixupKind::ThreadPointer);
        assert_eq!(tls.count(), 2);
    }

    #[test]
    fn inside_a_function_the_per_thread_count_keeps_flags_and_red_zone_too() {
        // cmp edi,1; mov eax,2; mov ecx,3; ret  (site at the mov eax: flags live)
        let code = [0x83, 0xff, 0x01, 0xb8, 2, 0, 0, 0, 0xb9, 3, 0, 0, 0, 0xc3];
        let d = site(&code, 0x1003, SiteKind::Inside).unwrap();
        let m = module_code_at(0x2000, &[(Patch::single(d), 0)], &LiveLayout::new(1, 8, 4));
        let all = placed(&m.unwrap(), 0x7000_0000, 0x6000_0000);
        let ret = all
            .iter()
            .position(|i| i.mnemonic() == Mnemonic::Ret)
            .unwrap();
        let stub: Vec<Mnemonic> = all[ret + 1..]
            .iter()
            .map(|i| i.mnemonic())
            .filter(|&m| m != Mnemonic::Int3)
            .take(15)
            .collect();
        use Mnemonic::*;
        assert_eq!(
            stub,
            [Lea, Pushfq, Push, Mov, Test, Je, Mov, Test, Je, Inc, Pop, Popfq, Lea, Mov, Jmp]
        );
    }

    #[test]
    fn inside_a_function_the_stub_keeps_flags_and_red_zone() {
        // cmp edi,1; mov eax,2; mov ecx,3; ret  (site at the mov eax: flags live)
        let code = [0x83, 0xff, 0x01, 0xb8, 2, 0, 0, 0, 0xb9, 3, 0, 0, 0, 0xc3];
        let d = site(&code, 0x1003, SiteKind::Inside).unwrap();
        let m =
            module_code_at(0x2000, &[(Patch::single(d), 0)], &LiveLayout::new(1, 8, 0)).unwrap();
        let moved = decode(&m.code, 0).unwrap();
        assert_eq!(moved[0].mnemonic(), Mnemonic::Lea);
        assert_eq!(moved[0].memory_displacement64() as i64, -128);
        assert_eq!(
            mnemonics(&m.code)[1..7],
            [
                Mnemonic::Pushfq,
                Mnemonic::Inc,
                Mnemonic::Popfq,
                Mnemonic::Lea,
                Mnemonic::Mov,
                Mnemonic::Jmp
            ]
        );
    }
}
