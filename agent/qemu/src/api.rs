//! The part of QEMU's plugin API (version 1, as in QEMU 7.2's `qemu-plugin.h`) this
//! plugin uses, declared from the documented signatures. QEMU resolves these symbols in
//! its own executable when it loads the plugin.

use core::ffi::{c_char, c_int, c_uint, c_void};

/// `qemu_plugin_id_t`.
pub type PluginId = u64;

/// `qemu_info_t` (its leading fields; QEMU passes a pointer to its own).
#[repr(C)]
pub struct Info {
    pub target_name: *const c_char,
    pub version_min: c_int,
    pub version_cur: c_int,
    pub system_emulation: bool,
}

/// `struct qemu_plugin_tb`, opaque.
#[repr(C)]
pub struct Tb {
    _private: [u8; 0],
}

/// `QEMU_PLUGIN_CB_NO_REGS`.
pub const CB_NO_REGS: c_int = 0;

pub type TbTransCb = extern "C" fn(PluginId, *mut Tb);
pub type VcpuUdataCb = extern "C" fn(c_uint, *mut c_void);
pub type SyscallCb = extern "C" fn(PluginId, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
pub type SyscallRetCb = extern "C" fn(PluginId, c_uint, i64, i64);

extern "C" {
    pub fn qemu_plugin_register_vcpu_tb_trans_cb(id: PluginId, cb: TbTransCb);
    pub fn qemu_plugin_register_vcpu_tb_exec_cb(
        tb: *mut Tb,
        cb: VcpuUdataCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_tb_n_insns(tb: *const Tb) -> usize;
    pub fn qemu_plugin_register_vcpu_syscall_cb(id: PluginId, cb: SyscallCb);
    pub fn qemu_plugin_register_vcpu_syscall_ret_cb(id: PluginId, cb: SyscallRetCb);
}
