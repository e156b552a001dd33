//! `dyn` dims with declared ranges and classes (issue 19): the generated `SHAPE_CLASSES`,
//! `class()` and `class_values()`, and `graph()` refusing a value outside its range; and plans of
//! every class bound made ahead of time, deviceless, into a directory a service seeds its plan
//! cache from.

use crate::common;

use cudnn_graph::shape_class::{Buckets, ShapeClass};
use cudnn_graph::{graph, ArgError};

graph! {
    /// Rows in batches of a listed size, sequence lengths in power-of-two classes.
    pub Classed<dyn B: [1, 8, 64], dyn S: 16..=4096 pow2, dyn N>(x: f32[B, S, 32]) -> (y: f32[B, S, 32]) {
        y = relu(x);
    }

    /// Multiples of 64, and a range of exact values.
    pub Stepped<dyn M: 64..=1000 multiple(64), dyn K: 1..=8>(a: f32[M, K]) -> (b: f32[M, K]) {
        b = relu(a);
    }
}

#[test]
fn the_declared_classes_are_constants_of_the_type() {
    assert_eq!(
        Classed::SHAPE_CLASSES,
        [
            ShapeClass { dim: "B", min: 1, max: 64, buckets: Buckets::List(&[1, 8, 64]) },
            ShapeClass { dim: "S", min: 16, max: 4096, buckets: Buckets::Pow2 },
            ShapeClass::any("N"),
        ]
    );
    assert_eq!(Stepped::SHAPE_CLASSES[0].to_string(), "M: 64..=1000 multiple(64)");
    assert_eq!(Stepped::SHAPE_CLASSES[1].to_string(), "K: 1..=8");
}

#[test]
fn a_value_maps_to_its_class_bound() {
    assert_eq!(Classed::new(5, 100, 7).class(), Ok(Classed::new(8, 128, 7)));
    assert_eq!(Classed::new(1, 16, 1).class(), Ok(Classed::new(1, 16, 1)));
    assert_eq!(Stepped::new(65, 3).class(), Ok(Stepped::new(128, 3)));
    assert_eq!(Stepped::new(999, 8).class(), Ok(Stepped::new(1000, 8)));
    let e = Classed::new(65, 100, 1).class().unwrap_err();
    assert_eq!(e.to_string(), "dyn dim `B` = 65 is outside its declared range 1..=64");
}

#[test]
fn class_values_list_every_combination_of_bounds_to_build_ahead_of_time() {
    // `N` and `K` take exact values: there is no finite list.
    assert_eq!(Classed::class_values(), None);
    assert_eq!(Stepped::class_values(), None);
    graph! {
        pub Prebuilt<dyn B: [1, 8], dyn S: 128..=1024 pow2>(x: f32[B, S]) -> (y: f32[B, S]) { y = relu(x); }
    }
    let all = Prebuilt::class_values().unwrap();
    let pairs: Vec<(usize, usize)> = all.iter().map(|v| (v.B, v.S)).collect();
    assert_eq!(pairs, [(1, 128), (1, 256), (1, 512), (1, 1024), (8, 128), (8, 256), (8, 512), (8, 1024)]);
    assert!(all.iter().all(|v| v.class() == Ok(*v)), "a bound is its own class");
    assert!(all.iter().all(|v| v.graph().is_ok()));
}

#[test]
fn graph_refuses_a_value_outside_its_range_naming_the_dim() {
    let e = Classed::new(8, 8192, 1).graph().unwrap_err();
    assert!(matches!(&e, ArgError::ShapeClass { source, .. } if source.dim == "S" && source.value == 8192), "{e:?}");
    assert_eq!(e.to_string(), "graph `Classed`: dyn dim `S` = 8192 is outside its declared range 16..=4096");
    // Inside the range, any value builds its exact graph (cuDNN 9.19 runs each shape's own plan).
    let g = Classed::new(3, 100, 1).graph().unwrap();
    assert_eq!(g.tensors[0].dims, [3, 100, 32]);
    let x: Vec<f32> = (0..3 * 100 * 32).map(|i| (i % 7) as f32 - 3.0).collect();
    let y = Classed::new(3, 100, 1).reference(ClassedInputs { x: &x }).unwrap().y;
    assert!(y.iter().zip(&x).all(|(y, x)| *y == x.max(0.0)));
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn every_class_bound_is_planned_ahead_of_time_and_seeds_a_plan_cache() {
    use cudnn_graph::backend::BuildOptions;
    use cudnn_graph::engines::{CacheSource, PlanCache, DEFAULT_BUDGET_BYTES};
    graph! {
        pub Served<dyn S: 64..=512 pow2>(a: bf16[1, S, 64], b: bf16[1, 64, 128], bias: bf16[1, 1, 128]) -> (y: bf16[1, S, 128]) {
            y = relu(add(matmul(a, b), bias));
        }
    }
    let Some(cudnn) = common::deviceless() else { return };
    let dir = std::env::temp_dir().join(format!("cudnn-graph-classes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Ahead of time (deviceless, for the H200): one plan per class bound, written to `dir`; with
    // dynamic shapes the first compiles the kernels and the others find them.
    let aot = PlanCache::with_dir(&dir).unwrap().dynamic_shapes(DEFAULT_BUDGET_BYTES);
    let classes = Served::class_values().unwrap();
    assert_eq!(classes.iter().map(|v| v.S).collect::<Vec<_>>(), [64, 128, 256, 512]);
    for v in &classes {
        let (_, outcome) = v.build_cached(&aot, &cudnn, &BuildOptions::default()).unwrap();
        assert_eq!(outcome.source, CacheSource::Built);
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), classes.len());
    // The service: a fresh cache seeded from the directory serves every class bound without
    // planning.
    let served = PlanCache::in_memory();
    assert_eq!(served.seed_from_dir(&dir).unwrap().seeded, classes.len());
    for v in &classes {
        let (plan, outcome) = v.build_cached(&served, &cudnn, &BuildOptions::default()).unwrap();
        assert_eq!(outcome.source, CacheSource::Memory, "S = {}", v.S);
        assert!(plan.plan().is_dynamic_shape(), "the payload keeps the flag");
    }
    // A value between bounds maps to its class, whose plan is there; cuDNN 9.19 runs a plan at
    // its own shape only, so the call itself builds its exact plan.
    assert_eq!(Served::new(100).class().unwrap().S, 128);
    assert_eq!(served.stats().builds, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
