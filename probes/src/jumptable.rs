//! Jump tables: where a function's indirect jumps through a register can go.
//!
//! Compilers lay out a `match` or `switch` in position-independent code as a table of
//! 32-bit offsets in read-only data, relative to the table's own address, which a
//! RIP-relative `lea` loads:
//!
//! ```text
//! lea    rcx, [rip + TABLE]
//! movsxd rax, dword ptr [rcx + rax*4]
//! add    rax, rcx
//! jmp    rax
//! ```
//!
//! (LLVM and GCC alike; the `lea` may be hoisted out of a loop.) A table's length is not
//! written anywhere, so its entries are read while they land on instructions of the
//! function: a superset of the real entries when another table follows, never fewer.

use std::collections::{HashMap, HashSet};

use iced_x86::{FlowControl, Instruction, Mnemonic, OpKind, Register};

/// Longest jump table read.
pub(crate) const MAX_TABLE: usize = 4096;

/// The entries of the table at `base` (32-bit offsets from `base`), read through
/// `read(address, len)` while they land on one of `boundaries`.
pub(crate) fn table_entries<'d>(
    base: u64,
    read: &dyn Fn(u64, usize) -> Option<&'d [u8]>,
    boundaries: &HashSet<u64>,
) -> Vec<u64> {
    let mut out = Vec::new();
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
    out
}

/// Per indirect jump through a register (by address): where its table sends it, when the
/// jump ends the pattern above and the `lea`s of the function that load its base register
/// give tables whose entries land on its instructions. A jump not in the map goes where
/// this cannot tell (a computed goto, a tail call through a register, a table laid out
/// otherwise).
pub(crate) fn jump_tables<'d>(
    insns: &[Instruction],
    read: &dyn Fn(u64, usize) -> Option<&'d [u8]>,
) -> HashMap<u64, Vec<u64>> {
    let boundaries: HashSet<u64> = insns.iter().map(|i| i.ip()).collect();
    let mut out = HashMap::new();
    for (k, jump) in insns.iter().enumerate() {
        if jump.flow_control() != FlowControl::IndirectBranch || jump.op0_kind() != OpKind::Register
        {
            continue;
        }
        let Some(base) = table_base(&insns[k.saturating_sub(6)..k], jump.op0_register()) else {
            continue;
        };
        let mut targets: Vec<u64> = insns
            .iter()
            .filter(|i| {
                i.mnemonic() == Mnemonic::Lea
                    && i.is_ip_rel_memory_operand()
                    && i.op0_register().full_register() == base
            })
            .flat_map(|lea| table_entries(lea.ip_rel_memory_address(), read, &boundaries))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        if !targets.is_empty() {
            out.insert(jump.ip(), targets);
        }
    }
    out
}

/// The register holding the table's address, when the instructions `before` a jump
/// through `via` end with `movsxd via, [base + index*4]` and `add via, base` (in either
/// order of the addition's operands).
fn table_base(before: &[Instruction], via: Register) -> Option<Register> {
    let via = via.full_register();
    let add = before.iter().rposition(|i| {
        i.mnemonic() == Mnemonic::Add
            && i.op_count() == 2
            && i.op0_kind() == OpKind::Register
            && i.op1_kind() == OpKind::Register
            && i.op0_register().full_register() == via
    })?;
    let other = before[add].op1_register().full_register();
    let load = before[..add].iter().rposition(|i| {
        i.mnemonic() == Mnemonic::Movsxd
            && i.op0_register().full_register() == via
            && i.op1_kind() == OpKind::Memory
            && i.memory_index_scale() == 4
            && i.memory_displacement64() == 0
    })?;
    let base = before[load].memory_base().full_register();
    // Nothing between the load and the jump may change the two registers again.
    let clobbers = |i: &Instruction| {
        i.op_count() > 0
            && i.op0_kind() == OpKind::Register
            && [via, base].contains(&i.op0_register().full_register())
    };
    let between = &before[load + 1..add];
    let after = &before[add + 1..];
    (base == other && !between.iter().chain(after).any(clobbers)).then_some(base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn decode(code: &[u8], at: u64) -> Vec<Instruction> {
        Decoder::with_ip(64, code, at, DecoderOptions::NONE)
            .iter()
            .collect()
    }

    /// `lea rcx,[rip+T]; movsxd rax,[rcx+rax*4]; add rax,rcx; jmp rax` at 0x1000 (with
    /// `inc rax` before the jump when `changed`), then three one-byte `ret`s, with a table
    /// of 3 entries at 0x2000 and garbage after it.
    fn table_code(changed: bool) -> (Vec<u8>, Vec<u8>) {
        let mut code = vec![0x48, 0x8d, 0x0d];
        // rip after the lea = 0x1007; T = 0x2000.
        code.extend_from_slice(&(0x2000i32 - 0x1007).to_le_bytes());
        code.extend_from_slice(&[0x48, 0x63, 0x04, 0x81]); // movsxd rax,[rcx+rax*4]
        code.extend_from_slice(&[0x48, 0x01, 0xc8]); // add rax,rcx
        if changed {
            code.extend_from_slice(&[0x48, 0xff, 0xc0]); // inc rax
        }
        code.extend_from_slice(&[0xff, 0xe0]); // jmp rax
        let rets = 0x1000 + code.len() as i64;
        code.extend_from_slice(&[0xc3, 0xc3, 0xc3]);
        let mut table = Vec::new();
        for n in [2i64, 0, 1] {
            table.extend_from_slice(&((rets + n - 0x2000) as i32).to_le_bytes());
        }
        table.extend_from_slice(&0x7fff_0000i32.to_le_bytes());
        (code, table)
    }

    /// The bytes of `table`, laid out at 0x2000.
    fn at_0x2000(table: &[u8], a: u64, len: usize) -> Option<&[u8]> {
        let from = usize::try_from(a.checked_sub(0x2000)?).ok()?;
        table.get(from..from + len)
    }

    #[test]
    fn a_position_independent_table_gives_its_jump_every_entry() {
        let (code, table) = table_code(false);
        let insns = decode(&code, 0x1000);
        let read = |a: u64, len: usize| at_0x2000(&table, a, len);
        let found = jump_tables(&insns, &read);
        let jump = insns[3].ip();
        assert_eq!(found.len(), 1);
        let rets: Vec<u64> = insns[4..].iter().map(|i| i.ip()).collect();
        assert_eq!(found.get(&jump), Some(&rets), "{found:x?}");
    }

    #[test]
    fn a_jump_whose_register_is_changed_after_the_addition_is_not_resolved() {
        let (code, table) = table_code(true);
        let insns = decode(&code, 0x1000);
        let read = |a: u64, len: usize| at_0x2000(&table, a, len);
        // The table still lands on the `ret`s: only the changed register refuses it.
        let boundaries: HashSet<u64> = insns.iter().map(|i| i.ip()).collect();
        assert_eq!(table_entries(0x2000, &read, &boundaries).len(), 3);
        assert!(jump_tables(&insns, &read).is_empty());
    }
}
