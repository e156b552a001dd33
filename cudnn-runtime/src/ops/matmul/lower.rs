//! cuDNN lowering of `matmul` (placeholder until the backend lands).
