//! The items behind the facade's `cudnn` feature (inside `if_cudnn!`): the device argument
//! structs, the plan type, and the methods that build, cache, load, serialize and execute plans.

use proc_macro2::TokenStream;
use quote::quote;

use super::tokens::{device_type, port_doc};
use super::{bodies, Gen};
use crate::check::Fusion;

impl Gen<'_> {
    /// Every cuDNN item, inside the facade's `if_cudnn!`.
    pub(super) fn cudnn_items(&self) -> TokenStream {
        let p = &self.p;
        let items = [
            self.device_args_struct(),
            self.plan_struct(),
            self.raw_args_struct(),
            self.plan_builders(),
            self.plan_impl(),
        ];
        quote! {
            #p::if_cudnn! {
                #(#items)*
            }
        }
    }

    /// The device buffers of `execute`: inputs borrowed, outputs borrowed mutably.
    fn device_args_struct(&self) -> TokenStream {
        let Gen { p, def, name_str, args_ty, .. } = self;
        let vis = &def.vis;
        let device_input_fields = self.inputs.iter().map(|port| {
            let (n, t) = (&port.name, device_type(port.dtype));
            let doc = port_doc(port);
            if port.host {
                return quote!(#[doc = #doc] pub #n: #t);
            }
            quote!(#[doc = #doc] pub #n: &'a dyn #p::InputBuffer<#t>)
        });
        let device_output_fields = self.outputs.iter().map(|port| {
            let (n, t) = (&port.name, device_type(port.dtype));
            let doc = port_doc(port);
            quote!(#[doc = #doc] pub #n: &'a mut dyn #p::OutputBuffer<#t>)
        });
        quote! {
            #[doc = ::core::concat!("Device buffers of [`", #name_str, "`], one field per port: inputs borrowed, outputs borrowed mutably.")]
            #vis struct #args_ty<'a> {
                #(#device_input_fields,)*
                #(#device_output_fields,)*
            }
        }
    }

    /// The plan type: the graph value, the shared plan, its origin and the ports' I/O order.
    fn plan_struct(&self) -> TokenStream {
        let Gen { p, def, name, name_str, plan_ty, generics_decl, generics_use, .. } = self;
        let vis = &def.vis;
        let n_ports = self.port_idents().len();
        quote! {
            #[doc = ::core::concat!("A built cuDNN plan of [`", #name_str, "`].")]
            #[derive(Debug)]
            #vis struct #plan_ty #generics_decl {
                /// The graph (and runtime dims) it was built for.
                pub graph: #name #generics_use,
                plan: ::std::sync::Arc<#p::ExecutionPlan>,
                origin: #p::PlanOrigin,
                /// Position in the graph's I/O order (inputs, then outputs, as the plan's
                /// `execute_raw` takes them) of each declared port, inputs then outputs.
                io_order: [usize; #n_ports],
            }
        }
    }

    /// The raw device pointers of `execute_raw`, one per port.
    fn raw_args_struct(&self) -> TokenStream {
        let Gen { def, name_str, raw_ty, .. } = self;
        let vis = &def.vis;
        let port_idents = self.port_idents();
        let raw_docs: Vec<String> = self.inputs.iter().chain(&self.outputs).map(|p| port_doc(p)).collect();
        quote! {
            #[doc = ::core::concat!("Raw device pointers (`CUdeviceptr`) of [`", #name_str, "`]'s ports, for frameworks with their own allocators.")]
            #[derive(Debug, Clone, Copy)]
            #vis struct #raw_ty {
                #(#[doc = #raw_docs] pub #port_idents: u64,)*
            }
        }
    }

    /// The graph's fusion policy (`FUSION`) and the options every plan of it is built with
    /// (`build_options`): the caller's, with `fusion` forced to `Single` under `#[fuse(single)]`.
    fn fusion_items(&self) -> TokenStream {
        let p = &self.p;
        let (variant, fusion_doc) = match self.ck.fusion {
            Fusion::Single => (
                quote!(Single),
                "This graph's fusion policy: declared `#[fuse(single)]`, it must run as one cuDNN kernel, \
                 and building a plan that cuDNN cannot make as one is an error naming the ops that cannot \
                 share a kernel, whatever the caller's `BuildOptions::fusion`.",
            ),
            Fusion::Auto => (
                quote!(Auto),
                "This graph's fusion policy: `Auto` (no `#[fuse(single)]`), so the caller's \
                 `BuildOptions::fusion` decides whether a graph cuDNN cannot plan as one kernel is split \
                 into parts.",
            ),
        };
        quote! {
            #[doc = #fusion_doc]
            pub const FUSION: #p::Fusion = #p::Fusion::#variant;

            /// The options `build` and `build_cached` plan with: `options` unchanged, except that
            /// `fusion` is `Fusion::Single` when the graph declares `#[fuse(single)]` (see
            /// `Self::FUSION`). Pass these when planning `graph()` through the untyped API
            /// (`ExecutionPlan::build` with `all_plans()` before `autotune`, say).
            pub fn build_options(options: &#p::BuildOptions) -> ::std::borrow::Cow<'_, #p::BuildOptions> {
                #p::declared_fusion(options, Self::FUSION)
            }
        }
    }

    /// The graph type's plan methods: `FUSION`, `build_options`, `build`, `build_autotuned`, `build_cached`,
    /// `expectation`, `deserialize`, `deserialize_signed`.
    // Long because it is one `quote!` template of the generated impl: its methods' docs and
    // bodies are the user's API as rustdoc shows it, in that order.
    fn plan_builders(&self) -> TokenStream {
        let Gen { p, name, name_str, plan_ty, generics_decl, generics_use, runtime, runtime_strs, .. } = self;
        let port_strs: Vec<String> = self.port_idents().iter().map(ToString::to_string).collect();
        let fusion = self.fusion_items();
        quote! {
            #[allow(non_snake_case)]
            impl #generics_decl #name #generics_use {
                #fusion

                /// Lowers the graph, asks cuDNN's heuristics and builds a plan (with
                /// `Self::build_options` of `options`).
                pub fn build(&self, cudnn: &#p::Cudnn, options: &#p::BuildOptions) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    let graph = self.graph()?;
                    let options = Self::build_options(options);
                    let plan = #p::ExecutionPlan::build(cudnn, &graph, &options)?;
                    self.__typed(::std::sync::Arc::new(plan), #p::PlanOrigin::of(cudnn))
                }

                /// [`Self::build`] with every candidate the heuristics offer built
                /// (`BuildOptions::build_all`), each timed on `cudnn`'s GPU with scratch inputs
                /// (`cudnn_graph::engines::autotune`) and the fastest kept; with
                /// `BuildOptions::measure_partitionings` the partitionings are timed too. Through
                /// the tuning store `tuning` names (`AutotuneOptions::tuning_store`; by default the
                /// one `CUDNN_GRAPH_TUNING_STORE` names): a hit builds the recorded choice and times
                /// nothing, a miss measures and records (`cudnn_graph::engines::build_autotuned`).
                /// The outcome says which, with the report of a measured build and every store
                /// entry not used. A deviceless context measures nothing: a miss is a typed error.
                pub fn build_autotuned(
                    &self,
                    cudnn: &#p::Cudnn,
                    options: &#p::BuildOptions,
                    tuning: &#p::AutotuneOptions,
                ) -> ::core::result::Result<(#plan_ty #generics_use, #p::AutotuneOutcome), #p::Error> {
                    let start = ::std::time::Instant::now();
                    let graph = self.graph()?;
                    let options = Self::build_options(options);
                    let built = #p::build_autotuned(cudnn, &graph, &self.expectation(), &options, tuning)?;
                    let outcome = #p::AutotuneOutcome { source: built.source, report: built.report, warnings: built.warnings, elapsed: start.elapsed() };
                    ::core::result::Result::Ok((self.__typed(::std::sync::Arc::new(built.plan), #p::PlanOrigin::of(cudnn))?, outcome))
                }

                /// [`Self::build`] through a plan cache: a hit (in memory or on disk, for this
                /// graph type, binding, SM and cuDNN version) skips heuristics and compilation; from
                /// memory, the plan is the one the cache shares with every caller on this CUDA
                /// context. The second value says where the plan came from and what the cache had
                /// to ignore. A cached plan serves only if it satisfies `Self::build_options` of
                /// `options`, which also build it on a miss.
                pub fn build_cached(
                    &self,
                    cache: &#p::PlanCache,
                    cudnn: &#p::Cudnn,
                    options: &#p::BuildOptions,
                ) -> ::core::result::Result<(#plan_ty #generics_use, #p::CacheOutcome), #p::Error> {
                    let graph = self.graph()?;
                    let options = Self::build_options(options);
                    let cached = cache.get_or_build(cudnn, &graph, &self.expectation(), &options)?;
                    let outcome = #p::CacheOutcome { source: cached.source, warnings: cached.warnings, elapsed: cached.elapsed };
                    ::core::result::Result::Ok((self.__typed(cached.plan, #p::PlanOrigin::of(cudnn))?, outcome))
                }

                /// `plan` as this type's plan: its ports found in the plan's I/O order.
                fn __typed(
                    &self,
                    plan: ::std::sync::Arc<#p::ExecutionPlan>,
                    origin: #p::PlanOrigin,
                ) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    let io_order = #p::io_order(plan.graph(), [#(#port_strs),*])?;
                    ::core::result::Result::Ok(#plan_ty { graph: *self, plan, origin, io_order })
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

                /// Loads a plan payload made for this value's binding by anything that planned the
                /// same graph: [`Self::serialize`], or `cudnn-graph aot` of `self.graph()`'s
                /// structural JSON (which records no graph type or runtime dims). The payload's graph
                /// must be exactly `self.graph()` (its fingerprint: dims, strides, types, ops); a
                /// type fingerprint or binding it records must be this type's and this value's.
                pub fn load_payload(&self, cudnn: &#p::Cudnn, bytes: &[u8]) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    let payload = #p::parse_payload(bytes)?;
                    let mut expect = self.expectation();
                    if payload.plan.type_fingerprint.is_none() {
                        expect.type_fingerprint = ::core::option::Option::None;
                    }
                    self.__load_as(cudnn, payload, expect)
                }

                fn __load(cudnn: &#p::Cudnn, payload: #p::Payload) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    let this = Self::new(#(payload.runtime_dim(#runtime_strs)?),*);
                    let expect = this.expectation();
                    this.__load_as(cudnn, payload, expect)
                }

                fn __load_as(self, cudnn: &#p::Cudnn, payload: #p::Payload, expect: #p::Expect) -> ::core::result::Result<#plan_ty #generics_use, #p::Error> {
                    let graph = self.graph()?;
                    let plan = #p::load_payload(cudnn, &payload, ::core::option::Option::Some(graph), &expect)?;
                    self.__typed(::std::sync::Arc::new(plan), payload.origin())
                }
            }
        }
    }

    /// The plan type's methods: `plan`, `serialize`, `serialize_signed`, `workspace_size`,
    /// `execute_raw` and `execute`.
    fn plan_impl(&self) -> TokenStream {
        let Gen { p, plan_ty, raw_ty, args_ty, generics_decl, generics_use, .. } = self;
        let port_idents = self.port_idents();
        let n_ports = port_idents.len();
        let execute_body = self.stub_or(|| bodies::execute_body(self.ck));
        quote! {
            #[allow(non_snake_case)]
            impl #generics_decl #plan_ty #generics_use {
                /// The underlying plan (engine, workspace, JSON).
                pub fn plan(&self) -> &#p::ExecutionPlan {
                    &self.plan
                }

                /// Writes the plan as a payload: structure and plan (`structure: true`, the
                /// default) or plan only. Read it back with `deserialize` of the graph type.
                pub fn serialize(&self, options: #p::SerializeOptions) -> ::core::result::Result<::std::vec::Vec<u8>, #p::Error> {
                    ::core::result::Result::Ok(#p::write_payload(&self.plan, &self.origin, options, &self.graph.expectation())?)
                }

                /// [`Self::serialize`], signed with `key` (HMAC-SHA256): read it back with
                /// `deserialize_signed` of the graph type and the same key.
                pub fn serialize_signed(
                    &self,
                    options: #p::SerializeOptions,
                    key: &#p::PayloadKey,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, #p::Error> {
                    ::core::result::Result::Ok(#p::write_signed_payload(&self.plan, &self.origin, options, &self.graph.expectation(), key)?)
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
