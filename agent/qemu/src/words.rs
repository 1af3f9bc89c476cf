//! What the plugin decides, in plain Rust (unit-tested): the plugin's arguments and the
//! system calls it watches.

/// `execve`.
pub const SYS_EXECVE: i64 = 59;
/// `execveat`.
pub const SYS_EXECVEAT: i64 = 322;
/// `clone`.
pub const SYS_CLONE: i64 = 56;
/// `fork`.
pub const SYS_FORK: i64 = 57;
/// `vfork` (QEMU's user mode runs it as a fork).
pub const SYS_VFORK: i64 = 58;
/// `clone3`.
pub const SYS_CLONE3: i64 = 435;

/// Whether system call `num` can start a new process.
pub fn may_fork(num: i64) -> bool {
    matches!(num, SYS_CLONE | SYS_FORK | SYS_VFORK | SYS_CLONE3)
}

/// Whether system call `num` replaces the process image.
pub fn is_exec(num: i64) -> bool {
    matches!(num, SYS_EXECVE | SYS_EXECVEAT)
}

/// The value of argument `key=` in one plugin argument (`key=value`), if it is that key.
pub fn arg_value<'a>(arg: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let rest = arg.strip_prefix(key)?;
    rest.strip_prefix(b"=")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_and_system_calls() {
        assert_eq!(
            arg_value(b"area=/proc/1/fd/3", b"area"),
            Some(&b"/proc/1/fd/3"[..])
        );
        assert_eq!(arg_value(b"areas=x", b"area"), None);
        assert_eq!(arg_value(b"other=x", b"area"), None);
        assert!(may_fork(57) && may_fork(56) && !may_fork(59));
        assert!(is_exec(59) && is_exec(322) && !is_exec(57));
    }
}
