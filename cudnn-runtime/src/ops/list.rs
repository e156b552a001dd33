//! The `families!` macro: from the one list of op families in `ops/mod.rs` it declares each
//! family's module and generates [`Op`](super::Op), [`Family`](super::Family), lookup by call name
//! ([`lookup`](super::lookup), [`all_names`](super::all_names)) and every method of `Op`, each a
//! `match` with one arm per family delegating to its [`OpFamily`](super::family::OpFamily) impl, or
//! for the cudnn-frontend fields to its `codec.rs` (`read(node, label, tag)` and `write(op, cx)`,
//! the same two in every family). No arm is a wildcard: a family that is listed but does not
//! implement a method, or a method that forgets a family, does not compile.

/// Generates the op vocabulary from `Family(KindType) => module` lines (`(KindType)` only for a
/// family of more than one op), in documentation order.
macro_rules! families {
    ($( $(#[$doc:meta])* $name:ident $(($kind:ident))? => $module:ident, )*) => {
        $(
            pub mod $module;
            pub use $module::{$name $(, $kind)?};
        )*

        /// One operation of a graph.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Op {
            $( $(#[$doc])* $name($name), )*
        }

        /// The family an op name belongs to, with the kind that picks the op in it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Family {
            $(
                #[doc = concat!("[`", stringify!($name), "`]")]
                $name $(($kind))?,
            )*
        }

        impl Family {
            /// Positional input `i` of a call to an op of this family and kind.
            fn input(self, i: usize) -> Option<PortSpec> {
                $(
                    if let Some(kind) = <$name as OpFamily>::KINDS.iter().copied().find(|&k| <$name as OpFamily>::signature_of(k).family == self) {
                        return <$name as OpFamily>::input_of(kind, i);
                    }
                )*
                None
            }
        }

        /// Looks up an op by its call name.
        pub fn lookup(name: &str) -> Option<OpSignature> {
            None $(.or_else(|| <$name as OpFamily>::kind_named(name).map(<$name as OpFamily>::signature_of)))*
        }

        /// Every call name, for suggestions and documentation.
        pub fn all_names() -> impl Iterator<Item = &'static str> {
            std::iter::empty()
                $(.chain(<$name as OpFamily>::KINDS.iter().map(|&k| <$name as OpFamily>::signature_of(k).name)))*
        }

        /// Every cudnn-frontend node tag (`MATMUL`, `CONV_FPROP`, ...) the structural JSON reads
        /// and writes, family by family.
        pub fn frontend_tags() -> impl Iterator<Item = &'static str> {
            std::iter::empty() $(.chain(<$name as OpFamily>::TAGS.iter().copied()))*
        }

        /// Each family's name and cudnn-frontend tags, for the test that every family has some.
        #[cfg(test)]
        fn tags_by_family() -> Vec<(&'static str, &'static [&'static str])> {
            vec![$((stringify!($name), <$name as OpFamily>::TAGS)),*]
        }

        /// The input port holding the ragged offsets of port `port` of a node tagged `tag`, where
        /// its family reads cudnn-frontend's `ragged_offset_uid` there.
        pub(crate) fn frontend_ragged_offsets(tag: &str, port: &str) -> Option<&'static str> {
            $(
                if <$name as OpFamily>::TAGS.contains(&tag) {
                    return <$name as OpFamily>::frontend_ragged_offsets(tag, port);
                }
            )*
            None
        }

        /// Reads a node from its cudnn-frontend fields; `None` for a tag no family has.
        pub(crate) fn read_frontend(
            node: &crate::codec::json::Obj<'_>,
            label: &str,
            tag: &str,
        ) -> Option<Result<codec::FrontendNode, codec::ReadError>> {
            $(
                if <$name as OpFamily>::TAGS.contains(&tag) {
                    return Some($module::codec::read(node, label, tag));
                }
            )*
            None
        }

        impl Op {
            /// [`Op::from_call`] for a call with `inputs` positional arguments: an op that takes any
            /// number of inputs (`concatenate`) takes that many; the others keep their ports, and their
            /// shape rule reports a wrong count.
            ///
            /// ```
            /// # use cudnn_runtime as cudnn_graph;
            /// use cudnn_graph::ops::{Op, AttrValue};
            /// let op = Op::from_call_with_inputs("concatenate", &[("axis".into(), AttrValue::Int(1))], 3).unwrap();
            /// let ports: Vec<&str> = op.inputs().iter().map(|p| p.name).collect();
            /// assert_eq!(ports, ["X[0]", "X[1]", "X[2]"]);
            /// ```
            pub fn from_call_with_inputs(
                name: &str,
                attrs: &[(String, AttrValue)],
                inputs: usize,
            ) -> Result<Op, AttrError> {
                $(
                    if let Some(kind) = <$name as OpFamily>::kind_named(name) {
                        let attrs = Attrs::check(&<$name as OpFamily>::signature_of(kind), attrs)?;
                        return Ok(Op::$name(<$name as OpFamily>::from_attrs(kind, &attrs, inputs)?));
                    }
                )*
                Err(AttrError::UnknownOp { op: name.to_string(), suggestion: suggest(name) })
            }

            /// This op's signature.
            pub fn signature(&self) -> OpSignature {
                match self {
                    $( Op::$name(op) => <$name as OpFamily>::signature_of(op.kind()), )*
                }
            }

            /// The attributes that [`Op::from_call`] would need to rebuild this op, defaults omitted.
            pub fn call_attrs(&self) -> Vec<(String, AttrValue)> {
                match self {
                    $( Op::$name(op) => OpFamily::call_attrs(op), )*
                }
            }

            /// The outputs this op instance produces, in order. Usually the signature's; an op whose
            /// attributes decide its outputs (a norm's training phase adds statistics) narrows them.
            pub fn outputs(&self) -> Vec<&'static str> {
                match self {
                    $( Op::$name(op) => OpFamily::outputs(op).to_vec(), )*
                }
            }

            /// The inputs this op instance takes, in order. Usually the signature's; an op whose
            /// attributes decide its inputs (attention's bias, sequence lengths, dropout seed) narrows
            /// them. Positional arguments, graph nodes and JSON ports follow this list.
            pub fn inputs(&self) -> Vec<PortSpec> {
                match self {
                    $( Op::$name(op) => OpFamily::inputs(op), )*
                }
            }

            /// The shape and dtype rule: output metadata from input metadata.
            ///
            /// # Errors
            ///
            /// A [`ShapeError`] naming the port (or attribute) at fault,
            /// [`ShapeErrorKind::Arity`] for a wrong number of inputs.
            pub fn infer<D: Dim>(
                &self,
                inputs: &[TensorMeta<D>],
                cx: &mut impl DimCx<D>,
            ) -> Result<Vec<OutputMeta<D>>, ShapeError> {
                self.infer_with(inputs, &Extents::own(), cx)
            }

            /// [`Op::infer`] with the extents of the op's [`AttrKind::Dims`] attributes given
            /// (`graph!` checks a call whose `shape = [B, S, H * D]` this way, over symbolic
            /// dims); attributes not in `extents` keep the op's own values.
            ///
            /// ```
            /// # use cudnn_runtime as cudnn_graph;
            /// use cudnn_graph::dim::{SymDim, Symbolic};
            /// use cudnn_graph::ops::{AttrValue, Extents, Op, TensorMeta};
            /// use cudnn_graph::DataType;
            /// // The checker's op holds a placeholder; the shape rule reads the given extents.
            /// let op = Op::from_call("reshape", &[("shape".into(), AttrValue::IntList(vec![1, 1, 1, 1]))]).unwrap();
            /// let p = |n: &str| SymDim::Param(n.into());
            /// let hd = p("H").checked_mul(&p("D")).unwrap();
            /// let x = TensorMeta { dims: vec![p("B"), p("S"), hd], dtype: DataType::BF16 };
            /// let given = [("shape".to_string(), vec![p("B"), p("S"), p("H"), p("D")])];
            /// let mut cx = Symbolic::default();
            /// let y = op.infer_with(&[x], &Extents::given(&given), &mut cx).unwrap();
            /// assert_eq!(y[0].dims, given[0].1);
            /// assert!(cx.deferred.is_empty(), "B * S * H * D is the count of both");
            /// ```
            pub fn infer_with<D: Dim>(
                &self,
                inputs: &[TensorMeta<D>],
                extents: &Extents<'_, D>,
                cx: &mut impl DimCx<D>,
            ) -> Result<Vec<OutputMeta<D>>, ShapeError> {
                self.check_arity(inputs.len())?;
                match self {
                    $( Op::$name(op) => OpFamily::infer_with(op, inputs, extents, cx), )*
                }
            }

            /// Computes the op on the CPU (see [`crate::reference`]).
            ///
            /// # Errors
            ///
            /// [`ShapeErrorKind::Arity`] if `inputs` are not as many as [`Op::inputs`] lists.
            pub fn reference(&self, inputs: &[&Array]) -> Result<Vec<Array>, ShapeError> {
                self.check_arity(inputs.len())?;
                self.check_values(inputs)?;
                Ok(match self {
                    $( Op::$name(op) => OpFamily::reference(op, inputs), )*
                })
            }

            /// The rule on the values of this op's inputs, where the op reads memory through them
            /// (every entry of a paged attention's page table names a page of its pool), with the
            /// port named.
            pub fn check_values(&self, inputs: &[&Array]) -> Result<(), ShapeError> {
                match self {
                    $( Op::$name(op) => OpFamily::check_values(op, inputs), )*
                }
            }

            /// This op's packed (ragged) ports, each with the input holding its offsets.
            pub fn ragged_ports(&self) -> Vec<RaggedPort> {
                match self {
                    $( Op::$name(op) => OpFamily::ragged_ports(op), )*
                }
            }

            /// The rule on the memory layout of this op's ports (dims and strides of its inputs and
            /// outputs, in port order), where its semantics depend on it: a ragged attention's
            /// packed tensors must be THD.
            pub fn check_layout(&self, inputs: &[StridedMeta<'_>], outputs: &[StridedMeta<'_>]) -> Result<(), ShapeError> {
                match self {
                    $( Op::$name(op) => OpFamily::check_layout(op, inputs, outputs), )*
                }
            }

            /// This op's cudnn-frontend fields, the tag included.
            pub(crate) fn write_frontend(&self, cx: &codec::WriteCx<'_>) -> codec::FrontendFields {
                match self {
                    $( Op::$name(op) => $module::codec::write(op, cx), )*
                }
            }

            /// How the builder lays out the virtual tensors around this op.
            pub(crate) fn layout_policy(&self) -> LayoutPolicy<'_> {
                match self {
                    $( Op::$name(op) => OpFamily::layout_policy(op), )*
                }
            }

            /// The rule this op puts on the graph's compute type, given its inputs' types
            /// (`OpFamily::compute_rule`: an fp8 matmul computes in f32).
            ///
            /// ```
            /// # use cudnn_runtime as cudnn_graph;
            /// use cudnn_graph::ops::Op;
            /// use cudnn_graph::DataType;
            /// let mm = Op::from_call("matmul", &[]).unwrap();
            /// let fp8 = [DataType::Fp8E4M3, DataType::Fp8E4M3];
            /// assert!(mm.check_compute(&fp8, DataType::F32).is_ok());
            /// assert!(mm.check_compute(&fp8, DataType::F16).is_err());
            /// ```
            pub fn check_compute(&self, inputs: &[DataType], compute: DataType) -> Result<(), ShapeError> {
                match self {
                    $( Op::$name(op) => OpFamily::compute_rule(op, inputs, compute), )*
                }
            }

            /// How this op shares a cuDNN kernel with its neighbours.
            pub fn fusion(&self) -> FusionRule {
                match self {
                    $( Op::$name(op) => OpFamily::fusion(op), )*
                }
            }

            /// Why a dynamic-shape operation graph must not hold this op, where it must not (the
            /// backend then plans the part holding it for its one shape).
            pub fn dynamic_shape_refusal(&self) -> Option<&'static str> {
                match self {
                    $( Op::$name(op) => OpFamily::dynamic_shape_refusal(op), )*
                }
            }

            /// The node's cuDNN operation descriptors (the backend's graph lowering calls it per
            /// node).
            #[cfg(feature = "cudnn")]
            pub(crate) fn lower(
                &self,
                cx: &family::lowering::NodeCx<'_>,
                cudnn: &crate::cudnn::Cudnn,
                next_uid: &mut i64,
            ) -> family::LowerResult {
                let mut cx = family::lowering::LowerCx { node: cx, cudnn, next_uid };
                match self {
                    $( Op::$name(op) => $module::lower::lower(op, &mut cx).map(Into::into), )*
                }
            }
        }
    };
}

pub(crate) use families;
