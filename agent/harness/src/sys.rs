//! The harness's only unsafe code: taking ownership of descriptors the collector passed,
//! switching perf events on and off, and reading this thread's CPU clock.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Take ownership of descriptor `fd`, inherited from the collector, after checking it is
/// open.
pub(crate) fn take_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only reads the descriptor's flags; an invalid number gives EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above) and was passed to this process for the
    // harness alone (announced by an env var the harness reads once), so nothing else in
    // the process owns or closes it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `PERF_EVENT_IOC_ENABLE` / `PERF_EVENT_IOC_DISABLE` on a perf event descriptor (its
/// inherited copies in threads and children follow).
#[inline]
pub(crate) fn perf_switch(fd: RawFd, on: bool) -> io::Result<()> {
    // _IO('$', 0) and _IO('$', 1) from <linux/perf_event.h>.
    const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
    const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
    let request = if on {
        PERF_EVENT_IOC_ENABLE
    } else {
        PERF_EVENT_IOC_DISABLE
    };
    // SAFETY: these two requests take no argument pointer (0 is passed) and only change the
    // state of the event behind `fd`; a descriptor that is not a perf event gives ENOTTY.
    if unsafe { libc::ioctl(fd, request as _, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: user and system, to the nanosecond,
/// the running slice included), or `None` if the clock cannot be read.
#[inline]
pub(crate) fn thread_cpu_time() -> Option<std::time::Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration; the clock id is a
    // constant the kernel knows (EINVAL otherwise, checked).
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    Some(std::time::Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// The QEMU engine's region marker: a system call no kernel defines (ENOSYS natively, at
/// the cost of one system call), which the engine's plugin sees before QEMU answers it
/// the same way. `on` switches the calling thread's region on, else off.
#[inline]
pub(crate) fn qemu_mark(on: bool) {
    // SAFETY: an undefined system call number with one integer argument: the kernel (or
    // QEMU) returns ENOSYS and touches no memory.
    unsafe {
        libc::syscall(sbs_agent_abi::qemu::MARKER_SYSCALL, libc::c_long::from(on));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_thread_cpu_clock_advances_with_work() {
        let before = super::thread_cpu_time().unwrap();
        let mut x = 1u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        let after = super::thread_cpu_time().unwrap();
        assert!(after > before, "{before:?} -> {after:?} ({x})");
    }
}
