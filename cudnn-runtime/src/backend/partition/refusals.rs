//! The refusal memo: the parts cuDNN refused, remembered for the process so that the next build
//! of the same part splits it without asking.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

#[derive(Debug, Default)]
pub(crate) struct Refusals {
    refused: Mutex<HashMap<RefusalKey, String>>,
}

/// cuDNN's version, the GPU's compute capability (`None` where unknown), the part's
/// [`Graph::fingerprint`].
pub(crate) type RefusalKey = (usize, Option<u32>, u64);

impl Refusals {
    /// The process's refusals.
    pub(crate) fn global() -> &'static Refusals {
        static REFUSALS: std::sync::OnceLock<Refusals> = std::sync::OnceLock::new();
        REFUSALS.get_or_init(Refusals::default)
    }

    /// How cuDNN refused this part, if it did.
    pub(crate) fn get(&self, key: RefusalKey) -> Option<String> {
        self.refused.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned()
    }

    /// Remembers that cuDNN refused this part, and how.
    pub(crate) fn insert(&self, key: RefusalKey, why: String) {
        self.refused.lock().unwrap_or_else(PoisonError::into_inner).insert(key, why);
    }
}
