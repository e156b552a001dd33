//! Stage 3: code generation. The graph type, its typed argument structs, and methods that rebuild
//! the graph through the runtime's builder API with concrete dims, run the CPU reference, and
//! (when the facade has its `cudnn` feature) build and execute cuDNN plans.
//!
//! One function per generated item: `Gen` holds the names they share. On a graph with errors
//! the same items are emitted with bodies that never run (thiserror's fallback), so the user sees
//! the graph's errors, not a cascade from every use of the type.

mod bodies;
mod cudnn;
mod tokens;

use std::collections::HashSet;

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::Ident;

use crate::check::{Checked, Port};
use crate::parse::GraphDef;
use cudnn_runtime::dim::SymDim;
use tokens::{port_doc, rust_type};

/// Emits one graph. `ok` is false when checking failed: then bodies are stubs.
pub fn expand(def: &GraphDef, ck: &Checked, ok: bool) -> TokenStream {
    let g = Gen::new(def, ck, ok);
    let items = [g.graph_type(), g.host_structs(), g.inherent_impl(), g.serialize_impl(), g.deserialize_impl()];
    let cudnn = g.cudnn_items();
    quote!(#(#items)* #cudnn)
}

/// What the generated items share: the graph, the names of the generated types, the dim
/// parameters and the ports.
struct Gen<'a> {
    def: &'a GraphDef,
    ck: &'a Checked,
    /// Whether checking passed (otherwise bodies are stubs).
    ok: bool,
    /// `::cudnn_graph::__private`, the facade's support module.
    p: TokenStream,
    name: &'a Ident,
    name_str: String,
    inputs_ty: Ident,
    outputs_ty: Ident,
    args_ty: Ident,
    plan_ty: Ident,
    raw_ty: Ident,
    /// `const` dim parameters, and their names as strings.
    consts: Vec<&'a Ident>,
    const_strs: Vec<String>,
    /// `dyn` dim parameters, and their names as strings.
    runtime: Vec<&'a Ident>,
    runtime_strs: Vec<String>,
    /// `<const M: usize, ...>` and `<M, ...>`.
    generics_decl: TokenStream,
    generics_use: TokenStream,
    /// The ports, without repeated names (a fallback expansion shows the graph's error alone).
    inputs: Vec<&'a Port>,
    outputs: Vec<&'a Port>,
}

impl<'a> Gen<'a> {
    fn new(def: &'a GraphDef, ck: &'a Checked, ok: bool) -> Self {
        let name = &def.name;
        let consts: Vec<&Ident> = def.params.iter().filter(|p| !p.runtime).map(|p| &p.name).collect();
        let runtime: Vec<&Ident> = def.params.iter().filter(|p| p.runtime).map(|p| &p.name).collect();
        let mut seen = HashSet::new();
        let inputs: Vec<&Port> = ck.inputs.iter().filter(|p| seen.insert(p.name.to_string())).collect();
        let outputs: Vec<&Port> = ck.outputs.iter().filter(|p| seen.insert(p.name.to_string())).collect();
        Gen {
            def,
            ck,
            ok,
            p: quote!(::cudnn_graph::__private),
            name,
            name_str: name.to_string(),
            inputs_ty: format_ident!("{}Inputs", name),
            outputs_ty: format_ident!("{}Outputs", name),
            args_ty: format_ident!("{}Args", name),
            plan_ty: format_ident!("{}Plan", name),
            raw_ty: format_ident!("{}RawArgs", name),
            const_strs: consts.iter().map(ToString::to_string).collect(),
            runtime_strs: runtime.iter().map(ToString::to_string).collect(),
            generics_decl: quote!(<#(const #consts: usize),*>),
            generics_use: quote!(<#(#consts),*>),
            consts,
            runtime,
            inputs,
            outputs,
        }
    }

    /// The body `make` builds, or, on a graph with errors, a stub that never runs.
    fn stub_or(&self, make: impl FnOnce() -> TokenStream) -> TokenStream {
        if self.ok {
            make()
        } else {
            quote!(::core::unreachable!())
        }
    }

    /// The ports' names, inputs then outputs.
    fn port_idents(&self) -> Vec<&'a Ident> {
        self.inputs.iter().chain(&self.outputs).map(|p| &p.name).collect()
    }

    /// The graph type: the user's docs, a summary, and one field per runtime dim.
    fn graph_type(&self) -> TokenStream {
        let Gen { def, ck, name, generics_decl, runtime, .. } = self;
        let vis = &def.vis;
        let docs = &def.docs;
        let struct_doc = format!(
            "Declared with `graph!`: {} input(s), {} output(s), {} node(s). Fingerprint `{:#018x}`.",
            ck.inputs.len(),
            ck.outputs.len(),
            ck.nodes.len(),
            ck.fingerprint
        );
        quote! {
            #(#docs)*
            #[doc = ""]
            #[doc = #struct_doc]
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
            #[allow(non_snake_case)]
            #vis struct #name #generics_decl {
                #(
                    #[doc = "A dim bound at run time."]
                    pub #runtime: usize,
                )*
            }
        }
    }

    /// The host argument structs of `reference`: borrowed inputs, owned outputs.
    fn host_structs(&self) -> TokenStream {
        let Gen { def, name_str, inputs_ty, outputs_ty, .. } = self;
        let vis = &def.vis;
        let input_fields = self.inputs.iter().map(|port| {
            let (n, t) = (&port.name, rust_type(port.dtype));
            let doc = port_doc(port);
            if port.host {
                return quote!(#[doc = #doc] pub #n: #t);
            }
            quote!(#[doc = #doc] pub #n: &'a [#t])
        });
        let output_fields = self.outputs.iter().map(|port| {
            let (n, t) = (&port.name, rust_type(port.dtype));
            let doc = port_doc(port);
            quote!(#[doc = #doc] pub #n: ::std::vec::Vec<#t>)
        });
        quote! {
            #[doc = ::core::concat!("Host inputs of [`", #name_str, "`], one field per input port, each in its declared layout (row-major unless it says `channels_last` or `order [..]`).")]
            #[derive(Debug, Clone, Copy)]
            #vis struct #inputs_ty<'a> {
                #(#input_fields,)*
            }

            #[doc = ::core::concat!("Host outputs of [`", #name_str, "`], one field per output port, each in its declared layout (row-major unless it says `channels_last` or `order [..]`).")]
            #[derive(Debug, Clone, PartialEq)]
            #vis struct #outputs_ty {
                #(#output_fields,)*
            }
        }
    }

    /// The const assertions over const parameters that only instantiation decides, each spanned
    /// on the call that needs it. A failed one stops the build with its message and the values
    /// this instantiation gives (`here K = 32`), so the error names both requirements.
    fn const_checks(&self) -> TokenStream {
        let p = &self.p;
        let checks = self.ck.const_checks.iter().map(|c| {
            let parse = |e: &str| syn::parse_str::<syn::Expr>(e).map_or_else(|e| e.to_compile_error(), |e| quote!(#e));
            let (lhs, rhs, msg) = (parse(&c.lhs), parse(&c.rhs), &c.message);
            let values = c.params.iter().map(|name| {
                let value = parse(&SymDim::Param(name.clone()).to_expr());
                quote!((#name, #value))
            });
            let derived = c.derived.iter().map(|(text, expr)| {
                let value = parse(expr);
                quote!((#text, #value))
            });
            let holds = if c.at_most { quote!(#lhs <= #rhs) } else { quote!(#lhs == #rhs) };
            quote_spanned! {c.span=>
                if !(#holds) {
                    let unmet = #p::UnmetRequirement::new(#msg, &[#(#values),*], &[#(#derived),*]);
                    ::core::panic!("{}", unmet.text());
                }
            }
        });
        quote!(#(#checks)*)
    }

    /// The text of the runtime-dim binding (`B = {}, S = {}`), as a `format!` call.
    fn binding(&self) -> TokenStream {
        let runtime = &self.runtime;
        let fmt = runtime.iter().map(|r| format!("{r} = {{}}")).collect::<Vec<_>>().join(", ");
        let fmt = if runtime.is_empty() { "no runtime dims".to_string() } else { fmt };
        quote!(::std::format!(#fmt #(, self.#runtime)*))
    }

    /// `SHAPE_CLASSES`, one `ShapeClass` per `dyn` dim, and the tokens of each.
    fn shape_classes(&self) -> (TokenStream, Vec<TokenStream>) {
        use crate::check::ClassBuckets;
        let p = &self.p;
        let each: Vec<TokenStream> = self
            .ck
            .classes
            .iter()
            .map(|c| {
                let (name, min, max) = (&c.name, c.min, c.max);
                let buckets = match &c.buckets {
                    ClassBuckets::Exact => quote!(#p::Buckets::Exact),
                    ClassBuckets::Pow2 => quote!(#p::Buckets::Pow2),
                    ClassBuckets::Multiple(k) => quote!(#p::Buckets::Multiple(#k)),
                    ClassBuckets::List(ends) => quote!(#p::Buckets::List(&[#(#ends),*])),
                };
                quote!(#p::ShapeClass { dim: #name, min: #min, max: #max, buckets: #buckets })
            })
            .collect();
        let n = each.len();
        (quote!([#p::ShapeClass; #n]), each)
    }

    /// The inherent impl: `FINGERPRINT`, `NAME`, the const checks, `new`, `binding`, `graph()`
    /// and `reference`.
    // Long because it is one `quote!` template of the generated impl: its items' docs and bodies
    // are the user's API as rustdoc shows it, in that order.
    fn inherent_impl(&self) -> TokenStream {
        let Gen { p, name, name_str, inputs_ty, outputs_ty, generics_decl, generics_use, runtime, .. } = self;
        let fingerprint = self.ck.fingerprint;
        // Argument names that cannot collide with the user's constants (a `const M` in scope would
        // turn a parameter named `M` into a pattern).
        let runtime_args: Vec<Ident> = runtime.iter().map(|r| format_ident!("__dim_{}", r)).collect();
        let checks = self.const_checks();
        let binding = self.binding();
        let new_doc = format!("The graph `{name_str}` with its runtime dims bound.");
        let graph_body = self.stub_or(|| bodies::graph_body(self.ck, name_str, &self.runtime_strs));
        let (classes_ty, classes) = self.shape_classes();
        let index: Vec<usize> = (0..runtime.len()).collect();
        let reference_body = self.stub_or(|| bodies::reference_body(self.ck, outputs_ty));
        let single_kernel = matches!(self.ck.fusion, crate::check::Fusion::Single);
        let runtime_strs = &self.runtime_strs;
        quote! {
            #[allow(non_snake_case, clippy::too_many_arguments, clippy::needless_update)]
            impl #generics_decl #name #generics_use {
                /// The structural fingerprint of this graph type, computed at expansion.
                pub const FINGERPRINT: u64 = #fingerprint;
                /// The graph's name.
                pub const NAME: &'static str = #name_str;
                const SHAPE_REQUIREMENTS: () = { #checks };

                #[doc = #new_doc]
                pub const fn new(#(#runtime_args: usize),*) -> Self {
                    #[allow(clippy::let_unit_value)]
                    let () = Self::SHAPE_REQUIREMENTS;
                    Self { #(#runtime: #runtime_args),* }
                }

                /// Each `dyn` dim's declared range and classes (`dyn S: 1..=8192 pow2`), in
                /// declaration order; a dim declared without them takes every value of at least 1.
                pub const SHAPE_CLASSES: #classes_ty = [#(#classes),*];

                /// This value with each `dyn` dim rounded up to the bound of its class (itself
                /// where the dim's values are exact); an error for a value outside its range.
                pub fn class(&self) -> ::core::result::Result<Self, #p::ClassError> {
                    ::core::result::Result::Ok(Self { #(#runtime: Self::SHAPE_CLASSES[#index].class_of(self.#runtime)?),* })
                }

                /// Every combination of the `dyn` dims' class bounds, to build ahead of time;
                /// `None` if some dim's values are exact (each its own class).
                pub fn class_values() -> ::core::option::Option<::std::vec::Vec<Self>> {
                    #[allow(unused_mut)]
                    let mut all = ::std::vec![Self { #(#runtime: 1),* }];
                    #(
                        let bounds = Self::SHAPE_CLASSES[#index].bounds()?;
                        all = all
                            .iter()
                            .flat_map(|v| bounds.iter().map(move |&b| Self { #runtime: b, ..*v }))
                            .collect();
                    )*
                    ::core::option::Option::Some(all)
                }

                /// The runtime-dim binding, as text (for errors and cache keys).
                pub fn binding(&self) -> ::std::string::String {
                    #binding
                }

                /// The graph IR with every dim concrete, validated.
                pub fn graph(&self) -> ::core::result::Result<#p::Graph, #p::ArgError> {
                    #[allow(clippy::let_unit_value)]
                    let () = Self::SHAPE_REQUIREMENTS;
                    self.class().map_err(|source| #p::ArgError::ShapeClass { graph: ::std::string::String::from(#name_str), source })?;
                    let build = || -> ::core::result::Result<#p::Graph, #p::GraphError> { #graph_body };
                    build().map_err(|source| #p::ArgError::Binding {
                        graph: ::std::string::String::from(#name_str),
                        binding: self.binding(),
                        source: ::std::boxed::Box::new(source),
                    })
                }

                /// Runs the graph on the CPU reference engine.
                pub fn reference(&self, inputs: #inputs_ty<'_>) -> ::core::result::Result<#outputs_ty, #p::ArgError> {
                    #reference_body
                }
            }

            // For code generic over graph types (framework adapters): forwards to the items above.
            impl #generics_decl #p::GraphType for #name #generics_use {
                const NAME: &'static str = Self::NAME;
                const FINGERPRINT: u64 = Self::FINGERPRINT;
                const SINGLE_KERNEL: bool = #single_kernel;
                fn graph(&self) -> ::core::result::Result<#p::Graph, #p::ArgError> {
                    Self::graph(self)
                }
                fn binding(&self) -> ::std::string::String {
                    Self::binding(self)
                }
                fn runtime_dims(&self) -> ::std::vec::Vec<(&'static str, usize)> {
                    ::std::vec![#((#runtime_strs, self.#runtime)),*]
                }
            }
        }
    }

    /// `Serialize`: the graph's description (name, fingerprint, every dim's value).
    fn serialize_impl(&self) -> TokenStream {
        let Gen { p, name, name_str, generics_decl, generics_use, consts, const_strs, runtime, runtime_strs, .. } =
            self;
        quote! {
            impl #generics_decl #p::serde::Serialize for #name #generics_use {
                fn serialize<__S: #p::serde::Serializer>(&self, serializer: __S) -> ::core::result::Result<__S::Ok, __S::Error> {
                    let dim = |name: &str, value: usize| {
                        #p::dim_value(name, value).map_err(<__S::Error as #p::serde::ser::Error>::custom)
                    };
                    #p::GraphDescription::new(
                        #name_str,
                        Self::FINGERPRINT,
                        ::std::vec![#((#const_strs, dim(#const_strs, #consts)?),)* #((#runtime_strs, dim(#runtime_strs, self.#runtime)?)),*],
                    )
                    .serialize(serializer)
                }
            }
        }
    }

    /// `Deserialize`: a description of this very type (name, fingerprint, const dims), its
    /// runtime dims bound.
    fn deserialize_impl(&self) -> TokenStream {
        let Gen { p, name, name_str, generics_use, consts, const_strs, runtime_strs, .. } = self;
        quote! {
            impl<'__de, #(const #consts: usize),*> #p::serde::Deserialize<'__de> for #name #generics_use {
                fn deserialize<__D: #p::serde::Deserializer<'__de>>(deserializer: __D) -> ::core::result::Result<Self, __D::Error> {
                    let description = #p::GraphDescription::deserialize(deserializer)?;
                    description
                        .check(#name_str, Self::FINGERPRINT, &[#((#const_strs, #consts as i64)),*])
                        .map_err(<__D::Error as #p::serde::de::Error>::custom)?;
                    ::core::result::Result::Ok(Self::new(#(description.dim(#runtime_strs).map_err(<__D::Error as #p::serde::de::Error>::custom)?),*))
                }
            }
        }
    }
}
