//! No code. This crate exists for its `Cargo.toml`: it pins the feature sets of third-party
//! crates shared by the CPU workspace build and the GPU build of `cix-kernels`, so the second
//! build reuses the first's artifacts (see the manifest's header).
