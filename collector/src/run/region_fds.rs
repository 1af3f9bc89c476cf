//! Region markers, the collector's side: an instrument that counts only inside a harness
//! benchmark's measured region passes a Unix socket to the child (at a fixed descriptor,
//! announced in an env var; see `sbs_agent_abi::harness`), opens its perf events on the
//! child disabled and without `enable_on_exec`, and sends them over the socket. The
//! harness in the child switches them on and off around each operation.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use crate::run::instrument::ChildSetup;

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

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{recvmsg, ControlMessageOwned};
    use std::io::IoSliceMut;
    use std::os::fd::{AsFd, FromRawFd};

    /// Receive as the harness does: messages until end of file.
    fn receive_all(socket: &OwnedFd) -> Vec<OwnedFd> {
        let mut out = Vec::new();
        loop {
            let mut byte = [0u8; 1];
            let mut iov = [IoSliceMut::new(&mut byte)];
            let mut space = nix::cmsg_space!([RawFd; 253]);
            let msg = recvmsg::<()>(
                socket.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .unwrap();
            for c in msg.cmsgs().unwrap() {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    // SAFETY: descriptors just received: ours alone.
                    out.extend(
                        fds.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
            if msg.bytes == 0 {
                return out;
            }
        }
    }

    #[test]
    fn many_descriptors_arrive_in_chunks_then_end_of_file() {
        let mut socket = RegionSocket::new(("SBS_TEST_REGION", 1000));
        let mut setup = ChildSetup::default();
        socket.prepare(&mut setup).unwrap();
        assert_eq!(setup.env, vec![("SBS_TEST_REGION".into(), "1000".into())]);
        let (child_end, number) = setup.pass_fds.pop().unwrap();
        assert_eq!(number, 1000);
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let fds: Vec<OwnedFd> = (0..CHUNK + 50)
            .map(|_| devnull.as_fd().try_clone_to_owned().unwrap())
            .collect();
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        socket.send(&raw).unwrap();
        // Our end is closed after sending, so the receiver sees end of file.
        assert_eq!(receive_all(&child_end).len(), CHUNK + 50);
        assert!(socket.send(&raw).is_err(), "a socket is used once per run");
    }
}
