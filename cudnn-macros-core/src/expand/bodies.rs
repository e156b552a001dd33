//! The bodies of the generated methods that do the work: `graph()` (the builder calls),
//! `reference` (the CPU engine) and `execute` (the device buffers).

use cudnn_runtime::DataType;
use proc_macro2::TokenStream;
use quote::quote;
use syn::Ident;

use super::tokens::{attr_tokens, dims_tokens, dtype_tokens, tensor_var};
use crate::check::{Checked, Operand};

/// `graph()`: inputs, nodes and outputs through the runtime's `GraphBuilder`, with concrete dims.
pub(super) fn graph_body(ck: &Checked, name: &str, runtime: &[String]) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    let (inter, comp) = (dtype_tokens(ck.intermediate), dtype_tokens(ck.compute));
    let inputs = ck.inputs.iter().map(|port| {
        let var = tensor_var(&port.name.to_string());
        let n = port.name.to_string();
        let dt = dtype_tokens(port.dtype.unwrap_or(DataType::F32));
        let dims = dims_tokens(&port.dims, runtime);
        if port.host {
            let rank = port.dims.len();
            return quote!(let #var = b.host_scalar(#n, #dt, #rank)?;);
        }
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
        let attrs = attr_tokens(&node.attrs, &node.extents, runtime);
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

/// `reference()`: the inputs into the CPU engine, its outputs into the outputs struct.
pub(super) fn reference_body(ck: &Checked, outputs_ty: &Ident) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    let gathers = ck.inputs.iter().map(|port| {
        let (n, s) = (&port.name, port.name.to_string());
        if port.host {
            // A host scalar's value, as the one element of its tensor.
            return quote!(#p::set_input(&graph, &mut values, #s, #p::HostSlice::from(::core::slice::from_ref(&inputs.#n)))?;);
        }
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

/// `execute()`: each port's device buffer (packed bits for `bool`), by name.
pub(super) fn execute_body(ck: &Checked) -> TokenStream {
    let p = quote!(::cudnn_graph::__private);
    // Host scalars' values, stored in their types for cuDNN to read when the work is enqueued.
    let hosts: Vec<TokenStream> = ck
        .inputs
        .iter()
        .filter(|port| port.host)
        .map(|port| {
            let n = &port.name;
            let var = quote::format_ident!("__host_{}", n);
            let dt = dtype_tokens(port.dtype.unwrap_or(DataType::F32));
            quote!(let #var = #p::HostScalar::new(#dt, #p::Element::to_f64_value(args.#n));)
        })
        .collect();
    let ins = ck.inputs.iter().map(|port| {
        let (n, s) = (&port.name, port.name.to_string());
        if port.host {
            let var = quote::format_ident!("__host_{}", n);
            return quote!((#s, #p::DeviceBuffer::host_scalar(&#var)));
        }
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
        #(#hosts)*
        let mut io = [#(#ins,)* #(#outs,)*];
        #p::execute_named(&self.plan, cudnn, &mut io, workspace)
    }
}
