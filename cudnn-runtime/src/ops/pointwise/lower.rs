//! cuDNN lowering of `pointwise` (placeholder until the backend lands).
