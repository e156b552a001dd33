//! Stage 3: code generation. The graph type, its typed argument structs, and methods that rebuild
//! the graph through the runtime's builder API with concrete dims, run the CPU reference, and
//! (when the facade has its `cudnn` feature) build and execute cuDNN plans.
//!
//! On a graph with errors the same items are emitted with bodies that never run (thiserror's
//! fallback), so the user sees the graph's errors, not a cascade from every use of the type.

use cudnn_runtime::dim::SymDim;
use cudnn_runtime::ir::{type_string, MemoryLayout};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::DataType;
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::Ident;

use crate::check::{Checked, Operand, Port};
use crate::parse::GraphDef;

/// The element type of a port's device buffer: a `bool` tensor is packed bits on the GPU.
fn device_type(dtype: Option<DataType>) -> TokenStream {
    match dtype {
        Some(DataType::Bool) => quote!(::cudnn_graph::__private::Bits),
        other => rust_type(other),
    }
}

fn rust_type(dtype: Option<DataType>) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    match dtype.unwrap_or(DataType::F32) {
        DataType::F32 => quote!(f32),
        DataType::F64 => quote!(f64),
        DataType::F16 => quote!(#p::half::f16),
        DataType::BF16 => quote!(#p::half::bf16),
        DataType::I8 => quote!(i8),
        DataType::U8 => quote!(u8),
        DataType::I32 => quote!(i32),
        DataType::I64 => quote!(i64),
        DataType::Bool => quote!(bool),
        DataType::Fp8E4M3 => quote!(#p::Fp8E4M3),
        DataType::Fp8E5M2 => quote!(#p::Fp8E5M2),
    }
}

fn dtype_tokens(dtype: DataType) -> TokenStream {
    let v = format_ident!("{}", format!("{dtype:?}"));
    quote!(::cudnn_graph::__private::DataType::#v)
}

fn dims_tokens(dims: &[SymDim], runtime: &[String]) -> TokenStream {
    let items = dims.iter().map(|d| match d {
        SymDim::Lit(n) => quote!(#n),
        // `as i64` would wrap a `usize` past `i64::MAX` into a negative (or plausible) extent
        // and blame the tensor; the checked conversion names the dim.
        SymDim::Param(p) => {
            let id = format_ident!("{}", p);
            let value = if runtime.contains(p) { quote!(self.#id) } else { quote!(#id) };
            quote!(::cudnn_graph::__private::dim_value(#p, #value)?)
        }
        // Declared dims are literals or parameters; computed extents never reach a declaration.
        SymDim::Expr(e) => syn::parse_str::<syn::Expr>(e).map_or_else(|e| e.to_compile_error(), |e| quote!(#e)),
    });
    quote!([#(#items),*])
}

fn attr_tokens(attrs: &[(String, AttrValue)]) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    let items = attrs.iter().map(|(k, v)| {
        let value = match v {
            AttrValue::Float(f) => {
                let bits = f.to_bits();
                quote!(#p::AttrValue::Float(f64::from_bits(#bits)))
            }
            AttrValue::Int(i) => quote!(#p::AttrValue::Int(#i)),
            AttrValue::IntList(l) => quote!(#p::AttrValue::IntList(::std::vec![#(#l),*])),
            AttrValue::Bool(b) => quote!(#p::AttrValue::Bool(#b)),
            AttrValue::Name(n) => quote!(#p::AttrValue::Name(::std::string::String::from(#n))),
        };
        quote!((::std::string::String::from(#k), #value))
    });
    quote!(&[#(#items),*])
}

fn tensor_var(name: &str) -> Ident {
    format_ident!("__t_{}", name)
}

/// Emits one graph. `ok` is false when checking failed: then bodies are stubs.
pub fn expand(def: &GraphDef, ck: &Checked, ok: bool) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    let vis = &def.vis;
    let name = &def.name;
    let name_str = name.to_string();
    let docs = &def.docs;
    let inputs_ty = format_ident!("{}Inputs", name);
    let outputs_ty = format_ident!("{}Outputs", name);
    let args_ty = format_ident!("{}Args", name);
    let plan_ty = format_ident!("{}Plan", name);

    let consts: Vec<&Ident> = def.params.iter().filter(|p| !p.runtime).map(|p| &p.name).collect();
    let runtime: Vec<&Ident> = def.params.iter().filter(|p| p.runtime).map(|p| &p.name).collect();
    // Argument names that cannot collide with the user's constants (a `const M` in scope would
    // turn a parameter named `M` into a pattern).
    let runtime_args: Vec<Ident> = runtime.iter().map(|r| format_ident!("__dim_{}", r)).collect();
    let runtime_strs: Vec<String> = runtime.iter().map(ToString::to_string).collect();
    let const_strs: Vec<String> = consts.iter().map(ToString::to_string).collect();
    let runtime_names: Vec<String> = runtime.iter().map(ToString::to_string).collect();
    let generics_decl = quote!(<#(const #consts: usize),*>);
    let generics_use = quote!(<#(#consts),*>);

    let fingerprint = ck.fingerprint;
    // Fallback expansions skip repeated port names so the user sees the graph's error alone.
    let mut seen = std::collections::HashSet::new();
    let inputs: Vec<&Port> = ck.inputs.iter().filter(|p| seen.insert(p.name.to_string())).collect();
    let outputs: Vec<&Port> = ck.outputs.iter().filter(|p| seen.insert(p.name.to_string())).collect();
    let raw_ty = format_ident!("{}RawArgs", name);
    let port_idents: Vec<&Ident> = inputs.iter().chain(&outputs).map(|p| &p.name).collect();
    let port_strs: Vec<String> = port_idents.iter().map(ToString::to_string).collect();
    let raw_docs: Vec<String> = inputs.iter().chain(&outputs).map(|p| port_doc(p)).collect();
    let n_ports = port_idents.len();
    let input_fields = inputs.iter().map(|port| {
        let (n, t) = (&port.name, rust_type(port.dtype));
        let doc = port_doc(port);
        quote!(#[doc = #doc] pub #n: &'a [#t])
    });
    let output_fields = outputs.iter().map(|port| {
        let (n, t) = (&port.name, rust_type(port.dtype));
        let doc = port_doc(port);
        quote!(#[doc = #doc] pub #n: ::std::vec::Vec<#t>)
    });
    let device_input_fields = inputs.iter().map(|port| {
        let (n, t) = (&port.name, device_type(port.dtype));
        let doc = port_doc(port);
        quote!(#[doc = #doc] pub #n: &'a dyn #p::InputBuffer<#t>)
    });
    let device_output_fields = outputs.iter().map(|port| {
        let (n, t) = (&port.name, device_type(port.dtype));
        let doc = port_doc(port);
        quote!(#[doc = #doc] pub #n: &'a mut dyn #p::OutputBuffer<#t>)
    });

    let checks = ck.const_checks.iter().map(|c| {
        let parse = |e: &str| syn::parse_str::<syn::Expr>(e).map_or_else(|e| e.to_compile_error(), |e| quote!(#e));
        let (lhs, rhs, msg) = (parse(&c.lhs), parse(&c.rhs), &c.message);
        quote_spanned!(c.span=> ::core::assert!(#lhs == #rhs, #msg);)
    });

    let graph_body = if ok { graph_body(ck, &name_str, &runtime_names) } else { quote!(::core::unreachable!()) };
    let reference_body = if ok { reference_body(ck, &outputs_ty) } else { quote!(::core::unreachable!()) };
    let binding = {
        let fmt = runtime.iter().map(|r| format!("{r} = {{}}")).collect::<Vec<_>>().join(", ");
        let fmt = if runtime.is_empty() { "no runtime dims".to_string() } else { fmt };
        quote!(::std::format!(#fmt #(, self.#runtime)*))
    };
    let new_doc = format!("The graph `{name_str}` with its runtime dims bound.");
    let struct_doc = format!(
        "Declared with `graph!`: {} input(s), {} output(s), {} node(s). Fingerprint `{fingerprint:#018x}`.",
        ck.inputs.len(),
        ck.outputs.len(),
        ck.nodes.len()
    );
    let execute_body = if ok { execute_body(ck) } else { quote!(::core::unreachable!()) };

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

        #[allow(non_snake_case, clippy::too_many_arguments)]
        impl #generics_decl #name #generics_use {
            /// The structural fingerprint of this graph type, computed at expansion.
            pub const FINGERPRINT: u64 = #fingerprint;
            /// The graph's name.
            pub const NAME: &'static str = #name_str;
            const __CHECKS: () = { #(#checks)* };

            #[doc = #new_doc]
            pub const fn new(#(#runtime_args: usize),*) -> Self {
                #[allow(clippy::let_unit_value)]
                let () = Self::__CHECKS;
                Self { #(#runtime: #runtime_args),* }
            }

            /// The runtime-dim binding, as text (for errors and cache keys).
            pub fn binding(&self) -> ::std::string::String {
                #binding
            }

            /// The graph IR with every dim concrete, validated.
            pub fn graph(&self) -> ::core::result::Result<#p::Graph, #p::ArgError> {
                #[allow(clippy::let_unit_value)]
                let () = Self::__CHECKS;
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

        impl<'__de, #(const #consts: usize),*> #p::serde::Deserialize<'__de> for #name #generics_use {
            fn deserialize<__D: #p::serde::Deserializer<'__de>>(deserializer: __D) -> ::core::result::Result<Self, __D::Error> {
                let description = #p::GraphDescription::deserialize(deserializer)?;
                description
                    .check(#name_str, Self::FINGERPRINT, &[#((#const_strs, #consts as i64)),*])
                    .map_err(<__D::Error as #p::serde::de::Error>::custom)?;
                ::core::result::Result::Ok(Self::new(#(description.dim(#runtime_strs).map_err(<__D::Error as #p::serde::de::Error>::custom)?),*))
            }
        }

        #p::if_cudnn! {
            #[doc = ::core::concat!("Device buffers of [`", #name_str, "`], one field per port: inputs borrowed, outputs borrowed mutably.")]
            #vis struct #args_ty<'a> {
                #(#device_input_fields,)*
                #(#device_output_fields,)*
            }

            #[doc = ::core::concat!("A built cuDNN plan of [`", #name_str, "`].")]
            #vis struct #plan_ty #generics_decl {
                /// The graph (and runtime dims) it was built for.
                pub graph: #name #generics_use,
                plan: ::std::sync::Arc<#p::ExecutionPlan>,
                origin: #p::PlanOrigin,
                /// Position in the graph's I/O order (inputs, then outputs, as the plan's
                /// `execute_raw` takes them) of each declared port, inputs then outputs.
                io_order: [usize; #n_ports],
            }

            #[doc = ::core::concat!("Raw device pointers (`CUdeviceptr`) of [`", #name_str, "`]'s ports, for frameworks with their own allocators.")]
            #[derive(Debug, Clone, Copy)]
            #vis struct #raw_ty {
                #(#[doc = #raw_docs] pub #port_idents: u64,)*
            }

            #[allow(non_snake_case)]
            impl #generics_decl #name #generics_use {
                /// Lowers the graph, asks cuDNN's heuristics and builds a plan.
                pub fn build(&self, cudnn: &#p::Cudnn, options: &#p::BuildOptions) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    let graph = self.graph()?;
                    let plan = #p::ExecutionPlan::build(cudnn, &graph, options)?;
                    let io_order = #p::io_order(plan.graph(), [#(#port_strs),*])?;
                    let plan = ::std::sync::Arc::new(plan);
                    ::core::result::Result::Ok(#plan_ty { graph: *self, plan, origin: #p::PlanOrigin::of(cudnn), io_order })
                }

                /// [`Self::build`] through a plan cache: a hit (in memory or on disk, for this
                /// graph type, binding, SM and cuDNN version) skips heuristics and compilation; from
                /// memory, the plan is the one the cache shares with every caller on this CUDA
                /// context. The second value says where the plan came from and what the cache had
                /// to ignore.
                pub fn build_cached(
                    &self,
                    cache: &#p::PlanCache,
                    cudnn: &#p::Cudnn,
                    options: &#p::BuildOptions,
                ) -> ::core::result::Result<(#plan_ty #generics_use, #p::CacheOutcome), #p::Error> {
                    let graph = self.graph()?;
                    let cached = cache.get_or_build(cudnn, &graph, &self.expectation(), options)?;
                    let io_order = #p::io_order(cached.plan.graph(), [#(#port_strs),*])?;
                    let outcome = #p::CacheOutcome { source: cached.source, warnings: cached.warnings, elapsed: cached.elapsed };
                    ::core::result::Result::Ok((
                        #plan_ty { graph: *self, plan: cached.plan, origin: #p::PlanOrigin::of(cudnn), io_order },
                        outcome,
                    ))
                }

                /// What this graph type records in its payloads and requires of those it loads
                /// (for the untyped payload and cache functions).
                pub fn expectation(&self) -> #p::Expect {
                    #p::Expect {
                        type_fingerprint: ::core::option::Option::Some(Self::FINGERPRINT),
                        type_name: ::core::option::Option::Some(::std::string::String::from(#name_str)),
                        binding: ::core::option::Option::Some(self.binding()),
                        // `graph()` succeeded before any plan of this value exists, so every
                        // runtime dim is within `i64` and the casts are exact.
                        runtime_dims: ::std::vec![#((::std::string::String::from(#runtime_strs), self.#runtime as i64)),*],
                    }
                }

                /// Loads a plan payload written by [`Self::serialize`] of this graph type, with or
                /// without structure: the runtime dims come from the payload; the graph type,
                /// shape binding, cuDNN version and SM must match (a typed error names what differs).
                pub fn deserialize(cudnn: &#p::Cudnn, bytes: &[u8]) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    Self::__load(cudnn, #p::parse_payload(bytes)?)
                }

                /// [`Self::deserialize`] of a payload that must carry a signature made with
                /// `key` (by `serialize_signed` of its plan): for payloads from
                /// outside the application's trust boundary (a payload carries GPU code).
                pub fn deserialize_signed(
                    cudnn: &#p::Cudnn,
                    bytes: &[u8],
                    key: &#p::PayloadKey,
                ) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    Self::__load(cudnn, #p::parse_signed_payload(bytes, key)?)
                }

                fn __load(cudnn: &#p::Cudnn, payload: #p::Payload) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    let this = Self::new(#(payload.runtime_dim(#runtime_strs)?),*);
                    let graph = this.graph()?;
                    let plan = #p::load_payload(cudnn, &payload, ::core::option::Option::Some(graph), &this.expectation())?;
                    let io_order = #p::io_order(plan.graph(), [#(#port_strs),*])?;
                    let plan = ::std::sync::Arc::new(plan);
                    ::core::result::Result::Ok(#plan_ty { graph: this, plan, origin: payload.origin(), io_order })
                }
            }

            #[allow(non_snake_case)]
            impl #generics_decl #plan_ty #generics_use {
                /// The underlying plan (engine, workspace, JSON).
                pub fn plan(&self) -> &#p::ExecutionPlan {
                    &self.plan
                }

                /// Writes the plan as a payload: structure and plan (`structure: true`, the
                /// default) or plan only. Read it back with `deserialize` of the graph type.
                pub fn serialize(&self, options: #p::SerializeOptions) -> ::core::result::Result<::std::vec::Vec<u8>, #p::Error> {
                    #p::write_payload(&self.plan, &self.origin, options, &self.graph.expectation())
                }

                /// [`Self::serialize`], signed with `key` (HMAC-SHA256): read it back with
                /// `deserialize_signed` of the graph type and the same key.
                pub fn serialize_signed(
                    &self,
                    options: #p::SerializeOptions,
                    key: &#p::PayloadKey,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, #p::Error> {
                    #p::write_signed_payload(&self.plan, &self.origin, options, &self.graph.expectation(), key)
                }

                /// Bytes of device workspace [`Self::execute`] needs.
                pub fn workspace_size(&self) -> usize {
                    self.plan.workspace_size()
                }

                /// Executes with raw device pointers on `cudnn`'s stream (no length or type checks).
                ///
                /// # Safety
                /// Each pointer must address device memory of the port's type, large enough for its
                /// tensor (see `plan().graph()`), valid on `cudnn`'s device until the stream has run
                /// the work; `workspace` likewise for [`Self::workspace_size`] bytes (0 if none).
                pub unsafe fn execute_raw(
                    &self,
                    cudnn: &#p::Cudnn,
                    args: #raw_ty,
                    workspace: u64,
                ) -> ::core::result::Result<(), #p::Error> {
                    let declared = [#(args.#port_idents),*];
                    let mut io = [0u64; #n_ports];
                    for (i, &position) in self.io_order.iter().enumerate() {
                        io[position] = declared[i];
                    }
                    // SAFETY: the caller's contract, as documented above.
                    unsafe { self.plan.execute_raw(cudnn, &io, workspace) }.map_err(#p::Error::from)
                }

                /// Executes on `cudnn`'s stream.
                pub fn execute(
                    &self,
                    cudnn: &#p::Cudnn,
                    args: #args_ty<'_>,
                    workspace: ::core::option::Option<&mut #p::cudarc::driver::CudaSlice<u8>>,
                ) -> ::core::result::Result<(), #p::Error> {
                    #execute_body
                }
            }
        }
    }
}

/// `` `x`: f16[N, C, H, W] channels-last ``: the port's type in the runtime's one spelling.
fn port_doc(port: &Port) -> String {
    let layout = port.order.as_deref().map_or(MemoryLayout::RowMajor, MemoryLayout::from_order);
    match port.dtype {
        Some(dtype) => format!("`{}`: {}", port.name, type_string(dtype, &port.dims, &layout)),
        None => format!("`{}`", port.name),
    }
}

fn graph_body(ck: &Checked, name: &str, runtime: &[String]) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    let (inter, comp) = (dtype_tokens(ck.intermediate), dtype_tokens(ck.compute));
    let inputs = ck.inputs.iter().map(|port| {
        let var = tensor_var(&port.name.to_string());
        let n = port.name.to_string();
        let dt = dtype_tokens(port.dtype.unwrap_or(DataType::F32));
        let dims = dims_tokens(&port.dims, runtime);
        let order = port.order.as_ref().map(|o| quote!(b.set_dim_order(#var, &[#(#o),*])?;));
        quote!(let #var = b.input(#n, #dt, &#dims)?; #order)
    });
    let nodes = ck.nodes.iter().map(|node| {
        let (nn, op) = (&node.name, node.op);
        let operands = node.inputs.iter().map(|o| match o {
            Operand::Tensor(t) => {
                let v = tensor_var(t);
                quote!(#p::Operand::Tensor(#v))
            }
            Operand::Scalar(v) => {
                let bits = v.to_bits();
                quote!(#p::Operand::Scalar(f64::from_bits(#bits)))
            }
        });
        let attrs = attr_tokens(&node.attrs);
        let outs: Vec<Ident> = node.outputs.iter().map(|o| tensor_var(o)).collect();
        let idx = 0..outs.len();
        quote! {
            let __outs = b.op_named(#nn, #op, &[#(#operands),*], #attrs)?;
            #(let #outs = __outs[#idx];)*
        }
    });
    let outputs = ck.bindings.iter().map(|(out, tensor)| {
        let port = ck.outputs.iter().find(|o| o.name == out);
        let dt = dtype_tokens(port.and_then(|p| p.dtype).unwrap_or(DataType::F32));
        let dims = dims_tokens(port.map_or(&[][..], |p| &p.dims), runtime);
        let var = tensor_var(tensor);
        let order = port.and_then(|p| p.order.as_ref()).map(|o| quote!(b.set_dim_order(__out, &[#(#o),*])?;));
        quote! {
            let __out = b.output(#var, #out, #dt)?;
            b.expect_dims(__out, &#dims)?;
            #order
        }
    });
    quote! {
        let mut b = #p::GraphBuilder::new(#name);
        b.context(#p::Context { intermediate_data_type: #inter, compute_data_type: #comp });
        #(#inputs)*
        #(#nodes)*
        #(#outputs)*
        b.build()
    }
}

fn reference_body(ck: &Checked, outputs_ty: &Ident) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    let gathers = ck.inputs.iter().map(|port| {
        let (n, s) = (&port.name, port.name.to_string());
        quote!(#p::set_input(&graph, &mut values, #s, #p::HostSlice::from(inputs.#n))?;)
    });
    let outs = ck.outputs.iter().map(|port| {
        let (n, s) = (&port.name, port.name.to_string());
        quote!(#n: #p::take_output(&graph, &outs, #s))
    });
    quote! {
        let graph = self.graph()?;
        let mut values = ::std::vec![::core::option::Option::None; graph.tensors.len()];
        #(#gathers)*
        let outs = #p::run_arrays(&graph, values)?;
        ::core::result::Result::Ok(#outputs_ty { #(#outs,)* })
    }
}

fn execute_body(ck: &Checked) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    let ins = ck.inputs.iter().map(|port| {
        let (n, s) = (&port.name, port.name.to_string());
        if port.dtype == Some(DataType::Bool) {
            quote!((#s, #p::DeviceBuffer::bits_input_dyn(args.#n)))
        } else {
            quote!((#s, #p::DeviceBuffer::input_dyn(args.#n)))
        }
    });
    let outs = ck.outputs.iter().map(|port| {
        let (n, s) = (&port.name, port.name.to_string());
        if port.dtype == Some(DataType::Bool) {
            quote!((#s, #p::DeviceBuffer::bits_output_dyn(args.#n)))
        } else {
            quote!((#s, #p::DeviceBuffer::output_dyn(args.#n)))
        }
    });
    quote! {
        let mut io = [#(#ins,)* #(#outs,)*];
        #p::execute_named(&self.plan, cudnn, &mut io, workspace)
    }
}
