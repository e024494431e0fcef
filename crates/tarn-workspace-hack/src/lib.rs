//! No code: this crate only pins the features of shared dependencies (see its
//! `Cargo.toml`), so that building any subset of the workspace reuses one build of
//! DataFusion, tantivy and what they stand on.
