//! cuDNN lowering of `reduction` (placeholder until the backend lands).
