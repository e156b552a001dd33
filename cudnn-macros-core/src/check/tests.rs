//! Unit tests of the graph-level rules.
