//! The memory tools, split by what they do: [`args`] (their arguments and answers),
//! [`input`] (what agents write, validated), [`output`] (what they read back), [`write`]
//! (add, update, delete) and [`read`] (get, list, search).

pub mod args;
pub mod input;
pub mod output;
pub mod read;
pub mod write;
