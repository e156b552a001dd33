//! The graph put together from the document's tensors and nodes: uids for tensors the document
//! left without one, the IR's tensor order, strides, and the context's defaults.

use std::collections::{HashMap, HashSet};

use super::nodes::RawNode;
use super::tensors::RawTensor;
use super::{context_type, RawContext, Result};
use crate::ops::Op;
use crate::serialize::SerializeError;
use crate::{Context, Graph, Node, Tensor, TensorId};

/// Packed strides, or `None` if they overflow.
fn packed_strides_checked(dims: &[i64]) -> Option<Vec<i64>> {
    let mut strides = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].checked_mul(dims[i + 1].max(1))?;
    }
    Some(strides)
}

/// Whether the element count and storage span fit in an `i64` (bad dims and strides are left to
/// [`Graph::validate`], which names them).
fn spans_fit(dims: &[i64], strides: &[i64]) -> bool {
    let count = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d.max(1)));
    let span = dims
        .iter()
        .zip(strides)
        .try_fold(1i64, |acc, (&d, &s)| d.max(1).checked_sub(1)?.checked_mul(s.max(0))?.checked_add(acc));
    count.is_some() && span.is_some()
}

/// Each raw tensor's uid: its own, or for one without, the smallest free uid in order of first
/// use by the nodes (ports in port order), then in document order (deterministic, unlike
/// cudnn-frontend's hash-map order); and the raw tensor of each uid.
fn uids(raw: &[RawTensor], nodes: &[(RawNode, Op)]) -> Result<(Vec<i64>, HashMap<i64, usize>)> {
    let mut owner: HashMap<i64, usize> = HashMap::new();
    for (i, t) in raw.iter().enumerate() {
        if let Some(uid) = t.uid {
            if let Some(&first) = owner.get(&uid) {
                return Err(SerializeError::DuplicateUid {
                    uid,
                    first: raw[first].name.clone(),
                    second: t.name.clone(),
                });
            }
            owner.insert(uid, i);
        }
    }
    let mut uids: Vec<Option<i64>> = raw.iter().map(|t| t.uid).collect();
    let use_order = nodes.iter().flat_map(|(n, _)| n.inputs.iter().chain(&n.outputs).copied()).chain(0..raw.len());
    let mut next = 1i64;
    for i in use_order {
        if uids[i].is_none() {
            while owner.contains_key(&next) {
                next += 1;
            }
            owner.insert(next, i);
            uids[i] = Some(next);
        }
    }
    let uids: Vec<i64> = uids.into_iter().map(|u| u.unwrap_or_default()).collect();
    Ok((uids, owner))
}

/// The order of the raw tensors in the IR: the document's tensor order where it gives one (each
/// uid once), else by uid.
fn sequence(order: Option<Vec<i64>>, owner: &HashMap<i64, usize>, uids: &[i64]) -> Result<Vec<usize>> {
    Ok(match order {
        None => {
            let mut s: Vec<usize> = (0..uids.len()).collect();
            s.sort_by_key(|&i| uids[i]);
            s
        }
        Some(order) => {
            if order.len() != uids.len() {
                return Err(SerializeError::TensorOrder {
                    reason: format!("lists {} uids but the document has {} tensors", order.len(), uids.len()),
                });
            }
            let mut seen = HashSet::new();
            order
                .iter()
                .map(|uid| {
                    let i = owner.get(uid).copied().ok_or_else(|| SerializeError::TensorOrder {
                        reason: format!("lists uid {uid}, which no tensor has"),
                    })?;
                    if !seen.insert(i) {
                        return Err(SerializeError::TensorOrder { reason: format!("lists uid {uid} twice") });
                    }
                    Ok(i)
                })
                .collect::<Result<_>>()?
        }
    })
}

/// Assigns uids where the document has none, orders the tensors, fills strides and builds the IR.
pub(super) fn assemble(
    cx: RawContext,
    raw: Vec<RawTensor>,
    nodes: Vec<(RawNode, Op)>,
    order: Option<Vec<i64>>,
) -> Result<Graph> {
    let (uids, owner) = uids(&raw, &nodes)?;
    // Position in the IR of each raw tensor.
    let sequence = sequence(order, &owner, &uids)?;
    let mut position = vec![0usize; raw.len()];
    for (pos, &i) in sequence.iter().enumerate() {
        position[i] = pos;
    }

    let mut slots: Vec<Option<RawTensor>> = raw.into_iter().map(Some).collect();
    let mut tensors = Vec::with_capacity(slots.len());
    for &i in &sequence {
        let Some(t) = slots.get_mut(i).and_then(Option::take) else { continue };
        let overflow = |t: &RawTensor| SerializeError::Overflow {
            tensor: t.name.clone(),
            dims: t.dims.clone(),
            strides: t.strides.clone().unwrap_or_default(),
        };
        let strides = match t.strides.clone() {
            Some(s) => s,
            None => packed_strides_checked(&t.dims).ok_or_else(|| overflow(&t))?,
        };
        if !spans_fit(&t.dims, &strides) {
            return Err(overflow(&t));
        }
        let data_type = context_type(&cx, &t)
            .ok_or_else(|| SerializeError::MissingField { path: format!("tensors[{:?}].data_type", t.key) })?;
        let pass_by_value = t.pass_by_value.map(|s| if s.exact { s.value } else { data_type.round(s.value) });
        tensors.push(Tensor {
            name: t.name,
            uid: uids[i],
            dims: t.dims,
            strides,
            data_type,
            is_virtual: t.is_virtual,
            pass_by_value,
            host_scalar: t.host_scalar,
        });
    }
    let ids = |v: &[usize]| v.iter().map(|&i| TensorId(position[i])).collect();
    let nodes = nodes
        .into_iter()
        .map(|(n, op)| Node {
            inputs: ids(&n.inputs),
            outputs: ids(&n.outputs),
            name: n.name,
            op,
            compute_data_type: n.compute_data_type,
        })
        .collect();
    let context = Context {
        intermediate_data_type: cx.intermediate.unwrap_or(Context::default().intermediate_data_type),
        compute_data_type: cx.compute.unwrap_or(Context::default().compute_data_type),
    };
    Ok(Graph { name: cx.name, context, tensors, nodes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_checks() {
        assert_eq!(packed_strides_checked(&[2, 3, 4]), Some(vec![12, 4, 1]));
        assert_eq!(packed_strides_checked(&[1 << 40, 1 << 40, 1 << 40]), None);
        assert!(spans_fit(&[2, 3], &[3, 1]));
        assert!(!spans_fit(&[1 << 32, 1 << 32], &[1, 1]));
        assert!(!spans_fit(&[2, i64::MAX], &[i64::MAX, 1]));
    }
}
