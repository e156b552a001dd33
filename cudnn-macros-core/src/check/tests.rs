//! Unit tests of the graph-level rules: a `graph!` body parsed from a string, checked, and the
//! errors and what the checker inferred asserted on (trybuild covers the spans and the expansion).

use cudnn_runtime::dim::SymDim;
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::DataType;

use super::{check, Checked, Fusion, Operand};
use crate::parse::GraphDef;
use crate::Ctxt;

/// Checks one graph: what the checker returned, and every error message in order.
fn run(src: &str) -> (Checked, Vec<String>) {
    let def: GraphDef = syn::parse_str(src).expect("the test's graph parses");
    let cx = Ctxt::new();
    let checked = check(&cx, &def);
    let errors = match cx.check() {
        Ok(()) => Vec::new(),
        Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
    };
    (checked, errors)
}

/// A graph that must check cleanly.
fn ok(src: &str) -> Checked {
    let (checked, errors) = run(src);
    assert_eq!(errors, Vec::<String>::new(), "unexpected errors for {src}");
    checked
}

/// The errors of a graph that must fail.
fn errors(src: &str) -> Vec<String> {
    let (_, errors) = run(src);
    assert!(!errors.is_empty(), "expected errors for {src}");
    errors
}

/// The only error of a graph.
fn error(src: &str) -> String {
    let errors = errors(src);
    assert_eq!(errors.len(), 1, "expected one error, got {errors:?}");
    errors.into_iter().next().unwrap_or_default()
}

fn param(name: &str) -> SymDim {
    SymDim::Param(name.to_string())
}

// Names and ports.

#[test]
fn duplicate_port_names_are_reported() {
    let e = error("G(x: f32[4], x: f32[4]) -> (y: f32[4]) { y = relu(x); }");
    assert_eq!(e, "duplicate name `x`: every input and output needs its own name");
}

#[test]
fn duplicate_let_names_are_reported() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { let c = relu(x); let c = relu(c); y = c; }");
    assert_eq!(e, "duplicate name `c`: it is already defined in graph `G`");
}

#[test]
fn a_let_cannot_shadow_an_input() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { let x = relu(x); y = x; }");
    assert_eq!(e, "duplicate name `x`: it is already defined in graph `G`");
}

#[test]
fn a_let_of_a_declared_output_is_one_error_saying_drop_the_let() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { let y = relu(x); }");
    assert_eq!(e, "`y` is an output of graph `G`: assign it without `let` (`y = ...;`)");
    // Also when the op itself fails: no "never assigned" follows.
    let errors = errors("G(x: f32[4]) -> (y: f32[1, 4], z: f32[4]) { let (y, s) = genstats(x); z = relu(x); }");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("genstats") && errors[1].starts_with("`y` is an output of graph `G`"), "{errors:?}");
}

#[test]
fn a_string_attribute_names_the_type_and_what_to_write() {
    let e = error("G(x: f32[4, 8]) -> (y: f32[4, 8]) { y = gen_index(x, axis = \"1\"); }");
    assert_eq!(e, "attribute `axis` of `gen_index` takes an integer, not a string: write `axis = 1`");
    let e = error("G(x: f32[4, 8]) -> (y: f32[4, 8]) { y = gen_index(x, axis = \"one\"); }");
    assert_eq!(e, "attribute `axis` of `gen_index` takes an integer, not a string");
    // An attribute the op does not have is reported as unknown, string or not.
    let e = error("G(x: f32[4, 8]) -> (y: f32[4, 8]) { y = relu(x, axes = \"1\"); }");
    assert!(e.contains("axes"), "{e}");
}

#[test]
fn an_unassigned_output_is_reported() {
    let e = error("G(x: f32[4]) -> (y: f32[4], z: f32[4]) { y = relu(x); }");
    assert_eq!(e, "output `z` is never assigned; add `z = ...;` to the body of `G`");
}

#[test]
fn an_output_assigned_twice_is_reported() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { y = relu(x); y = relu(x); }");
    assert_eq!(e, "output `y` is assigned twice");
}

#[test]
fn unused_inputs_and_intermediates_are_reported_in_name_order() {
    let e = errors("G(x: f32[4], w: f32[4]) -> (y: f32[4]) { let t = relu(x); y = relu(x); }");
    assert_eq!(e, ["tensor `t` is never used in graph `G`", "input `w` is never used in graph `G`"]);
}

#[test]
fn unused_names_are_not_reported_after_another_error() {
    // `w` is unused only because the call that would read it is wrong: one error, not two.
    let e = error("G(x: f32[4], w: f32[4]) -> (y: f32[4]) { y = ad(x, w); }");
    assert_eq!(e, "unknown op `ad`; did you mean `add`?");
}

#[test]
fn an_undefined_tensor_is_reported_with_the_closest_name() {
    let e = error("G(input: f32[4]) -> (y: f32[4]) { y = relu(inptu); }");
    assert_eq!(e, "undefined tensor `inptu` in graph `G`; did you mean `input`?");
}

#[test]
fn an_output_read_before_it_is_assigned_is_reported() {
    let e = error("G(x: f32[4]) -> (y: f32[4], z: f32[4]) { z = relu(y); y = relu(x); }");
    assert_eq!(e, "output `y` is read before it is assigned; assign it with `y = ...;` first");
}

#[test]
fn assigning_an_intermediate_says_to_use_let() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { let c = relu(x); c = relu(x); y = c; }");
    assert_eq!(e, "`c` is not an output; bind intermediates with `let c = ...`");
}

#[test]
fn an_assigned_output_is_readable_by_later_statements() {
    let ck = ok("G(x: f32[4]) -> (y: f32[4], z: f32[4]) { y = relu(x); z = exp(y); }");
    assert_eq!(ck.bindings, [("y".to_string(), "y".to_string()), ("z".to_string(), "z".to_string())]);
    assert_eq!(ck.nodes[1].inputs, [Operand::Tensor("y".to_string())]);
}

// Declarations.

#[test]
fn unknown_dtypes_suggest_the_closest() {
    let e = error("G(x: bf61[4]) -> (y: bf16[4]) { y = relu(x); }");
    assert_eq!(e, "unknown dtype `bf61`; did you mean `bf16`?");
}

#[test]
fn dim_parameters_must_be_declared_once_and_usize() {
    let e = errors("G<const M: u32, dyn M>(x: f32[M]) -> (y: f32[M]) { y = relu(x); }");
    assert_eq!(e, ["dim parameters are `usize`: write `const M: usize`", "dim parameter `M` is declared twice"]);
}

#[test]
fn undeclared_and_non_positive_dims_are_reported() {
    let e = errors("G(x: f32[0, N]) -> (y: f32[0, N]) { y = relu(x); }");
    assert_eq!(e.len(), 4);
    assert_eq!(e[0], "dims must be positive integers; `x` has `0`");
    assert!(e[1].starts_with("unknown dim `N`; declare it as `const N: usize`"), "{}", e[1]);
}

#[test]
fn channels_last_needs_three_to_five_dims() {
    let e = error("G(x: f32[4, 4] channels_last) -> (y: f32[4, 4]) { y = relu(x); }");
    assert!(e.starts_with("`channels_last` needs 3 to 5 dims"), "{e}");
    assert!(e.contains("but `x` has 2"), "{e}");
}

#[test]
fn layouts_and_settings_are_resolved() {
    let ck = ok("#[compute(f32)] #[intermediate(f16)]
        G(x: f16[2, 3, 4, 5] channels_last) -> (y: f16[2, 3, 4, 5] order [0, 2, 3, 1]) { y = relu(x); }");
    assert_eq!(ck.inputs[0].order.as_deref(), Some(&[0, 2, 3, 1][..]));
    assert_eq!(ck.outputs[0].order, ck.inputs[0].order);
    assert_eq!((ck.compute, ck.intermediate), (DataType::F32, DataType::F16));
}

// `#[fuse(..)]`.

const RELU: &str = "G(x: f32[4]) -> (y: f32[4]) { y = relu(x); }";

#[test]
fn the_fusion_policy_is_auto_unless_the_graph_says_single() {
    assert_eq!(ok(RELU).fusion, Fusion::Auto);
    assert_eq!(ok(&format!("#[fuse(auto)] {RELU}")).fusion, Fusion::Auto);
    assert_eq!(ok(&format!("#[fuse(single)] {RELU}")).fusion, Fusion::Single);
    // Among the other graph attributes, in any order, and as a raw identifier.
    assert_eq!(
        ok(&format!("/// docs\n#[compute(f32)] #[fuse(r#single)] #[intermediate(f16)] {RELU}")).fusion,
        Fusion::Single
    );
}

#[test]
fn an_unknown_fusion_mode_lists_the_modes_or_suggests_the_closest() {
    assert_eq!(
        error(&format!("#[fuse(one)] {RELU}")),
        "unknown fusion mode `one`; expected `single` (one kernel, or an error) or `auto` (parts where cuDNN \
         needs them, the default)"
    );
    assert_eq!(error(&format!("#[fuse(singel)] {RELU}")), "unknown fusion mode `singel`; did you mean `single`?");
    assert_eq!(error(&format!("#[fuse(Auto)] {RELU}")), "unknown fusion mode `Auto`; did you mean `auto`?");
}

#[test]
fn a_fusion_mode_written_as_a_string_is_told_to_drop_the_quotes() {
    assert_eq!(
        error(&format!("#[fuse(\"single\")] {RELU}")),
        "`#[fuse(..)]` takes `single` or `auto`, not a string: write `#[fuse(single)]`"
    );
    // A string that names no mode gets no suggestion to write it bare.
    assert_eq!(error(&format!("#[fuse(\"one\")] {RELU}")), "`#[fuse(..)]` takes `single` or `auto`, not a string");
}

#[test]
fn a_fuse_attribute_without_one_mode_says_what_to_write() {
    let missing = "`#[fuse]` needs a mode: `single` (one kernel, or an error) or `auto` (parts where cuDNN needs \
                   them, the default), as in `#[fuse(single)]`";
    assert_eq!(error(&format!("#[fuse] {RELU}")), missing);
    assert_eq!(error(&format!("#[fuse()] {RELU}")), missing);
    let other = "`#[fuse(..)]` takes one mode, `single` (one kernel, or an error) or `auto` (parts where cuDNN \
                 needs them, the default): write `#[fuse(single)]`";
    assert_eq!(error(&format!("#[fuse = single] {RELU}")), other);
    assert_eq!(error(&format!("#[fuse(single, auto)] {RELU}")), other);
    assert_eq!(error(&format!("#[fuse(1)] {RELU}")), other);
}

#[test]
fn a_repeated_fuse_attribute_is_an_error_on_each_repeat() {
    let e = errors(&format!("#[fuse(single)] #[fuse(single)] #[fuse(auto)] {RELU}"));
    assert_eq!(e, ["graph `G` has more than one `#[fuse(..)]`; keep one"; 2]);
    // Each misuse of one attribute is reported too, in one pass.
    let e = errors(&format!("#[fuse(one)] #[fuse] {RELU}"));
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].starts_with("unknown fusion mode `one`"), "{e:?}");
    assert!(e[1].starts_with("graph `G` has more than one") && e[2].starts_with("`#[fuse]` needs a mode"), "{e:?}");
}

#[test]
fn the_fingerprint_covers_the_fusion_policy() {
    let fp = |src: &str| ok(src).fingerprint;
    // A plan that may be split must not serve a graph that demands one kernel, and back.
    assert_ne!(fp(RELU), fp(&format!("#[fuse(single)] {RELU}")));
    // `auto` is the default spelled out: the same type.
    assert_eq!(fp(RELU), fp(&format!("#[fuse(auto)] {RELU}")));
}

// Calls: names, attributes, ports.

#[test]
fn unknown_ops_suggest_the_closest() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { y = rleu(x); }");
    assert_eq!(e, "unknown op `rleu`; did you mean `relu`?");
}

#[test]
fn attribute_errors_name_the_attribute() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { y = relu(x, uper_clip = 6.0); }");
    assert_eq!(e, "`relu` has no attribute `uper_clip`; did you mean `upper_clip`?");
    let e = error("G(x: f32[4, 8]) -> (y: f32[4, 1]) { y = reduce_sum(x, dims = 1); }");
    assert_eq!(e, "attribute `dims` of `reduce_sum` must be a list of integers");
}

#[test]
fn a_bare_number_is_not_a_tensor() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { let c = 0.5; y = mul(x, c); }");
    assert_eq!(e, "a number is not a tensor of its own: it can only be an operand of an op, as in `op(x, 0.5)`");
}

#[test]
fn arity_lists_the_ports() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { y = add(x); }");
    assert_eq!(e, "`add` takes 2 inputs (IN_0, IN_1), found 1");
}

#[test]
fn numbers_feed_only_scalar_ports() {
    let e = error("G(a: f32[4, 4]) -> (y: f32[4, 4]) { y = matmul(a, 2.0); }");
    assert_eq!(e, "`matmul` port B takes a tensor, not a number");
    let ck = ok("G(x: f32[4]) -> (y: f32[4]) { y = mul(x, 0.5); }");
    assert_eq!(ck.nodes[0].inputs, [Operand::Tensor("x".to_string()), Operand::Scalar(0.5)]);
}

#[test]
fn the_output_count_hint_comes_from_the_op() {
    let e = error(
        "G(x: f32[8, 32], s: f32[1, 32], b: f32[1, 32]) -> (y: f32[8, 32]) {
            let (o, m) = layernorm(x, s, b, 1e-5);
            y = o;
        }",
    );
    assert_eq!(
        e,
        "`layernorm` produces 1 output (Y) here, but 2 names are bound; `phase = training` adds MEAN, INV_VARIANCE"
    );
    let e = error(
        "G(x: f16[1, 4, 8, 8]) -> (y: f16[1, 4, 4, 4]) {
            let (p, i) = resample(x, mode = maxpool, window = [2, 2]);
            y = p;
        }",
    );
    assert!(e.ends_with("; `index = true` adds Index"), "{e}");
}

#[test]
fn nested_calls_become_fresh_nodes_that_avoid_user_names() {
    let ck = ok("G(x: f32[4]) -> (relu_0: f32[4]) { relu_0 = exp(relu(x)); }");
    let names: Vec<&str> = ck.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["relu_1", "relu_0"]);
    assert_eq!(ck.nodes[0].op, "relu");
    assert_eq!(ck.nodes[1].inputs, [Operand::Tensor("relu_1".to_string())]);
}

#[test]
fn attributes_reach_the_node_without_defaults() {
    let ck = ok("G(x: f32[4]) -> (y: f32[4]) { y = relu(x, upper_clip = 6); }");
    assert_eq!(ck.nodes[0].attrs, [("upper_clip".to_string(), AttrValue::Float(6.0))]);
}

// Shapes: literals, const and dyn parameters.

#[test]
fn literal_dims_that_differ_are_errors() {
    let e = error("G(a: f32[2, 4], b: f32[5, 3]) -> (y: f32[2, 3]) { y = matmul(a, b); }");
    assert_eq!(
        e,
        "graph `G`: matmul contraction dims differ: A is [2, 4] and B is [5, 3], so A[-1] = 4 must equal B[-2] = 5"
    );
}

#[test]
fn distinct_parameters_that_must_be_equal_are_errors() {
    let e =
        error("G<const K: usize, const J: usize>(a: f32[2, K], b: f32[J, 3]) -> (y: f32[2, 3]) { y = matmul(a, b); }");
    assert!(e.ends_with("so A[-1] = K must equal B[-2] = J"), "{e}");
}

#[test]
fn a_const_parameter_against_a_literal_defers_to_a_const_assertion() {
    let ck = ok("G<const K: usize>(a: f32[2, K], b: f32[64, 3]) -> (y: f32[2, 3]) { y = matmul(a, b); }");
    assert_eq!(ck.const_checks.len(), 1);
    let c = &ck.const_checks[0];
    assert_eq!((c.lhs.as_str(), c.rhs.as_str()), ("(K as i64)", "64"));
    assert_eq!(c.message, "graph `G`: K must equal 64: `matmul` (node `y`) needs it");
    assert_eq!(c.params, ["K"]);
    assert!(c.derived.is_empty(), "a lone parameter is printed as itself");
}

#[test]
fn a_deferred_expression_names_its_parameters_and_itself() {
    let ck = ok("G<const H: usize, const D: usize>(a: f32[2, H * D], b: f32[64, 3]) -> (y: f32[2, 3]) {
        y = matmul(a, b);
    }");
    let c = &ck.const_checks[0];
    assert_eq!(c.params, ["D", "H"]);
    assert_eq!(c.derived.len(), 1);
    assert_eq!(c.derived[0].0, "D * H");
    assert_eq!(c.derived[0].1, c.lhs, "the value printed is the side compared");
}

#[test]
fn extents_no_positive_parameters_make_equal_are_errors_at_expansion() {
    // 2K = K only at K = 0: an error now, not a const assertion of every instantiation.
    let e = error("G<const K: usize>(a: f32[1, 4, 2 * K], b: f32[1, K, 8]) -> (y: f32[1, 4, 8]) { y = matmul(a, b); }");
    assert_eq!(
        e,
        "graph `G`: matmul contraction dims differ: A is [1, 4, 2 * K] and B is [1, K, 8], so A[-1] = 2 * K must \
         equal B[-2] = K; 2 * K and K differ whatever the instantiation: no value of `K` makes them equal (every \
         dim is at least 1)"
    );
    // Several parameters: 2M + 1 is odd, 4N even. `dyn` ones alike (no run-time check either).
    let e = error(
        "G<const M: usize, dyn N>(a: f32[1, 4, 2 * M + 1], b: f32[1, 4 * N, 8]) -> (y: f32[1, 4, 8]) { y = matmul(a, b); }",
    );
    assert!(
        e.ends_with(
            "so A[-1] = 2 * M + 1 must equal B[-2] = 4 * N; 2 * M + 1 and 4 * N differ whatever the instantiation: no \
             values of `M`, `N` make them equal (every dim is at least 1)"
        ),
        "{e}"
    );
    // A declared output: K + N is at least 2, never 1.
    let e = error(
        "G<const K: usize, const N: usize>(a: f32[1, N, K], b: f32[1, K, 1]) -> (y: f32[1, N, K + N]) { y = matmul(a, b); }",
    );
    assert_eq!(
        e,
        "output `y` is declared [1, N, K + N] but is assigned a tensor of shape [1, N, 1]: dim 2 is K + N declared, 1 \
         assigned"
    );
}

#[test]
fn extents_some_parameters_make_equal_wait_for_the_instantiation() {
    // 2K = N at N = 2K: a const assertion, naming both parameters and the product.
    let ck = ok("G<const K: usize, const N: usize>(a: f32[1, 4, 2 * K], b: f32[1, N, 8]) -> (y: f32[1, 4, 8]) {
        y = matmul(a, b);
    }");
    assert_eq!(ck.const_checks.len(), 1);
    let c = &ck.const_checks[0];
    assert_eq!(c.message, "graph `G`: 2 * K must equal N: `matmul` (node `y`) needs it");
    assert_eq!(c.params, ["K", "N"]);
    // 2K = 6 at K = 3; 3K = 7 at no K, so that one is an error.
    let ck = ok("G<const K: usize>(a: f32[1, 4, 2 * K], b: f32[1, 6, 8]) -> (y: f32[1, 4, 8]) { y = matmul(a, b); }");
    assert_eq!(ck.const_checks.len(), 1);
    error("G<const K: usize>(a: f32[1, 4, 3 * K], b: f32[1, 7, 8]) -> (y: f32[1, 4, 8]) { y = matmul(a, b); }");
}

#[test]
fn a_dyn_parameter_defers_to_run_time_validation() {
    let ck = ok("G<dyn K>(a: f32[2, K], b: f32[64, 3]) -> (y: f32[2, 3]) { y = matmul(a, b); }");
    assert!(ck.const_checks.is_empty());
}

#[test]
fn parameters_flow_through_the_shape_rules() {
    let ck = ok("G<const M: usize, dyn B>(a: f32[B, M, 8], b: f32[B, 8, 16]) -> (y: f32[B, M, 16]) {
        y = matmul(a, b);
    }");
    assert_eq!(ck.outputs[0].dims, [param("B"), param("M"), SymDim::Lit(16)]);
    assert!(ck.const_checks.is_empty());
}

#[test]
fn a_wrong_declared_output_shape_is_reported() {
    let e = error("G(a: f32[2, 4], b: f32[4, 3]) -> (y: f32[2, 4]) { y = matmul(a, b); }");
    assert_eq!(
        e,
        "output `y` is declared [2, 4] but is assigned a tensor of shape [2, 3]: dim 1 is 4 declared, 3 assigned"
    );
}

// Forced dtypes: from the op's shape rule, for every output, through names too.

#[test]
fn a_comparison_forces_bool() {
    let e = error("G(a: f32[8], b: f32[8]) -> (y: i32[8]) { y = cmp_lt(a, b); }");
    assert_eq!(e, "output `y` is declared i32 but its op produces bool");
    // A comparison's 0 or 1 may be stored in a float output (cuDNN writes it so); a logical
    // op's may not (cuDNN 9.19 plans none).
    ok("G(a: f32[8], b: f32[8]) -> (y: f16[8]) { y = cmp_lt(a, b); }");
    let e = error("G(a: f32[8], b: f32[8]) -> (y: f32[8]) { y = logical_and(cmp_lt(a, b), cmp_gt(a, b)); }");
    assert_eq!(e, "output `y` is declared f32 but its op produces bool");
    let ck = ok("G(a: f32[8], b: f32[8]) -> (y: bool[8]) { y = cmp_lt(a, b); }");
    assert_eq!(ck.outputs[0].dtype, Some(DataType::Bool));
}

#[test]
fn the_pooling_index_forces_i8() {
    let src = |index: &str| {
        format!(
            "G(x: f16[1, 4, 8, 8]) -> (y: f16[1, 4, 4, 4], idx: {index}[1, 4, 4, 4]) {{
                (y, idx) = resample(x, mode = maxpool, window = [2, 2], index = true);
            }}"
        )
    };
    assert_eq!(error(&src("f32")), "output `idx` is declared f32 but its op produces i8");
    let ck = ok(&src("i8"));
    assert_eq!(ck.nodes[0].outputs, ["y", "idx"]);
}

#[test]
fn the_attention_stats_force_f32_through_a_let() {
    let src = |stats: &str| {
        format!(
            "G(q: bf16[2, 8, 128, 64], k: bf16[2, 8, 128, 64], v: bf16[2, 8, 128, 64])
                -> (o: bf16[2, 8, 128, 64], stats: {stats}[2, 8, 128, 1]) {{
                let (out, lse) = sdpa(q, k, v, training = true);
                o = out;
                stats = lse;
            }}"
        )
    };
    assert_eq!(error(&src("bf16")), "output `stats` is declared bf16 but its op produces f32");
    ok(&src("f32"));
}

#[test]
fn an_op_that_forces_nothing_takes_the_declared_dtype() {
    let ck = ok("G(a: bf16[4], b: bf16[4]) -> (y: f32[4]) { y = add(a, b); }");
    assert_eq!(ck.outputs[0].dtype, Some(DataType::F32));
}

// The pass as a whole.

#[test]
fn every_error_of_a_graph_is_reported_in_one_pass() {
    let e = errors(
        "Broken<const M: usize>(a: bf16[1, M, 4], b: bf16[1, 5, 16], bias: bf61[1, 1, 16]) -> (y: bf16[1, M, 16]) {
            let c = matmul(a, b);
            let d = ad(c, bias);
            y = relu(dd);
        }",
    );
    assert_eq!(e.len(), 4, "{e:?}");
    assert_eq!(e[0], "unknown dtype `bf61`; did you mean `bf16`?");
    assert!(e[1].starts_with("graph `Broken`: matmul contraction dims differ"), "{}", e[1]);
    assert_eq!(e[2], "unknown op `ad`; did you mean `add`?");
    assert_eq!(e[3], "undefined tensor `dd` in graph `Broken`");
}

#[test]
fn the_fingerprint_is_stable_and_structural() {
    let base = "G(x: f32[4]) -> (y: f32[4]) { y = relu(x, upper_clip = 6.0); }";
    let fp = |src: &str| ok(src).fingerprint;
    assert_eq!(fp(base), fp(base));
    // Docs and formatting are not structure; an explicit row-major order is the default.
    assert_eq!(fp(base), fp("/// docs\nG(x: f32[4] order [0]) -> (y: f32[4]) {\n  y = relu(x, upper_clip = 6.0);\n}"));
    assert_ne!(fp(base), fp("G(x: f32[4]) -> (y: f32[4]) { y = relu(x, upper_clip = 5.0); }"));
    assert_ne!(fp(base), fp("G(x: f16[4]) -> (y: f16[4]) { y = relu(x, upper_clip = 6.0); }"));
    assert_ne!(fp(base), fp("H(x: f32[4]) -> (y: f32[4]) { y = relu(x, upper_clip = 6.0); }"));
    assert_ne!(
        fp("G(x: f32[2, 3, 4, 5]) -> (y: f32[2, 3, 4, 5]) { y = relu(x); }"),
        fp("G(x: f32[2, 3, 4, 5] channels_last) -> (y: f32[2, 3, 4, 5]) { y = relu(x); }")
    );
}

#[test]
fn a_graph_needs_an_input() {
    let e = errors("G() -> (y: f32[4]) { }");
    assert_eq!(e[0], "graph `G` needs at least one input");
}

// Hints a new user needed (issue 17).

#[test]
fn a_lower_rank_operand_of_a_pointwise_op_is_told_the_shape_that_broadcasts() {
    let e = error(
        "G(x: bf16[2, 64, 32], w: bf16[1, 32, 128], b: bf16[128]) -> (y: bf16[2, 64, 128]) { y = add(matmul(x, w), b); }",
    );
    assert_eq!(
        e,
        "graph `G`: `add` port IN_1 needs rank 3 (the rank of port IN_0; declare it [1, 1, 128] to broadcast along \
         the leading dims), found rank 1 ([128])"
    );
}

#[test]
fn a_name_used_before_its_let_says_to_move_the_let() {
    let e = error("G(x: f32[4]) -> (y: f32[4]) { let a = relu(c); let c = relu(x); y = a; }");
    assert_eq!(e, "tensor `c` is used before its `let` in graph `G`; move `let c = ...;` above this use");
}

#[test]
fn a_graph_without_outputs_is_told_at_its_signature() {
    let e = error("G(x: f32[4]) -> () { let a = relu(x); }");
    assert_eq!(e, "graph `G` declares no outputs; list at least one after `->`: `-> (y: f32[..])`");
}

#[test]
fn a_port_refusing_the_intermediate_type_suggests_the_setting() {
    let e = error(
        "G(q: bf16[1, 2, 64, 64], k: bf16[1, 2, 64, 64], v: bf16[1, 2, 64, 64]) -> (o: bf16[1, 2, 64, 64]) \
         { o = sdpa(mul(q, 0.5), k, v); }",
    );
    assert_eq!(
        e,
        "graph `G`: `sdpa` port Q does not take f32; it takes f16 or bf16; this operand is an intermediate, of the \
         graph's intermediate type f32: put `#[intermediate(bf16)]` on graph `G`"
    );
    // A graph input of the wrong type gets no such hint: the setting would not change it.
    let e = error(
        "G(q: f32[1, 2, 64, 64], k: bf16[1, 2, 64, 64], v: bf16[1, 2, 64, 64]) -> (o: bf16[1, 2, 64, 64]) \
         { o = sdpa(q, k, v); }",
    );
    assert_eq!(e, "graph `G`: `sdpa` port Q does not take f32; it takes f16 or bf16");
}

#[test]
fn an_output_of_the_wrong_shape_names_the_dims_that_differ() {
    let e = error("G(x: f32[4, 8, 16]) -> (y: f32[4, 9, 16]) { y = relu(x); }");
    assert_eq!(
        e,
        "output `y` is declared [4, 9, 16] but is assigned a tensor of shape [4, 8, 16]: dim 1 is 9 declared, 8 assigned"
    );
    let e = error("G(x: f32[4, 8]) -> (y: f32[4, 8, 1]) { y = relu(x); }");
    assert!(e.ends_with(": rank 3 declared, rank 2 assigned"), "{e}");
}

// Extents: port dims and `Dims` attributes written with parameters and expressions.

#[test]
fn port_dims_may_be_expressions_over_parameters() {
    let ck = ok("G<const H: usize, const D: usize, dyn B>(x: f32[B, H * D], w: f32[(H + 1) / 2, 4])
        -> (y: f32[B, D * H], z: f32[(1 + H) / 2, 4]) { y = relu(x); z = relu(w); }");
    assert_eq!(ck.inputs[0].dims[1].to_string(), "D * H");
    assert_eq!(ck.inputs[1].dims[0].to_string(), "(H + 1) / 2");
    assert!(ck.const_checks.is_empty(), "equal canonical forms are equal at expansion");
}

#[test]
fn wrong_dim_expressions_are_reported_on_their_tokens() {
    let e = errors("G<const H: usize, dyn S>(x: f32[S / H, H - H, Q * 2, 3 - 1]) -> (y: f32[1]) { y = relu(x); }");
    assert_eq!(
        e[..3],
        [
            "a dim is divided only by a positive integer (floor division, as in `(H + 1) / 2`), not by `H`",
            "dims must be positive integers; `x` has `0`",
            "unknown dim `Q`; declare it as `const Q: usize` (compile time) or `dyn Q` (run time) in the graph's parameters",
        ]
    );
}

#[test]
fn a_symbolic_reshape_keeps_its_extents_for_the_generated_code() {
    let ck = ok("G<const H: usize, const D: usize, dyn B, dyn S>(x: f32[B, S, H * D]) -> (y: f32[B, S, H, D]) {
        y = reshape(x, shape = [B, S, H, D]);
    }");
    let node = &ck.nodes[0];
    assert!(node.attrs.is_empty(), "no placeholder reaches the node: {:?}", node.attrs);
    assert_eq!(node.extents, [("shape".to_string(), vec![param("B"), param("S"), param("H"), param("D")])]);
    assert!(ck.const_checks.is_empty());
    // And back: the expression is the count's other grouping.
    let ck = ok("G<const H: usize, const D: usize, dyn B>(x: f32[B, H, D]) -> (y: f32[B, H * D]) {
        y = reshape(x, shape = [B, H * D]);
    }");
    assert_eq!(ck.nodes[0].extents[0].1[1].to_string(), "D * H");
}

#[test]
fn a_literal_reshape_builds_as_before() {
    let ck = ok("G(x: f32[2, 3, 4]) -> (y: f32[6, 4]) { y = reshape(x, shape = [6, 4]); }");
    assert_eq!(ck.nodes[0].attrs, [("shape".to_string(), AttrValue::IntList(vec![6, 4]))]);
    assert!(ck.nodes[0].extents.is_empty());
}

#[test]
fn a_reshape_count_that_differs_for_every_binding_is_an_error() {
    let e = error("G<dyn B>(x: f32[B, 64]) -> (y: f32[B, 2, 31]) { y = reshape(x, shape = [B, 2, 31]); }");
    assert_eq!(
        e,
        "graph `G`: `reshape`: X [B, 64] cannot be reshaped to [B, 2, 31]: the element counts differ (64 * B against 62 * B)"
    );
}

#[test]
fn a_reshape_count_over_const_parameters_is_a_const_assertion_without_the_dyn_ones() {
    let ck = ok("G<const H: usize, const D: usize, dyn B>(x: f32[B, H * D]) -> (y: f32[B, H]) {
        y = reshape(x, shape = [B, H]);
    }");
    assert_eq!(ck.const_checks.len(), 1);
    let c = &ck.const_checks[0];
    assert_eq!((c.lhs.as_str(), c.rhs.as_str()), ("(D as i64)", "1"));
    assert_eq!(c.message, "graph `G`: D must equal 1: `reshape` (node `y`) needs it");
}

#[test]
fn a_reshape_count_over_dyn_parameters_is_left_to_run_time() {
    let ck = ok("G<dyn M, dyn N>(x: f32[M, 8]) -> (y: f32[N, 4]) { y = reshape(x, shape = [N, 4]); }");
    assert!(ck.const_checks.is_empty());
    assert_eq!(ck.nodes[0].extents, [("shape".to_string(), vec![param("N"), SymDim::Lit(4)])]);
}

#[test]
fn bad_extents_are_reported_each_on_its_token() {
    let e = errors(
        "G<const H: usize, dyn S>(x: f32[S, H]) -> (y: f32[S, H]) {
        y = reshape(x, shape = [S, 0, Q, S / H, 2 - 3]);
    }",
    );
    assert_eq!(
        e,
        [
            "attribute `shape` of `reshape` takes positive extents (integers, dim parameters or expressions over them); `0` is not one",
            "unknown dim `Q`; declare it as `const Q: usize` (compile time) or `dyn Q` (run time) in the graph's parameters",
            "a dim is divided only by a positive integer (floor division, as in `(H + 1) / 2`), not by `H`",
            "attribute `shape` of `reshape` takes positive extents (integers, dim parameters or expressions over them); `-1` is not one",
        ]
    );
}

#[test]
fn a_list_of_integers_takes_no_dims() {
    let e = error("G<dyn B>(x: f32[B, 4]) -> (y: f32[4, B]) { y = transpose(x, permutation = [1, B]); }");
    assert_eq!(e, "attribute `permutation` of `transpose` takes a list of integers; `B` is not an integer literal");
    // Negative integers stay integers.
    ok("G(x: f32[2, 4]) -> (y: f32[2, 1]) { y = reduce_sum(x, dims = [-1]); }");
}

#[test]
fn the_fingerprint_covers_symbolic_extents() {
    let fp = |shape: &str| {
        let src = format!(
            "G<dyn B>(x: f32[B, 8]) -> (y: f32[B, 8]) {{ y = reshape(reshape(x, shape = {shape}), shape = [B, 8]); }}"
        );
        ok(&src).fingerprint
    };
    assert_eq!(fp("[B, 2, 4]"), fp("[B, 2, 4]"));
    assert_ne!(fp("[B, 2, 4]"), fp("[B, 4, 2]"));
}

#[test]
fn a_const_parameter_pinned_to_two_numbers_is_an_error_at_expansion() {
    let e = error(
        "pub TwoProj<const D: usize>(x: bf16[1, 8, D], w1: bf16[1, 64, 16], w2: bf16[1, 32, 16])
            -> (y: bf16[1, 8, 16], z: bf16[1, 8, 16]) { y = matmul(x, w1); z = matmul(x, w2); }",
    );
    assert!(e.contains("const parameter `D` must equal 32 here") && e.contains("also equal 64"), "{e}");
    // Pinned twice to the same number: one const assertion each, no error.
    let checked = ok("pub Same<const D: usize>(x: bf16[1, 8, D], w1: bf16[1, 64, 16], w2: bf16[1, 64, 16])
            -> (y: bf16[1, 8, 16], z: bf16[1, 8, 16]) { y = matmul(x, w1); z = matmul(x, w2); }");
    assert_eq!(checked.const_checks.len(), 2);
    // Pinned through expressions linear in the parameter: 2D = 64 and D + 1 = 17.
    let e = error(
        "pub Widened<const D: usize>(x: bf16[1, 8, 2 * D], h: bf16[1, 8, D + 1], w1: bf16[1, 64, 16], w2: bf16[1, 17, 16])
            -> (y: bf16[1, 8, 16], z: bf16[1, 8, 16]) { y = matmul(x, w1); z = matmul(h, w2); }",
    );
    assert_eq!(
        e,
        "graph `Widened`: const parameter `D` must equal 16 here (`matmul` (node `z`) needs it: D + 1 = 17), but it \
         must also equal 32 (`matmul` (node `y`) needs it: 2 * D = 64): no `D` satisfies both"
    );
    // 2D = 64 and D = 32 agree: two const assertions.
    let checked = ok(
        "pub Agree<const D: usize>(x: bf16[1, 8, 2 * D], h: bf16[1, 8, D], w1: bf16[1, 64, 16], w2: bf16[1, 32, 16])
            -> (y: bf16[1, 8, 16], z: bf16[1, 8, 16]) { y = matmul(x, w1); z = matmul(h, w2); }",
    );
    assert_eq!(checked.const_checks.len(), 2);
}

#[test]
fn a_name_bound_twice_is_one_error_and_later_uses_read_the_new_binding() {
    let errors = errors(
        "pub Rebound(x: f32[2, 4, 8], w: f32[1, 8, 4]) -> (y: f32[2, 4, 4]) {
            let o = reshape(x, shape = [2, 32]); let o = reshape(o, shape = [2, 4, 8]); y = matmul(o, w); }",
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("duplicate name `o`"), "{errors:?}");
}

#[test]
fn a_failed_op_leaves_unknown_extents_and_checking_goes_on() {
    let errors = errors(
        "pub TwoMistakes(a: f32[1, 8, 4], b: f32[1, 5, 16], w: f32[1, 16, 32]) -> (y: bf16[1, 8, 64]) {
            let c = matmul(a, b); y = matmul(c, w); }",
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("contraction dims differ"), "{errors:?}");
    assert_eq!(
        errors[1],
        "output `y` is declared [1, 8, 64] but is assigned a tensor of shape [1, 8, 32]: dim 2 is 64 declared, 32 \
         assigned",
        "the failed matmul's M and N are known"
    );
    // `c` keeps the extents its failure does not decide, and they agree with `y`: one error.
    let errors = self::errors(
        "pub Echo(a: f32[1, 8, 4], b: f32[1, 5, 16], w: f32[1, 16, 32]) -> (y: f32[1, 8, 32]) {
            let c = matmul(a, b); y = matmul(c, w); }",
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
}

#[test]
fn a_failed_op_keeps_the_extents_its_failure_does_not_decide() {
    // The matmul fails on K (16 against 8) but knows its output is [1, 4, 8]: M from A, N from
    // B. The add's own mistake (8 against 9) is then reported on the add, not on `y`.
    let errors = errors(
        "pub TwoMistakes(a: f32[1, 4, 16], b: f32[1, 8, 8], bias: f32[1, 4, 9]) -> (y: f32[1, 4, 8]) {
            let c = matmul(a, b); let d = add(c, bias); y = relu(d); }",
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("contraction dims differ"), "{errors:?}");
    assert!(errors[1].contains("[1, 4, 8]") && errors[1].contains("[1, 4, 9]"), "{errors:?}");
    assert!(!errors[1].starts_with("output `y`"), "{errors:?}");
    // The failed add's last extent is 8 or 9 as one repairs it: unknown, so neither declaration
    // of `y` echoes the mistake.
    for declared in [8, 9] {
        let errors = self::errors(&format!(
            "pub G(a: f32[1, 4, 8], bias: f32[1, 4, 9]) -> (y: f32[1, 4, {declared}]) {{ y = add(a, bias); }}"
        ));
        assert_eq!(errors.len(), 1, "{errors:?}");
    }
    // What the failure leaves known is checked against the declaration: N = 8, not 64.
    let errors = self::errors("pub G(a: f32[1, 4, 16], b: f32[1, 8, 8]) -> (y: f32[1, 4, 64]) { y = matmul(a, b); }");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(
        errors[1],
        "output `y` is declared [1, 4, 64] but is assigned a tensor of shape [1, 4, 8]: dim 2 is 64 declared, 8 assigned"
    );
    // A coincidence does not make a dim unknown: B's N equals its wrong K, and N is still known.
    let errors = self::errors("pub G(a: f32[1, 4, 16], b: f32[1, 8, 16]) -> (y: f32[1, 4, 64]) { y = matmul(a, b); }");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[1].contains("shape [1, 4, 16]"), "{errors:?}");
}

// Shape classes of `dyn` dims.

#[test]
fn dyn_dims_declare_ranges_and_classes() {
    use super::{ClassBuckets, DimClass};
    let ck = ok("G<dyn B, dyn S: 1..=8192 pow2, dyn T: 64..=4096 multiple(64), dyn U: [128, 512, 2048], dyn V: 2..=9 exact, dyn W: 3..=7>(\
                 x: f32[B, S, T, U, V, W]) -> (y: f32[B, S, T, U, V, W]) { y = relu(x); }");
    let class = |name: &str, min, max, buckets| DimClass { name: name.into(), min, max, buckets };
    assert_eq!(
        ck.classes,
        [
            class("B", 1, usize::MAX, ClassBuckets::Exact),
            class("S", 1, 8192, ClassBuckets::Pow2),
            class("T", 64, 4096, ClassBuckets::Multiple(64)),
            class("U", 1, 2048, ClassBuckets::List(vec![128, 512, 2048])),
            class("V", 2, 9, ClassBuckets::Exact),
            class("W", 3, 7, ClassBuckets::Exact),
        ]
    );
}

#[test]
fn bad_ranges_and_classes_are_reported_each_on_its_token() {
    let g = |decl: &str| format!("G<dyn S: {decl}>(x: f32[S]) -> (y: f32[S]) {{ y = relu(x); }}");
    let cases = [
        ("0..=8", "dyn dim `S` starts at 0, but extents are positive: start at 1"),
        ("8192..=1", "dyn dim `S` has an empty range 8192..=1: write the smaller bound first"),
        ("1..=64 multiple(0)", "dyn dim `S` has classes of `multiple(0)`: the step is 1 or more"),
        ("[512, 128]", "dyn dim `S` lists 128 after 512: list the classes' ends in ascending order, each once"),
        ("[64, 64]", "dyn dim `S` lists 64 after 64: list the classes' ends in ascending order, each once"),
        ("[0, 64]", "dyn dim `S` lists a class ending at 0, but extents are positive"),
        ("[]", "dyn dim `S` lists no class: give at least one, e.g. `[128, 512]`"),
        (
            "1..=99999999999999999999999",
            "`99999999999999999999999` is not a size: the values of dyn dim `S` are `usize`",
        ),
    ];
    for (decl, want) in cases {
        assert_eq!(error(&g(decl)), want, "{decl}");
    }
    // Every graph's mistakes in one pass, the rest of the graph still checked.
    let both = errors("G<dyn S: 0..=8, dyn T: [4, 2]>(x: f32[S, T]) -> (y: f32[S]) { y = relu(x); }");
    assert_eq!(both.len(), 3, "{both:?}");
}

#[test]
fn an_unknown_class_word_is_a_parse_error_saying_what_to_write() {
    let Err(e) = syn::parse_str::<GraphDef>("G<dyn S: 1..=64 pow3>(x: f32[S]) -> (y: f32[S]) { y = relu(x); }") else {
        panic!("parsed");
    };
    assert_eq!(
        e.to_string(),
        "unknown classes `pow3`: write `pow2`, `multiple(N)`, `exact` or nothing after the range"
    );
}

// Views: what the checker knows of each value's memory.

#[test]
fn reshapes_of_views_follow_the_memory_they_describe() {
    // A BSHD input read as [B, H, S, D]: merging its heads again is a view of the input.
    ok("G<dyn B, dyn S>(q: f32[B, 4, S, 8] order [0, 2, 1, 3]) -> (y: f32[B, S, 32]) {
            y = reshape(transpose(q, permutation = [0, 2, 1, 3]), shape = [B, S, 32]);
        }");
    // Merging the input's heads with its tokens as declared ([B, H, S, D]) is not.
    let e = error(
        "G<dyn B, dyn S>(q: f32[B, 4, S, 8] order [0, 2, 1, 3]) -> (y: f32[B, 32, S]) {
            y = reshape(q, shape = [B, 32, S]);
        }",
    );
    assert!(e.contains("`reshape`: X [B, 4, S, 8] is a strided view (strides [32 * S, 8, 32, 1])"), "{e}");
    assert!(e.ends_with("X is `q`"), "{e}");
    // A computed tensor read through a transpose may be stored for the reshape (attention's O).
    ok("G<dyn S>(a: f32[1, 4, S, 8], b: f32[1, 4, 8, 8]) -> (y: f32[1, S, 32]) {
            y = reshape(transpose(matmul(a, b), permutation = [0, 2, 1, 3]), shape = [1, S, 32]);
        }");
    // A slice of a computed tensor pins it: its rows' gap is there for every later reshape.
    let e = error(
        "G<dyn S>(a: f32[1, S, 8], b: f32[1, 8, 24]) -> (y: f32[1, S * 8]) {
            y = reshape(slice(matmul(a, b), start = [0, 0, 8], limit = [1, S, 16]), shape = [1, S * 8]);
        }",
    );
    assert!(e.contains("whose dims 1 and 2 are not contiguous in memory"), "{e}");
}

#[test]
fn slice_bounds_take_dims_and_indices() {
    let ck = ok("G<const H: usize, dyn S>(x: f32[1, S, 3 * H]) -> (y: f32[1, S, H]) {
            y = slice(x, start = [0, 0, H], limit = [1, S, 2 * H]);
        }");
    let slice = &ck.nodes[0];
    let names: Vec<&str> = slice.extents.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["start", "limit"]);
    assert!(ck.const_checks.is_empty());
    // Only an instantiation decides `H <= N`: a const assertion `<=`.
    let ck = ok("G<const N: usize, const H: usize>(x: f32[2, N]) -> (y: f32[2, H]) {
            y = slice(x, start = [0, 0], limit = [2, H]);
        }");
    assert_eq!(ck.const_checks.len(), 1);
    assert!(ck.const_checks[0].at_most);
    assert_eq!(ck.const_checks[0].message, "graph `G`: H must be at most N: `slice` (node `y`) needs it");
}

// Host scalars: `host` inputs, given by value at execute.

#[test]
fn a_host_input_is_a_host_scalar_of_the_type() {
    let host = ok("G(x: f32[8], s: f32[1] host) -> (y: f32[8]) { y = mul(x, s); }");
    assert!(host.inputs[1].host && !host.inputs[0].host);
    let device = ok("G(x: f32[8], s: f32[1]) -> (y: f32[8]) { y = mul(x, s); }");
    assert_ne!(host.fingerprint, device.fingerprint, "`host` is part of the type");
    // A wrong one is one error, checked on as all 1s: the op reading it says nothing more.
    let e = error("G(x: f32[8], s: f32[2] host) -> (y: f32[8]) { y = mul(x, s); }");
    assert!(e.starts_with("host scalar `s` is one value given at execute"), "{e}");
    let e = error("G(x: f32[8], s: f32[1]) -> (y: f32[8] host) { y = mul(x, s); }");
    assert!(e.starts_with("output `y` cannot be `host`"), "{e}");
}
