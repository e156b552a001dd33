//! The variant packs a plan keeps: [`PackSlots`], the last [`PACK_SLOTS`] finalized packs keyed by
//! their pointers, so an execute with pointers seen recently makes no descriptor call.

use crate::cudnn::Descriptor;

/// How many variant packs a plan keeps: callers that rotate two or three sets of buffers
/// (double buffering) hit as often as those that reuse one.
pub const PACK_SLOTS: usize = 4;

/// The variant packs of a plan's recent executes, keyed by their pointers (I/O in I/O order,
/// then the workspace). A pack depends only on the pointers (and the by-value scalars' storage,
/// which the plan owns), so it is reused across [`ExecutionPlan::select`]. It lives with the
/// plan's other descriptors, behind the plan's lock.
pub(crate) struct PackSlots {
    packs: [Option<CachedPack>; PACK_SLOTS],
    next: usize,
}

struct CachedPack {
    key: Box<[u64]>,
    descriptor: Descriptor,
}

impl std::fmt::Debug for PackSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackSlots({} of {PACK_SLOTS})", self.packs.iter().flatten().count())
    }
}

impl PackSlots {
    pub(crate) fn new() -> Self {
        PackSlots { packs: std::array::from_fn(|_| None), next: 0 }
    }

    pub(super) fn find(&self, io: &[u64], workspace: u64) -> Option<&Descriptor> {
        self.packs.iter().flatten().find(|p| p.matches(io, workspace)).map(|p| &p.descriptor)
    }

    pub(super) fn insert(&mut self, io: &[u64], workspace: u64, descriptor: Descriptor) {
        let key = io.iter().copied().chain([workspace]).collect();
        self.packs[self.next] = Some(CachedPack { key, descriptor });
        self.next = (self.next + 1) % PACK_SLOTS;
    }
}

impl CachedPack {
    fn matches(&self, io: &[u64], workspace: u64) -> bool {
        self.key.len() == io.len() + 1 && self.key[..io.len()] == *io && self.key[io.len()] == workspace
    }
}
