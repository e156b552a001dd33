//! Tokens for the runtime's values: Rust element types of dtypes, `DataType` paths, dims,
//! attribute lists, tensor variables and port docs.

use cudnn_runtime::dim::SymDim;
use cudnn_runtime::ir::{type_string, MemoryLayout};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::DataType;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Ident;

use crate::check::Port;

/// The element type of a port's device buffer: a `bool` tensor is packed bits on the GPU.
pub(super) fn device_type(dtype: Option<DataType>) -> TokenStream {
    match dtype {
        Some(DataType::Bool) => quote!(::cudnn_graph::__private::Bits),
        other => rust_type(other),
    }
}

/// The element type of a port's host buffer.
pub(super) fn rust_type(dtype: Option<DataType>) -> TokenStream {
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

/// The path of a `DataType` variant.
pub(super) fn dtype_tokens(dtype: DataType) -> TokenStream {
    let v = format_ident!("{}", format!("{dtype:?}"));
    quote!(::cudnn_graph::__private::DataType::#v)
}

/// An array of dims (see [`dim_tokens`]).
pub(super) fn dims_tokens(dims: &[SymDim], runtime: &[String]) -> TokenStream {
    let items = dims.iter().map(|d| dim_tokens(d, runtime));
    quote!([#(#items),*])
}

/// A dim as an `i64` expression of the generated `graph()`: a literal; a parameter checked into
/// `i64` (`self.B` for a `dyn` one); an expression (`H * D`) evaluated with checked arithmetic
/// from its parameters' values, an overflow an error naming it.
pub(super) fn dim_tokens(d: &SymDim, runtime: &[String]) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    // `as i64` would wrap a `usize` past `i64::MAX` into a negative (or plausible) extent and
    // blame the tensor; the checked conversion names the dim.
    let param = |name: &str| {
        let id = format_ident!("{}", name);
        let value = if runtime.iter().any(|r| r == name) { quote!(self.#id) } else { quote!(#id) };
        quote!(#p::dim_value(#name, #value)?)
    };
    match d {
        SymDim::Lit(n) => quote!(#n),
        SymDim::Param(name) => param(name),
        SymDim::Expr(_) => {
            let params = d.params();
            let vars: Vec<Ident> = params.iter().map(|n| format_ident!("__v_{}", n)).collect();
            let values = params.iter().map(|n| param(n));
            let text = d.to_string();
            let checked = d.to_checked_expr(&|n| format!("__v_{n}"));
            let checked = syn::parse_str::<syn::Expr>(&checked).map_or_else(|e| e.to_compile_error(), |e| quote!(#e));
            quote!({
                #(let #vars: i64 = #values;)*
                #p::extent(#text, &[#((#params, #vars)),*], #checked)?
            })
        }
    }
}

/// A slice of `(name, AttrValue)` pairs: `attrs` (floats travel as their bits), then each
/// `Dims` attribute of `extents` as the list of its evaluated extents.
pub(super) fn attr_tokens(
    attrs: &[(String, AttrValue)],
    extents: &[(String, Vec<SymDim>)],
    runtime: &[String],
) -> TokenStream {
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
    let dims = extents.iter().map(|(k, dims)| {
        let items = dims.iter().map(|d| dim_tokens(d, runtime));
        quote!((::std::string::String::from(#k), #p::AttrValue::IntList(::std::vec![#(#items),*])))
    });
    quote!(&[#(#items,)* #(#dims),*])
}

/// The generated variable holding a tensor's id.
pub(super) fn tensor_var(name: &str) -> Ident {
    format_ident!("__t_{}", name)
}

/// `` `x`: f16[N, C, H, W] channels-last ``: the port's type in the runtime's one spelling.
pub(super) fn port_doc(port: &Port) -> String {
    let layout = port.order.as_deref().map_or(MemoryLayout::RowMajor, MemoryLayout::from_order);
    let host = if port.host { ", a host scalar given by value at execute" } else { "" };
    match port.dtype {
        Some(dtype) => format!("`{}`: {}{host}", port.name, type_string(dtype, &port.dims, &layout)),
        None => format!("`{}`{host}", port.name),
    }
}
