//! How a preloaded library of ours finds its run's shared file (the allocation agent's
//! report file, the counting library's site table) without an environment variable and
//! without a descriptor inherited from the collector.
//!
//! For each run the collector copies the embedded library into a fresh sealed memfd and
//! *stamps* the copy: the library holds one [`Stamp`] static, which starts with
//! [`STAMP_MAGIC`] and is otherwise zero; the collector finds the magic in the copy's
//! bytes and writes, after it, its own pid, the number of the descriptor under which it
//! keeps the run's file open, and the run's token. The child's `LD_PRELOAD` names the copy
//! as `/proc/<collector pid>/fd/<n>`, a descriptor of the collector, not of the child: a
//! descendant that closed every descriptor before its exec (Python's `subprocess` does by
//! default) can still open it, where `/proc/self/fd/<n>` would make the loader print an
//! error into the descendant's stderr. The library reads its stamp, opens
//! `/proc/<pid>/fd/<fd>` the same way ([`proc_fd_path`]), checks the token in the file's
//! header, maps the file and closes the descriptor again: the program is left with no
//! descriptor of ours and no variable but `LD_PRELOAD`.
//!
//! Opening `/proc/<pid>/fd/<n>` of another process takes the permission to inspect it
//! (`PTRACE_MODE_READ`): a descendant running as the collector's user can, one that
//! switched to another user (without the setuid bit, which makes the loader ignore
//! `LD_PRELOAD` anyway) cannot, nor can one in a pid namespace with a `/proc` of its own.

/// The first bytes of every library's [`Stamp`]: found exactly once in the library file.
pub const STAMP_MAGIC: [u8; 16] = *b"\x7fsbs-run-stamp1\x00";

/// Bytes of the values written after the magic.
pub const STAMP_VALUES_SIZE: usize = 24;

/// The static a library carries: the magic, then the values the collector writes (zero
/// in the library as built: not stamped).
#[repr(C)]
pub struct Stamp {
    /// [`STAMP_MAGIC`].
    pub magic: [u8; 16],
    /// The values, as [`StampValues::to_bytes`] encodes them.
    pub values: [u8; STAMP_VALUES_SIZE],
}

impl Stamp {
    /// The library's static as built.
    pub const UNSTAMPED: Stamp = Stamp {
        magic: STAMP_MAGIC,
        values: [0; STAMP_VALUES_SIZE],
    };
}

/// What a stamp says: where the run's file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StampValues {
    /// The collector's pid (as the child sees it: the collector forks the child in its
    /// own pid namespace).
    pub pid: u64,
    /// The collector's descriptor of the run's file.
    pub fd: u64,
    /// The run's token, also in the file's header.
    pub token: u64,
}

impl StampValues {
    /// Encode (little-endian words).
    pub fn to_bytes(&self) -> [u8; STAMP_VALUES_SIZE] {
        let mut out = [0u8; STAMP_VALUES_SIZE];
        for (i, v) in [self.pid, self.fd, self.token].into_iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Decode; `None` for an unstamped library (pid 0).
    pub fn from_bytes(bytes: &[u8; STAMP_VALUES_SIZE]) -> Option<StampValues> {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let v = StampValues {
            pid: word(0),
            fd: word(1),
            token: word(2),
        };
        (v.pid != 0).then_some(v)
    }
}

/// Where the values go in `library`: just after the one occurrence of the magic. `None`
/// when the magic is missing or appears more than once (a stamp could then land in the
/// wrong place).
pub fn values_at(library: &[u8]) -> Option<usize> {
    let mut found = None;
    let mut at = 0;
    while at + STAMP_MAGIC.len() + STAMP_VALUES_SIZE <= library.len() {
        if library[at..at + STAMP_MAGIC.len()] == STAMP_MAGIC {
            if found.is_some() {
                return None;
            }
            found = Some(at + STAMP_MAGIC.len());
            at += STAMP_MAGIC.len();
        } else {
            at += 1;
        }
    }
    found
}

/// Stamp `library` (a copy of the library's file) with `values`; `false` when it has no
/// single stamp to fill.
pub fn write(library: &mut [u8], values: StampValues) -> bool {
    match values_at(library) {
        Some(at) => {
            library[at..at + STAMP_VALUES_SIZE].copy_from_slice(&values.to_bytes());
            true
        }
        None => false,
    }
}

/// The stamp of a library file, if it has one and it was filled in.
pub fn read(library: &[u8]) -> Option<StampValues> {
    let at = values_at(library)?;
    let mut raw = [0u8; STAMP_VALUES_SIZE];
    raw.copy_from_slice(&library[at..at + STAMP_VALUES_SIZE]);
    StampValues::from_bytes(&raw)
}

/// The start of the name of the directory a run's stamped copy of a preload library is
/// written into (`/dev/shm/sbs-profile.XXXXXX/alloc-agent.so`): what tells the library's
/// `LD_PRELOAD` entry from the program's own, beside the memfd's `/proc/<pid>/fd/<n>`.
pub const SHARED_DIR_PREFIX: &str = "sbs-profile.";

/// Whether an `LD_PRELOAD` entry may name a stamped copy of ours: a file in a directory
/// named with [`SHARED_DIR_PREFIX`], or a descriptor `/proc/<pid>/fd/<n>` (the memfd).
pub fn may_be_stamped_copy(entry: &str) -> bool {
    let in_our_dir = entry
        .rsplit('/')
        .nth(1)
        .is_some_and(|dir| dir.starts_with(SHARED_DIR_PREFIX));
    in_our_dir || (entry.starts_with("/proc/") && entry.contains("/fd/"))
}

/// Longest path [`proc_fd_path`] writes, its NUL included.
pub const PROC_FD_PATH_MAX: usize = 64;

/// Write `/proc/<pid>/fd/<fd>` and a NUL into `out`, without allocating; returns the
/// length without the NUL.
pub fn proc_fd_path(pid: u64, fd: u64, out: &mut [u8; PROC_FD_PATH_MAX]) -> usize {
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        out[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    let mut digits = [0u8; 20];
    put(b"/proc/");
    put(decimal(pid, &mut digits));
    put(b"/fd/");
    put(decimal(fd, &mut digits));
    put(b"\0");
    len - 1
}

/// `value` in decimal, in the tail of `buf`.
fn decimal(mut value: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buf[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_of_ours_is_told_from_the_program_s_own_preloads() {
        assert!(may_be_stamped_copy(
            "/dev/shm/sbs-profile.a1B2c3/alloc-agent.so"
        ));
        assert!(may_be_stamped_copy("/tmp/sbs-profile.Xy9z0Q/inproc.so"));
        assert!(may_be_stamped_copy("/proc/4242/fd/11"));
        assert!(!may_be_stamped_copy("/usr/lib/libasan.so.8"));
        assert!(!may_be_stamped_copy("libfoo.so"));
        assert!(!may_be_stamped_copy("/opt/sbs-profile/lib.so"));
    }

    fn library_with(stamps: usize) -> Vec<u8> {
        let mut lib = vec![0x90u8; 100];
        for _ in 0..stamps {
            lib.extend_from_slice(&STAMP_MAGIC);
            lib.extend_from_slice(&[0; STAMP_VALUES_SIZE]);
            lib.extend_from_slice(&[0xcc; 7]);
        }
        lib
    }

    #[test]
    fn a_stamp_is_written_after_the_single_magic_and_read_back() {
        let mut lib = library_with(1);
        assert_eq!(read(&lib), None, "not stamped yet");
        let v = StampValues {
            pid: 4242,
            fd: 17,
            token: 0xfeed_beef_0000_0001,
        };
        assert!(write(&mut lib, v));
        assert_eq!(read(&lib), Some(v));
        assert_eq!(lib.len(), 100 + 16 + 24 + 7, "nothing else changed in size");
        assert!(lib[..100].iter().all(|&b| b == 0x90));
        assert!(lib[140..].iter().all(|&b| b == 0xcc));
    }

    #[test]
    fn no_stamp_where_the_magic_is_missing_twice_or_cut_short() {
        let v = StampValues {
            pid: 1,
            fd: 2,
            token: 3,
        };
        assert!(!write(&mut library_with(0), v));
        assert!(!write(&mut library_with(2), v));
        let mut cut = library_with(1);
        cut.truncate(100 + 16 + 10);
        assert!(!write(&mut cut, v));
    }

    #[test]
    fn the_static_as_built_is_the_magic_and_zeros() {
        let s = Stamp::UNSTAMPED;
        assert_eq!(s.magic, STAMP_MAGIC);
        assert_eq!(StampValues::from_bytes(&s.values), None);
        assert_eq!(core::mem::size_of::<Stamp>(), 16 + STAMP_VALUES_SIZE);
    }

    #[test]
    fn proc_paths_are_written_without_allocating() {
        let mut buf = [0xffu8; PROC_FD_PATH_MAX];
        let len = proc_fd_path(12345, 7, &mut buf);
        assert_eq!(&buf[..len], b"/proc/12345/fd/7");
        assert_eq!(buf[len], 0);
        let len = proc_fd_path(u64::MAX, u64::MAX, &mut buf);
        assert_eq!(len, "/proc//fd/".len() + 2 * 20);
        assert!(len < PROC_FD_PATH_MAX);
        assert_eq!(&buf[..7], b"/proc/1");
        let len = proc_fd_path(0, 0, &mut buf);
        assert_eq!(&buf[..len], b"/proc/0/fd/0");
    }
}
