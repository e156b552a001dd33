pub use cudnn_macros::graph;
