//! The archived record types of a segment (rkyv) and the plain inputs the writer takes.
//!
//! `chunks.rkyv` holds one [`ChunkTable`]: the files of the segment (sorted by path) and their
//! chunks (grouped by file, in file order). Chunk ordinals are the segment-local ids used by the
//! postings, the graph and the vectors. Graph node ids are chunk ordinals first, then
//! `chunk_count + file ordinal` for file nodes.

use rkyv::with::Map;
use rkyv::{Archive, Deserialize, Serialize};

use crate::short_str::ShortStr;

/// Marker for "no parent chunk".
pub const NO_PARENT: u32 = u32::MAX;

/// The `kind` of a header chunk (`path ▸ owner ▸ signature ▸ first doc sentence`): a search
/// aid that stands for its symbol, its `parent`. It is never a name, a child, a duplicate, a
/// mention or a result of its own.
pub const HEADER_KIND: &str = "header";
/// The kind of a piece of a long symbol past its head chunk (its parent); it has no symbol id
/// of its own.
pub const BODY_PART_KIND: &str = "body_part";

/// One indexed file.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    #[rkyv(with = ShortStr)]
    pub repo: String,
    /// Repository-relative path with `/` separators.
    #[rkyv(with = ShortStr)]
    pub path: String,
    #[rkyv(with = ShortStr)]
    pub language: String,
    /// blake3 of the file's bytes.
    pub content_hash: [u8; 32],
    pub size: u64,
    pub first_chunk: u32,
    pub chunk_count: u32,
    /// Imports of the file as written (resolved ones also appear as IMPORTS edges).
    #[rkyv(with = Map<ShortStr>)]
    pub imports: Vec<String>,
}

/// One chunk: a symbol, a piece of a long body, a top-level window or a text window.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ChunkRecord {
    pub file: u32,
    #[rkyv(with = ShortStr)]
    pub kind: String,
    #[rkyv(with = ShortStr)]
    pub name: String,
    #[rkyv(with = ShortStr)]
    pub qualified: String,
    /// SCIP-like id, empty for chunks that are not symbols.
    #[rkyv(with = ShortStr)]
    pub symbol_id: String,
    pub start_line: u32,
    pub end_line: u32,
    pub start_byte: u32,
    pub end_byte: u32,
    /// Chunk ordinal of the enclosing symbol, or [`NO_PARENT`].
    pub parent: u32,
    /// blake3 of exactly the text that was embedded; the key for reusing vectors.
    pub content_hash: [u8; 32],
    /// Format 3 keeps the text here, archived as [`crate::lazy_text::ArchivedText`] (the bytes
    /// of an `ArchivedString`, UTF-8 checked when read); format 4 writes it to `texts.bin` and
    /// leaves this empty. Read it with [`crate::Segment::chunk_text`].
    #[rkyv(with = crate::lazy_text::LazyUtf8)]
    pub text: String,
}

impl ArchivedChunkTable {
    /// Every text of format 3 records checked for UTF-8 (`verify`; format 4 records hold no
    /// text): the first failure and how many.
    pub(crate) fn check_texts(&self, path: &std::path::Path) -> crate::Result<()> {
        let mut bad = (self.chunks.iter().enumerate())
            .filter_map(|(c, r)| r.text.as_str().err().map(|e| (c, e)));
        let Some((first, e)) = bad.next() else {
            return Ok(());
        };
        Err(crate::corrupt(
            path,
            format!(
                "{} chunk text(s) are not UTF-8; the first, chunk {first}: {e}",
                bad.count() + 1
            ),
        ))
    }
}

impl ArchivedChunkRecord {
    /// Whether this is a header chunk ([`HEADER_KIND`]).
    pub fn is_header(&self) -> bool {
        self.kind.as_str() == HEADER_KIND
    }

    /// The chunk of the symbol this one is a piece of (`own` is its ordinal): the parent of a
    /// header or a body part ([`BODY_PART_KIND`]), else itself. What names the chunk to a
    /// caller: its kind, name and symbol id.
    pub fn symbol_chunk(&self, own: u32) -> u32 {
        let parent = self.parent.to_native();
        if (self.is_header() || self.kind.as_str() == BODY_PART_KIND) && parent != NO_PARENT {
            parent
        } else {
            own
        }
    }

    /// The chunk that stands for this one (`own` is its ordinal): a header's symbol, else
    /// itself.
    pub fn shown_as(&self, own: u32) -> u32 {
        let parent = self.parent.to_native();
        if self.is_header() && parent != NO_PARENT {
            parent
        } else {
            own
        }
    }
}

/// The root of `chunks.rkyv`: the records, and sorted lookup tables over them so readers find
/// symbols, names and paths by binary search in the mapped file instead of building hash maps.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkTable {
    pub files: Vec<FileRecord>,
    pub chunks: Vec<ChunkRecord>,
    /// Ordinals of the chunks that have a symbol id, sorted by (symbol id, ordinal).
    pub by_symbol: Vec<u32>,
    /// Sorted, unique lookup keys: every chunk's [`name_key`] and [`qualified_key`].
    #[rkyv(with = Map<ShortStr>)]
    pub name_keys: Vec<String>,
    /// Key `i`'s chunks are `name_chunks[name_offsets[i]..name_offsets[i + 1]]`, ascending.
    pub name_offsets: Vec<u32>,
    pub name_chunks: Vec<u32>,
    /// File ordinals sorted by (path, ordinal): the same path may exist in several repos.
    pub files_by_path: Vec<u32>,
}

/// Lookup key of a simple name: lower-cased.
pub fn name_key(name: &str) -> String {
    name.trim().to_lowercase()
}

/// Lookup key of a qualified name: lower-cased, with `::`, `#` and `/` as `.`
/// (`Dictionary::suggest`, `Dictionary#suggest` → `dictionary.suggest`).
pub fn qualified_key(q: &str) -> String {
    q.trim()
        .to_lowercase()
        .replace("::", ".")
        .replace(['#', '/'], ".")
        .trim_matches('.')
        .to_string()
}

impl ChunkTable {
    /// Fills the lookup tables from `files` and `chunks`.
    pub fn with_lookups(files: Vec<FileRecord>, chunks: Vec<ChunkRecord>) -> ChunkTable {
        let mut by_symbol: Vec<u32> = (0..chunks.len() as u32)
            .filter(|&c| !chunks[c as usize].symbol_id.is_empty())
            .collect();
        by_symbol.sort_by(|&a, &b| {
            chunks[a as usize]
                .symbol_id
                .cmp(&chunks[b as usize].symbol_id)
                .then(a.cmp(&b))
        });
        let mut pairs: Vec<(String, u32)> = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            // A `header` chunk repeats its symbol's name; it is a search aid, not a name.
            if c.name.is_empty() || c.kind == HEADER_KIND {
                continue;
            }
            let n = name_key(&c.name);
            let q = qualified_key(&c.qualified);
            if !q.is_empty() && q != n {
                pairs.push((q, i as u32));
            }
            pairs.push((n, i as u32));
        }
        pairs.sort_unstable();
        pairs.dedup();
        let mut name_keys: Vec<String> = Vec::new();
        let mut name_offsets = Vec::new();
        let mut name_chunks = Vec::with_capacity(pairs.len());
        for (k, c) in pairs {
            if name_keys.last() != Some(&k) {
                name_offsets.push(name_chunks.len() as u32);
                name_keys.push(k);
            }
            name_chunks.push(c);
        }
        name_offsets.push(name_chunks.len() as u32);
        let mut files_by_path: Vec<u32> = (0..files.len() as u32).collect();
        files_by_path.sort_by(|&a, &b| {
            files[a as usize]
                .path
                .cmp(&files[b as usize].path)
                .then(a.cmp(&b))
        });
        ChunkTable {
            files,
            chunks,
            by_symbol,
            name_keys,
            name_offsets,
            name_chunks,
            files_by_path,
        }
    }
}

impl ArchivedChunkTable {
    /// Chunks with this symbol id, ascending.
    pub fn symbol_chunks(&self, id: &str) -> impl Iterator<Item = u32> + '_ {
        let key = |c: &rkyv::rend::u32_le| self.chunks[c.to_native() as usize].symbol_id.as_str();
        let lo = self.by_symbol.partition_point(|c| key(c) < id);
        let hi = lo + self.by_symbol[lo..].partition_point(|c| key(c) == id);
        self.by_symbol[lo..hi].iter().map(|c| c.to_native())
    }

    /// Chunks whose [`name_key`] or [`qualified_key`] is `key` (already a key), ascending.
    pub fn name_chunks(&self, key: &str) -> impl Iterator<Item = u32> + '_ {
        self.name_chunks_fenced(key, None)
    }

    /// [`Self::name_chunks`], the key searched between `fences` of the name keys
    /// ([`Self::name_fences`]) when they are given and of this table: the same chunks (a
    /// binary search of the keys is ~16 probes, each a key and often its bytes on another
    /// cache line; nine segments' lookups took ~50 µs of a query at 1M chunks).
    pub fn name_chunks_fenced(
        &self,
        key: &str,
        fences: Option<&crate::bm25::TermFences>,
    ) -> impl Iterator<Item = u32> + '_ {
        let found = match fences.filter(|f| f.fences(self.name_keys.len())) {
            Some(f) => f.find(key.as_bytes(), |i| {
                self.name_keys.get(i).map(|k| k.as_str().as_bytes())
            }),
            None => self
                .name_keys
                .binary_search_by(|k| k.as_str().cmp(key))
                .ok(),
        };
        let r = match found {
            Some(i) => {
                self.name_offsets[i].to_native() as usize
                    ..self.name_offsets[i + 1].to_native() as usize
            }
            None => 0..0,
        };
        self.name_chunks[r].iter().map(|c| c.to_native())
    }

    /// Fences of the name keys for [`Self::name_chunks_fenced`] (reads every key: done
    /// beside `Segment::populate`, not at open).
    pub fn name_fences(&self) -> crate::bm25::TermFences {
        crate::bm25::TermFences::of_sorted(self.name_keys.iter().map(|k| k.as_str().as_bytes()))
    }

    /// Every lookup key with its chunks.
    pub fn names(&self) -> impl Iterator<Item = (&str, &[rkyv::rend::u32_le])> + '_ {
        self.name_keys.iter().enumerate().map(|(i, k)| {
            let r = self.name_offsets[i].to_native() as usize
                ..self.name_offsets[i + 1].to_native() as usize;
            (k.as_str(), &self.name_chunks[r])
        })
    }

    /// Ordinals of the files with this path, ascending.
    pub fn files_with_path(&self, path: &str) -> impl Iterator<Item = u32> + '_ {
        let key = |f: &rkyv::rend::u32_le| self.files[f.to_native() as usize].path.as_str();
        let lo = self.files_by_path.partition_point(|f| key(f) < path);
        let hi = lo + self.files_by_path[lo..].partition_point(|f| key(f) == path);
        self.files_by_path[lo..hi].iter().map(|f| f.to_native())
    }

    /// Structural checks of the lookup tables (ranges and lengths; ordering only affects what
    /// lookups find, never memory safety).
    pub fn validate_lookups(&self) -> Result<(), &'static str> {
        let n = self.chunks.len() as u32;
        if self.by_symbol.iter().any(|c| c.to_native() >= n) {
            return Err("symbol lookup names a chunk past the end");
        }
        if self.name_offsets.len() != self.name_keys.len() + 1
            || self.name_offsets[0] != 0
            || self.name_offsets.windows(2).any(|w| w[0] > w[1])
            || self.name_offsets.last().map_or(0, |o| o.to_native()) as usize
                != self.name_chunks.len()
            || self.name_chunks.iter().any(|c| c.to_native() >= n)
        {
            return Err("name lookup tables are inconsistent");
        }
        let nf = self.files.len();
        if self.files_by_path.len() != nf
            || self
                .files_by_path
                .iter()
                .any(|f| f.to_native() as usize >= nf)
        {
            return Err("path lookup table is inconsistent");
        }
        Ok(())
    }
}

/// A file as the writer takes it.
pub type FileInput = FileRecord;
/// A chunk as the writer takes it.
pub type ChunkInput = ChunkRecord;

/// The edge types of the code graph. The discriminant is the index into the graph's CSR list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeKind {
    Contains = 0,
    Imports = 1,
    Calls = 2,
}

impl EdgeKind {
    pub const ALL: [EdgeKind; 3] = [EdgeKind::Contains, EdgeKind::Imports, EdgeKind::Calls];

    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Contains => "contains",
            EdgeKind::Imports => "imports",
            EdgeKind::Calls => "calls",
        }
    }

    pub fn from_name(s: &str) -> Option<EdgeKind> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Edge flag bit: the target was resolved through the file's own symbols or its imports (set),
/// or inferred from a globally unique name (clear).
pub const EDGE_RESOLVED: u8 = 1;

/// An edge between two nodes of the same segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EdgeInput {
    pub kind: EdgeKind,
    pub src: u32,
    pub dst: u32,
    pub resolved: bool,
}

/// An edge from a node of this segment to a symbol (or file path) that lives in another
/// segment (incremental builds); resolved by symbol id at read time.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExternalEdge {
    pub kind: u8,
    pub src: u32,
    /// A symbol id, or `file:<path>` for a file node.
    pub dst: String,
    pub flags: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(file: u32, name: &str, qualified: &str, symbol: &str) -> ChunkRecord {
        ChunkRecord {
            file,
            kind: "function".into(),
            name: name.into(),
            qualified: qualified.into(),
            symbol_id: symbol.into(),
            start_line: 1,
            end_line: 1,
            start_byte: 0,
            end_byte: 1,
            parent: NO_PARENT,
            content_hash: [0; 32],
            text: String::new(),
        }
    }

    fn file(repo: &str, path: &str, first: u32, n: u32) -> FileRecord {
        FileRecord {
            repo: repo.into(),
            path: path.into(),
            language: "rust".into(),
            content_hash: [0; 32],
            size: 0,
            first_chunk: first,
            chunk_count: n,
            imports: vec![],
        }
    }

    #[test]
    fn lookups_find_symbols_names_and_paths() {
        let t = ChunkTable::with_lookups(
            vec![file("a", "src/x.rs", 0, 3), file("b", "src/x.rs", 3, 1)],
            vec![
                chunk(0, "Parse", "Config::Parse", "s/parse"),
                chunk(0, "render", "render", "s/render"),
                chunk(0, "Parse", "Config::Parse", "s/parse"), // second piece
                chunk(1, "", "", ""),
            ],
        );
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&t).unwrap();
        let a = rkyv::access::<ArchivedChunkTable, rkyv::rancor::Error>(&bytes).unwrap();
        a.validate_lookups().unwrap();
        assert_eq!(a.symbol_chunks("s/parse").collect::<Vec<_>>(), [0, 2]);
        assert_eq!(a.symbol_chunks("s/render").collect::<Vec<_>>(), [1]);
        assert_eq!(a.symbol_chunks("s/none").count(), 0);
        assert_eq!(a.name_chunks("parse").collect::<Vec<_>>(), [0, 2]);
        assert_eq!(a.name_chunks("config.parse").collect::<Vec<_>>(), [0, 2]);
        assert_eq!(a.name_chunks("Parse").count(), 0, "keys are lower-cased");
        assert_eq!(a.files_with_path("src/x.rs").collect::<Vec<_>>(), [0, 1]);
        assert_eq!(a.files_with_path("src/y.rs").count(), 0);
        let keys: Vec<&str> = a.names().map(|(k, _)| k).collect();
        assert_eq!(keys, ["config.parse", "parse", "render"]);
        assert_eq!(qualified_key("a::B#c/d"), "a.b.c.d");
        let empty = ChunkTable::with_lookups(vec![], vec![]);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&empty).unwrap();
        let a = rkyv::access::<ArchivedChunkTable, rkyv::rancor::Error>(&bytes).unwrap();
        a.validate_lookups().unwrap();
        assert_eq!(a.name_chunks("x").count(), 0);
        let fences = a.name_fences();
        assert_eq!(a.name_chunks_fenced("x", Some(&fences)).count(), 0);
    }

    /// Lookups between the name keys' fences find what the plain search finds: every key,
    /// keys one byte longer or shorter, and runs of keys sharing their first 8 bytes across
    /// many fences; fences of another table are not used.
    #[test]
    fn fenced_name_lookups_equal_plain_ones() {
        let mut names: Vec<String> = (0..700).map(|i| format!("n{:05}", i * 7)).collect();
        names.extend((0..300).map(|i| format!("parse_config_{i}")));
        names.extend((0..40).map(|i| format!("é{i}")));
        names.extend(["a".into(), "ab".into(), "z".into()]);
        let chunks: Vec<ChunkRecord> = names
            .iter()
            .map(|n| chunk(0, n, &format!("m::{n}"), ""))
            .collect();
        let t = ChunkTable::with_lookups(vec![file("a", "x.rs", 0, chunks.len() as u32)], chunks);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&t).unwrap();
        let a = rkyv::access::<ArchivedChunkTable, rkyv::rancor::Error>(&bytes).unwrap();
        let fences = a.name_fences();
        let keys: Vec<String> = a.names().map(|(k, _)| k.to_string()).collect();
        assert!(keys.len() > 2000);
        let mut probes: Vec<String> = Vec::new();
        for k in &keys {
            probes.push(k.clone());
            probes.push(format!("{k}0"));
            probes.push(format!("{k}\u{10ffff}"));
            let mut shorter = k.clone();
            shorter.pop();
            probes.push(shorter);
        }
        probes.extend(["".into(), "\0".into(), "zz".into(), "parse_config".into()]);
        let mut found = 0;
        for p in &probes {
            let plain: Vec<u32> = a.name_chunks(p).collect();
            found += usize::from(!plain.is_empty());
            assert_eq!(
                a.name_chunks_fenced(p, Some(&fences)).collect::<Vec<_>>(),
                plain,
                "{p:?}"
            );
        }
        assert!(found >= keys.len());
        // Fences of another table (another key count) are not used.
        let other = ChunkTable::with_lookups(vec![], vec![]);
        let ob = rkyv::to_bytes::<rkyv::rancor::Error>(&other).unwrap();
        let o = rkyv::access::<ArchivedChunkTable, rkyv::rancor::Error>(&ob).unwrap();
        assert_eq!(
            a.name_chunks_fenced(&keys[5], Some(&o.name_fences()))
                .count(),
            1
        );
    }
}
