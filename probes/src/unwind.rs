//! Unwinding sampled user stacks ([`crate::sample`]) into call chains of file addresses.
//!
//! Each sampled process gets a `framehop` unwinder with one module per executable file it
//! mapped (the program, the dynamic loader, each shared library): the module's `.eh_frame`
//! and `.eh_frame_hdr` (CFI) and `.text`. framehop follows the CFI rule of each address,
//! and frame pointers where no CFI covers it, reading the stack from the copy the sample
//! carries. A process forked without exec made no mapping records of its own: its
//! samples are unwound with the mappings of the process that exec'd first.
//!
//! Addresses come back as the file's own (link-time) addresses, the load bias removed,
//! together with the file: the sampled instruction for the innermost frame, and for each
//! caller the return address minus one, which lies inside the call instruction, so it
//! names the call site.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};

use crate::sample::{Mapping, RawSample, Recorded};

/// Frames followed at most per sample.
const MAX_FRAMES: usize = 512;

/// One frame: an address in one of [`Unwound::objects`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Index into [`Unwound::objects`].
    pub object: usize,
    /// The file's own address: the sampled instruction (innermost frame) or a return
    /// address minus one (inside the call instruction).
    pub address: u64,
}

/// One unwound sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// Process of the sample.
    pub pid: u32,
    /// CPU time it stands for, ns.
    pub period: u64,
    /// Innermost first; `None` for an address in no mapped file (JIT code, the vDSO).
    pub frames: Vec<Option<Frame>>,
    /// Whether unwinding reached the root of the stack (a frame that says it has no
    /// caller); `false` when it stopped early (stack copy too short, no rule for an
    /// address, a corrupt frame).
    pub complete: bool,
}

/// A run's samples, unwound.
#[derive(Debug, Clone, Default)]
pub struct Unwound {
    /// The executable files the frames point into.
    pub objects: Vec<PathBuf>,
    /// One per sample with a stack.
    pub stacks: Vec<Stack>,
}

impl Unwound {
    /// How many samples could not be unwound to the root of their stack.
    pub fn incomplete(&self) -> usize {
        self.stacks.iter().filter(|s| !s.complete).count()
    }

    /// The index of `path` among the objects (compared after resolving symbolic links).
    pub fn object_index(&self, path: &Path) -> Option<usize> {
        let wanted = path.canonicalize().ok()?;
        self.objects
            .iter()
            .position(|o| o.canonicalize().is_ok_and(|p| p == wanted))
    }
}

/// A file's unwinding sections, read once per run.
struct ObjectFile {
    text: Option<(std::ops::Range<u64>, Arc<[u8]>)>,
    eh_frame: Option<(std::ops::Range<u64>, Arc<[u8]>)>,
    eh_frame_hdr: Option<(std::ops::Range<u64>, Arc<[u8]>)>,
    /// `(file offset, file size, virtual address)` of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

/// A slice of shared bytes, as framehop takes section data.
#[derive(Clone, Default)]
struct Bytes(Arc<[u8]>);

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl ObjectFile {
    fn load(path: &Path) -> Option<ObjectFile> {
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let section = |name: &str| {
            let s = file.section_by_name(name)?;
            let bytes = s.data().ok()?;
            Some((s.address()..s.address() + s.size(), Arc::from(bytes)))
        };
        Some(ObjectFile {
            text: section(".text"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            segments: file
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, size, s.address())
                })
                .collect(),
        })
    }

    /// The load bias of a mapping of this file: its start address less the link-time
    /// address of the file offset it maps.
    fn bias(&self, m: &Mapping) -> Option<u64> {
        // Two segments can share a page (lld starts the code segment in the page where
        // the read-only one ends): the one that starts in the mapped page is meant.
        let starts_there = |&&(offset, _, _): &&(u64, u64, u64)| offset & !0xfff == m.pgoff;
        let covers = |&&(offset, size, _): &&(u64, u64, u64)| {
            m.pgoff >= offset & !0xfff && m.pgoff < offset + size
        };
        let segments = &self.segments;
        segments
            .iter()
            .rev()
            .find(starts_there)
            .or_else(|| segments.iter().find(covers))
            .map(|&(offset, _, vaddr)| {
                m.start
                    .wrapping_sub(vaddr)
                    .wrapping_sub(m.pgoff.wrapping_sub(offset))
            })
    }

    fn module(&self, name: String, range: std::ops::Range<u64>, bias: u64) -> Module<Bytes> {
        let part = |s: &Option<(std::ops::Range<u64>, Arc<[u8]>)>| {
            s.as_ref().map(|(r, d)| (r.clone(), Bytes(d.clone())))
        };
        let (text_svma, text) = part(&self.text).unzip();
        let (eh_frame_svma, eh_frame) = part(&self.eh_frame).unzip();
        let (eh_frame_hdr_svma, eh_frame_hdr) = part(&self.eh_frame_hdr).unzip();
        Module::new(
            name,
            range,
            bias,
            ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma,
                text,
                eh_frame_svma,
                eh_frame,
                eh_frame_hdr_svma,
                eh_frame_hdr,
                ..Default::default()
            },
        )
    }
}

/// Where one process's code is: per mapping, the object, its range and load bias.
struct AddressSpace {
    unwinder: UnwinderX86_64<Bytes>,
    ranges: Vec<(std::ops::Range<u64>, usize, u64)>,
}

impl AddressSpace {
    fn frame(&self, address: u64) -> Option<Frame> {
        self.ranges
            .iter()
            .find(|(r, _, _)| r.contains(&address))
            .map(|&(_, object, bias)| Frame {
                object,
                address: address.wrapping_sub(bias),
            })
    }
}

/// Unwind every sample of a run.
pub fn unwind(recorded: &Recorded) -> Unwound {
    let mut objects: Vec<PathBuf> = Vec::new();
    let mut files: Vec<Option<ObjectFile>> = Vec::new();
    let mut spaces: HashMap<u32, AddressSpace> = HashMap::new();
    let mut first_pid = None;
    for m in &recorded.mappings {
        let index = match objects.iter().position(|p| p == &m.path) {
            Some(i) => i,
            None => {
                objects.push(m.path.clone());
                files.push(ObjectFile::load(&m.path));
                objects.len() - 1
            }
        };
        let Some(file) = &files[index] else { continue };
        let Some(bias) = file.bias(m) else { continue };
        first_pid.get_or_insert(m.pid);
        let space = spaces.entry(m.pid).or_insert_with(|| AddressSpace {
            unwinder: UnwinderX86_64::new(),
            ranges: Vec::new(),
        });
        // A remapping of a range replaces what was there.
        if let Some(old) = space.ranges.iter().position(|(r, _, _)| r.start == m.start) {
            space.ranges.remove(old);
            space.unwinder.remove_module(m.start);
        }
        space.ranges.push((m.start..m.end, index, bias));
        space
            .unwinder
            .add_module(file.module(m.path.display().to_string(), m.start..m.end, bias));
    }
    let mut cache = CacheX86_64::new();
    let stacks = recorded
        .samples
        .iter()
        .filter_map(|s| {
            let space = spaces
                .get(&s.pid)
                .or_else(|| first_pid.and_then(|p| spaces.get(&p)))?;
            Some(unwind_one(s, space, &mut cache))
        })
        .collect();
    Unwound { objects, stacks }
}

fn unwind_one(s: &RawSample, space: &AddressSpace, cache: &mut CacheX86_64) -> Stack {
    let mut read_stack = |address: u64| -> Result<u64, ()> {
        let at = address.checked_sub(s.sp).ok_or(())? as usize;
        let word = s.stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
    };
    let regs = UnwindRegsX86_64::new(s.ip, s.sp, s.bp);
    let mut frames = Vec::new();
    let mut iter = space
        .unwinder
        .iter_frames(s.ip, regs, cache, &mut read_stack);
    let complete = loop {
        match iter.next() {
            Ok(Some(address)) => {
                let at = match address {
                    FrameAddress::InstructionPointer(a) => a,
                    FrameAddress::ReturnAddress(_) => address.address_for_lookup(),
                };
                frames.push(space.frame(at));
                if frames.len() >= MAX_FRAMES {
                    break false;
                }
            }
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    Stack {
        pid: s.pid,
        period: s.period,
        frames,
        complete,
    }
}
