//! [`Partition`]: one value for "this graph as parts", whichever way it was made (the fusion
//! table's partition, split where cuDNN refused; a partition recorded by node names; a
//! candidate [`Fusion::Measure`](crate::backend::Fusion::Measure) times). It owns the graph as the
//! parts see it, its aliases and groups, consults and writes the refusal memo, builds its parts
//! with a closure the plan gives it, and places what they exchange in an [`Arena`].

use super::arena::Arena;
use super::cut::{node_ref, Cut, CutReason};
use super::group::{extract, from_names, group, measured_cuts, retype_epilogue_cut, split, Group};
use super::refusals::{RefusalKey, Refusals};
use super::views::{aliases, restride, Alias};
use crate::cudnn::Cudnn;
use crate::ir::{Graph, TensorId};

/// A graph as parts: the graph rewritten for cuDNN and restrided so the views between parts are
/// aliases (with the tensors a measured epilogue cut materializes retyped), its aliases, and its
/// groups of nodes, one per part, in execution order.
#[derive(Debug, Clone)]
pub(crate) struct Partition {
    graph: Graph,
    alias: Vec<Option<Alias>>,
    groups: Vec<Group>,
}

/// Built parts, each with its part's tensors' ids in the partition's graph.
pub(crate) type BuiltParts<P> = Vec<(P, Vec<TensorId>)>;

/// The key of `graph` in the refusal memo: cuDNN's version, the GPU, the graph's fingerprint.
fn refusal_key(cudnn: &Cudnn, graph: &Graph) -> RefusalKey {
    (cudnn.version(), cudnn.sm(), graph.fingerprint())
}

impl Partition {
    /// Whether the fusion table plans `planned` (the graph rewritten) as one kernel, views
    /// fusing as elementwise ops; where not, the first cut.
    pub(crate) fn one_kernel(planned: &Graph) -> Result<(), Option<Cut>> {
        let table = group(planned, None);
        if table.len() > 1 {
            return Err(table.iter().find_map(|g| g.cut.clone()));
        }
        Ok(())
    }

    /// How cuDNN refused `graph` as one kernel before (this cuDNN version and GPU), if it did.
    pub(crate) fn refused(cudnn: &Cudnn, graph: &Graph) -> Option<String> {
        Refusals::global().get(refusal_key(cudnn, graph))
    }

    /// Remembers that cuDNN refused `graph` as one kernel, and how.
    pub(crate) fn remember_refusal(cudnn: &Cudnn, graph: &Graph, why: String) {
        Refusals::global().insert(refusal_key(cudnn, graph), why);
    }

    /// The fusion table's partition of `planned` ([`Fusion::Auto`](crate::backend::Fusion::Auto));
    /// with `refused` (why cuDNN would not take it as one kernel), a partition of one part is
    /// split around its anchor. `None` when that part is one node, which cannot be split.
    pub(crate) fn automatic(planned: &Graph, refused: Option<&str>) -> Option<Partition> {
        let graph = restride(planned);
        let alias = aliases(&graph);
        let mut groups = group(&graph, Some(&alias));
        if let (Some(why), [one]) = (refused, groups.as_slice()) {
            groups = split(&graph, one, why)?;
        }
        Some(Partition { graph, alias, groups })
    }

    /// The partition recorded by the node names of each part (a plan payload's parts, a plan's
    /// own), checked to cover `planned` as a partition must; the error says what is wrong.
    pub(crate) fn from_names<'a>(
        planned: &Graph,
        names: impl Iterator<Item = &'a [String]>,
    ) -> Result<Partition, String> {
        let graph = restride(planned);
        let alias = aliases(&graph);
        let groups = from_names(&graph, names, &alias)?;
        Ok(Partition { graph, alias, groups })
    }

    /// The partition with each part's cut as `cuts` gives it, in part order.
    pub(crate) fn with_cuts(mut self, cuts: impl Iterator<Item = Option<Cut>>) -> Partition {
        for (group, cut) in self.groups.iter_mut().zip(cuts) {
            group.cut = cut;
        }
        self
    }

    /// The cuts of a partition read back from a payload, from each part's saved reasons
    /// (cuDNN's refusal, autotuning's times; in part order): where it has one, a cut of that
    /// reason before the part's first node, cuDNN's refusal first; else the fusion table's cut,
    /// where the table's partition has the same part. A part cut by autotuning's times stores the
    /// tensors its epilogue cut materializes as the build stored them ([`retype_epilogue_cut`]).
    pub(crate) fn with_saved_cuts(mut self, saved: &[(Option<&str>, Option<&str>)]) -> Partition {
        let table = group(&self.graph, Some(&self.alias));
        for (k, (_, measured)) in saved.iter().enumerate() {
            if measured.is_some() {
                retype_epilogue_cut(&mut self.graph, &self.groups, k);
            }
        }
        for (k, (refused, measured)) in saved.iter().enumerate().take(self.groups.len()) {
            let reason = match (refused, measured) {
                (Some(why), _) => Some(CutReason::Refused(why.to_string())),
                (None, Some(times)) => Some(CutReason::MeasuredFaster(times.to_string())),
                (None, None) => None,
            };
            let before = k.checked_sub(1).and_then(|j| self.groups[j].nodes.last());
            self.groups[k].cut = match (reason, before) {
                (Some(reason), Some(&before)) => Some(Cut {
                    before: node_ref(&self.graph.nodes[before]),
                    after: node_ref(&self.graph.nodes[self.groups[k].nodes[0]]),
                    reason,
                }),
                _ => table.get(k).filter(|g| g.nodes == self.groups[k].nodes).and_then(|g| g.cut.clone()),
            };
        }
        self
    }

    /// The candidates [`Fusion::Measure`](crate::backend::Fusion::Measure) times against this
    /// partition: it with one part cut at one of [`measured_cuts`]' points each, the tensors an
    /// epilogue cut materializes stored as [`retype_epilogue_cut`] says.
    pub(crate) fn measured(&self) -> Vec<Partition> {
        let mut out = Vec::new();
        for candidate in measured_cuts(&self.graph, &self.groups) {
            let mut graph = self.graph.clone();
            for k in 0..candidate.len() {
                if candidate[k].cut.as_ref().is_some_and(|c| c.reason == CutReason::ToMeasure) {
                    retype_epilogue_cut(&mut graph, &candidate, k);
                }
            }
            out.push(Partition { graph, alias: self.alias.clone(), groups: candidate });
        }
        out
    }

    /// How many parts it has.
    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }

    /// The names of the nodes of each part, in part order.
    pub(crate) fn names(&self) -> Vec<Vec<String>> {
        (0..self.groups.len()).map(|k| self.nodes(k)).collect()
    }

    /// The names of part `k`'s nodes.
    fn nodes(&self, k: usize) -> Vec<String> {
        self.groups[k].nodes.iter().map(|&n| self.graph.nodes[n].name.clone()).collect()
    }

    /// Builds every part in order with `build` (the part's own graph, its nodes' names, its cut),
    /// stopping at the first error.
    pub(crate) fn build_each<P, E>(
        &self,
        mut build: impl FnMut(usize, Graph, Vec<String>, Option<Cut>) -> Result<P, E>,
    ) -> Result<BuiltParts<P>, E> {
        let mut built = Vec::with_capacity(self.groups.len());
        for k in 0..self.groups.len() {
            let part = extract(&self.graph, &self.groups, k, &self.alias);
            let p = build(k, part.graph, self.nodes(k), self.groups[k].cut.clone())?;
            built.push((p, part.tensors));
        }
        Ok(built)
    }

    /// Builds every part in order with `build`, splitting a part cuDNN refuses: a part of several
    /// nodes cuDNN refused before (the refusal memo) is split without asking, and one `build`
    /// fails for with a refusal (`refusal` gives its reason, `None` for an error a split cannot
    /// help, which is returned) is split around its anchor, the refusal remembered. `Ok(None)`
    /// when a part that cannot be split was refused before; its own error when it was refused now.
    pub(crate) fn build_splitting<P, E>(
        &mut self,
        cudnn: &Cudnn,
        mut build: impl FnMut(Graph, Vec<String>, Option<Cut>) -> Result<P, E>,
        refusal: impl Fn(&E) -> Option<String>,
    ) -> Result<Option<BuiltParts<P>>, E> {
        let mut built = Vec::new();
        while built.len() < self.groups.len() {
            let k = built.len();
            let part = extract(&self.graph, &self.groups, k, &self.alias);
            let remembered = if self.groups[k].nodes.len() > 1 { Self::refused(cudnn, &part.graph) } else { None };
            let key = refusal_key(cudnn, &part.graph);
            let failure = match remembered {
                Some(why) => {
                    tracing::debug!(part = k, reason = %why, "cuDNN refused this part before: splitting it");
                    Err((why, None))
                }
                None => match build(part.graph, self.nodes(k), self.groups[k].cut.clone()) {
                    Ok(p) => Ok(p),
                    Err(e) => match refusal(&e) {
                        Some(why) => Err((why, Some(e))),
                        None => return Err(e),
                    },
                },
            };
            match failure {
                Ok(p) => built.push((p, part.tensors)),
                Err((why, error)) => {
                    let Some(pieces) = split(&self.graph, &self.groups[k], &why) else {
                        return match error {
                            Some(e) => Err(e),
                            None => Ok(None),
                        };
                    };
                    Refusals::global().insert(key, why);
                    self.groups.splice(k..=k, pieces);
                }
            }
        }
        Ok(Some(built))
    }

    /// Where the tensors the parts exchange live: graph I/O (`io`, the plan's I/O order) in its
    /// buffers, the rest in the arena.
    pub(crate) fn arena(&self, io: &[TensorId]) -> Arena {
        Arena::new(&self.graph, &self.groups, &self.alias, io)
    }
}
