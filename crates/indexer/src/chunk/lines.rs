//! Line arithmetic on source text: line start offsets, trimming, char boundaries and cutting
//! byte ranges at line starts. Plain text only (no tree-sitter).

/// Byte offsets of line starts.
pub(crate) struct LineIndex {
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub(crate) fn new(src: &str) -> Self {
        let mut starts = vec![0];
        for (i, b) in src.bytes().enumerate() {
            if b == b'\n' && i + 1 < src.len() {
                starts.push(i + 1);
            }
        }
        LineIndex {
            starts,
            len: src.len(),
        }
    }
    /// Number of lines.
    pub(crate) fn count(&self) -> usize {
        self.starts.len()
    }
    /// 0-based line of a byte offset.
    pub(crate) fn line0(&self, byte: usize) -> usize {
        self.starts
            .partition_point(|&s| s <= byte)
            .saturating_sub(1)
    }
    /// Start byte of a 0-based line.
    pub(crate) fn start(&self, line0: usize) -> usize {
        self.starts.get(line0).copied().unwrap_or(self.len)
    }
    /// End byte (exclusive, newline included) of a 0-based line.
    pub(crate) fn end(&self, line0: usize) -> usize {
        self.starts.get(line0 + 1).copied().unwrap_or(self.len)
    }
    /// 1-based inclusive line range of a non-empty byte range.
    pub(crate) fn range(&self, start: usize, end: usize) -> (u32, u32) {
        let a = self.line0(start);
        let b = self.line0(end.max(start + 1) - 1).max(a);
        (a as u32 + 1, b as u32 + 1)
    }
}

/// `end` moved back over trailing whitespace (never before `start`).
pub(crate) fn trim_end(src: &str, start: usize, end: usize) -> usize {
    let t = src[start..end].trim_end();
    start + t.len()
}

/// Largest char boundary `<= i`.
pub(crate) fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// True when only spaces/tabs precede `byte` on its line.
pub(super) fn line_prefix_blank(src: &str, lines: &LineIndex, byte: usize) -> bool {
    let ls = lines.start(lines.line0(byte));
    src.get(ls..byte)
        .map(|p| p.chars().all(|c| c == ' ' || c == '\t'))
        .unwrap_or(false)
}

/// Cuts `[start, end)` into pieces of at most `max_lines` lines / `max_bytes` bytes at line
/// starts (a single longer line stays whole).
pub(super) fn line_pieces(
    src: &str,
    lines: &LineIndex,
    start: usize,
    end: usize,
    max_lines: u32,
    max_bytes: usize,
) -> Vec<(usize, usize)> {
    let _ = src;
    let mut out = Vec::new();
    let first = lines.line0(start);
    let last = lines.line0(end.max(start + 1) - 1);
    let mut ps = start;
    let mut count = 0u32;
    for l in first..=last {
        let ls = lines.start(l).max(start);
        let le = lines.end(l).min(end);
        if count > 0 && (count + 1 > max_lines || le - ps > max_bytes) {
            out.push((ps, ls));
            ps = ls;
            count = 0;
        }
        count += 1;
    }
    out.push((ps, end));
    out
}
