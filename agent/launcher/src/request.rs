//! Reading a request (layout: `sbs_agent_abi::launcher`): plain Rust over its bytes, with
//! every count and string checked against them, so that a malformed request is refused,
//! never followed.

use sbs_agent_abi::launcher::{
    CPU_MASK_WORDS, FLAG_CPUS, FLAG_LATCHED, FLAG_NO_ASLR, MAX_TARGETS, REQUEST_HEADER_WORDS,
    REQUEST_MAGIC,
};

/// A request's header and target numbers; the strings stay in its bytes.
pub struct ReceivedRequest {
    /// The benchmark's process waits at the latch.
    pub latched: bool,
    /// ASLR off.
    pub no_aslr: bool,
    /// `cpu_mask` applies.
    pub cpus: bool,
    /// The CPUs to run on.
    pub cpu_mask: [u64; CPU_MASK_WORDS],
    /// The number of arguments, `argv[0]` included.
    pub args: usize,
    /// The number of environment entries.
    pub env: usize,
    targets: [i32; MAX_TARGETS],
    count: usize,
    strings_at: usize,
}

fn word(bytes: &[u8], i: usize) -> Option<u64> {
    let w = bytes.get(i * 8..i * 8 + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(w);
    Some(u64::from_le_bytes(a))
}

impl ReceivedRequest {
    /// Read the header of `bytes`, for a datagram that carried `passed` descriptors
    /// besides the request's own: the report pipe, the latch of a latched run, the targets.
    pub fn parse(bytes: &[u8], passed: usize) -> Option<ReceivedRequest> {
        if word(bytes, 0)? != REQUEST_MAGIC {
            return None;
        }
        let flags = word(bytes, 1)?;
        let count = usize::try_from(word(bytes, 2)?).ok()?;
        let args = usize::try_from(word(bytes, 3)?).ok()?;
        let env = usize::try_from(word(bytes, 4)?).ok()?;
        let latched = flags & FLAG_LATCHED != 0;
        if count + 1 + usize::from(latched) != passed || count > MAX_TARGETS || args == 0 {
            return None;
        }
        let mut cpu_mask = [0u64; CPU_MASK_WORDS];
        for (i, m) in cpu_mask.iter_mut().enumerate() {
            *m = word(bytes, 5 + i)?;
        }
        let mut targets = [0i32; MAX_TARGETS];
        for (i, t) in targets.iter_mut().take(count).enumerate() {
            *t = i32::try_from(word(bytes, REQUEST_HEADER_WORDS + i)?).ok()?;
            if *t < 0 {
                return None;
            }
        }
        Some(ReceivedRequest {
            latched,
            no_aslr: flags & FLAG_NO_ASLR != 0,
            cpus: flags & FLAG_CPUS != 0,
            cpu_mask,
            args,
            env,
            targets,
            count,
            strings_at: (REQUEST_HEADER_WORDS + count) * 8,
        })
    }

    /// The target number of the `i`th passed descriptor.
    pub fn target(&self, i: usize) -> i32 {
        self.targets[i]
    }

    /// The highest target number (2 at least: stdin, stdout and stderr are always there).
    pub fn highest_target(&self) -> i32 {
        self.targets[..self.count]
            .iter()
            .copied()
            .max()
            .unwrap_or(2)
            .max(2)
    }

    /// Fill `table` with pointers to the arguments, a NULL, the environment entries and a
    /// NULL (`table` has room for exactly that), and return a pointer to the program's
    /// path; `None` if the strings in `bytes` are not exactly that many, NUL-terminated.
    pub fn strings(&self, bytes: &[u8], table: &mut [*const u8]) -> Option<*const u8> {
        if table.len() != self.args + 1 + self.env + 1 {
            return None;
        }
        let mut rest = bytes.get(self.strings_at..)?;
        let mut next = || {
            let end = rest.iter().position(|&b| b == 0)?;
            let s = rest.as_ptr();
            rest = &rest[end + 1..];
            Some(s)
        };
        let program = next()?;
        let mut slot = 0;
        for _ in 0..self.args {
            table[slot] = next()?;
            slot += 1;
        }
        table[slot] = core::ptr::null();
        slot += 1;
        for _ in 0..self.env {
            table[slot] = next()?;
            slot += 1;
        }
        table[slot] = core::ptr::null();
        Some(program)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn request(flags: u64, targets: &[i32], strings: &[&str], args: usize) -> Vec<u8> {
        let mut words = vec![
            REQUEST_MAGIC,
            flags,
            targets.len() as u64,
            args as u64,
            (strings.len() - 1 - args) as u64,
        ];
        words.extend([3u64; CPU_MASK_WORDS]);
        words.extend(targets.iter().map(|&t| t as u64));
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for s in strings {
            bytes.extend(s.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    fn text(p: *const u8) -> String {
        // SAFETY: the pointers come from `strings`, inside the test's live request bytes.
        unsafe { CStr::from_ptr(p.cast()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_request_reads_back() {
        let bytes = request(
            FLAG_LATCHED | FLAG_CPUS,
            &[0, 1, 2, 61],
            &["/bin/echo", "echo", "hi", "A=1"],
            2,
        );
        // The report pipe, the latch and four targets.
        let r = ReceivedRequest::parse(&bytes, 6).unwrap();
        assert!(r.latched && r.cpus && !r.no_aslr);
        assert_eq!(r.cpu_mask, [3; CPU_MASK_WORDS]);
        assert_eq!((r.args, r.env), (2, 1));
        assert_eq!((r.target(3), r.highest_target()), (61, 61));
        let mut table = [std::ptr::null(); 5];
        let program = r.strings(&bytes, &mut table).unwrap();
        assert_eq!(text(program), "/bin/echo");
        let shown: Vec<_> = table
            .iter()
            .map(|&p| (!p.is_null()).then(|| text(p)))
            .collect();
        assert_eq!(
            shown,
            [
                Some("echo".into()),
                Some("hi".into()),
                None,
                Some("A=1".into()),
                None
            ]
        );
    }

    #[test]
    fn malformed_requests_are_refused() {
        let good = request(0, &[0], &["/bin/true", "true"], 1);
        assert!(ReceivedRequest::parse(&good, 2).is_some());
        // A descriptor count that is not what came with the datagram (a latch too many).
        assert!(ReceivedRequest::parse(&good, 3).is_none());
        // Another magic; cut short.
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert!(ReceivedRequest::parse(&bad, 2).is_none());
        assert!(ReceivedRequest::parse(&good[..40], 2).is_none());
        // A string without its NUL, or fewer strings than announced.
        let r = ReceivedRequest::parse(&good, 2).unwrap();
        let mut table = [std::ptr::null(); 3];
        assert!(r.strings(&good[..good.len() - 1], &mut table).is_none());
        let short = request(0, &[0], &["/bin/true", "true"], 1);
        let mut more = short.clone();
        more[24..32].copy_from_slice(&3u64.to_le_bytes()); // 3 arguments announced
        let r = ReceivedRequest::parse(&more, 2).unwrap();
        let mut table = [std::ptr::null(); 5];
        assert!(r.strings(&more, &mut table).is_none());
        // No arguments at all, a negative target.
        let mut none = good.clone();
        none[24..32].copy_from_slice(&0u64.to_le_bytes());
        assert!(ReceivedRequest::parse(&none, 2).is_none());
        let neg = request(0, &[-1], &["/bin/true", "true"], 1);
        assert!(ReceivedRequest::parse(&neg, 2).is_none());
    }
}
