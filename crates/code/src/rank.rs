//! Ranking rules applied around fusion (see [`crate::search`]): the exact-name tier (chunks
//! that a query names) and the collapse of duplicate and split results.
//!
//! - **Names.** A query names a chunk when the query itself, or its words joined as
//!   snake_case, camelCase or PascalCase, equals the chunk's name or qualified name, compared
//!   case-insensitively ([`name_keys`]); `Type::method`, `Type.method` and `Type#method` also
//!   match a qualified name ending with those segments.
//! - **Collapse.** Results with the same (repository, path, line range) are one result; the
//!   pieces of one long symbol (its head chunk and its `body_part` chunks) whose line ranges
//!   overlap or touch (at most one line apart) are one result with the union of their ranges
//!   ([`collapse`]). The best-ranked member stands for the group. A symbol's `header` chunk
//!   counts as the symbol itself (its lines, its group), and a result is never shown as a
//!   header: [`shown`] maps it to its symbol. A body part standing for a group shows its own
//!   text, named by its symbol (`crate::search` takes kind, name and id from
//!   `symbol_chunk`).

use rustc_hash::{FxHashMap, FxHashSet};

use format::records::{name_key, qualified_key, NO_PARENT};
use format::Index;
use roaring::RoaringBitmap;

/// (segment ordinal, chunk ordinal).
type Node = (usize, u32);

/// Most words a query may have for its joined forms to be looked up as a name.
pub const MAX_NAME_WORDS: usize = 6;

/// Words of a query or identifier: split at whitespace, `_`, `-` and case changes
/// (`closestMatch` → closest, Match; `HTTPServer` → HTTP, Server). `None` when a word holds
/// anything but letters and digits (the query is not a name spelled as words).
fn words(q: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for part in q.split(|c: char| c.is_whitespace() || c == '_' || c == '-') {
        if part.is_empty() {
            continue;
        }
        if !part.chars().all(char::is_alphanumeric) {
            return None;
        }
        let cs: Vec<char> = part.chars().collect();
        let mut cur = String::new();
        for (i, &c) in cs.iter().enumerate() {
            if i > 0 && c.is_uppercase() {
                let prev = cs[i - 1];
                let next_lower = cs.get(i + 1).is_some_and(|n| n.is_lowercase());
                if prev.is_lowercase()
                    || prev.is_ascii_digit()
                    || (prev.is_uppercase() && next_lower)
                {
                    out.push(std::mem::take(&mut cur));
                }
            }
            cur.push(c);
        }
        out.push(cur);
    }
    (!out.is_empty() && out.len() <= MAX_NAME_WORDS).then_some(out)
}

/// Lookup keys (as [`name_key`] / [`qualified_key`] write them) of the names a query spells:
/// the query itself when it has no whitespace (`levenshtein`, `Buffer::format`), and its words
/// joined as snake_case and as one lower-cased word (which is how camelCase and PascalCase
/// names are keyed): `closest match`, `closestMatch` and `closest_match` all give
/// `closest_match` and `closestmatch`. Sorted, unique.
pub fn name_keys(query: &str) -> Vec<String> {
    let q = query.trim();
    let mut keys = Vec::new();
    if q.is_empty() {
        return keys;
    }
    if !q.contains(char::is_whitespace) {
        keys.push(name_key(q));
        keys.push(qualified_key(q));
    }
    if let Some(w) = words(q) {
        let lower: Vec<String> = w.iter().map(|s| s.to_lowercase()).collect();
        keys.push(lower.join("_"));
        keys.push(lower.concat());
    }
    keys.retain(|k| !k.is_empty());
    keys.sort();
    keys.dedup();
    keys
}

/// Live chunks that pass the filters (`allows`, one per segment) and that the query names
/// (see [`name_keys`]), in (segment, chunk) order.
pub fn name_matches(index: &Index, query: &str, allows: &[Option<RoaringBitmap>]) -> Vec<Node> {
    let keys = name_keys(query);
    if keys.is_empty() {
        return Vec::new();
    }
    // `Type::method` also names `module.Type.method`: look the last segment up and keep the
    // chunks whose qualified key ends with the whole query.
    let qk = qualified_key(query);
    let suffix = qk
        .rsplit_once('.')
        .filter(|_| !query.trim().contains(char::is_whitespace))
        .map(|(_, last)| (last.to_string(), format!(".{qk}")));
    let mut out = Vec::new();
    for (si, ls) in index.segments.iter().enumerate() {
        let t = ls.segment.table();
        let ok = |c: u32| {
            !ls.tombstones.contains(c) && allows[si].as_ref().is_none_or(|a| a.contains(c))
        };
        for k in &keys {
            out.extend(
                ls.segment
                    .name_chunks(k)
                    .filter(|&c| ok(c))
                    .map(|c| (si, c)),
            );
        }
        if let Some((last, suffix)) = &suffix {
            out.extend(
                ls.segment
                    .name_chunks(last)
                    .filter(|&c| ok(c))
                    .filter(|&c| qualified_key(&t.chunks[c as usize].qualified).ends_with(suffix))
                    .map(|c| (si, c)),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The score a named chunk reports: above `best_other` (the best score of a chunk the query
/// does not name) and ordered like its own fused score `s`. Linear-fusion scores stay in
/// (0, 1): `m + (1 − m)·s`; RRF scores are `m + s`.
pub fn lift(s: f32, best_other: f32, bounded: bool) -> f32 {
    if bounded {
        best_other + (1.0 - best_other) * s
    } else {
        best_other + s
    }
}

/// One result after [`collapse`]: the best-ranked member and the union of the members' lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// Position of the representative in the ranked input.
    pub rank: usize,
    pub node: Node,
    pub start_line: u32,
    pub end_line: u32,
}

/// Line ranges at most this many lines apart (a blank line between two pieces of one body)
/// count as touching.
pub const MERGE_GAP_LINES: u32 = 1;

/// Collapses a ranked list (best first) into its first `limit` results: a chunk with the same
/// (repository, path, line range) as a better-ranked one is dropped; a chunk of the same
/// symbol as a better-ranked result (a `body_part` and its head, or two body parts of one
/// head) whose lines overlap or touch that result's range is merged into it (the range
/// grows). Every chunk is visited, so the groups — and their ranges — are those of collapsing
/// the whole list and keeping the first `limit`.
///
/// Once `limit` groups exist, a chunk can only change one of them by merging into it, so a
/// chunk whose symbol has no kept group is set aside with its lines alone, and the file
/// record and path of a chunk are read only when it may merge (to drop it if it repeats an
/// earlier chunk, set aside ones included). At 1M chunks most of a query's ~200 candidates
/// come after the tenth group, and their file records and paths were most of the collapse.
pub fn collapse(index: &Index, ranked: &[Node], limit: usize) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    if limit == 0 {
        return out;
    }
    let mut seen: FxHashSet<(&str, &str, u32, u32)> = FxHashSet::default();
    // Symbol root → indices into `out`.
    let mut by_root: FxHashMap<Node, Vec<usize>> = FxHashMap::default();
    // Chunks met after the `limit`-th group whose symbol had no kept group: (start, end, node).
    let mut aside: Vec<(u32, u32, Node)> = Vec::new();
    let record = |&(si, c): &Node| {
        let chunks = &index.segments[si].segment.table().chunks;
        chunks.get(c as usize..c as usize + 1)
    };
    let file = |&(si, c): &Node| {
        let t = index.segments[si].segment.table();
        let ch = t.chunks.get(c as usize)?;
        let f = ch.file.to_native() as usize;
        t.files.get(f..f + 1)
    };
    // (repository, path) of a chunk.
    let place = |(si, c): Node| {
        let t = index.segments[si].segment.table();
        let f = &t.files[t.chunks[c as usize].file.to_native() as usize];
        (f.repo.as_str(), f.path.as_str())
    };
    // Every candidate's record, then the file (and a header's parent) record of the first
    // few, then their paths and repositories, each asked for into L2 in one pass before the
    // grouping reads them: the misses of a pass overlap instead of each waiting in a chain a
    // few ranks ahead. The first `2·limit + 8` usually hold the kept groups; the rest are
    // read only if they may merge.
    let head = &ranked[..ranked.len().min(2 * limit + 8)];
    for n in ranked.iter().filter_map(record) {
        format::prefetch_l2(n);
    }
    for (n, f) in head.iter().filter_map(|n| Some((n, file(n)?))) {
        format::prefetch_l2(f);
        let t = index.segments[n.0].segment.table();
        let ch = &t.chunks[n.1 as usize];
        if ch.shown_as(n.1) != n.1 {
            let p = ch.parent.to_native() as usize;
            if let Some(p) = t.chunks.get(p..p + 1) {
                format::prefetch_l2(p);
            }
        }
    }
    for f in head.iter().filter_map(file) {
        format::prefetch_l2(f[0].path.as_bytes());
        format::prefetch_l2(f[0].repo.as_bytes());
    }
    for (rank, &(si, c)) in ranked.iter().enumerate() {
        let t = index.segments[si].segment.table();
        let ch = &t.chunks[c as usize];
        let parent = ch.parent.to_native();
        // A header stands for its symbol: the symbol's lines, the symbol's group.
        let header = ch.shown_as(c) != c;
        let (start, end) = if header {
            let p = &t.chunks[parent as usize];
            (p.start_line.to_native(), p.end_line.to_native())
        } else {
            (ch.start_line.to_native(), ch.end_line.to_native())
        };
        let root = if (header || ch.kind.as_str() == "body_part") && parent != NO_PARENT {
            (si, parent)
        } else {
            (si, c)
        };
        let full = out.len() >= limit;
        if full && !by_root.contains_key(&root) {
            aside.push((start, end, (si, c)));
            continue;
        }
        let (repo, path) = place((si, c));
        if !seen.insert((repo, path, start, end)) {
            continue;
        }
        // A repeat of a chunk set aside is dropped as the full collapse drops it.
        if full
            && aside
                .iter()
                .any(|&(s, e, n)| (s, e) == (start, end) && place(n) == (repo, path))
        {
            continue;
        }
        let slots = by_root.entry(root).or_default();
        let touching = slots.iter().copied().find(|&g| {
            let g = &out[g];
            start <= g.end_line.saturating_add(MERGE_GAP_LINES + 1)
                && g.start_line <= end.saturating_add(MERGE_GAP_LINES + 1)
        });
        match touching {
            Some(g) => {
                let g = &mut out[g];
                g.start_line = g.start_line.min(start);
                g.end_line = g.end_line.max(end);
            }
            // A new group past the cut changes none of the kept ones.
            None if full => {}
            None => {
                slots.push(out.len());
                out.push(Group {
                    rank,
                    node: (si, c),
                    start_line: start,
                    end_line: end,
                });
            }
        }
    }
    out
}

/// The chunk a result shows: a `header` chunk's symbol, else the chunk itself.
pub fn shown(index: &Index, (si, c): Node) -> Node {
    (
        si,
        index.segments[si].segment.table().chunks[c as usize].shown_as(c),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_identifiers_and_sentences() {
        let w = |q: &str| words(q).map(|v| v.join(" "));
        assert_eq!(w("closestMatch").as_deref(), Some("closest Match"));
        assert_eq!(w("ClosestMatch").as_deref(), Some("Closest Match"));
        assert_eq!(w("closest_match").as_deref(), Some("closest match"));
        assert_eq!(w("closest match").as_deref(), Some("closest match"));
        assert_eq!(w("HTTPServer").as_deref(), Some("HTTP Server"));
        assert_eq!(w("utf8Decode").as_deref(), Some("utf8 Decode"));
        assert_eq!(w("levenshtein").as_deref(), Some("levenshtein"));
        assert_eq!(w("Buffer::format"), None);
        assert_eq!(w("one two three four five six seven"), None);
        assert_eq!(w("  "), None);
    }

    #[test]
    fn name_keys_cover_the_spellings_of_a_name() {
        for q in [
            "closest match",
            "closestMatch",
            "ClosestMatch",
            "closest_match",
        ] {
            let k = name_keys(q);
            assert!(k.contains(&"closest_match".to_string()), "{q}: {k:?}");
            assert!(k.contains(&"closestmatch".to_string()), "{q}: {k:?}");
        }
        assert_eq!(name_keys("levenshtein"), vec!["levenshtein".to_string()]);
        let k = name_keys("Buffer::format");
        assert!(k.contains(&"buffer.format".to_string()), "{k:?}");
        assert!(k.contains(&"buffer::format".to_string()), "{k:?}");
        assert!(name_keys("   ").is_empty());
        // A sentence is looked up only as joined words (which names rarely are).
        let k = name_keys("levenshtein distance between two strings");
        assert_eq!(
            k,
            vec![
                "levenshtein_distance_between_two_strings".to_string(),
                "levenshteindistancebetweentwostrings".to_string()
            ]
        );
    }

    #[test]
    fn lift_keeps_order_and_beats_the_rest() {
        let m = 0.9;
        let (a, b) = (lift(0.2, m, true), lift(0.1, m, true));
        assert!(a > b && b > m && a < 1.0);
        let (a, b) = (lift(0.02, 0.05, false), lift(0.01, 0.05, false));
        assert!(a > b && b > 0.05);
    }
}
