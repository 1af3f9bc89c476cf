//! The harness's only unsafe code: taking ownership of descriptors the collector passed,
//! and switching perf events on and off.

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
