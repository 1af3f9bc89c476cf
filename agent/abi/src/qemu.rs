//! The contract of the QEMU instruction engine (`--instructions qemu`): the *count area*
//! the collector creates and the TCG plugin (`agent/qemu`) counts into.
//!
//! The collector makes a memfd of [`AREA_BYTES`], writes [`AREA_MAGIC`] into word 0 and
//! keeps it open for the run; the plugin gets its path (`/proc/<collector pid>/fd/<n>`)
//! as the plugin argument `area=`, maps it shared and closes the descriptor again, so the
//! program sees no extra descriptor. All fields are 64-bit words.
//!
//! ```text
//! header (HEADER_WORDS)
//!   H_MAGIC        written by the collector
//!   H_LOADED       the plugin's API version + PLUGIN_MARK, once installed
//!   H_NEXT_SLOT    the next free slot (atomic)
//!   H_LOST         processes that found no free slot (their counts are missing)
//!   H_EXECS        execve/execveat calls that did not return: images run outside QEMU
//!   H_REGION_LOST  region markers on a vCPU beyond VCPUS (region counts are missing)
//!   H_REGION_MARKS region markers seen (start and stop)
//! slots (SLOTS, SLOT_WORDS each), one per process running under QEMU
//!   S_PID          the process's pid
//!   S_SHARED       instructions of vCPUs beyond VCPUS (atomic adds)
//!   S_VCPU..       one plain counter per vCPU (guest thread) below VCPUS
//!   S_REGION..     per vCPU: instructions inside the measured region
//!   S_START..      per vCPU: the count when the region was switched on
//! ```
//!
//! Why per process and per vCPU: a forked child inherits both the shared mapping and
//! the vCPU index of the thread that forked, so counting by vCPU index alone would let a
//! parent and its child add to one word at once (and lose updates). Each process claims a
//! slot of its own (the first process at install, a forked child as its fork returns 0);
//! inside a slot each guest thread has its own vCPU index, so its counter is only ever
//! written by one host thread and a plain add is exact.

/// Word 0 of the area, written by the collector.
pub const AREA_MAGIC: u64 = 0x5342_5351_454d_5531; // "SBSQEMU1"
/// Added to the plugin's API version in [`H_LOADED`].
pub const PLUGIN_MARK: u64 = 0x5142_0000;
/// The system call number of the region marker: no kernel defines it, so natively it
/// returns ENOSYS at the cost of one system call; under QEMU the plugin sees it before
/// QEMU answers it the same way. First argument: 1 switches the region on, 0 off.
pub const MARKER_SYSCALL: i64 = 0x5b5b;
/// Env var: set (to `1`) when the run is under the QEMU engine; the harness then issues
/// the marker system call around each operation.
pub const ENV_REGION_QEMU: &str = "SBS_REGION_QEMU";

/// Header words.
pub const HEADER_WORDS: usize = 16;
/// See the module's table.
pub const H_MAGIC: usize = 0;
/// See the module's table.
pub const H_LOADED: usize = 1;
/// See the module's table.
pub const H_NEXT_SLOT: usize = 2;
/// See the module's table.
pub const H_LOST: usize = 3;
/// See the module's table.
pub const H_EXECS: usize = 4;
/// See the module's table.
pub const H_REGION_LOST: usize = 5;
/// See the module's table.
pub const H_REGION_MARKS: usize = 6;

/// vCPUs (guest threads) counted with a plain add per slot; later ones share an atomic
/// word. QEMU's user mode gives each live guest thread its own index and reuses the
/// indexes of threads that ended.
pub const VCPUS: usize = 128;
/// Processes counted per run.
pub const SLOTS: usize = 256;
/// See the module's table.
pub const S_PID: usize = 0;
/// See the module's table.
pub const S_SHARED: usize = 1;
/// Words before the per-vCPU arrays of a slot.
pub const SLOT_HEAD: usize = 8;
/// See the module's table.
pub const S_VCPU: usize = SLOT_HEAD;
/// See the module's table.
pub const S_REGION: usize = SLOT_HEAD + VCPUS;
/// See the module's table.
pub const S_START: usize = SLOT_HEAD + 2 * VCPUS;
/// Words per slot.
pub const SLOT_WORDS: usize = SLOT_HEAD + 3 * VCPUS;
/// Words of the area.
pub const AREA_WORDS: usize = HEADER_WORDS + SLOTS * SLOT_WORDS;
/// Bytes of the area.
pub const AREA_BYTES: usize = AREA_WORDS * 8;

/// Index of slot `slot`'s word `word` in the area.
pub const fn slot_word(slot: usize, word: usize) -> usize {
    HEADER_WORDS + slot * SLOT_WORDS + word
}

/// What one run counted, read from the area after the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AreaValues {
    /// Whether the plugin was installed (it wrote [`H_LOADED`]), and its API version.
    pub loaded: Option<u64>,
    /// Instructions of every process.
    pub total: u64,
    /// Instructions inside the measured region, every process.
    pub region: u64,
    /// Processes that ran under QEMU.
    pub process_count: u64,
    /// Processes that found no slot.
    pub lost: u64,
    /// Images exec'd out of QEMU (not measured).
    pub execs: u64,
    /// Region markers whose counts could not be kept.
    pub region_lost: u64,
    /// Region markers seen.
    pub region_marks: u64,
}

impl AreaValues {
    /// Read the values from the area's words.
    pub fn from_words(words: &[u64]) -> Option<AreaValues> {
        if words.len() < AREA_WORDS || words[H_MAGIC] != AREA_MAGIC {
            return None;
        }
        let loaded = words[H_LOADED]
            .checked_sub(PLUGIN_MARK)
            .filter(|v| *v < 0x1_0000);
        let used = (words[H_NEXT_SLOT] as usize).min(SLOTS);
        let mut v = AreaValues {
            loaded,
            lost: words[H_LOST],
            execs: words[H_EXECS],
            region_lost: words[H_REGION_LOST],
            region_marks: words[H_REGION_MARKS],
            process_count: used as u64,
            ..AreaValues::default()
        };
        for s in 0..used {
            let w = |i: usize| words[slot_word(s, i)];
            let mut n = w(S_SHARED);
            let mut r = 0u64;
            for c in 0..VCPUS {
                n = n.wrapping_add(w(S_VCPU + c));
                r = r.wrapping_add(w(S_REGION + c));
            }
            v.total = v.total.wrapping_add(n);
            v.region = v.region.wrapping_add(r);
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_slots_and_vcpus_and_refuses_a_foreign_area() {
        let mut words = vec![0u64; AREA_WORDS];
        assert_eq!(AreaValues::from_words(&words), None);
        words[H_MAGIC] = AREA_MAGIC;
        words[H_LOADED] = PLUGIN_MARK + 1;
        words[H_NEXT_SLOT] = 2;
        words[H_EXECS] = 1;
        words[slot_word(0, S_VCPU)] = 10;
        words[slot_word(0, S_VCPU + 3)] = 5;
        words[slot_word(0, S_SHARED)] = 1;
        words[slot_word(1, S_VCPU)] = 100;
        words[slot_word(1, S_REGION + 1)] = 7;
        // An unclaimed slot is not read.
        words[slot_word(2, S_VCPU)] = 1000;
        let v = AreaValues::from_words(&words).unwrap();
        assert_eq!(v.loaded, Some(1));
        assert_eq!(v.total, 116);
        assert_eq!(v.region, 7);
        assert_eq!(v.process_count, 2);
        assert_eq!(v.execs, 1);
    }
}
