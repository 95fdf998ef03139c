//! The code view of one index generation: the memory-mapped code segments, read through the
//! segments' sorted lookup tables (symbol ids, names, paths), and one code graph across
//! segments.
//!
//! The graph of an incrementally built index spans segments: edges of an old segment may point
//! at chunks that a later build tombstoned (their file changed), and a new segment names targets
//! that live in older segments by symbol id (`external` edges). [`CodeView::out_edges`] and
//! [`CodeView::in_edges`] resolve both by symbol id to the live chunks, so callers see one graph.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use format::graph::Direction;
use format::manifest::LiveSegment;
use format::records::{
    name_key, qualified_key, ArchivedChunkRecord, ArchivedFileRecord, EdgeKind, BODY_PART_KIND,
};
use format::{FormatError, Index};

/// A graph node: (segment ordinal, node id). Node ids are chunk ordinals, then
/// `chunk_count + file ordinal` for file nodes.
pub type NodeRef = (usize, u32);

/// The code half of a snapshot. Everything it knows is read from the mapped segments: symbols,
/// names, paths and external edges are found by binary search in each segment's lookup tables
/// (written by `format`), so a view costs no heap proportional to the index and is cheap to
/// clone (one `Arc`).
#[derive(Clone)]
pub struct CodeView {
    pub index: Arc<Index>,
}

impl std::fmt::Debug for CodeView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeView")
            .field("dir", &self.index.dir)
            .field("generation", &self.index.manifest.generation)
            .finish()
    }
}

/// Whether file `fi` of segment `ls` is live: a chunk of it is not tombstoned, or it has no
/// chunks and is not deleted ([`LiveSegment::file_is_live`]).
fn file_is_live(ls: &LiveSegment, fi: u32) -> bool {
    ls.file_is_live(fi)
}

impl CodeView {
    /// Opens the index at `dir` (code and memory segments; this view reads the code ones).
    pub fn open(dir: &Path) -> Result<CodeView, FormatError> {
        Ok(CodeView::new(Arc::new(Index::open(dir)?)))
    }

    pub fn new(index: Arc<Index>) -> CodeView {
        CodeView { index }
    }

    pub fn generation(&self) -> u64 {
        self.index.manifest.generation
    }

    fn chunk_count(&self, seg: usize) -> u32 {
        self.index.segments[seg].segment.table().chunks.len() as u32
    }

    /// True for a chunk node that is not tombstoned.
    pub fn is_live_chunk(&self, (s, n): NodeRef) -> bool {
        n < self.chunk_count(s) && !self.index.segments[s].tombstones.contains(n)
    }

    /// Whether `component` (of a module path, lower case) names where chunk `n` lives: `crate`,
    /// `self` or `super`, a directory of its file's path or the file's stem, or its repository
    /// (`tracing` for `tracing-0.1.44`).
    fn lives_in(&self, n: NodeRef, component: &str) -> bool {
        let f = self.file(n);
        let repo = f.repo.to_lowercase();
        let repo_name = repo.split(['-', '@']).next().unwrap_or("");
        matches!(component, "crate" | "self" | "super")
            || repo_name == component
            || repo_name.replace('-', "_") == component
            || f.path.split('/').any(|p| {
                let p = p.to_lowercase();
                let stem = p.rsplit_once('.').map_or(p.as_str(), |(s, _)| s);
                stem == component
            })
    }

    /// The live body parts of symbol chunk `n` (the pieces past its head, [`BODY_PART_KIND`]),
    /// in text order: the chunks of its file whose parent it is.
    pub fn body_parts(&self, (s, n): NodeRef) -> Vec<NodeRef> {
        let ls = &self.index.segments[s];
        let t = ls.segment.table();
        let Some(c) = t.chunks.get(n as usize) else {
            return Vec::new();
        };
        let f = &t.files[c.file.to_native() as usize];
        let first = f.first_chunk.to_native();
        (first..first + f.chunk_count.to_native())
            .filter(|&p| {
                let pc = &t.chunks[p as usize];
                pc.parent.to_native() == n
                    && pc.kind.as_str() == BODY_PART_KIND
                    && !ls.tombstones.contains(p)
            })
            .map(|p| (s, p))
            .collect()
    }

    pub fn is_chunk(&self, (s, n): NodeRef) -> bool {
        n < self.chunk_count(s)
    }

    pub fn chunk(&self, (s, n): NodeRef) -> &ArchivedChunkRecord {
        &self.index.segments[s].segment.table().chunks[n as usize]
    }

    /// A chunk's text, checked when read ([`format::Segment::chunk_text`]): a damaged text is a
    /// corruption error naming the segment's file, never a panic or altered text.
    pub fn text(&self, (s, n): NodeRef) -> Result<&str, FormatError> {
        self.index.segments[s].segment.chunk_text(n)
    }

    /// The file of a chunk node, or the file a file node stands for.
    pub fn file(&self, (s, n): NodeRef) -> &ArchivedFileRecord {
        let t = self.index.segments[s].segment.table();
        let cc = t.chunks.len() as u32;
        let fi = if n < cc {
            t.chunks[n as usize].file.to_native()
        } else {
            n - cc
        };
        &t.files[fi as usize]
    }

    /// The stored vector of a chunk.
    pub fn vector(&self, (s, n): NodeRef) -> Option<&[f32]> {
        self.index.segments[s].segment.vector(n)
    }

    /// Chunks with exactly this symbol id, live or tombstoned, in (segment, chunk) order.
    fn symbol_nodes(&self, id: &str) -> impl Iterator<Item = NodeRef> + '_ {
        let id = id.to_string();
        self.index
            .segments
            .iter()
            .enumerate()
            .flat_map(move |(si, ls)| {
                ls.segment
                    .table()
                    .symbol_chunks(&id)
                    .map(move |c| (si, c))
                    .collect::<Vec<_>>()
            })
    }

    /// Live chunks with exactly this symbol id (several for a long body split into pieces), in
    /// (segment, chunk) order: the symbol's own chunk first.
    pub fn by_symbol_id(&self, id: &str) -> Vec<NodeRef> {
        if id.is_empty() {
            return Vec::new();
        }
        self.symbol_nodes(id)
            .filter(|&n| self.is_live_chunk(n))
            .collect()
    }

    /// The first live chunk of a symbol id.
    fn first_live(&self, id: &str) -> Option<NodeRef> {
        if id.is_empty() {
            return None;
        }
        self.symbol_nodes(id).find(|&n| self.is_live_chunk(n))
    }

    /// Live chunks under a lookup key (see [`format::records::name_key`]).
    fn by_key(&self, key: &str) -> Vec<NodeRef> {
        let mut out = Vec::new();
        for (si, ls) in self.index.segments.iter().enumerate() {
            for c in ls.segment.table().name_chunks(key) {
                if !ls.tombstones.contains(c) {
                    out.push((si, c));
                }
            }
        }
        out
    }

    /// Live chunks whose simple or qualified name is `name` (case-insensitive).
    pub fn by_name(&self, name: &str) -> Vec<NodeRef> {
        self.by_key(&name_key(name))
    }

    /// Every file node of a path, live or not, in (segment, file) order.
    fn files_all(&self, path: &str) -> Vec<NodeRef> {
        let mut out = Vec::new();
        for (si, ls) in self.index.segments.iter().enumerate() {
            let t = ls.segment.table();
            let cc = t.chunks.len() as u32;
            out.extend(t.files_with_path(path).map(|f| (si, cc + f)));
        }
        out
    }

    /// The symbol id of the smallest live chunk of `path` that covers `start..=end`.
    pub fn innermost_symbol(&self, path: &str, start: u32, end: u32) -> Option<String> {
        self.chunks_of_path(path)
            .into_iter()
            .map(|n| self.chunk(n))
            .filter(|c| {
                !c.symbol_id.is_empty()
                    && c.start_line.to_native() <= start
                    && c.end_line.to_native() >= end
            })
            .min_by_key(|c| c.end_line.to_native() - c.start_line.to_native())
            .map(|c| c.symbol_id.to_string())
    }

    /// The live chunks of the file at repo-relative `path`, in order.
    pub fn chunks_of_path(&self, path: &str) -> Vec<NodeRef> {
        let Some((si, n)) = self.file_by_path(path) else {
            return Vec::new();
        };
        let ls = &self.index.segments[si];
        let t = ls.segment.table();
        let f = &t.files[(n - t.chunks.len() as u32) as usize];
        let first = f.first_chunk.to_native();
        (first..first + f.chunk_count.to_native())
            .filter(|c| !ls.tombstones.contains(*c))
            .map(|c| (si, c))
            .collect()
    }

    /// Whether the index holds a live file of repository `repo` at the repository-relative
    /// `path` (the same path in another repository does not count).
    pub fn holds_file(&self, repo: &str, path: &str) -> bool {
        self.index.segments.iter().any(|ls| {
            let t = ls.segment.table();
            t.files_with_path(path)
                .any(|fi| t.files[fi as usize].repo == repo && file_is_live(ls, fi))
        })
    }

    /// The live file node of a path: the newest segment whose file still has a live chunk (or
    /// has no chunks and is not deleted).
    fn file_by_path(&self, path: &str) -> Option<NodeRef> {
        for (si, ls) in self.index.segments.iter().enumerate().rev() {
            let t = ls.segment.table();
            let cc = t.chunks.len() as u32;
            for fi in t
                .files_with_path(path)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                if file_is_live(ls, fi) {
                    return Some((si, cc + fi));
                }
            }
        }
        None
    }

    /// Resolves a symbol id, else a qualified or simple name (`Dictionary::suggest`,
    /// `Dictionary.suggest`, `suggest`), to live symbols: one node per symbol id (its first
    /// chunk).
    pub fn resolve(&self, symbol: &str) -> Vec<NodeRef> {
        let symbol = symbol.trim();
        if let Some(n) = self.first_live(symbol) {
            return vec![n];
        }
        let mut found = self.by_name(symbol);
        if found.is_empty() {
            // `Type::method`, `Type.method`, `Type#method` spellings of a qualified name.
            let norm = qualified_key(symbol);
            found = self.by_key(&norm);
            if found.is_empty() {
                // A qualified suffix: `Circle.area` for `geometry.Circle.area`; then the name
                // with its leading path components dropped, one at a time, down to
                // `Type.method` (`tracing::span::Span::enter` is `Span#enter`: the module path
                // an agent writes is not in the qualified names).
                if let Some(last) = norm.rsplit('.').next().filter(|l| *l != norm) {
                    let named = self.by_key(last);
                    let parts: Vec<&str> = norm.split('.').collect();
                    for skip in 0..parts.len().saturating_sub(1) {
                        let tail = parts[skip..].join(".");
                        let suffix = format!(".{tail}");
                        found = (named.iter().copied())
                            .filter(|&n| {
                                let q = qualified_key(&self.chunk(n).qualified);
                                // A dropped component must name where the symbol lives (a
                                // directory, the file, the repository, or `crate`): not
                                // another package's type of the same name.
                                (skip > 0
                                    && q == tail
                                    && parts[..skip].iter().all(|c| self.lives_in(n, c)))
                                    || q.ends_with(&suffix)
                            })
                            .collect();
                        if !found.is_empty() {
                            break;
                        }
                    }
                }
            }
        }
        // A body part or a header is its symbol; then one node per symbol id: the first
        // chunk; chunks without a symbol id stay as they are.
        for n in found.iter_mut() {
            n.1 = self.chunk(*n).symbol_chunk(n.1);
        }
        let mut seen = std::collections::HashSet::new();
        found.sort_unstable();
        found.dedup();
        found.retain(|&n| {
            let id = self.chunk(n).symbol_id.as_str();
            id.is_empty() || seen.insert(id.to_string())
        });
        found
            .into_iter()
            .map(|n| {
                self.first_live(self.chunk(n).symbol_id.as_str())
                    .unwrap_or(n)
            })
            .collect()
    }

    /// Known names close to `name`: same prefix or substring first, then by edit distance.
    pub fn suggest(&self, name: &str, k: usize) -> Vec<String> {
        let q = name
            .trim()
            .rsplit(['.', ':', '#', '/'])
            .find(|s| !s.is_empty())
            .unwrap_or("")
            .to_lowercase();
        if q.is_empty() {
            return Vec::new();
        }
        // Keys without separators, each with its first live chunk (segments in order).
        let mut keys: std::collections::BTreeMap<&str, NodeRef> = std::collections::BTreeMap::new();
        for (si, ls) in self.index.segments.iter().enumerate() {
            for (k, chunks) in ls.segment.table().names() {
                if k.contains(['.', ':']) || keys.contains_key(k) {
                    continue;
                }
                if let Some(c) = chunks
                    .iter()
                    .find(|c| !ls.tombstones.contains(c.to_native()))
                {
                    keys.insert(k, (si, c.to_native()));
                }
            }
        }
        let mut scored: Vec<(usize, &str, NodeRef)> = keys
            .into_iter()
            .map(|(n, node)| {
                // A substring counts when it is a real part of the other (not the `t` of an
                // `impl<T> … for T` inside any name with a t).
                let (short, long) = if n.len() <= q.len() {
                    (n, q.as_str())
                } else {
                    (&q[..], n)
                };
                let part = short.len() >= 3 && 3 * short.len() >= long.len();
                let d = if part && long.contains(short) {
                    n.len().abs_diff(q.len()) / 4
                } else {
                    levenshtein(&q, n)
                };
                (d, n, node)
            })
            .filter(|(d, n, _)| *d <= (q.len().max(n.len()) / 2).max(2))
            .collect();
        scored.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
        let mut out: Vec<String> = Vec::new();
        for (_, _, node) in scored {
            let c = self.chunk(node);
            let s = if c.qualified.is_empty() {
                c.name.to_string()
            } else {
                c.qualified.to_string()
            };
            if !out.contains(&s) {
                out.push(s);
            }
            if out.len() >= k {
                break;
            }
        }
        out
    }

    /// Where edges of `(seg, target)` really lead: a tombstoned chunk is replaced by the live
    /// chunks with its symbol id, a file node by the live node of its path (nowhere when no
    /// file of the path is live).
    fn push_target(&self, seg: usize, t: u32, fl: u8, out: &mut Vec<(NodeRef, u8)>) {
        let node = (seg, t);
        if self.is_chunk(node) {
            if self.is_live_chunk(node) {
                out.push((node, fl));
            } else if let Some(n) = self.first_live(self.chunk(node).symbol_id.as_str()) {
                out.push((n, fl));
            }
        } else if let Some(n) = self.file_by_path(self.file(node).path.as_str()) {
            // The live node of its path (none when the file is deleted).
            out.push((n, fl));
        }
    }

    fn push_external(&self, dst: &str, fl: u8, out: &mut Vec<(NodeRef, u8)>) {
        if let Some(p) = dst.strip_prefix("file:") {
            if let Some(n) = self.file_by_path(p) {
                out.push((n, fl));
            }
        } else if let Some(n) = self.first_live(dst) {
            out.push((n, fl));
        }
    }

    /// A source node is current when it is a live chunk or the live node of its file.
    fn is_current_source(&self, n: NodeRef) -> bool {
        if self.is_chunk(n) {
            self.is_live_chunk(n)
        } else {
            self.file_by_path(self.file(n).path.as_str()) == Some(n)
        }
    }

    /// Targets of `node`'s edges of `kind` (callees, contained symbols, imported files), with
    /// their flags, remapped across segments; deduplicated, in edge order.
    pub fn out_edges(&self, node: NodeRef, kind: EdgeKind) -> Vec<(NodeRef, u8)> {
        let (s, n) = node;
        let mut out = Vec::new();
        for (t, fl) in self.index.segments[s]
            .segment
            .graph()
            .neighbors(n, kind, Direction::Out)
        {
            self.push_target(s, t, fl, &mut out);
        }
        for e in self.index.segments[s]
            .segment
            .graph()
            .external_from(n, kind)
        {
            self.push_external(e.dst.as_str(), e.flags, &mut out);
        }
        dedup_nodes(out, node)
    }

    /// Sources of edges of `kind` into `node` (callers, containers, importers), including edges
    /// that still point at an older, tombstoned version of the same symbol or file and external
    /// edges naming it; only current sources.
    pub fn in_edges(&self, node: NodeRef, kind: EdgeKind) -> Vec<(NodeRef, u8)> {
        let mut aliases = vec![node];
        let key = if self.is_chunk(node) {
            let id = self.chunk(node).symbol_id.as_str();
            // Other pieces of the symbol, live or tombstoned (old targets of edges).
            aliases.extend(self.symbol_nodes(id).filter(|&x| x != node));
            (!id.is_empty()).then(|| id.to_string())
        } else {
            let p = self.file(node).path.to_string();
            aliases.extend(self.files_all(&p).into_iter().filter(|&x| x != node));
            Some(format!("file:{p}"))
        };
        let mut out = Vec::new();
        for (s, n) in aliases {
            for (src, fl) in
                self.index.segments[s]
                    .segment
                    .graph()
                    .neighbors(n, kind, Direction::In)
            {
                if self.is_current_source((s, src)) {
                    out.push(((s, src), fl));
                }
            }
        }
        if let Some(key) = key {
            for (si, ls) in self.index.segments.iter().enumerate() {
                for e in ls.segment.graph().external_to(&key, kind) {
                    let src = (si, e.src.to_native());
                    if self.is_current_source(src) {
                        out.push((src, e.flags));
                    }
                }
            }
        }
        dedup_nodes(out, node)
    }

    /// Live chunks whose text may hold `word` where neither the character before it nor the
    /// one after it is a letter, a digit or `_` (a whole word, as the callers' and mentions'
    /// text scans look for it): a superset of those that do, in [`Self::live_chunks`] order,
    /// found through each segment's BM25 postings instead of every text. Exact as a superset:
    /// a chunk's postings hold every token of its text, and such an occurrence tokenizes as
    /// `word` alone does, so a chunk without one of `word`'s tokens cannot hold it. Every
    /// live chunk when `word` has no token the postings keep (shorter than 2 or longer than
    /// 64 bytes, a stop word) or is not ASCII (the tokenizer's letters and case mappings of
    /// other characters follow the Unicode tables of the Rust version that wrote a segment,
    /// which may be older than this one); every live chunk of a segment whose postings list
    /// for the token does not decode (damaged: the scan's answer, not a short one).
    pub fn live_chunks_with_word(&self, word: &str) -> Vec<NodeRef> {
        if !word.is_ascii() {
            return self.live_chunks().collect();
        }
        let mut tokens: Vec<String> = Vec::new();
        format::text::for_each_token(word, |t| {
            if !tokens.iter().any(|x| x == t) {
                tokens.push(t.to_string());
            }
        });
        if tokens.is_empty() {
            return self.live_chunks().collect();
        }
        let mut out = Vec::new();
        for (si, ls) in self.index.segments.iter().enumerate() {
            let p = ls.segment.postings();
            let n = self.chunk_count(si);
            // The rarest of the word's tokens: a chunk holding the word holds them all.
            let Some(t) = (tokens.iter())
                .map(|t| p.term_id(t))
                .collect::<Option<Vec<usize>>>()
                .and_then(|ids| {
                    (ids.into_iter()).min_by_key(|&t| p.term_df.get(t).map_or(0, |d| d.to_native()))
                })
            else {
                continue;
            };
            let live = |d: &u32| *d < n && !ls.tombstones.contains(*d);
            match p.docs_of_term(t) {
                Some(docs) => out.extend(docs.into_iter().filter(live).map(|d| (si, d))),
                None => out.extend((0..n).filter(live).map(|d| (si, d))),
            }
        }
        out
    }

    /// Every live chunk, in (segment, chunk) order.
    pub fn live_chunks(&self) -> impl Iterator<Item = NodeRef> + '_ {
        self.index.segments.iter().enumerate().flat_map(|(si, ls)| {
            (0..ls.segment.table().chunks.len() as u32)
                .filter(move |c| !ls.tombstones.contains(*c))
                .map(move |c| (si, c))
        })
    }
}

/// Drops duplicates (keeping the first, i.e. the strongest flags seen first) and self-loops.
fn dedup_nodes(v: Vec<(NodeRef, u8)>, this: NodeRef) -> Vec<(NodeRef, u8)> {
    let mut seen: HashMap<NodeRef, usize> = HashMap::new();
    let mut out: Vec<(NodeRef, u8)> = Vec::new();
    for (n, fl) in v {
        if n == this {
            continue;
        }
        match seen.get(&n) {
            Some(&i) => out[i].1 |= fl,
            None => {
                seen.insert(n, out.len());
                out.push((n, fl));
            }
        }
    }
    out
}

/// Edit distance (insertions, deletions, substitutions) over chars.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "ab"), 2);
        assert_eq!(levenshtein("same", "same"), 0);
    }

    use format::manifest::{SegmentEntry, TombstoneRef};
    use format::records::{ChunkRecord, EdgeInput, ExternalEdge, FileRecord, NO_PARENT};
    use format::IndexManifest;
    use format::{tombstones, SegmentBuilder};

    const MODEL: &str = "test-model@0";
    const DIM: usize = 4;

    fn sym(path: &str, name: &str) -> String {
        format!("rust r {path}/{name}().")
    }

    /// A segment of `files`: (path, [function names]); calls as (src, dst) chunk ordinals.
    fn segment(
        files: &[(&str, &[&str])],
        calls: &[(u32, u32)],
        ext: Vec<ExternalEdge>,
    ) -> SegmentBuilder {
        let mut b = SegmentBuilder::default();
        for (fi, (path, names)) in files.iter().enumerate() {
            let first = b.chunks.len() as u32;
            for (i, name) in names.iter().enumerate() {
                let text = format!("fn {name}() {{}}");
                b.chunks.push(ChunkRecord {
                    file: fi as u32,
                    kind: "function".into(),
                    name: name.to_string(),
                    qualified: name.to_string(),
                    symbol_id: sym(path, name),
                    start_line: 1 + i as u32,
                    end_line: 1 + i as u32,
                    start_byte: 0,
                    end_byte: 10,
                    parent: NO_PARENT,
                    content_hash: [i as u8; 32],
                    text,
                });
                let mut v = vec![0.0; DIM];
                v[i % DIM] = 1.0;
                b.vectors.extend(v);
            }
            b.files.push(FileRecord {
                repo: "r".into(),
                path: path.to_string(),
                language: "rust".into(),
                content_hash: [fi as u8; 32],
                size: 10,
                first_chunk: first,
                chunk_count: names.len() as u32,
                imports: vec![],
            });
        }
        for &(src, dst) in calls {
            b.edges.push(EdgeInput {
                kind: EdgeKind::Calls,
                src,
                dst,
                resolved: true,
            });
        }
        b.external_edges = ext;
        b
    }

    /// Whether `text` holds `word` with neither neighbour a letter, a digit, `_` (nor `$`
    /// before it): what the callers' and mentions' scans look for.
    fn holds_word(text: &str, word: &str) -> bool {
        let id = |c: char| c.is_alphanumeric() || c == '_';
        text.match_indices(word).any(|(a, _)| {
            let b = a + word.len();
            !text[..a]
                .chars()
                .next_back()
                .is_some_and(|c| id(c) || c == '$')
                && !text[b..].chars().next().is_some_and(id)
        })
    }

    /// An index of one segment whose chunks hold `texts`.
    fn word_index(d: &std::path::Path, texts: &[&str]) -> CodeView {
        let mut b = SegmentBuilder::default();
        for (i, t) in texts.iter().enumerate() {
            b.chunks.push(ChunkRecord {
                file: 0,
                kind: "function".into(),
                name: format!("f{i}"),
                qualified: format!("f{i}"),
                symbol_id: sym("a.rs", &format!("f{i}")),
                start_line: 1 + i as u32,
                end_line: 1 + i as u32,
                start_byte: 0,
                end_byte: 1,
                parent: NO_PARENT,
                content_hash: [i as u8; 32],
                text: t.to_string(),
            });
            let mut v = vec![0.0; DIM];
            v[i % DIM] = 1.0;
            b.vectors.extend(v);
        }
        one_file_index(d, b)
    }

    /// The index at `d` of the one segment of `b`'s chunks, all of them the file `a.rs` of
    /// repository `r`.
    fn one_file_index(d: &std::path::Path, mut b: SegmentBuilder) -> CodeView {
        let n = b.chunks.len() as u32;
        b.files.push(FileRecord {
            repo: "r".into(),
            path: "a.rs".into(),
            language: "rust".into(),
            content_hash: [0; 32],
            size: 10,
            first_chunk: 0,
            chunk_count: n,
            imports: vec![],
        });
        let (id, _) = b.write(d, MODEL, DIM).unwrap();
        IndexManifest {
            format_version: format::FORMAT_VERSION,
            generation: 1,
            model_id: MODEL.into(),
            dim: DIM as u32,
            segments: vec![SegmentEntry {
                id,
                chunks: n,
                tombstones: None,
            }],
            ..IndexManifest::empty("", 0)
        }
        .commit(d)
        .unwrap();
        CodeView::open(d).unwrap()
    }

    /// A long symbol's body parts and header carry its name but are pieces of it: a name
    /// resolves to the symbol once, not to each piece.
    #[test]
    fn a_name_resolves_to_the_symbol_not_its_pieces() {
        let d = tempfile::tempdir().unwrap();
        let mut b = SegmentBuilder::default();
        let pieces = [
            (
                "method",
                NO_PARENT,
                sym("a.rs", "Widget#render"),
                1,
                40,
                "render",
            ),
            ("header", 0, String::new(), 1, 2, "render"),
            ("body_part", 0, String::new(), 20, 30, "render"),
            ("body_part", 0, String::new(), 31, 40, "render"),
            ("impl", NO_PARENT, String::new(), 41, 50, "T"),
        ];
        for (i, (kind, parent, id, s, e, name)) in pieces.into_iter().enumerate() {
            b.chunks.push(ChunkRecord {
                file: 0,
                kind: kind.into(),
                name: name.into(),
                qualified: if name == "T" {
                    "T".into()
                } else {
                    "Widget.render".into()
                },
                symbol_id: id,
                start_line: s,
                end_line: e,
                start_byte: 0,
                end_byte: 1,
                parent,
                content_hash: [i as u8; 32],
                text: format!("fn render part {i}"),
            });
            b.vectors.extend([1.0, 0.0, 0.0, 0.0]);
        }
        let v = one_file_index(d.path(), b);
        // A module path before the type, as an agent writes it, is dropped until the name
        // resolves (down to `Type::method`, never to the bare name).
        for q in [
            "render",
            "Widget::render",
            "Widget.render",
            "a::Widget::render",
            "crate::a::Widget::render",
            "r::a::Widget::render",
        ] {
            assert_eq!(v.resolve(q), vec![(0, 0)], "{q}");
        }
        // Not when a dropped component names some other package.
        assert!(v.resolve("mymod::Widget::render").is_empty());
        assert!(v.resolve("a::Other::render").is_empty());
        // A one-letter name is no suggestion for every name that holds its letter.
        assert!(!v
            .suggest("nonexistent_fn_xyz", 5)
            .contains(&"T".to_string()));
        assert_eq!(v.suggest("rendr", 5), vec!["Widget.render".to_string()]);
        assert_eq!(v.chunk((0, 2)).symbol_chunk(2), 0);
        assert_eq!(v.chunk((0, 0)).symbol_chunk(0), 0);
    }

    /// The postings find every chunk the text scans would, in their order, and more only
    /// where the token allows (other case, the word inside a longer one); a word without a
    /// token the postings keep (too short, a stop word) gets every chunk.
    #[test]
    fn chunks_with_a_word_are_found_through_the_postings() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let texts = [
            "let y = foo(1);",
            "foo_bar(2)",
            "xfoo()",
            "$foo()",
            "Foo.bar()",
            "\u{e9}foo()",
            "a.foo\t(x)",
            "foo\u{e9}()",
            "call(parseHTTPRequest)",
            "it is x",
            "xx::foo::<T>(1)",
            "nothing here",
        ];
        let v = word_index(d, &texts);
        let all: Vec<NodeRef> = v.live_chunks().collect();
        for word in [
            "foo",
            "bar",
            "foo_bar",
            "_foo",
            "$foo",
            "parseHTTPRequest",
            "HTTP",
            "\u{e9}foo",
            "is",
            "x",
            "absent",
        ] {
            let found = v.live_chunks_with_word(word);
            let want: Vec<NodeRef> = (all.iter().copied())
                .filter(|&n| holds_word(v.text(n).unwrap(), word))
                .collect();
            assert!(
                want.iter().all(|n| found.contains(n)),
                "{word}: found {found:?}, the scan {want:?}"
            );
            assert!(found.windows(2).all(|w| w[0] < w[1]), "{word}: {found:?}");
            if matches!(word, "is" | "x") {
                assert_eq!(found, all, "{word}");
            }
        }
        // Narrower than every chunk where a token allows it.
        // Not ASCII: every chunk.
        assert_eq!(v.live_chunks_with_word("\u{e9}foo"), all);
        let foo = v.live_chunks_with_word("foo");
        assert!(!foo.contains(&(0, 2)) && !foo.contains(&(0, 8)) && !foo.contains(&(0, 11)));
        assert!(v.live_chunks_with_word("absent").is_empty());
        assert_eq!(v.live_chunks_with_word("HTTP"), vec![(0, 8)]);
    }

    /// Random texts over letters of both cases, digits, `_`, `$` and punctuation: every whole
    /// word of every text (and its pieces around `$`) is found through the postings wherever
    /// the scan finds it.
    #[test]
    fn chunks_with_a_word_hold_every_whole_word_occurrence() {
        let dir = tempfile::tempdir().unwrap();
        const ALPHABET: &[u8] = b"aAbB_$9x.(: Xy";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let texts: Vec<String> = (0..300)
            .map(|_| {
                let len = 1 + (next() % 24) as usize;
                (0..len)
                    .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize] as char)
                    .collect()
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let v = word_index(dir.path(), &refs);
        let all: Vec<NodeRef> = v.live_chunks().collect();
        let mut words: Vec<&str> = texts
            .iter()
            .flat_map(|t| t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$')))
            .filter(|w| !w.is_empty())
            .collect();
        words.sort_unstable();
        words.dedup();
        assert!(words.len() > 100, "{}", words.len());
        for word in words {
            let found = v.live_chunks_with_word(word);
            for &n in &all {
                if holds_word(v.text(n).unwrap(), word) {
                    assert!(found.contains(&n), "{word:?} in {:?}", v.text(n).unwrap());
                }
            }
        }
    }

    /// An incremental build by hand: `b.rs` changed, so its chunk in segment A is tombstoned
    /// and segment B holds the new `callee` plus a new `helper`.
    #[test]
    fn edges_into_tombstoned_chunks_and_external_edges_are_remapped() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A: a.rs/caller (0) calls b.rs/callee (1).
        let (a, _) = segment(
            &[("a.rs", &["caller"]), ("b.rs", &["callee"])],
            &[(0, 1)],
            vec![],
        )
        .write(d, MODEL, DIM)
        .unwrap();
        // B: b.rs/callee (0), b.rs/helper (1) calls callee; callee calls a.rs/caller (external).
        let ext = vec![ExternalEdge {
            kind: EdgeKind::Calls as u8,
            src: 0,
            dst: sym("a.rs", "caller"),
            flags: 0,
        }];
        let (b, _) = segment(&[("b.rs", &["callee", "helper"])], &[(1, 0)], ext)
            .write(d, MODEL, DIM)
            .unwrap();
        let mut bits = roaring::RoaringBitmap::new();
        bits.insert(1);
        let name = tombstones::file_name(&a, 2);
        let bytes = tombstones::write(&d.join(&name), MODEL, &bits).unwrap();
        IndexManifest {
            format_version: format::FORMAT_VERSION,
            generation: 2,
            model_id: MODEL.into(),
            dim: DIM as u32,
            segments: vec![
                SegmentEntry {
                    id: a,
                    chunks: 2,
                    tombstones: Some(TombstoneRef {
                        file: name,
                        blake3: format::blake3_hex(&bytes),
                        count: 1,
                    }),
                },
                SegmentEntry {
                    id: b,
                    chunks: 2,
                    tombstones: None,
                },
            ],
            ..IndexManifest::empty("", 0)
        }
        .commit(d)
        .unwrap();

        let s = CodeView::open(d).unwrap();
        let (caller, old_callee, callee, helper) = ((0, 0), (0, 1), (1, 0), (1, 1));
        assert!(!s.is_live_chunk(old_callee));
        // The chunks holding a word, through the postings: not the tombstoned one, and not
        // from a segment without the word.
        assert_eq!(s.live_chunks_with_word("callee"), vec![callee]);
        assert_eq!(s.live_chunks_with_word("helper"), vec![helper]);
        assert_eq!(s.live_chunks_with_word("caller"), vec![caller]);
        assert_eq!(s.resolve("callee"), vec![callee]);
        assert_eq!(s.resolve(&sym("b.rs", "callee")), vec![callee]);
        let nodes = |v: Vec<(NodeRef, u8)>| v.into_iter().map(|x| x.0).collect::<Vec<_>>();
        // The old edge caller → old callee now leads to the live callee.
        assert_eq!(nodes(s.out_edges(caller, EdgeKind::Calls)), vec![callee]);
        // Callers of the live callee: through the tombstoned alias, and in its own segment.
        let mut callers = nodes(s.in_edges(callee, EdgeKind::Calls));
        callers.sort();
        assert_eq!(callers, vec![caller, helper]);
        // External edges by symbol id, both directions.
        assert_eq!(nodes(s.out_edges(callee, EdgeKind::Calls)), vec![caller]);
        assert_eq!(nodes(s.in_edges(caller, EdgeKind::Calls)), vec![callee]);
        // The file node of b.rs is the new segment's.
        assert_eq!(s.file_by_path("b.rs"), Some((1, 2)));
        assert_eq!(s.suggest("calee", 3)[0], "callee");
    }

    #[test]
    fn dedup_keeps_first_and_merges_flags() {
        let v = vec![((0, 1), 0), ((0, 2), 1), ((0, 1), 1), ((0, 5), 0)];
        assert_eq!(dedup_nodes(v, (0, 5)), vec![((0, 1), 1), ((0, 2), 1)]);
    }
}
