//! The measured region inside the child: perf-event descriptors the collector passed
//! (turned on around each operation), callgrind's event collection (toggled around each
//! operation when the collector asks) and the allocation agent's report slot (read before
//! and after each operation).

use std::fs::File;
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use sbs_agent_abi::harness::{ENV_REGION_CALLGRIND, REGION_SOCKET_ENVS};
use sbs_agent_abi::qemu::ENV_REGION_QEMU;
use sbs_agent_abi::{
    parse_fd, parse_token, slot_offset, stamp, HeaderValues, Origin, SlotValues, ENV_HARNESS_FD,
    ENV_HARNESS_TOKEN, HEADER_SIZE, SLOT_COUNT, SLOT_SIZE,
};

use crate::error::HarnessError;
use crate::sys;
use crate::valgrind;

/// The allocation agent's counters of this process at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HeapSnapshot {
    pub allocs: u64,
    pub bytes: u64,
    /// Live requested bytes (stored wrapping by the agent, read signed).
    pub live: i64,
}

/// This process's slot in the agent's report file.
#[derive(Debug)]
pub(crate) struct AgentSlot {
    file: File,
    offset: u64,
}

impl AgentSlot {
    /// The slot of this process, if the agent is loaded (or `--alloc-harness` announced
    /// its report file) and a slot carries our pid.
    pub(crate) fn find() -> Result<Option<AgentSlot>, HarnessError> {
        let Some((file, header)) = harness_report()?.or_else(agent_report) else {
            return Ok(None);
        };
        let report_err = |source| HarnessError::io("reading the allocation report file", source);
        let me = u64::from(std::process::id());
        let claimed = (header.claims as usize).min(SLOT_COUNT);
        let mut found = None;
        for index in 0..claimed {
            let mut raw = [0u8; SLOT_SIZE];
            let offset = slot_offset(index) as u64;
            file.read_exact_at(&mut raw, offset).map_err(report_err)?;
            if let Some(s) = SlotValues::from_bytes(&raw) {
                if s.pid == me && s.origin() == Some(Origin::Load) {
                    found = Some(offset);
                }
            }
        }
        Ok(found.map(|offset| AgentSlot { file, offset }))
    }

    /// Read the counters now. Allocates nothing.
    #[inline]
    pub(crate) fn snapshot(&self) -> Result<HeapSnapshot, HarnessError> {
        let mut raw = [0u8; SLOT_SIZE];
        self.file
            .read_exact_at(&mut raw, self.offset)
            .map_err(|e| HarnessError::io("reading the allocation agent's slot", e))?;
        let s = SlotValues::from_bytes(&raw).unwrap_or_default();
        Ok(HeapSnapshot {
            allocs: s.allocs,
            bytes: s.bytes,
            live: s.live as i64,
        })
    }
}

/// The report file `--alloc-harness` announces (env vars and an inherited descriptor),
/// with its header, if its token matches.
fn harness_report() -> Result<Option<(File, HeaderValues)>, HarnessError> {
    let announced = || {
        Some((
            std::env::var(ENV_HARNESS_FD).ok()?,
            std::env::var(ENV_HARNESS_TOKEN).ok()?,
        ))
    };
    let Some((fd, token)) = announced() else {
        return Ok(None);
    };
    let (Some(fd), Some(token)) = (parse_fd(fd.as_bytes()), parse_token(token.as_bytes())) else {
        return Ok(None);
    };
    let report_err = |what, source| HarnessError::Descriptor { what, fd, source };
    // Reopening through /proc gives a descriptor of our own; the counting allocator keeps
    // its own.
    let file = File::open(format!("/proc/self/fd/{fd}"))
        .map_err(|e| report_err("opening the allocation report file", e))?;
    let header =
        read_header(&file).map_err(|e| report_err("reading the allocation report file", e))?;
    Ok(header.filter(|h| h.matches(token)).map(|h| (file, h)))
}

/// The preloaded agent's report file, with its header: the agent library is an entry of
/// `LD_PRELOAD` (a run's copy in a directory of ours, or a `/proc/<pid>/fd/<n>` memfd)
/// whose stamp says where the report file is (see `sbs_agent_abi::stamp`).
fn agent_report() -> Option<(File, HeaderValues)> {
    let preload = std::env::var("LD_PRELOAD").ok()?;
    preload
        .split([' ', ':'])
        .filter(|entry| stamp::may_be_stamped_copy(entry))
        .find_map(|entry| {
            let values = stamp::read(&std::fs::read(entry).ok()?)?;
            let file = File::open(format!("/proc/{}/fd/{}", values.pid, values.fd)).ok()?;
            let header = read_header(&file).ok()??;
            header.matches(values.token).then_some((file, header))
        })
}

/// The header of a report file, if it is one.
fn read_header(file: &File) -> std::io::Result<Option<HeaderValues>> {
    let mut head = [0u8; HEADER_SIZE];
    file.read_exact_at(&mut head, 0)?;
    Ok(HeaderValues::from_bytes(&head))
}

/// Everything that marks the measured region in this process.
#[derive(Debug, Default)]
pub(crate) struct Region {
    perf: Vec<OwnedFd>,
    /// Toggle callgrind's collection around each operation ([`ENV_REGION_CALLGRIND`]).
    callgrind: bool,
    /// Mark the region for the QEMU engine's plugin ([`ENV_REGION_QEMU`]).
    qemu: bool,
    pub agent: Option<AgentSlot>,
}

impl Region {
    /// Receive the descriptors the collector sends and find the agent's slot.
    pub(crate) fn from_env() -> Result<Region, HarnessError> {
        let mut region = Region {
            perf: Vec::new(),
            callgrind: std::env::var_os(ENV_REGION_CALLGRIND).is_some_and(|v| v == "1"),
            qemu: std::env::var_os(ENV_REGION_QEMU).is_some_and(|v| v == "1"),
            agent: AgentSlot::find()?,
        };
        for (var, _) in REGION_SOCKET_ENVS {
            let Some(fd) = std::env::var(var).ok().and_then(|v| parse_fd(v.as_bytes())) else {
                continue;
            };
            let socket = sys::take_inherited_fd(fd).map_err(|source| HarnessError::Descriptor {
                what: "region marker socket",
                fd,
                source,
            })?;
            region.perf.extend(receive_fds(&socket, fd)?);
        }
        Ok(region)
    }

    /// Number of perf-event descriptors switched around each operation.
    pub(crate) fn perf_events(&self) -> usize {
        self.perf.len()
    }

    /// With callgrind asked for: what `RUNNING_ON_VALGRIND` answers here (0 natively).
    pub(crate) fn callgrind(&self) -> Option<u64> {
        self.callgrind.then(valgrind::running_on_valgrind)
    }

    /// With callgrind asked for: dump its counts since the last dump (collected while the
    /// region was on) to a file of their own.
    pub(crate) fn dump(&self) {
        if self.callgrind {
            valgrind::dump_stats();
        }
    }

    /// Switch every perf event, callgrind's collection and the QEMU engine's region on
    /// (`true`) or off. Callgrind is switched innermost (on last, off first), so the test
    /// of the QEMU flag lies outside its region, as it did before there was one; the QEMU
    /// marker comes next, its region holding only the constant test of the callgrind
    /// flag besides the operation.
    #[inline]
    pub(crate) fn switch(&self, on: bool) -> Result<(), HarnessError> {
        if !on && self.callgrind {
            valgrind::toggle_collect();
        }
        if !on && self.qemu {
            sys::qemu_mark(false);
        }
        for fd in &self.perf {
            sys::perf_switch(fd.as_raw_fd(), on).map_err(|source| HarnessError::Descriptor {
                what: if on {
                    "PERF_EVENT_IOC_ENABLE"
                } else {
                    "PERF_EVENT_IOC_DISABLE"
                },
                fd: fd.as_raw_fd(),
                source,
            })?;
        }
        if on && self.qemu {
            sys::qemu_mark(true);
        }
        if on && self.callgrind {
            valgrind::toggle_collect();
        }
        Ok(())
    }
}

/// Read `SCM_RIGHTS` messages until the collector closes its end.
fn receive_fds(socket: &OwnedFd, number: i32) -> Result<Vec<OwnedFd>, HarnessError> {
    let mut out = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        let mut iov = [IoSliceMut::new(&mut byte)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 253]);
        let msg = recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(|e| HarnessError::Descriptor {
            what: "region marker: receiving perf events",
            fd: number,
            source: e.into(),
        })?;
        let got = msg.bytes;
        let cmsgs = msg.cmsgs().map_err(|e| HarnessError::Descriptor {
            what: "region marker: receiving perf events",
            fd: number,
            source: e.into(),
        })?;
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for fd in fds {
                    out.push(sys::take_inherited_fd(fd).map_err(|source| {
                        HarnessError::Descriptor {
                            what: "region marker perf event",
                            fd,
                            source,
                        }
                    })?);
                }
            }
        }
        if got == 0 {
            return Ok(out);
        }
    }
}
