//! Line windows for non-code files (Markdown split at headings) and for top-level leftovers of
//! code files.

use super::{
    floor_boundary, trim_end, Chunk, ChunkKind, ChunkOptions, CompactString, Language, LineIndex,
    SymbolTag,
};

/// Line windows over a whole non-code file (`window_lines` with `window_overlap`); Markdown
/// windows prefer to start at headings and are named after the heading of their section.
pub(crate) fn windows(lang: Language, src: &str, opts: &ChunkOptions) -> Vec<Chunk> {
    let lines = LineIndex::new(src);
    if src.trim().is_empty() {
        return Vec::new();
    }
    let last = lines.count() - 1;
    if lang == Language::Markdown {
        let headings = markdown_headings(src, &lines);
        let breaks: Vec<usize> = headings.iter().map(|h| h.0).collect();
        let name_at = |line: usize| -> String {
            let i = headings.partition_point(|h| h.0 <= line);
            if i == 0 {
                String::new()
            } else {
                headings[i - 1].1.clone()
            }
        };
        return windows_core(
            src,
            &lines,
            0,
            last,
            opts.window_lines as usize,
            opts.window_overlap as usize,
            opts.max_chunk_bytes,
            ChunkKind::Window,
            &breaks,
            &name_at,
        );
    }
    windows_core(
        src,
        &lines,
        0,
        last,
        opts.window_lines as usize,
        opts.window_overlap as usize,
        opts.max_chunk_bytes,
        ChunkKind::Window,
        &[],
        &|_| String::new(),
    )
}

/// Windows over 0-based lines `first..=last` without heading logic (top-level leftovers).
#[allow(clippy::too_many_arguments)]
pub(crate) fn line_windows(
    src: &str,
    lines: &LineIndex,
    first: usize,
    last: usize,
    window: usize,
    overlap: usize,
    max_bytes: usize,
    kind: ChunkKind,
) -> Vec<Chunk> {
    windows_core(
        src,
        lines,
        first,
        last,
        window,
        overlap,
        max_bytes,
        kind,
        &[],
        &|_| String::new(),
    )
}

/// `(0-based line, heading text)` of ATX headings outside fenced code blocks.
fn markdown_headings(src: &str, lines: &LineIndex) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for l in 0..lines.count() {
        let line = &src[lines.start(l)..lines.end(l)];
        let t = line.trim_start();
        let indent = line.len() - t.len();
        let t = t.trim_end();
        if indent <= 3 {
            for f in ["```", "~~~"] {
                if t.starts_with(f) {
                    match fence {
                        Some(open) if open == f => fence = None,
                        None => fence = Some(f),
                        _ => {}
                    }
                }
            }
        }
        if fence.is_some() || indent > 3 {
            continue;
        }
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) {
            let rest = &t[hashes..];
            if rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t') {
                let name = rest.trim().trim_end_matches('#').trim().to_string();
                out.push((l, name));
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn windows_core(
    src: &str,
    lines: &LineIndex,
    first: usize,
    last: usize,
    window: usize,
    overlap: usize,
    max_bytes: usize,
    kind: ChunkKind,
    breaks: &[usize],
    name_at: &dyn Fn(usize) -> String,
) -> Vec<Chunk> {
    let mut out = Vec::new();
    let window = window.max(1);
    let overlap = overlap.min(window / 2);
    let blank = |l: usize| src[lines.start(l)..lines.end(l)].trim().is_empty();
    let mut s = first;
    while s <= last {
        // Skip leading blank lines of a window.
        while s <= last && blank(s) {
            s += 1;
        }
        if s > last {
            break;
        }
        let mut e = (s + window - 1).min(last);
        let mut next_is_break = false;
        // Prefer to end right before a break (heading) inside the window.
        let bi = breaks.partition_point(|&b| b <= s);
        if let Some(&b) = breaks.get(bi) {
            if b <= e {
                e = b - 1;
                next_is_break = true;
            }
        }
        // Respect the byte limit.
        while e > s && lines.end(e) - lines.start(s) > max_bytes {
            e -= 1;
            next_is_break = false;
        }
        let (bs, be) = (lines.start(s), trim_end(src, lines.start(s), lines.end(e)));
        if be > bs {
            let name = name_at(s);
            if be - bs > max_bytes {
                // A single over-long line: cut it at char boundaries.
                let mut a = bs;
                while a < be {
                    let mut b = floor_boundary(src, (a + max_bytes).min(be));
                    if b <= a {
                        b = (a + max_bytes).min(be);
                        while b < be && !src.is_char_boundary(b) {
                            b += 1;
                        }
                    }
                    push_window(&mut out, src, lines, a, b, kind, &name);
                    a = b;
                }
            } else {
                push_window(&mut out, src, lines, bs, be, kind, &name);
            }
        }
        if e >= last {
            break;
        }
        let next = if next_is_break || overlap == 0 {
            e + 1
        } else {
            e + 1 - overlap
        };
        s = if next <= s { e + 1 } else { next };
    }
    out
}

fn push_window(
    out: &mut Vec<Chunk>,
    src: &str,
    lines: &LineIndex,
    bs: usize,
    be: usize,
    kind: ChunkKind,
    name: &str,
) {
    let text = &src[bs..be];
    if text.trim().is_empty() {
        return;
    }
    let (a, b) = lines.range(bs, be);
    out.push(Chunk {
        kind,
        name: name.into(),
        qualified: CompactString::default(),
        symbol: SymbolTag::NONE,
        start_line: a,
        end_line: b,
        start_byte: bs as u32,
        end_byte: be as u32,
        text: text.to_string(),
        parent: None,
    });
}
