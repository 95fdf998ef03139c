//! The shape of a synthetic conversational-memory set, shared by its two generators
//! (`convmem_lite.rs`, set a; `convmem.rs`, set b) and the harnesses that read them.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Turn {
    pub id: String,
    pub speaker: String,
    pub text: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Session {
    pub id: String,
    /// YYYY-MM-DD.
    pub date: String,
    pub turns: Vec<Turn>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Conversation {
    pub id: String,
    pub sessions: Vec<Session>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Question {
    pub id: String,
    pub conversation: String,
    pub text: String,
    /// When it is asked (YYYY-MM-DD), after every session of its evidence.
    pub date: String,
    /// `single`, `multi`, `temporal` or `update`.
    pub kind: String,
    /// Turn ids.
    pub evidence: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Dataset {
    pub conversations: Vec<Conversation>,
    pub questions: Vec<Question>,
}
