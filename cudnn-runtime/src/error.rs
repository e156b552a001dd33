//! The crate-level error: [`Error`], the aggregate of each layer's own error type (each defined
//! beside its layer and re-exported here), and [`Result`].

pub use crate::ir::GraphError;
pub use crate::reference::ArgError;

/// Every error of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A graph that breaks a rule.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A bad execution argument.
    #[error(transparent)]
    Arg(#[from] ArgError),
    /// A payload that cannot be read.
    #[error(transparent)]
    Serialize(#[from] crate::serialize::SerializeError),
    /// A plan payload that cannot be loaded here.
    #[cfg(feature = "cudnn")]
    #[error(transparent)]
    Payload(#[from] crate::payload::plan::PayloadError),
    /// A cuDNN, CUDA or loading failure.
    #[cfg(feature = "cudnn")]
    #[error(transparent)]
    Backend(crate::backend::BackendError),
}

#[cfg(feature = "cudnn")]
impl From<crate::backend::BackendError> for Error {
    /// A backend failure, except that a graph or argument error the backend met is
    /// [`Error::Graph`] or [`Error::Arg`], as if the caller had met it.
    fn from(e: crate::backend::BackendError) -> Self {
        use crate::backend::BackendError;
        match e {
            BackendError::Graph(e) => Error::Graph(*e),
            BackendError::Arg(e) => Error::Arg(*e),
            e => Error::Backend(e),
        }
    }
}

#[cfg(feature = "cudnn")]
impl From<cudarc::driver::DriverError> for Error {
    /// A failed CUDA driver call made through cudarc (an allocation or copy by the caller, a
    /// framework's stream) is a [`Error::Backend`] one, [`BackendError::Driver`](crate::backend::BackendError::Driver).
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Backend(crate::backend::BackendError::Driver {
            call: "a CUDA driver call (cudarc)",
            message: e.to_string(),
        })
    }
}

#[cfg(feature = "cudnn")]
impl From<crate::cudnn::CudnnError> for Error {
    /// A failure of the cuDNN layer is a [`Error::Backend`] one.
    fn from(e: crate::cudnn::CudnnError) -> Self {
        Error::Backend(e.into())
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
