//! Placeholder: filled by the next commit.
