//! `#[fuse(..)]`: a graph's fusion policy is part of its type. `Name::FUSION` shows it, every
//! plan of the type is built with it (`Name::build_options`), and `Name::FINGERPRINT` covers it,
//! so a payload made under one policy never loads as the other. Plans are built deviceless
//! against the H200's properties (CI runs these with real cuDNN).

#![cfg(feature = "cudnn")]

use crate::common;

use std::borrow::Cow;

use cudnn_graph::backend::{BuildOptions, Fusion, HeuristicMode};
use cudnn_graph::engines::{CacheSource, PlanCache};
use cudnn_graph::payload::plan::{PayloadError, SerializeOptions};
use cudnn_graph::Error;

// The same graph three times, each in its own module so that the attribute is all that differs
// (the name included): demanding one kernel, `auto` spelled out, and nothing said.
mod single {
    cudnn_graph::graph! {
        /// A matmul with its epilogue: one kernel, or an error.
        #[fuse(single)]
        pub Epilogue<dyn M>(a: bf16[1, M, 32], b: bf16[1, 32, 64], bias: bf16[1, 1, 64]) -> (y: bf16[1, M, 64]) {
            y = relu(add(matmul(a, b), bias));
        }
    }
}

mod auto {
    cudnn_graph::graph! {
        /// A matmul with its epilogue, split where cuDNN needs it.
        #[fuse(auto)]
        pub Epilogue<dyn M>(a: bf16[1, M, 32], b: bf16[1, 32, 64], bias: bf16[1, 1, 64]) -> (y: bf16[1, M, 64]) {
            y = relu(add(matmul(a, b), bias));
        }
    }
}

mod plain {
    cudnn_graph::graph! {
        /// A matmul with its epilogue, no policy declared.
        pub Epilogue<dyn M>(a: bf16[1, M, 32], b: bf16[1, 32, 64], bias: bf16[1, 1, 64]) -> (y: bf16[1, M, 64]) {
            y = relu(add(matmul(a, b), bias));
        }
    }
}

#[test]
fn the_declared_policy_is_an_associated_constant() {
    assert_eq!(single::Epilogue::FUSION, Fusion::Single);
    assert_eq!(auto::Epilogue::FUSION, Fusion::Auto);
    assert_eq!(plain::Epilogue::FUSION, Fusion::Auto);
}

#[test]
fn the_fingerprint_tells_the_policies_apart() {
    // Equal IR, so only the type fingerprint can keep a plan of one from serving the other.
    let ir = |g: cudnn_graph::Graph| g.fingerprint();
    assert_eq!(ir(single::Epilogue::new(8).graph().unwrap()), ir(auto::Epilogue::new(8).graph().unwrap()));
    assert_ne!(single::Epilogue::FINGERPRINT, auto::Epilogue::FINGERPRINT);
    // `auto` is the default written out: the same type as saying nothing.
    assert_eq!(auto::Epilogue::FINGERPRINT, plain::Epilogue::FINGERPRINT);
}

#[test]
fn a_single_kernel_graph_forces_its_policy_onto_the_callers_options() {
    let caller = BuildOptions::default().modes(&[HeuristicMode::B]).workspace_limit(1 << 20).all_plans();
    let forced = single::Epilogue::build_options(&caller);
    assert!(matches!(forced, Cow::Owned(_)));
    // Only `fusion` changes.
    assert_eq!(*forced, caller.clone().single_kernel());
    // Options that already say so are used as they are.
    let already = caller.clone().single_kernel();
    assert!(matches!(single::Epilogue::build_options(&already), Cow::Borrowed(o) if *o == already));
}

#[test]
fn an_auto_graph_leaves_the_callers_options_alone() {
    for caller in [BuildOptions::default(), BuildOptions::default().single_kernel()] {
        for options in [auto::Epilogue::build_options(&caller), plain::Epilogue::build_options(&caller)] {
            assert!(matches!(options, Cow::Borrowed(o) if *o == caller), "{caller:?}");
        }
    }
}

#[needs_cudnn]
#[test]
fn a_single_kernel_graph_builds_caches_and_round_trips_as_its_own_type() {
    let Some(cudnn) = common::deviceless() else { return };
    let g = single::Epilogue::new(96);
    // A matmul with a pointwise epilogue is one kernel for cuDNN: the demand is met.
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let cache = PlanCache::in_memory();
    let (_, outcome) = g.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
    assert_eq!(outcome.source, CacheSource::Built);
    let (_, outcome) = g.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
    assert_eq!(outcome.source, CacheSource::Memory);

    // Its payload loads into its own type, and into no type of another policy.
    let bytes = plan.serialize(SerializeOptions::default()).unwrap();
    assert_eq!(single::Epilogue::deserialize(&cudnn, &bytes).unwrap().graph, g);
    refused_as_another_type(auto::Epilogue::deserialize(&cudnn, &bytes).err());
    refused_as_another_type(plain::Epilogue::deserialize(&cudnn, &bytes).err());
}

fn refused_as_another_type(error: Option<Error>) {
    match error {
        Some(Error::Payload(e @ PayloadError::TypeFingerprint { .. })) => {
            assert!(e.to_string().starts_with("payload was made by graph type `Epilogue` (fingerprint "), "{e}")
        }
        other => panic!("expected a type fingerprint error, got {other:?}"),
    }
}

/// `build_autotuned` times candidates on a GPU: on a deviceless context it builds them (with the
/// declared policy) and then refuses by name to tune.
#[needs_cudnn]
#[test]
fn deviceless_build_autotuned_is_a_typed_error() {
    let Some(cudnn) = common::deviceless() else { return };
    let tuning = cudnn_graph::engines::AutotuneOptions::default();
    match single::Epilogue::new(64).build_autotuned(&cudnn, &BuildOptions::default(), &tuning) {
        Err(Error::Backend(e @ cudnn_graph::backend::BackendError::DevicelessPlan { .. })) => {
            assert!(e.to_string().contains("Epilogue"), "{e}");
        }
        other => panic!("expected DevicelessPlan, got {:?}", other.map(|(p, _)| p.plan().selected().tag())),
    }
}
