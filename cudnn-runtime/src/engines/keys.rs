//! What plans and kernel caches are filed under: a [`PlanKey`] (graph fingerprint, runtime-dim
//! binding, SM, cuDNN version) names a plan and its entry file; a [`StructureKey`] (the graph's
//! structure without its extents) names a kernel cache.

use std::fmt;

use crate::backend::Cudnn;
use crate::payload::plan::{Expect, PlanRecord};
use crate::{Fnv, Graph};

/// What a cached plan is filed under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlanKey {
    /// [`Graph::fingerprint`].
    pub graph_fingerprint: u64,
    /// The `graph!` type's runtime-dim binding ([`Expect::binding`]), if any.
    pub binding: Option<String>,
    /// The target's compute capability.
    pub sm: Option<u32>,
    /// `cudnnGetVersion()`.
    pub cudnn_version: usize,
}

impl PlanKey {
    /// The key of `graph` (with `expect`'s binding) planned by `cudnn`.
    pub fn new(cudnn: &Cudnn, graph: &Graph, expect: &Expect) -> Self {
        PlanKey {
            graph_fingerprint: graph.fingerprint(),
            binding: expect.binding.clone(),
            sm: cudnn.sm(),
            cudnn_version: cudnn.version(),
        }
    }

    /// The key a payload's plan record was made under; `None` if its fingerprint is not `0x…`
    /// hex.
    pub fn of_record(record: &PlanRecord) -> Option<Self> {
        let hex = record.graph_fingerprint.strip_prefix("0x")?;
        Some(PlanKey {
            graph_fingerprint: u64::from_str_radix(hex, 16).ok()?,
            binding: record.binding.clone(),
            sm: record.sm,
            cudnn_version: record.cudnn_version,
        })
    }

    /// The entry's file name in a cache directory.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::PlanKey;
    /// let key = PlanKey { graph_fingerprint: 0xab, binding: None, sm: Some(90), cudnn_version: 91900 };
    /// assert!(key.file_name().starts_with("00000000000000ab-"));
    /// assert!(key.file_name().ends_with("-sm90-cudnn91900.plan.json"));
    /// ```
    pub fn file_name(&self) -> String {
        let mut h = Fnv::default();
        match &self.binding {
            Some(b) => h.write_str(&format!("some:{b}")),
            None => h.write_str("none"),
        }
        let sm = self.sm.map_or_else(|| "any".to_string(), |s| s.to_string());
        format!("{:016x}-{:016x}-sm{sm}-cudnn{}.plan.json", self.graph_fingerprint, h.finish(), self.cudnn_version)
    }
}

impl fmt::Display for PlanKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "graph {:#018x}", self.graph_fingerprint)?;
        if let Some(b) = &self.binding {
            write!(f, " ({b})")?;
        }
        match self.sm {
            Some(sm) => write!(f, ", sm {sm}")?,
            None => f.write_str(", sm ?")?,
        }
        write!(f, ", cuDNN {}", self.cudnn_version)
    }
}

/// What a kernel cache is filed under ([`PlanCache::dynamic_shapes`](crate::engines::PlanCache::dynamic_shapes)): the graph's structure
/// without its extents, on one SM and cuDNN version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StructureKey {
    /// [`Graph::structure_fingerprint`].
    pub structure_fingerprint: u64,
    /// The target's compute capability.
    pub sm: Option<u32>,
    /// `cudnnGetVersion()`.
    pub cudnn_version: usize,
}

impl StructureKey {
    /// The structure key of `graph` planned by `cudnn`.
    pub fn new(cudnn: &Cudnn, graph: &Graph) -> Self {
        StructureKey {
            structure_fingerprint: graph.structure_fingerprint(),
            sm: cudnn.sm(),
            cudnn_version: cudnn.version(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fp: u64, binding: Option<&str>, sm: Option<u32>, version: usize) -> PlanKey {
        PlanKey { graph_fingerprint: fp, binding: binding.map(str::to_string), sm, cudnn_version: version }
    }

    #[test]
    fn every_key_part_changes_the_file_name() {
        let base = key(1, Some("M = 64"), Some(90), 91900);
        let names = [
            base.file_name(),
            key(2, Some("M = 64"), Some(90), 91900).file_name(),
            key(1, Some("M = 65"), Some(90), 91900).file_name(),
            key(1, None, Some(90), 91900).file_name(),
            key(1, Some(""), Some(90), 91900).file_name(),
            key(1, Some("M = 64"), Some(80), 91900).file_name(),
            key(1, Some("M = 64"), None, 91900).file_name(),
            key(1, Some("M = 64"), Some(90), 91400).file_name(),
        ];
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:#?}");
        assert_eq!(base.file_name(), key(1, Some("M = 64"), Some(90), 91900).file_name());
        assert!(names.iter().all(|n| !n.starts_with('.') && !n.contains('/')));
    }
}
