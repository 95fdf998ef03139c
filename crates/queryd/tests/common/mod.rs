//! Shared helpers: the real model, a copy of the polyglot fixture, an index built from it (all
//! from the workspace's `cix-tests` library; each test binary uses some of them).

#![allow(unused_imports)]

pub use cix_tests::{encoder, indexed_fixture, model_dir};

pub mod http;
