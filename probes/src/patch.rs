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
//! Stubs: at a function entry the flags are dead and nothing lives below the stack
//! pointer, so the stub is `lock inc qword [rip+counter]`, the displaced instructions and
//! `jmp` back. Inside a function (the entry of an inlined copy) the flags may be live and
//! the 128-byte red zone below `rsp` may hold data, so the stub steps over the red zone
//! and saves the flags around the increment.
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
use sbs_agent_abi::inproc::{pages, Fixup, SiteRecord, MAX_PATCH};

use crate::elf::{Function, Image};
use crate::lsda::LsdaError;
pub use crate::refusal::PatchRefusal;

/// Bytes of the `jmp rel32` written at a site.
pub(crate) const JMP_LEN: usize = 5;

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
    let segments = load_segments(image);
    let read = |vaddr: u64, len: usize| -> Option<&[u8]> {
        let &(at, size, offset) = segments
            .iter()
            .find(|&&(at, size, _)| vaddr >= at && vaddr + len as u64 <= at + size)?;
        let from = usize::try_from(offset + (vaddr - at)).ok()?;
        let _ = size;
        image.data().get(from..from.checked_add(len)?)
    };
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

/// The file-backed parts of the `PT_LOAD` segments: (vaddr, file size, file offset).
fn load_segments(image: &Image) -> Vec<(u64, u64, u64)> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let data = image.data();
    let Ok(header) = object::elf::FileHeader64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let Ok(endian) = header.endian() else {
        return Vec::new();
    };
    let Ok(phdrs) = header.program_headers(endian, data) else {
        return Vec::new();
    };
    phdrs
        .iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .map(|p| (p.p_vaddr(endian), p.p_filesz(endian), p.p_offset(endian)))
        .collect()
}

/// Longest jump table read.
const MAX_TABLE: usize = 4096;

/// The possible targets of the function's indirect jumps, if they can be bounded: every
/// address a RIP-relative `lea` of the function loads that lies inside it (a label taken
/// for a computed goto), and every entry of each table of 32-bit offsets relative to an
/// address such a `lea` loads (how compilers lay out jump tables in position-independent
/// code), read while the entries land on instructions of the function (a superset of the
/// table's real entries). `None` when the function's indirect jumps cannot be bounded
/// this way (an indirect jump through memory other than a RIP-relative slot, which is a
/// tail call through the GOT).
fn indirect_targets<'d>(
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
        for n in 0..MAX_TABLE {
            let Some(entry) = read(base + 4 * n as u64, 4) else {
                break;
            };
            let offset = i32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]);
            let target = base.wrapping_add(offset as i64 as u64);
            if !boundaries.contains(&target) {
                break;
            }
            out.push(target);
        }
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
/// `counters_at + 8 (first + n)` of the live region.
pub fn module_code(
    image: &Image,
    sites: &[(Patch, usize)],
    counters_at: u64,
) -> Result<ModuleCode, PatchRefusal> {
    let top = image
        .exec_segments
        .iter()
        .map(|&(vaddr, size, _)| vaddr + size)
        .max()
        .unwrap_or(0);
    module_code_at(top, sites, counters_at)
}

/// [`module_code`] for a module whose code ends at link-time address `top`.
pub fn module_code_at(
    top: u64,
    sites: &[(Patch, usize)],
    counters_at: u64,
) -> Result<ModuleCode, PatchRefusal> {
    // Encoded as if the trampoline lay just past the module's code, so that RIP-relative
    // operands into the module stay in 32-bit reach; the library fixes them up for where
    // it really lies.
    let base = pages(top) + (16 << 20);
    let first = encode_all(sites, base, 0, counters_at)?;
    let code_pages = pages(first.code.len() as u64).max(4096);
    let out = encode_all(sites, base, code_pages, counters_at)?;
    if out.code.len() != first.code.len() {
        return Err(encoding("the trampoline's length changed between passes"));
    }
    Ok(out)
}

fn encode_all(
    sites: &[(Patch, usize)],
    base: u64,
    code_pages: u64,
    counters_at: u64,
) -> Result<ModuleCode, PatchRefusal> {
    let mut code = Vec::new();
    let mut fixups = Vec::new();
    let mut records = Vec::new();
    for (patch, first) in sites {
        let d = &patch.displaced;
        let stub = code.len() as u64;
        let counters: Vec<(usize, u64)> = patch
            .counts
            .iter()
            .enumerate()
            .map(|(n, &at)| {
                (
                    at,
                    base + code_pages + counters_at + 8 * (*first + n) as u64,
                )
            })
            .collect();
        let (bytes, mut fx) = stub_code(d, base + stub, &counters)?;
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
        // Stubs start on 16 bytes (int3 between them: never executed).
        while code.len() % 16 != 0 {
            code.push(0xcc);
        }
    }
    Ok(ModuleCode {
        code,
        code_pages,
        fixups,
        sites: records,
    })
}

/// One patch's stub, encoded at `rip`, and its fixups (offsets relative to the stub).
/// `counters` are (index of the displaced instruction to count before, address of the
/// counter).
fn stub_code(
    d: &Displaced,
    rip: u64,
    counters: &[(usize, u64)],
) -> Result<(Vec<u8>, Vec<Fixup>), PatchRefusal> {
    let e = |e: iced_x86::IcedError| PatchRefusal::Encoding { why: e.to_string() };
    if counters.iter().any(|&(at, _)| at >= d.instructions.len()) {
        return Err(encoding(
            "a site is counted past the displaced instructions",
        ));
    }
    // Each instruction of the stub, and whether it comes from the module (moved or
    // emulated: its fields refer to the module and are fixed up) or is the stub's own.
    let mut list: Vec<(Instruction, bool)> = Vec::new();
    for (n, moved) in d.instructions.iter().enumerate() {
        let here: Vec<u64> = counters
            .iter()
            .filter(|&&(at, _)| at == n)
            .map(|&(_, c)| c)
            .collect();
        // At a function's entry the flags are dead and nothing lives below the stack
        // pointer; past the first instruction, or inside a function, both may be live.
        let careful = n > 0 || d.kind == SiteKind::Inside;
        list.extend(
            counting(&here, careful)
                .map_err(e)?
                .into_iter()
                .map(|i| (i, false)),
        );
        list.push((*moved, true));
    }
    let call = match list.last() {
        Some((last, _)) if is_call(last) => list.pop(),
        _ => None,
    };
    if let Some((call, _)) = call {
        list.extend(
            emulated_call(&call, d.address + d.original.len() as u64)
                .map_err(e)?
                .into_iter()
                .map(|i| (i, true)),
        );
    }
    let (list, from_module): (Vec<Instruction>, Vec<bool>) = list.into_iter().unzip();
    let block = InstructionBlock::new(&list, rip);
    let result = BlockEncoder::encode(
        64,
        block,
        BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS
            | BlockEncoderOptions::RETURN_CONSTANT_OFFSETS,
    )
    .map_err(|err| PatchRefusal::Relocation {
        why: err.to_string(),
    })?;
    let mut fixups = moved_fixups(&list, &from_module, &result)?;
    let mut bytes = result.code_buffer;
    let jumps_away = d
        .instructions
        .last()
        .is_some_and(|i| i.flow_control() == FlowControl::UnconditionalBranch);
    if call.is_some() || jumps_away {
        // The callee returns to the instruction after the displaced ones, or the moved
        // jump leaves: a jump back would never run.
        return Ok((bytes, fixups));
    }
    // The jump back to the instruction after the displaced ones.
    let back = bytes.len() as u32;
    bytes.extend_from_slice(&[0xe9, 0, 0, 0, 0]);
    fixups.push(Fixup {
        field: back + 1,
        end: back + 5,
        target: d.address + d.original.len() as u64,
    });
    Ok((bytes, fixups))
}

/// The instructions that count: `lock inc` of each of `counters`, and with `careful`
/// the 128-byte red zone stepped over and the flags saved around them. Nothing when
/// there is no counter.
fn counting(counters: &[u64], careful: bool) -> Result<Vec<Instruction>, iced_x86::IcedError> {
    let mut incs = Vec::new();
    for &counter in counters {
        let mut inc = Instruction::with1(
            Code::Inc_rm64,
            MemoryOperand::with_base_displ(Register::RIP, counter as i64),
        )?;
        inc.set_has_lock_prefix(true);
        incs.push(inc);
    }
    if incs.is_empty() || !careful {
        return Ok(incs);
    }
    let red_zone = |delta: i64| {
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RSP,
            MemoryOperand::with_base_displ(Register::RSP, delta),
        )
    };
    let mut out = vec![red_zone(-128)?, Instruction::with(Code::Pushfq)];
    out.extend(incs);
    out.extend([Instruction::with(Code::Popfq), red_zone(128)?]);
    Ok(out)
}

/// The fixups of the instructions of `list` that come from the module (`from_module`:
/// the displaced ones and the emulated call), as `result` encoded them: each jump target
/// and RIP-relative operand refers to the module.
fn moved_fixups(
    list: &[Instruction],
    from_module: &[bool],
    result: &iced_x86::BlockEncoderResult,
) -> Result<Vec<Fixup>, PatchRefusal> {
    let bytes = &result.code_buffer;
    let mut fixups = Vec::new();
    for (n, i) in list.iter().enumerate().filter(|&(n, _)| from_module[n]) {
        let at = result.new_instruction_offsets[n];
        if at == u32::MAX {
            return Err(encoding("an instruction had to be rewritten to be moved"));
        }
        let end = result
            .new_instruction_offsets
            .get(n + 1)
            .copied()
            .unwrap_or(bytes.len() as u32);
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
            fixups.push(Fixup {
                field: end - 4,
                end,
                target: i.near_branch_target(),
            });
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
        fixups.push(Fixup {
            field: at + offsets.displacement_offset() as u32,
            end,
            target: i.ip_rel_memory_address(),
        });
    }
    Ok(fixups)
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
        let m = module_code_at(0x2000, &[(Patch::single(d), 3)], 64).unwrap();
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

    /// `code` at 0x1000 with `m`'s fixups applied for a trampoline at T and the module at
    /// bias B, decoded at T.
    fn placed(m: &ModuleCode, t: u64, bias: u64) -> Vec<Instruction> {
        let mut placed = m.code.clone();
        for f in &m.fixups {
            let v = sbs_agent_abi::inproc::rel32(t + f.end as u64, bias + f.target).unwrap();
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
        let m = module_code_at(0x2000, &[(Patch::single(d), 0)], 64).unwrap();
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
        let m = module_code_at(0x2000, &[(Patch::single(d), 0)], 64).unwrap();
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
        let m = module_code_at(0x2000, &[(Patch::single(d), 0)], 64).unwrap();
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
        let m = module_code_at(0x2000, &[(Patch::single(d), 0)], 64).unwrap();
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
        let m = module_code_at(0x2000, &[(Patch::single(d), 0)], 64).unwrap();
        let moved = decode(&m.code, 0).unwrap();
        assert_eq!(moved[1].mnemonic(), Mnemonic::Add);
        assert!(moved[1].has_lock_prefix());
    }

    #[test]
    fn inside_a_function_the_stub_keeps_flags_and_red_zone() {
        // cmp edi,1; mov eax,2; mov ecx,3; ret  (site at the mov eax: flags live)
        let code = [0x83, 0xff, 0x01, 0xb8, 2, 0, 0, 0, 0xb9, 3, 0, 0, 0, 0xc3];
        let d = site(&code, 0x1003, SiteKind::Inside).unwrap();
        let m = module_code_at(0x2000, &[(Patch::single(d), 0)], 64).unwrap();
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
