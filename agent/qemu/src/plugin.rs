//! The plugin's entry point and callbacks (see the crate's comment).

use core::ffi::{c_char, c_int, c_uint, c_void, CStr};
use core::ptr;
use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicPtr, AtomicU64};

use sbs_agent_abi::qemu::{
    slot_word, AREA_BYTES, AREA_MAGIC, H_EXECS, H_LOADED, H_LOST, H_MAGIC, H_NEXT_SLOT,
    H_REGION_LOST, H_REGION_MARKS, MARKER_SYSCALL, PLUGIN_MARK, SLOTS, SLOT_WORDS, S_PID, S_REGION,
    S_SHARED, S_START, S_VCPU, VCPUS,
};

use crate::api::{self, Info, PluginId, Tb};
use crate::sys;
use crate::words::{arg_value, is_exec, may_fork};

/// The plugin API version this library is written for (QEMU 7.2's).
#[no_mangle]
#[used]
pub static qemu_plugin_version: c_int = 1;

/// The count area (the collector's memfd, mapped shared).
static AREA: AtomicPtr<AtomicU64> = AtomicPtr::new(ptr::null_mut());
/// This process's slot in the area (a forked child changes it in its own copy).
static SLOT: AtomicPtr<AtomicU64> = AtomicPtr::new(ptr::null_mut());
/// Where a process that found no free slot counts (nobody reads it; the area's
/// `H_LOST` says counts are missing).
static SPARE: [AtomicU64; SLOT_WORDS] = [const { AtomicU64::new(0) }; SLOT_WORDS];

/// Word `i` of the area.
fn area(i: usize) -> &'static AtomicU64 {
    // SAFETY: AREA is set before any callback is registered and points to AREA_BYTES of
    // shared memory mapped for the life of the process; `i` is below AREA_WORDS at every
    // call site (header indexes and slot_word of a claimed slot).
    unsafe { &*AREA.load(Relaxed).add(i) }
}

/// Word `i` of this process's slot.
#[inline(always)]
fn slot(i: usize) -> &'static AtomicU64 {
    // SAFETY: SLOT points to SLOT_WORDS words (a claimed slot of the area or SPARE) for
    // the life of the process, and `i` is below SLOT_WORDS at every call site.
    unsafe { &*SLOT.load(Relaxed).add(i) }
}

/// Claim a slot for this process.
fn claim_slot() {
    let n = area(H_NEXT_SLOT).fetch_add(1, Relaxed) as usize;
    if n >= SLOTS {
        area(H_LOST).fetch_add(1, Relaxed);
        SLOT.store(SPARE.as_ptr().cast_mut(), Relaxed);
        return;
    }
    let base = area(slot_word(n, 0)) as *const AtomicU64;
    SLOT.store(base.cast_mut(), Relaxed);
    slot(S_PID).store(sys::getpid(), Relaxed);
}

/// Called by QEMU once, as it loads the plugin: map the area named by `area=`, claim the
/// first slot and register the callbacks. Non-zero makes QEMU stop with an error.
///
/// # Safety
/// QEMU passes a valid `info` and `argc` NUL-terminated arguments.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    info: *const Info,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: QEMU's own info structure.
    if info.is_null() || unsafe { (*info).system_emulation } {
        return -1;
    }
    let mut area_path: Option<&[u8]> = None;
    for i in 0..usize::try_from(argc).unwrap_or(0) {
        // SAFETY: QEMU passes `argc` valid NUL-terminated strings.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) }.to_bytes_with_nul();
        if let Some(v) = arg_value(arg, b"area") {
            area_path = Some(v);
        }
    }
    let Some(path) = area_path else {
        return -1;
    };
    let Some(mapped) = sys::map_shared(path, AREA_BYTES) else {
        return -1;
    };
    AREA.store(mapped.cast(), Relaxed);
    if area(H_MAGIC).load(Relaxed) != AREA_MAGIC {
        return -1;
    }
    claim_slot();
    // SAFETY: registering our callbacks with the id QEMU gave us.
    unsafe {
        api::qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
        api::qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
        api::qemu_plugin_register_vcpu_syscall_ret_cb(id, on_syscall_ret);
    }
    area(H_LOADED).store(PLUGIN_MARK + qemu_plugin_version as u64, Relaxed);
    0
}

/// A block was translated: count its instructions each time it runs.
extern "C" fn on_translate(_id: PluginId, tb: *mut Tb) {
    // SAFETY: QEMU's block, valid during this callback.
    let n = unsafe { api::qemu_plugin_tb_n_insns(tb) };
    // SAFETY: registering a callback on the block being translated; the user data is the
    // count itself, not a pointer.
    unsafe {
        api::qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, api::CB_NO_REGS, n as *mut c_void)
    };
}

/// A block runs on `vcpu`: add its instruction count.
extern "C" fn on_block(vcpu: c_uint, n: *mut c_void) {
    let n = n as u64;
    let v = vcpu as usize;
    if v < VCPUS {
        // Only this guest thread writes this word: a plain load and store, no lock.
        let w = slot(S_VCPU + v);
        w.store(w.load(Relaxed).wrapping_add(n), Relaxed);
    } else {
        slot(S_SHARED).fetch_add(n, Relaxed);
    }
}

/// A system call is about to run.
#[allow(clippy::too_many_arguments)]
extern "C" fn on_syscall(
    _id: PluginId,
    vcpu: c_uint,
    num: i64,
    a1: u64,
    _a2: u64,
    _a3: u64,
    _a4: u64,
    _a5: u64,
    _a6: u64,
    _a7: u64,
    _a8: u64,
) {
    if num == MARKER_SYSCALL {
        area(H_REGION_MARKS).fetch_add(1, Relaxed);
        let v = vcpu as usize;
        if v >= VCPUS {
            area(H_REGION_LOST).fetch_add(1, Relaxed);
            return;
        }
        let now = slot(S_VCPU + v).load(Relaxed);
        if a1 == 1 {
            slot(S_START + v).store(now, Relaxed);
        } else {
            let start = slot(S_START + v).load(Relaxed);
            let r = slot(S_REGION + v);
            r.store(
                r.load(Relaxed).wrapping_add(now.wrapping_sub(start)),
                Relaxed,
            );
        }
    } else if is_exec(num) {
        // Undone in on_syscall_ret if the call fails; a successful one never returns.
        area(H_EXECS).fetch_add(1, Relaxed);
    }
}

/// A system call returned `ret`.
extern "C" fn on_syscall_ret(_id: PluginId, _vcpu: c_uint, num: i64, ret: i64) {
    if is_exec(num) {
        area(H_EXECS).fetch_sub(1, Relaxed);
    } else if may_fork(num) && ret == 0 && slot(S_PID).load(Relaxed) != sys::getpid() {
        // A new process: the parent's slot and vCPU index came with the fork.
        claim_slot();
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Unwinding into QEMU is never allowed.
    sys::exit_now()
}

// The hidden, trapping `rust_eh_personality` a no_std cdylib needs to load.
sbs_agent_abi::personality_stub!();
