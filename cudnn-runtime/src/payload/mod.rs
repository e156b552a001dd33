//! Plan payloads: a built [`ExecutionPlan`](crate::backend::ExecutionPlan) written out as bytes and
//! read back, checked at every step before cuDNN sees it. They wrap a plan of the backend, so they
//! sit one layer above it, although the structural JSON they embed ([`crate::serialize`]) sits
//! below it.
//!
//! 1. [`plan`]: our own payload format (JSON, digest, optional HMAC signature), what the plan
//!    cache writes to disk and what the command-line tool ships between machines.
//! 2. [`frontend`]: cudnn-frontend 1.32's payload (UBJSON), imported and exported beside ours.
//!
//! (These were `serialize::plan` and `serialize::frontend_payload`.)

pub mod frontend;
pub mod plan;
