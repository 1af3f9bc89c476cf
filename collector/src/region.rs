//! Region markers, the collector's side: an instrument that counts only inside a harness
//! benchmark's measured region passes a Unix socket to the child (at a fixed descriptor,
//! announced in an env var; see `sbs_agent_abi::harness`), opens its perf events on the
//! child disabled and without `enable_on_exec`, and sends them over the socket. The
//! harness in the child switches them on and off around each operation.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use crate::instrument::ChildSetup;

/// Descriptors per `SCM_RIGHTS` message (the kernel's limit is 253).
const CHUNK: usize = 200;

/// One run's socket: created in `prepare`, used once in `attach`.
#[derive(Debug)]
pub struct RegionSocket {
    env: &'static str,
    number: i32,
    parent: Option<UnixStream>,
}

impl RegionSocket {
    /// A socket announced by env var `env` at descriptor `number` in the child.
    pub fn new((env, number): (&'static str, i32)) -> Self {
        RegionSocket {
            env,
            number,
            parent: None,
        }
    }

    /// Before fork: make the pair, pass the child's end.
    pub fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        let (parent, child) = UnixStream::pair().map_err(|e| {
            anyhow::anyhow!("cannot create the region-marker socket for the harness: {e}")
        })?;
        setup.pass_fds.push((OwnedFd::from(child), self.number));
        setup
            .env
            .push((self.env.into(), self.number.to_string().into()));
        self.parent = Some(parent);
        Ok(())
    }

    /// After attaching: send `fds` to the child and close our end (the harness reads until
    /// end of file).
    pub fn send(&mut self, fds: &[RawFd]) -> anyhow::Result<()> {
        let Some(parent) = self.parent.take() else {
            anyhow::bail!("internal error: region socket used before prepare");
        };
        for chunk in fds.chunks(CHUNK) {
            let iov = [IoSlice::new(&[1u8])];
            let cmsg = [ControlMessage::ScmRights(chunk)];
            sendmsg::<()>(parent.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None).map_err(
                |e| anyhow::anyhow!("cannot pass perf events to the harness in the child: {e}"),
            )?;
        }
        Ok(())
    }

    /// Drop a run's socket that was not used.
    pub fn abort(&mut self) {
        self.parent = None;
    }
}
