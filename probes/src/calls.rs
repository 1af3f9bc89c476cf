//! A function's call list: its call sites in address order, read from its machine code.
//!
//! The function is decoded from its symbol's start (`iced-x86`). A call site is
//! - a `call` instruction, direct or through memory or a register, or
//! - a `jmp` to the start of another function (a tail call: the callee returns to our
//!   caller; callgrind counts it as a call from the `jmp`, so the cost table agrees).
//!
//! A direct target is named by the symbol that starts there. A target in the PLT
//! (`.plt`, `.plt.sec`, `.plt.got`) is decoded too: its stub jumps through a GOT slot, and
//! the dynamic relocation of that slot names the external function; a `call` through a
//! GOT slot (`-fno-plt`) is named the same way. Anything else (a call through a register,
//! a vtable) has no name before it runs: [`Callee::Unknown`].

use std::collections::HashMap;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
use object::read::elf::ElfFile64;
use object::{
    Endianness, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags,
    RelocationTarget,
};

use crate::elf::{safe_offset, Function, Image};
use crate::error::ProbeError;

/// Who a call site calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callee {
    /// A function of the same file, by its symbol (mangled, as stored).
    Local {
        /// Start address.
        address: u64,
        /// Symbol name.
        name: String,
    },
    /// A function of another object, reached through the PLT or a GOT slot: its code is
    /// not this file's.
    External {
        /// The dynamic symbol's name (`malloc`).
        name: String,
    },
    /// Not known before the program runs (through a register, or memory without a
    /// relocation).
    Unknown,
}

/// One call site of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSite {
    /// Address of the `call` (or tail-call `jmp`) instruction.
    pub address: u64,
    /// Who it calls.
    pub callee: Callee,
    /// A `jmp` that leaves for another function rather than a `call`.
    pub tail: bool,
}

/// What naming call targets needs from an image, computed once: the PLT sections and the
/// GOT slots with a dynamic relocation naming a symbol.
#[derive(Debug, Default)]
pub struct CallTargets {
    plt: Vec<(u64, u64)>,
    /// GOT slots filled with another object's function, by name.
    slots: HashMap<u64, String>,
    /// GOT slots filled with one of this file's addresses (a `R_X86_64_RELATIVE`
    /// relocation, or a symbol this file defines): `call [rip+slot]` in a PIE.
    local_slots: HashMap<u64, u64>,
}

impl CallTargets {
    /// Read the PLT sections and dynamic relocations of `image`.
    pub fn of(image: &Image) -> Result<CallTargets, ProbeError> {
        let file = ElfFile64::<Endianness>::parse(image.data()).map_err(|e| {
            ProbeError::UnsupportedElf {
                path: image.path.clone(),
                reason: format!("malformed ELF file ({e})"),
            }
        })?;
        let plt = file
            .sections()
            .filter(|s| {
                s.name()
                    .is_ok_and(|n| n == ".plt" || n == ".plt.sec" || n == ".plt.got")
            })
            .map(|s| (s.address(), s.address() + s.size()))
            .collect();
        let mut slots = HashMap::new();
        let mut local_slots = HashMap::new();
        if let (Some(relocations), Some(symbols)) =
            (file.dynamic_relocations(), file.dynamic_symbol_table())
        {
            for (offset, relocation) in relocations {
                let relative = matches!(
                    relocation.flags(),
                    RelocationFlags::Elf { r_type } if r_type == object::elf::R_X86_64_RELATIVE
                );
                if relative {
                    if let Ok(address) = u64::try_from(relocation.addend()) {
                        local_slots.insert(offset, address);
                    }
                    continue;
                }
                let RelocationTarget::Symbol(index) = relocation.target() else {
                    continue;
                };
                let Ok(symbol) = symbols.symbol_by_index(index) else {
                    continue;
                };
                if !symbol.is_undefined() && symbol.address() != 0 {
                    local_slots.insert(offset, symbol.address());
                    continue;
                }
                match symbol.name() {
                    Ok(name) if !name.is_empty() => {
                        slots.insert(offset, name.to_string());
                    }
                    _ => {}
                }
            }
        }
        Ok(CallTargets {
            plt,
            slots,
            local_slots,
        })
    }

    /// Who a `call`/`jmp` through the GOT slot at `slot` reaches, if the file says.
    fn through_slot(&self, image: &Image, slot: u64) -> Option<Callee> {
        if let Some(&target) = self.local_slots.get(&slot) {
            return Some(callee_at(image, self, target).unwrap_or(Callee::Unknown));
        }
        self.slots
            .get(&slot)
            .map(|name| Callee::External { name: name.clone() })
    }

    fn in_plt(&self, address: u64) -> bool {
        self.plt
            .iter()
            .any(|&(lo, hi)| address >= lo && address < hi)
    }

    /// The external function a PLT stub at `address` jumps to.
    fn plt_stub(&self, image: &Image, address: u64) -> Option<String> {
        let offset = safe_offset(&image.exec_segments, address, 1)?;
        let start = usize::try_from(offset).ok()?;
        let code = image.data().get(start..)?;
        let code = &code[..code.len().min(32)];
        let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
        // A stub is `jmp [rip+slot]`, after an `endbr64` in `.plt.sec`.
        for _ in 0..3 {
            if !decoder.can_decode() {
                break;
            }
            let i = decoder.decode();
            if i.flow_control() == FlowControl::IndirectBranch && i.is_ip_rel_memory_operand() {
                return self.slots.get(&i.ip_rel_memory_address()).cloned();
            }
        }
        None
    }
}

fn callee_at(image: &Image, targets: &CallTargets, target: u64) -> Option<Callee> {
    if let Some(f) = image.functions.iter().find(|f| f.address == target) {
        return Some(Callee::Local {
            address: target,
            name: f.name.clone(),
        });
    }
    if targets.in_plt(target) {
        return Some(match targets.plt_stub(image, target) {
            Some(name) => Callee::External { name },
            None => Callee::Unknown,
        });
    }
    None
}

/// The call list of `function` in `image`, in address order.
pub fn call_sites(
    image: &Image,
    targets: &CallTargets,
    function: &Function,
) -> Result<Vec<CallSite>, ProbeError> {
    let code = image
        .code_of(function)
        .ok_or_else(|| ProbeError::UnsupportedElf {
            path: image.path.clone(),
            reason: format!("the code of `{}` lies outside the file", function.name),
        })?;
    let mut sites = Vec::new();
    let mut decoder = Decoder::with_ip(64, code, function.address, DecoderOptions::NONE);
    let mut i = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut i);
        if i.is_invalid() {
            return Err(ProbeError::UnsupportedElf {
                path: image.path.clone(),
                reason: format!(
                    "`{}` does not decode as x86-64 at {:#x}",
                    function.name,
                    i.ip()
                ),
            });
        }
        match i.flow_control() {
            FlowControl::Call => {
                let target = i.near_branch_target();
                let callee = callee_at(image, targets, target).unwrap_or(Callee::Unknown);
                sites.push(CallSite {
                    address: i.ip(),
                    callee,
                    tail: false,
                });
            }
            FlowControl::IndirectCall => {
                let callee = if i.is_ip_rel_memory_operand() {
                    targets
                        .through_slot(image, i.ip_rel_memory_address())
                        .unwrap_or(Callee::Unknown)
                } else {
                    Callee::Unknown
                };
                sites.push(CallSite {
                    address: i.ip(),
                    callee,
                    tail: false,
                });
            }
            FlowControl::UnconditionalBranch => {
                let target = i.near_branch_target();
                let inside =
                    target >= function.address && target < function.address + function.size;
                if inside {
                    continue;
                }
                if let Some(callee) = callee_at(image, targets, target) {
                    sites.push(CallSite {
                        address: i.ip(),
                        callee,
                        tail: true,
                    });
                }
            }
            FlowControl::IndirectBranch if i.is_ip_rel_memory_operand() => {
                if let Some(callee) = targets.through_slot(image, i.ip_rel_memory_address()) {
                    sites.push(CallSite {
                        address: i.ip(),
                        callee,
                        tail: true,
                    });
                }
            }
            _ => {}
        }
    }
    Ok(sites)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own code: a function that calls two others and `malloc`.
    #[inline(never)]
    fn first(x: u64) -> u64 {
        std::hint::black_box(x) + 1
    }

    #[inline(never)]
    fn second(x: u64) -> u64 {
        std::hint::black_box(x) * 3
    }

    #[inline(never)]
    fn caller(x: u64) -> u64 {
        let a = first(x);
        let b = second(a);
        std::hint::black_box(a + b)
    }

    #[test]
    fn lists_a_functions_direct_calls_in_order() {
        assert_eq!(caller(1), 8);
        let exe = std::env::current_exe().unwrap();
        let image = Image::load(&exe).unwrap();
        let targets = CallTargets::of(&image).unwrap();
        let function = image
            .functions
            .iter()
            .find(|f| {
                crate::demangle::demangle(&f.name)
                    .label
                    .ends_with("calls::tests::caller")
            })
            .expect("the test's caller is in the symbol table");
        let sites = call_sites(&image, &targets, function).unwrap();
        let names: Vec<String> = sites
            .iter()
            .filter_map(|s| match &s.callee {
                Callee::Local { name, .. } => Some(crate::demangle::demangle(name).label),
                _ => None,
            })
            .collect();
        let first = names.iter().position(|n| n.ends_with("tests::first"));
        let second = names.iter().position(|n| n.ends_with("tests::second"));
        assert!(
            matches!((first, second), (Some(a), Some(b)) if a < b),
            "{names:?}"
        );
        assert!(sites.windows(2).all(|w| w[0].address < w[1].address));
    }
}
