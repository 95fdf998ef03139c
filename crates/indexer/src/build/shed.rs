//! Chunk text dropped after parsing to stay within the memory budget, and how it comes back
//! when its segment is written ([`super::reread`]).

use crate::chunk::{self, ChunkOptions, FileExtract, Language};

/// How the texts [`shed_texts`] dropped come back ([`super::reread`]). A chunk whose text is its
/// byte range of the file after a short prefix (none for most; a long body's part repeats
/// the signature) keeps the prefix and gets the range sliced from the bytes again. When any
/// other text was dropped, the file is chunked again.
#[derive(Debug, Default)]
pub(super) struct Shed {
    /// (chunk, prefix of its text before its byte range)
    sliced: Vec<(u32, String)>,
    extract_again: bool,
}

/// Composed texts (a header line) and prefixes up to this size may stay in memory when a
/// file's texts are shed (within [`super::Budget`]'s `composed` share), so that the file can
/// come back by slicing instead of a parse.
const KEEP_COMPOSED: usize = 512;

/// Drops the parsed text of every chunk of a file (graph resolution reads none:
/// [`crate::graph::Declarations`] holds what it needs of them), freeing its buffers.
pub(super) fn drop_texts(ex: &mut FileExtract) {
    for c in &mut ex.chunks {
        c.text = String::new();
    }
}

/// [`drop_texts`] for a file that will be written: `source` is the text it was chunked from,
/// and the result says how [`super::reread`] gets the dropped texts back. What stays in memory
/// for that (prefixes, short composed texts) is asked of `reserve` in one amount; when it is
/// refused, or a long composed text is dropped, every text goes and the file is chunked again.
pub(super) fn shed_texts(
    ex: &mut FileExtract,
    source: &str,
    reserve: &dyn Fn(u64) -> bool,
) -> Shed {
    // Per chunk with a text: its text's prefix before its byte range, or none (a composed
    // text, kept whole when short). A prefix's entry in `Shed::sliced` is counted too.
    let mut plan: Vec<(usize, Option<String>)> = Vec::new();
    let mut keep = 0u64;
    let mut again = false;
    for (i, c) in ex.chunks.iter().enumerate() {
        if c.text.is_empty() {
            continue;
        }
        let range = c.start_byte as usize..c.end_byte as usize;
        let prefix = (source.get(range))
            .filter(|tail| c.text.ends_with(*tail))
            .and_then(|tail| c.text.get(..c.text.len() - tail.len()))
            .filter(|p| p.len() <= KEEP_COMPOSED)
            // A copy (empty for most): the text's own buffer is freed below.
            .map(str::to_string);
        match &prefix {
            Some(p) => keep += (p.len() + std::mem::size_of::<(u32, String)>()) as u64,
            None if c.text.len() <= KEEP_COMPOSED => keep += c.text.len() as u64,
            None => again = true,
        }
        plan.push((i, prefix));
    }
    if !again && keep > 0 && !reserve(keep) {
        again = true;
    }
    let mut shed = Shed {
        extract_again: again,
        ..Shed::default()
    };
    for (i, prefix) in plan {
        let c = &mut ex.chunks[i];
        match prefix {
            _ if again => c.text = String::new(),
            Some(p) => {
                c.text = String::new();
                shed.sliced.push((i as u32, p));
            }
            None => {} // short composed text: stays
        }
    }
    shed
}

/// Gives back the texts `shed` dropped from `extract`, from `source` (the file's bytes, hash
/// checked by the caller): prefixes and slices, or the file chunked again. `Some(true)` when
/// it was chunked again, `None` when a chunk's range is not in `source`.
pub(super) fn restore_texts(
    extract: &mut FileExtract,
    shed: Shed,
    source: &str,
    (lang, repo, path): (Language, &str, &str),
    opts: &ChunkOptions,
) -> Option<bool> {
    if shed.extract_again {
        *extract = chunk::extract(lang, repo, path, source, opts);
        return Some(true);
    }
    // The same bytes give the same ranges.
    for (i, mut prefix) in shed.sliced {
        let c = extract.chunks.get_mut(i as usize)?;
        prefix.push_str(source.get(c.start_byte as usize..c.end_byte as usize)?);
        c.text = prefix;
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long function split into parts (each repeating the signature), its header, small
    /// items and leftovers; with `big_type`, also a struct too long to keep whole (reduced to
    /// its header and members, a composed text) and its impl.
    fn source(big_type: bool) -> String {
        let mut s = String::from("//! Module doc.\nuse std::fmt;\n\n");
        s.push_str("/// Adds things.\npub fn long_one(a: u32, b: u32) -> u32 {\n");
        for i in 0..200 {
            s.push_str(&format!("    let v{i} = a + b * {i};\n"));
        }
        s.push_str("    a\n}\n\n");
        if big_type {
            s.push_str("pub struct Big {\n");
            for i in 0..150 {
                s.push_str(&format!("    /// Field {i}.\n    pub field_{i}: u64,\n"));
            }
            s.push_str("}\n\nimpl Big {\n");
            for i in 0..60 {
                s.push_str(&format!(
                    "    pub fn get_{i}(&self) -> u64 {{\n        self.field_{i} + 1\n    }}\n"
                ));
            }
            s.push_str("}\n\n");
        }
        s.push_str("const X: u32 = 1;\nstatic Y: &str = \"é\";\n");
        s
    }

    fn texts(x: &FileExtract) -> Vec<String> {
        x.chunks.iter().map(|c| c.text.clone()).collect()
    }

    const AT: (Language, &str, &str) = (Language::Rust, "r", "src/lib.rs");

    #[test]
    fn sliced_texts_come_back_byte_for_byte() {
        let src = source(false);
        let opts = ChunkOptions::default();
        let whole = chunk::extract(AT.0, AT.1, AT.2, &src, &opts);
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, &|_| true);
        assert!(!shed.extract_again, "{shed:?}");
        assert!(
            shed.sliced.iter().any(|(_, p)| !p.is_empty()),
            "no body part kept a prefix: {shed:?}"
        );
        assert!(shed.sliced.iter().any(|(_, p)| p.is_empty()));
        let sliced = shed.sliced.len();
        assert_eq!(
            ex.chunks.iter().filter(|c| c.text.is_empty()).count(),
            sliced
        );
        assert_eq!(restore_texts(&mut ex, shed, &src, AT, &opts), Some(false));
        assert_eq!(texts(&ex), texts(&whole));

        // Nothing may stay in memory: the file is chunked again.
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, &|_| false);
        assert!(shed.extract_again && shed.sliced.is_empty(), "{shed:?}");
        assert_eq!(restore_texts(&mut ex, shed, &src, AT, &opts), Some(true));
        assert_eq!(texts(&ex), texts(&whole));

        // Bytes that no longer hold a range are refused, not guessed.
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, &|_| true);
        assert_eq!(restore_texts(&mut ex, shed, &src[..10], AT, &opts), None);
    }

    #[test]
    fn a_long_composed_text_brings_the_file_back_by_chunking() {
        let src = source(true);
        let opts = ChunkOptions::default();
        let whole = chunk::extract(AT.0, AT.1, AT.2, &src, &opts);
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, &|_| true);
        assert!(shed.extract_again && shed.sliced.is_empty(), "{shed:?}");
        assert_ne!(texts(&ex), texts(&whole));
        assert_eq!(restore_texts(&mut ex, shed, &src, AT, &opts), Some(true));
        assert_eq!(texts(&ex), texts(&whole));
    }
}
