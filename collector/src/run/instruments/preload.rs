//! The preload libraries we embed (the allocation agent, the in-process counting library)
//! as the child loads them: for each run a copy stamped with where the run's shared file
//! is (`sbs_agent_abi::stamp`), in a sealed memfd that the collector keeps open for the
//! run, named in `LD_PRELOAD` as `/proc/<collector pid>/fd/<n>`.
//!
//! Nothing is passed to the child but that one variable: no descriptor (a program that
//! closes its descriptors before an exec, as Python's `subprocess` does by default, would
//! otherwise leave its child unable to load the library, and the loader would say so in
//! the child's stderr), no other variable (every variable changes what a program that
//! copies its environment allocates and calls). The library opens the run's file through
//! the collector's descriptor too, maps it and closes the descriptor again.
//!
//! What the path asks of a descendant: to be allowed to inspect the collector
//! (`PTRACE_MODE_READ`: the same user, or root), and to see the collector's pid in its
//! `/proc`. A descendant that switched to another user, or runs in a pid namespace with a
//! `/proc` of its own, cannot load the library: the loader prints its error there, and the
//! run's exec check reports the image as not measured.

use std::ffi::{CStr, OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use sbs_agent_abi::stamp::{self, StampValues};

/// One run's copy of a preload library.
#[derive(Debug)]
pub struct StampedLibrary {
    file: File,
}

impl StampedLibrary {
    /// Copy `library` into a sealed memfd called `name`, stamped with our pid, the
    /// descriptor of the run's `shared` file and the run's `token`.
    pub fn new(name: &CStr, library: &[u8], shared: &File, token: u64) -> io::Result<Self> {
        let mut bytes = library.to_vec();
        let values = StampValues {
            pid: u64::from(std::process::id()),
            fd: shared.as_raw_fd() as u64,
            token,
        };
        if !stamp::write(&mut bytes, values) {
            return Err(io::Error::other(
                "internal error: the embedded library has no single stamp to fill in",
            ));
        }
        let mut file: File = memfd_create(
            name,
            MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
        )?
        .into();
        file.write_all(&bytes)?;
        let seals = SealFlag::F_SEAL_WRITE
            | SealFlag::F_SEAL_SHRINK
            | SealFlag::F_SEAL_GROW
            | SealFlag::F_SEAL_SEAL;
        fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals))?;
        Ok(StampedLibrary { file })
    }

    /// The child's `LD_PRELOAD`: this library, then the child's own `existing` one.
    pub fn ld_preload(&self, existing: Option<&OsStr>) -> OsString {
        let mut value = OsString::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.file.as_raw_fd()
        ));
        if let Some(existing) = existing.filter(|e| !e.is_empty()) {
            value.push(" ");
            value.push(existing);
        }
        value
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `library` carries one stamp, and a run's copy holds the run's values.
    pub(crate) fn check_stamping(library: &[u8]) {
        let shared = File::from(memfd_create(c"shared", MemFdCreateFlag::MFD_CLOEXEC).unwrap());
        assert!(stamp::values_at(library).is_some(), "one stamp");
        assert_eq!(stamp::read(library), None, "not stamped as built");
        let copy = StampedLibrary::new(c"test", library, &shared, 0xabc).unwrap();
        let path = copy.ld_preload(None);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), library.len());
        let values = stamp::read(&bytes).expect("stamped");
        assert_eq!(values.pid, u64::from(std::process::id()));
        assert_eq!(values.fd, shared.as_raw_fd() as u64);
        assert_eq!(values.token, 0xabc);
        let with = copy.ld_preload(Some(OsStr::new("/lib/x.so")));
        assert_eq!(
            with,
            OsString::from(format!("{} /lib/x.so", path.to_string_lossy()))
        );
    }

    #[test]
    fn the_agent_library_carries_one_stamp_and_takes_a_run_s_values() {
        check_stamping(crate::run::instruments::alloc::AGENT_LIBRARY);
    }

    /// `library` was linked without the C start files: crtbegin's destructor would call
    /// `__cxa_finalize` at exit, one call more of a function the program may count.
    pub(crate) fn check_no_start_files(library: &[u8]) {
        use object::{Object, ObjectSymbol};
        let file = object::File::parse(library).unwrap();
        let imported: Vec<String> = file
            .dynamic_symbols()
            .filter(|s| s.is_undefined())
            .filter_map(|s| s.name().ok().map(str::to_string))
            .collect();
        for start_file in [
            "__cxa_finalize",
            "__gmon_start__",
            "_ITM_registerTMCloneTable",
        ] {
            assert!(
                !imported.iter().any(|i| i == start_file),
                "{start_file} in {imported:?}"
            );
        }
    }

    #[test]
    fn the_preload_libraries_have_no_start_files() {
        check_no_start_files(crate::run::instruments::alloc::AGENT_LIBRARY);
        check_no_start_files(crate::run::instruments::invocations::inproc_library());
    }
}
