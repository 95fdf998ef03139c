//! Memory records: what agents save ("memories") and how a memory segment stores them.
//!
//! A memory segment is an ordinary segment (postings, vectors, IVF, tombstones all work the
//! same) whose chunk table has one chunk per memory and which carries one more file,
//! `memories.rkyv` ([`MemoryTable`]): the full records, in chunk order. The chunk of a memory
//! has kind `memory`, the memory text as its text, the entity as its name (boosted in BM25 and
//! findable through the name lookup), the tags as its qualified name, and `memory:<id>` as its
//! symbol id (so a memory is found by id through the symbol lookup, by binary search).

use rkyv::{Archive, Deserialize, Serialize};

use crate::records::{ChunkRecord, FileRecord, NO_PARENT};

/// Symbol id prefix of memory chunks.
pub const MEMORY_SYMBOL_PREFIX: &str = "memory:";
/// Path of the one pseudo-file of a memory segment.
pub const MEMORY_PATH: &str = "memories";
/// Chunk kind and file language of memory chunks.
pub const MEMORY_KIND: &str = "memory";

/// A link from a memory to code (see the code-linked memories issue). Stored from the start.
#[derive(
    Archive, Serialize, Deserialize, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq,
)]
pub struct CodeRef {
    #[serde(default)]
    pub repo: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    #[serde(default)]
    pub symbol_id: String,
    #[serde(default)]
    pub git_commit: String,
    /// `sha256:<hex>` of the referenced lines, or empty.
    #[serde(default)]
    pub code_hash: String,
    /// Unix milliseconds.
    #[serde(default)]
    pub created_at: i64,
    #[serde(default)]
    pub last_verified_at: Option<i64>,
    #[serde(default)]
    pub stale_since: Option<i64>,
    #[serde(default)]
    pub confidence: Option<f32>,
    #[serde(default)]
    pub reason: String,
}

/// One memory, as stored. Times are Unix milliseconds.
#[derive(
    Archive, Serialize, Deserialize, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq,
)]
pub struct MemoryRecord {
    /// Time-ordered UUID (v7), lower-case hyphenated.
    pub id: String,
    pub text: String,
    pub category: String,
    /// `user`, `session`, `project`, `team` or `org`.
    pub scope: String,
    pub entity: String,
    /// `key` or `key=value`, sorted, unique.
    pub tags: Vec<String>,
    /// `user`, `agent` or `inferred`.
    pub source: String,
    pub evidence: Vec<String>,
    pub code_refs: Vec<CodeRef>,
    pub created_at: i64,
    pub updated_at: i64,
    /// `active`, `archived` or `deleted`.
    pub state: String,
    /// SIMILAR edges from this memory, computed when its text was written: its
    /// [`SIMILAR_K`] nearest live memories with cosine similarity ≥ [`SIMILAR_MIN`], best
    /// first. The reverse direction is found through [`MemoryTable::similar_in`] and the delta.
    #[serde(default)]
    pub similar: Vec<Similar>,
}

/// One SIMILAR edge: the other memory and the cosine similarity of the two vectors.
#[derive(
    Archive, Serialize, Deserialize, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq,
)]
pub struct Similar {
    pub id: String,
    pub score: f32,
}

/// How many SIMILAR edges a memory gets at write, and the least cosine similarity for one.
pub const SIMILAR_K: usize = 5;
pub const SIMILAR_MIN: f32 = 0.55;

/// The SIMILAR edges among candidate (memory id, cosine) pairs: those ≥ [`SIMILAR_MIN`], best
/// first (ties by id), one per id, at most [`SIMILAR_K`], scores rounded to 4 decimals. The
/// one rule for queryd's writes and the indexer's dump ingest.
pub fn pick_similar(mut cands: Vec<(String, f32)>) -> Vec<Similar> {
    cands.retain(|(_, s)| *s >= SIMILAR_MIN);
    cands.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    cands.dedup_by(|a, b| a.0 == b.0);
    cands.truncate(SIMILAR_K);
    cands
        .into_iter()
        .map(|(id, s)| Similar {
            id,
            score: (s.clamp(-1.0, 1.0) * 1e4).round() / 1e4,
        })
        .collect()
}

/// A reverse SIMILAR edge: memory `target` is similar to the memory in chunk `source`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SimilarIn {
    pub target: String,
    pub source: u32,
}

/// The root of `memories.rkyv`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct MemoryTable {
    pub memories: Vec<MemoryRecord>,
    /// Every record's SIMILAR edges reversed, sorted by (target, source).
    pub similar_in: Vec<SimilarIn>,
}

impl MemoryTable {
    /// The table of `memories` (in chunk order) with its reverse SIMILAR edges.
    pub fn new(memories: Vec<MemoryRecord>) -> MemoryTable {
        let mut similar_in: Vec<SimilarIn> = memories
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                m.similar.iter().map(move |s| SimilarIn {
                    target: s.id.clone(),
                    source: i as u32,
                })
            })
            .collect();
        similar_in.sort_by(|a, b| (&a.target, a.source).cmp(&(&b.target, b.source)));
        similar_in.dedup();
        MemoryTable {
            memories,
            similar_in,
        }
    }
}

impl ArchivedMemoryTable {
    /// Chunks of the records that have a SIMILAR edge to memory `id`.
    pub fn similar_to<'a>(&'a self, id: &str) -> impl Iterator<Item = u32> + 'a {
        let v = &self.similar_in;
        let start = v.partition_point(|e| e.target.as_str() < id);
        let id = id.to_string();
        v[start..]
            .iter()
            .take_while(move |e| e.target.as_str() == id)
            .map(|e| e.source.to_native())
    }

    /// Checks the reverse SIMILAR table against the records: sorted, in range, and exactly
    /// the records' edges.
    pub fn check_similar(&self) -> Result<(), SimilarTableError> {
        let n = self.memories.len() as u32;
        let v = &self.similar_in;
        let mut count = 0usize;
        for (i, e) in v.iter().enumerate() {
            let src = e.source.to_native();
            if src >= n {
                return Err(SimilarTableError::OutOfRange { i, src, n });
            }
            if i > 0 {
                let p = &v[i - 1];
                if (p.target.as_str(), p.source.to_native()) >= (e.target.as_str(), src) {
                    return Err(SimilarTableError::Unsorted);
                }
            }
            if !self.memories[src as usize]
                .similar
                .iter()
                .any(|s| s.id.as_str() == e.target.as_str())
            {
                return Err(SimilarTableError::NotAnEdge(i));
            }
        }
        for m in self.memories.iter() {
            let mut ids: Vec<&str> = m.similar.iter().map(|s| s.id.as_str()).collect();
            ids.sort_unstable();
            ids.dedup();
            count += ids.len();
        }
        if count != v.len() {
            return Err(SimilarTableError::Count);
        }
        Ok(())
    }
}

/// The chunk that stands for `m` in a memory segment's chunk table.
pub fn memory_chunk(m: &MemoryRecord) -> ChunkRecord {
    let lines = m.text.lines().count().max(1) as u32;
    ChunkRecord {
        file: 0,
        kind: MEMORY_KIND.into(),
        name: m.entity.clone(),
        qualified: m.tags.join(" "),
        symbol_id: format!("{MEMORY_SYMBOL_PREFIX}{}", m.id),
        start_line: 1,
        end_line: lines,
        start_byte: 0,
        end_byte: m.text.len() as u32,
        parent: NO_PARENT,
        content_hash: *blake3::hash(m.text.as_bytes()).as_bytes(),
        text: m.text.clone(),
    }
}

/// The one pseudo-file of a memory segment holding `n` memories.
pub fn memory_file(n: u32) -> FileRecord {
    FileRecord {
        repo: String::new(),
        path: MEMORY_PATH.into(),
        language: MEMORY_KIND.into(),
        content_hash: [0; 32],
        size: 0,
        first_chunk: 0,
        chunk_count: n,
        imports: Vec::new(),
    }
}

/// Milliseconds since the Unix epoch (the unit of a record's times).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Allowed scopes, sources and states.
pub const SCOPES: [&str; 5] = ["user", "session", "project", "team", "org"];
pub const SOURCES: [&str; 3] = ["user", "agent", "inferred"];
pub const STATES: [&str; 3] = ["active", "archived", "deleted"];
/// Longest memory text, in bytes.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Longest category or entity, in bytes.
pub const MAX_FIELD_BYTES: usize = 256;
/// Most tags, evidence entries or code references on one memory.
pub const MAX_LIST: usize = 64;
/// Longest tag key and tag value, in bytes.
pub const MAX_TAG_KEY: usize = 64;
pub const MAX_TAG_VALUE: usize = 256;
/// Longest `symbol_id` of a new code reference, in bytes.
pub const MAX_SYMBOL_ID_BYTES: usize = 1024;
/// What a code reference's `code_hash` starts with; 64 lower-case hex digits follow.
pub const CODE_HASH_PREFIX: &str = "sha256:";

/// How a memory segment's reverse SIMILAR table disagrees with its records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimilarTableError {
    #[error("reverse SIMILAR edge {i} names record {src} of {n}")]
    OutOfRange { i: usize, src: u32, n: u32 },
    #[error("reverse SIMILAR edges are not sorted")]
    Unsorted,
    #[error("reverse SIMILAR edge {0} is not a record's edge")]
    NotAnEdge(usize),
    #[error("reverse SIMILAR edges and the records' edges differ in number")]
    Count,
}

/// Why a memory record, tag or code reference is invalid. The texts are what agents read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    #[error("unknown {what} `{value}`; expected one of: {allowed}")]
    NotOneOf {
        what: &'static str,
        value: String,
        allowed: String,
    },
    #[error("malformed tag `{0}`: a tag is `key` or `key=value`; the key is 1-{MAX_TAG_KEY} letters, digits or `_ - . : /`")]
    TagKey(String),
    #[error("malformed tag `{0}`: the value must be 1-{MAX_TAG_VALUE} bytes on one line")]
    TagValue(String),
    #[error("tag `{0}` is not in canonical form")]
    TagNotCanonical(String),
    #[error("tags must be sorted and unique")]
    TagsUnsorted,
    #[error("a code reference needs a `path`")]
    RefNoPath,
    #[error(
        "code reference path `{0}` must be relative to the repository and must not contain `..`"
    )]
    RefPath(String),
    #[error("code reference lines {start}-{end} are invalid: lines are 1-based and end ≥ start")]
    RefLines { start: u32, end: u32 },
    #[error("code reference `{what}` is {len} bytes; at most {max} bytes are allowed")]
    RefFieldTooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("code_hash `{0}` must be `sha256:` followed by 64 lower-case hex digits; leave it out to have it computed from the file")]
    RefCodeHash(String),
    #[error("`{0}` is not a memory id (a lower-case hyphenated UUID)")]
    BadId(String),
    #[error("the memory text is empty")]
    EmptyText,
    #[error("the memory text is {0} bytes; the limit is {MAX_TEXT_BYTES} bytes: split it into several memories")]
    TextTooLong(usize),
    #[error("`{0}` must be at most {MAX_FIELD_BYTES} bytes on one line")]
    FieldTooLong(&'static str),
    #[error("`category` is empty")]
    EmptyCategory,
    #[error("{count} {what}; at most {MAX_LIST} are allowed")]
    TooMany { what: &'static str, count: usize },
    #[error("an evidence entry is empty or longer than 1024 bytes")]
    Evidence,
    #[error("SIMILAR edge to `{0}`: not another memory's id")]
    SimilarId(String),
    #[error("SIMILAR edge to `{id}`: score {score} is not a cosine similarity")]
    SimilarScore { id: String, score: f32 },
    #[error("timestamps are invalid: updated_at must be ≥ created_at ≥ 0")]
    Timestamps,
    #[error("`{what}` contains the control character U+{code:04X}; {allowed}")]
    ControlChar {
        what: &'static str,
        code: u32,
        allowed: &'static str,
    },
}

/// Longest user value echoed back in an error, in characters.
pub const MAX_ECHO_CHARS: usize = 80;

/// `s` as an error message quotes it: at most [`MAX_ECHO_CHARS`] characters, with a note of
/// the full length when cut (a 100 KB bad tag is not echoed back whole).
pub fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_ECHO_CHARS {
        return s.to_string();
    }
    let head: String = s.chars().take(MAX_ECHO_CHARS - 20).collect();
    format!("{head}… ({} bytes)", s.len())
}

/// Refuses control characters (NUL, escape, DEL, C1…) in `s`; with `multiline`, newlines,
/// carriage returns and tabs are allowed.
pub fn check_controls(what: &'static str, s: &str, multiline: bool) -> Result<(), RecordError> {
    match s.chars().find(|&c| !allowed_char(c, multiline)) {
        None => Ok(()),
        Some(c) => Err(RecordError::ControlChar {
            what,
            code: c as u32,
            allowed: if multiline {
                "only newlines and tabs are allowed"
            } else {
                "it must be one line of printable text"
            },
        }),
    }
}

/// Whether a field may hold `c`: no control character, except newlines and tabs in a
/// `multiline` one (the text).
pub fn allowed_char(c: char, multiline: bool) -> bool {
    !c.is_control() || (multiline && matches!(c, '\n' | '\r' | '\t'))
}

fn one_of(what: &'static str, v: &str, allowed: &[&str]) -> Result<(), RecordError> {
    if allowed.contains(&v) {
        Ok(())
    } else {
        Err(RecordError::NotOneOf {
            what,
            value: clip(v),
            allowed: allowed.join(", "),
        })
    }
}

/// A tag in canonical form: `key` or `key=value`, key of letters, digits and `_ - . : /`,
/// value without line breaks; surrounding spaces trimmed.
pub fn normalize_tag(t: &str) -> Result<String, RecordError> {
    let t = t.trim();
    let (k, v) = match t.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (t, None),
    };
    let key_ok = !k.is_empty()
        && k.len() <= MAX_TAG_KEY
        && k.chars()
            .all(|c| c.is_alphanumeric() || "_-.:/".contains(c));
    if !key_ok {
        return Err(RecordError::TagKey(clip(t)));
    }
    match v {
        None => Ok(k.to_string()),
        Some(v) if v.is_empty() || v.len() > MAX_TAG_VALUE || v.contains(['\n', '\r']) => {
            Err(RecordError::TagValue(clip(t)))
        }
        Some(v) => {
            check_controls("tag value", v, false)?;
            Ok(format!("{k}={v}"))
        }
    }
}

/// The key of a canonical tag.
pub fn tag_key(t: &str) -> &str {
    t.split_once('=').map_or(t, |(k, _)| k)
}

/// True for a lower-case hyphenated UUID (`8-4-4-4-12` hex digits).
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// True for `sha256:` followed by exactly 64 lower-case hex digits (the form of a code
/// reference's `code_hash`).
pub fn is_code_hash(s: &str) -> bool {
    s.strip_prefix(CODE_HASH_PREFIX).is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Checks the fields of a code reference as a tool receives it, before it is completed:
/// `repo` and `git_commit` one line of at most [`MAX_FIELD_BYTES`], `symbol_id` one line of
/// at most [`MAX_SYMBOL_ID_BYTES`], no control characters, and `code_hash` empty or
/// [`is_code_hash`]. Only new input is held to these rules: [`validate_record`] (which stored
/// records, dumps and updates of other fields go through) does not apply them, so a record
/// stored before them stays loadable and updatable.
pub fn validate_new_code_ref(r: &CodeRef) -> Result<(), RecordError> {
    for (what, label, v, max) in [
        ("repo", "code reference repo", &r.repo, MAX_FIELD_BYTES),
        (
            "git_commit",
            "code reference git_commit",
            &r.git_commit,
            MAX_FIELD_BYTES,
        ),
        (
            "symbol_id",
            "code reference symbol_id",
            &r.symbol_id,
            MAX_SYMBOL_ID_BYTES,
        ),
    ] {
        if v.len() > max {
            return Err(RecordError::RefFieldTooLong {
                what,
                len: v.len(),
                max,
            });
        }
        check_controls(label, v, false)?;
    }
    if !r.code_hash.is_empty() && !is_code_hash(&r.code_hash) {
        return Err(RecordError::RefCodeHash(clip(&r.code_hash)));
    }
    Ok(())
}

/// Checks a code reference's shape: a relative path without `..`, lines 1-based with
/// end ≥ start. The other fields are checked only when new ([`validate_new_code_ref`]).
pub fn validate_code_ref(r: &CodeRef) -> Result<(), RecordError> {
    if r.path.trim().is_empty() {
        return Err(RecordError::RefNoPath);
    }
    if r.path.starts_with('/') || r.path.split(['/', '\\']).any(|c| c == "..") {
        return Err(RecordError::RefPath(clip(&r.path)));
    }
    check_controls("code reference path", &r.path, false)?;
    if r.start_line == 0 || r.end_line < r.start_line {
        return Err(RecordError::RefLines {
            start: r.start_line,
            end: r.end_line,
        });
    }
    Ok(())
}

/// Checks a whole record (ids, enumerations, sizes, tags in canonical form, sorted and unique).
/// Used for every write and for every record of a memory dump.
pub fn validate_record(m: &MemoryRecord) -> Result<(), RecordError> {
    if !is_uuid(&m.id) {
        return Err(RecordError::BadId(clip(&m.id)));
    }
    if m.text.trim().is_empty() {
        return Err(RecordError::EmptyText);
    }
    if m.text.len() > MAX_TEXT_BYTES {
        return Err(RecordError::TextTooLong(m.text.len()));
    }
    check_controls("text", &m.text, true)?;
    for (what, v) in [("category", &m.category), ("entity", &m.entity)] {
        if v.len() > MAX_FIELD_BYTES || v.contains(['\n', '\r']) {
            return Err(RecordError::FieldTooLong(what));
        }
        check_controls(what, v, false)?;
    }
    if m.category.trim().is_empty() {
        return Err(RecordError::EmptyCategory);
    }
    one_of("scope", &m.scope, &SCOPES)?;
    one_of("source", &m.source, &SOURCES)?;
    one_of("state", &m.state, &STATES)?;
    for (what, n) in [
        ("tags", m.tags.len()),
        ("evidence entries", m.evidence.len()),
        ("code references", m.code_refs.len()),
    ] {
        if n > MAX_LIST {
            return Err(RecordError::TooMany { what, count: n });
        }
    }
    for t in &m.tags {
        if normalize_tag(t)? != *t {
            return Err(RecordError::TagNotCanonical(clip(t)));
        }
    }
    if m.tags.windows(2).any(|w| w[0] >= w[1]) {
        return Err(RecordError::TagsUnsorted);
    }
    if m.evidence
        .iter()
        .any(|e| e.trim().is_empty() || e.len() > 1024)
    {
        return Err(RecordError::Evidence);
    }
    for e in &m.evidence {
        check_controls("evidence", e, false)?;
    }
    for r in &m.code_refs {
        validate_code_ref(r)?;
    }
    if m.similar.len() > MAX_LIST {
        return Err(RecordError::TooMany {
            what: "SIMILAR edges",
            count: m.similar.len(),
        });
    }
    for e in &m.similar {
        if !is_uuid(&e.id) || e.id == m.id {
            return Err(RecordError::SimilarId(clip(&e.id)));
        }
        if !(e.score.is_finite() && (-1.0..=1.0001).contains(&e.score)) {
            return Err(RecordError::SimilarScore {
                id: e.id.clone(),
                score: e.score,
            });
        }
    }
    if m.created_at < 0 || m.updated_at < m.created_at {
        return Err(RecordError::Timestamps);
    }
    Ok(())
}

/// A memory record for tests: id `0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e<i in two hex digits>`,
/// text `memory <i> at <updated_at>`, a project decision by an agent, created at 1.
#[doc(hidden)]
pub fn record_for_tests(i: u8, updated_at: i64) -> MemoryRecord {
    MemoryRecord {
        id: format!("0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e{i:02x}"),
        text: format!("memory {i} at {updated_at}"),
        category: "decision".into(),
        scope: "project".into(),
        entity: String::new(),
        tags: vec![],
        source: "agent".into(),
        evidence: vec![],
        code_refs: vec![],
        created_at: 1,
        updated_at,
        state: "active".into(),
        similar: vec![],
    }
}

impl ArchivedMemoryRecord {
    /// An owned copy of the stored record.
    pub fn to_record(&self) -> MemoryRecord {
        rkyv::deserialize::<MemoryRecord, rkyv::rancor::Error>(self)
            .expect("deserialising a validated archive cannot fail")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn record() -> MemoryRecord {
        MemoryRecord {
            id: "0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e7f".into(),
            text: "The upload handler retries three times".into(),
            category: "decision".into(),
            scope: "project".into(),
            entity: "uploads".into(),
            tags: vec!["area=io".into(), "retry".into()],
            source: "agent".into(),
            evidence: vec!["PR-12".into()],
            code_refs: vec![],
            created_at: 1,
            updated_at: 2,
            state: "active".into(),
            similar: vec![],
        }
    }

    #[test]
    fn reverse_similar_edges() {
        let id = |i: u8| format!("0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e{i:02x}");
        let mut recs: Vec<MemoryRecord> = (0..4)
            .map(|i| MemoryRecord {
                id: id(i),
                ..record()
            })
            .collect();
        let e = |i: u8, s: f32| Similar {
            id: id(i),
            score: s,
        };
        recs[1].similar = vec![e(0, 0.9)];
        recs[2].similar = vec![e(0, 0.8), e(1, 0.7)];
        recs[3].similar = vec![e(9, 0.6)]; // a memory outside this table
        let t = MemoryTable::new(recs);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&t).unwrap();
        let a = rkyv::access::<ArchivedMemoryTable, rkyv::rancor::Error>(&bytes).unwrap();
        assert_eq!(a.similar_to(&id(0)).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(a.similar_to(&id(1)).collect::<Vec<_>>(), [2]);
        assert_eq!(a.similar_to(&id(9)).collect::<Vec<_>>(), [3]);
        assert_eq!(a.similar_to(&id(2)).count(), 0);
        a.check_similar().unwrap();
        // A table whose reverse edges disagree with its records is refused.
        let mut bad = t.clone();
        bad.similar_in.pop();
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&bad).unwrap();
        let a = rkyv::access::<ArchivedMemoryTable, rkyv::rancor::Error>(&bytes).unwrap();
        assert!(a.check_similar().is_err());
        let mut bad = t;
        bad.similar_in.swap(0, 1);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&bad).unwrap();
        let a = rkyv::access::<ArchivedMemoryTable, rkyv::rancor::Error>(&bytes).unwrap();
        assert!(a.check_similar().is_err());
        let mut r = record();
        r.similar = vec![Similar {
            id: r.id.clone(),
            score: 0.9,
        }];
        assert!(validate_record(&r)
            .unwrap_err()
            .to_string()
            .contains("SIMILAR"));
        r.similar = vec![e(1, f32::NAN)];
        assert!(validate_record(&r)
            .unwrap_err()
            .to_string()
            .contains("cosine"));
    }

    #[test]
    fn validation_rules() {
        assert!(validate_record(&record()).is_ok());
        let bad = |f: &dyn Fn(&mut MemoryRecord)| {
            let mut r = record();
            f(&mut r);
            validate_record(&r).unwrap_err().to_string()
        };
        assert!(bad(&|r| r.id = "x".into()).contains("memory id"));
        assert!(bad(&|r| r.text = " ".into()).contains("empty"));
        assert!(bad(&|r| r.text = "a".repeat(MAX_TEXT_BYTES + 1)).contains("limit"));
        assert!(bad(&|r| r.scope = "galaxy".into()).contains("unknown scope"));
        assert!(bad(&|r| r.state = "gone".into()).contains("unknown state"));
        assert!(bad(&|r| r.tags = vec!["b".into(), "a".into()]).contains("sorted"));
        assert!(bad(&|r| r.tags = vec!["a b".into()]).contains("malformed"));
        assert!(bad(&|r| r.updated_at = 0).contains("timestamps"));
        assert_eq!(normalize_tag(" lang = rust ").unwrap(), "lang=rust");
        assert!(normalize_tag("=x").is_err() && normalize_tag("k=").is_err());
        assert_eq!(tag_key("lang=rust"), "lang");
        let cr = |p: &str, s, e| CodeRef {
            repo: String::new(),
            path: p.into(),
            start_line: s,
            end_line: e,
            symbol_id: String::new(),
            git_commit: String::new(),
            code_hash: String::new(),
            created_at: 0,
            last_verified_at: None,
            stale_since: None,
            confidence: None,
            reason: String::new(),
        };
        assert!(validate_code_ref(&cr("src/a.rs", 1, 1)).is_ok());
        assert!(validate_code_ref(&cr("src/a.rs", 0, 1)).is_err());
        assert!(validate_code_ref(&cr("src/a.rs", 5, 4)).is_err());
        assert!(validate_code_ref(&cr("../etc/passwd", 1, 1)).is_err());
        assert!(validate_code_ref(&cr("/etc/passwd", 1, 1)).is_err());
    }

    #[test]
    fn code_hash_shape() {
        let hex = "0123456789abcdef".repeat(4);
        assert!(is_code_hash(&format!("sha256:{hex}")));
        for bad in [
            String::new(),
            "sha256:".into(),
            hex.clone(),
            format!("sha256:{}", &hex[1..]),
            format!("sha256:{hex}0"),
            format!("sha256:{}", hex.to_uppercase()),
            format!("SHA256:{hex}"),
            format!("sha256:{}g", &hex[1..]),
            format!("sha256: {}", &hex[1..]),
            format!("md5:{hex}"),
        ] {
            assert!(!is_code_hash(&bad), "{bad}");
        }
    }

    /// New code references: control characters and over-long `repo`, `git_commit` and
    /// `symbol_id` are refused, and `code_hash` must be well formed; a stored record holding
    /// such values still passes [`validate_record`] (it stays loadable and updatable).
    #[test]
    fn new_code_ref_fields() {
        let ok = CodeRef {
            repo: "app".into(),
            path: "src/a.rs".into(),
            start_line: 1,
            end_line: 2,
            symbol_id: "rust:src/a.rs:Thing::run".into(),
            git_commit: "0123456789abcdef0123456789abcdef01234567".into(),
            code_hash: format!("sha256:{}", "ab".repeat(32)),
            created_at: 0,
            last_verified_at: None,
            stale_since: None,
            confidence: None,
            reason: String::new(),
        };
        assert!(validate_new_code_ref(&ok).is_ok());
        assert!(validate_new_code_ref(&CodeRef {
            repo: String::new(),
            symbol_id: String::new(),
            git_commit: String::new(),
            code_hash: String::new(),
            ..ok.clone()
        })
        .is_ok());
        assert!(validate_new_code_ref(&CodeRef {
            repo: "r".repeat(MAX_FIELD_BYTES),
            git_commit: "g".repeat(MAX_FIELD_BYTES),
            symbol_id: "s".repeat(MAX_SYMBOL_ID_BYTES),
            ..ok.clone()
        })
        .is_ok());
        let bad = |f: &dyn Fn(&mut CodeRef)| {
            let mut r = ok.clone();
            f(&mut r);
            let e = validate_new_code_ref(&r).unwrap_err().to_string();
            // Stored as is, the record still validates.
            let rec = MemoryRecord {
                code_refs: vec![r],
                ..record()
            };
            assert!(validate_record(&rec).is_ok(), "{e}");
            e
        };
        let e = bad(&|r| r.git_commit = format!("\x1b[31m{}", "a".repeat(100_000)));
        assert!(
            e.contains("`git_commit` is 100005 bytes; at most 256"),
            "{e}"
        );
        let e = bad(&|r| r.git_commit = "abc\x1b[2J".into());
        assert!(e.contains("git_commit") && e.contains("U+001B"), "{e}");
        let e = bad(&|r| r.repo = "r".repeat(MAX_FIELD_BYTES + 1));
        assert!(e.contains("`repo` is 257 bytes"), "{e}");
        let e = bad(&|r| r.repo = "app\n".into());
        assert!(e.contains("repo") && e.contains("U+000A"), "{e}");
        let e = bad(&|r| r.symbol_id = "s".repeat(MAX_SYMBOL_ID_BYTES + 1));
        assert!(e.contains("`symbol_id` is 1025 bytes; at most 1024"), "{e}");
        let e = bad(&|r| r.symbol_id = "a\0b".into());
        assert!(e.contains("symbol_id") && e.contains("U+0000"), "{e}");
        let e = bad(&|r| r.code_hash = "sha256:xyz".into());
        assert!(
            e.contains("`sha256:xyz`") && e.contains("64 lower-case hex"),
            "{e}"
        );
        let e = bad(&|r| r.code_hash = format!("sha256:{}", "A".repeat(100_000)));
        assert!(
            e.len() < 300 && e.contains("bytes)"),
            "echo is clipped: {e}"
        );
    }
}
