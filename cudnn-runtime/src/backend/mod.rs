//! The cuDNN backend-API layer (placeholder until the backend lands).

/// A cuDNN, CUDA or loading failure.
#[derive(Debug, thiserror::Error)]
#[error("cuDNN backend unavailable")]
pub struct BackendError;
