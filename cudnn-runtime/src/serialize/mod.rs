//! Structural JSON of graphs (placeholder until it lands).
