//! A file's extract without its chunk texts, as bytes: what a build's facts cache
//! (`build/facts.rs`) keeps for a file so that the next build need not parse it again while
//! its bytes stay the same. [`decode`] gives back what [`encode`] was given, texts left
//! empty; malformed bytes give `None`, never a panic.
//!
//! Layout: `had_parse_errors` (a byte), `id_prefix`; the chunks (count, then per chunk its
//! kind as its place in [`ChunkKind::ALL`], name, qualified name, symbol tag, lines, bytes and
//! parent + 1, 0 for none); the imports (module, names, line, aliases); the module and member
//! bindings; the calls ([`PackedCalls::raw`]: count, byte length, bytes). Numbers are LEB128
//! varints and strings a length and their bytes (`packed.rs`).

use super::packed::{put_str, put_varint, Reader};
use super::{Chunk, ChunkKind, CompactString, FileExtract, Import, PackedCalls, SymbolTag};

/// Appends `ex` (its chunk texts left out) and `calls` to `out`.
pub(crate) fn encode(ex: &FileExtract, calls: &PackedCalls, out: &mut Vec<u8>) {
    out.push(u8::from(ex.had_parse_errors));
    put_str(out, &ex.id_prefix);
    put_varint(out, ex.chunks.len() as u64);
    for c in &ex.chunks {
        let kind = ChunkKind::ALL
            .iter()
            .position(|k| *k == c.kind)
            .unwrap_or(0);
        out.push(kind as u8);
        put_str(out, &c.name);
        put_str(out, &c.qualified);
        put_varint(out, u64::from(c.symbol.raw()));
        for n in [c.start_line, c.end_line, c.start_byte, c.end_byte] {
            put_varint(out, u64::from(n));
        }
        put_varint(out, c.parent.map_or(0, |p| p as u64 + 1));
    }
    put_varint(out, ex.imports.len() as u64);
    for i in &ex.imports {
        put_str(out, &i.module);
        put_varint(out, i.names.len() as u64);
        for n in &i.names {
            put_str(out, n);
        }
        put_varint(out, u64::from(i.line));
        put_varint(out, i.aliases.len() as u64);
        for (a, b) in &i.aliases {
            put_str(out, a);
            put_str(out, b);
        }
    }
    put_varint(out, ex.module_bindings.len() as u64);
    for (a, b) in &ex.module_bindings {
        put_str(out, a);
        put_str(out, b);
    }
    put_varint(out, ex.member_bindings.len() as u64);
    for (a, b, c) in &ex.member_bindings {
        put_str(out, a);
        put_str(out, b);
        put_str(out, c);
    }
    let (bytes, len) = calls.raw();
    put_varint(out, u64::from(len));
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn compact(r: &mut Reader<'_>) -> Option<CompactString> {
    r.str().map(CompactString::from)
}

/// What [`encode`] wrote at the start of `r`: the extract (texts empty, calls moved out) and
/// its calls. `None` when the bytes are malformed.
pub(crate) fn decode(r: &mut Reader<'_>) -> Option<(FileExtract, PackedCalls)> {
    let had_parse_errors = match r.byte()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let id_prefix = r.str()?.to_string();
    let n = r.count()?;
    let mut chunks = Vec::new();
    for _ in 0..n {
        let kind = *ChunkKind::ALL.get(usize::from(r.byte()?))?;
        let name = compact(r)?;
        let qualified = compact(r)?;
        let symbol = SymbolTag::from_raw(r.u32()?);
        let (start_line, end_line, start_byte, end_byte) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        let parent = match r.usize()? {
            0 => None,
            p if p - 1 < n => Some(p - 1),
            _ => return None,
        };
        chunks.push(Chunk {
            kind,
            name,
            qualified,
            symbol,
            start_line,
            end_line,
            start_byte,
            end_byte,
            text: String::new(),
            parent,
        });
    }
    let n = r.count()?;
    let mut imports = Vec::new();
    for _ in 0..n {
        let module = compact(r)?;
        let k = r.count()?;
        let names = (0..k).map(|_| compact(r)).collect::<Option<Vec<_>>>()?;
        let line = r.u32()?;
        let k = r.count()?;
        let aliases = (0..k)
            .map(|_| Some((compact(r)?, compact(r)?)))
            .collect::<Option<Vec<_>>>()?;
        imports.push(Import {
            module,
            names,
            line,
            aliases,
        });
    }
    let n = r.count()?;
    let module_bindings = (0..n)
        .map(|_| Some((compact(r)?, compact(r)?)))
        .collect::<Option<Vec<_>>>()?;
    let n = r.count()?;
    let member_bindings = (0..n)
        .map(|_| Some((compact(r)?, compact(r)?, compact(r)?)))
        .collect::<Option<Vec<_>>>()?;
    let calls_len = r.u32()?;
    let k = r.count()?;
    let calls = PackedCalls::from_raw(r.bytes(k)?, calls_len)?;
    let ex = FileExtract {
        chunks,
        imports,
        calls: Vec::new(),
        module_bindings,
        member_bindings,
        had_parse_errors,
        id_prefix,
    };
    Some((ex, calls))
}
