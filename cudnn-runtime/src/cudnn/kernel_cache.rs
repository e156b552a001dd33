//! [`KernelCache`]: cuDNN's kernel cache (`CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR`). Plans of
//! dynamic-shape operation graphs (`CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED`) finalized
//! with one cache (`CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE`) share its compiled kernels, so a new
//! shape of a graph structure already built skips the kernel compilation.
//!
//! As cudnn-frontend does (`KernelCache::build`): the descriptor is created empty and finalized
//! once, with the operation graph of the first plan made with it
//! (`CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH`, cuDNN ≥ 9.5); every later plan only refers to it.
//! cuDNN promises nothing about two plans finalized with one cache at once, so the cache is
//! locked while a plan is finalized with it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::cudnn::sys::{cudnnBackendAttributeName_t as Attr, cudnnBackendDescriptorType_t as Kind};

use super::{CudnnError, Descriptor};

/// A kernel cache shared by the plans of one graph structure; cloning shares it.
///
/// ```no_run
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{BuildOptions, KernelCache};
/// let cache = KernelCache::new();
/// // Every plan built with these options shares the cache (and is dynamic-shape).
/// let options = BuildOptions::default().dynamic_shapes(cache.clone());
/// assert_eq!(options.kernel_cache.as_ref(), Some(&cache));
/// ```
#[derive(Clone)]
pub struct KernelCache {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` until the first plan is finalized with it (the descriptor is created then).
    descriptor: Mutex<Option<Descriptor>>,
    /// Plans finalized with it.
    uses: AtomicU64,
}

impl Default for KernelCache {
    fn default() -> Self {
        Self::new()
    }
}

impl KernelCache {
    /// An empty cache; cuDNN's descriptor is made when the first plan uses it.
    pub fn new() -> Self {
        KernelCache { inner: Arc::new(Inner { descriptor: Mutex::new(None), uses: AtomicU64::new(0) }) }
    }

    /// How many owners share the cache: every clone, and every plan finalized with it (a plan
    /// keeps its cache, where its kernels live).
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// How many plans were finalized with this cache.
    pub fn uses(&self) -> u64 {
        self.inner.uses.load(Ordering::Relaxed)
    }

    /// Whether the cache's descriptor exists (a plan was finalized with it).
    pub fn is_finalized(&self) -> bool {
        self.inner.descriptor.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// cuDNN's JSON of the cache (`CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION`, cuDNN ≥ 9.10):
    /// its compiled kernels serialized; `None` before a plan used it.
    pub fn json(&self) -> Result<Option<String>, CudnnError> {
        let held = self.inner.descriptor.lock().unwrap_or_else(PoisonError::into_inner);
        held.as_ref().map(|d| d.get_chars(Attr::CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION)).transpose()
    }

    /// Finalizes `plan` (an execution-plan descriptor, every other attribute set) with this
    /// cache, finalizing the cache first with `operation_graph` if no plan has used it yet. The
    /// cache is locked throughout.
    pub(crate) fn finalize_plan(&self, plan: &mut Descriptor, operation_graph: &Descriptor) -> Result<(), CudnnError> {
        // A panic while the lock was held leaves either no descriptor or a finalized one.
        let mut held = self.inner.descriptor.lock().unwrap_or_else(PoisonError::into_inner);
        let cache = match &mut *held {
            Some(cache) => cache,
            None => {
                let mut cache = Descriptor::new(Kind::CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR)?;
                cache.set_descriptors(Attr::CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, &[operation_graph])?;
                cache.finalize()?;
                held.insert(cache)
            }
        };
        plan.set_descriptors(Attr::CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE, &[cache])?;
        plan.finalize()?;
        self.inner.uses.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl PartialEq for KernelCache {
    /// The same cache (clones of one).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for KernelCache {}

impl fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelCache").field("uses", &self.uses()).field("finalized", &self.is_finalized()).finish()
    }
}
