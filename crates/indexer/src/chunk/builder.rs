//! The language-independent chunking engine for one parsed code file: symbol tree → chunks
//! (long function bodies split at statements, large types reduced to their header and
//! members), out-of-line methods pointed at their type, top-level leftovers as windows, and
//! one walk over the tree for imports and calls.

use rustc_hash::FxHashMap as HashMap;

use tree_sitter::Node;

use super::defs::{collect_defs, DefNode};
use super::lines::{floor_boundary, line_pieces, line_prefix_blank, trim_end, LineIndex};
use super::parse::{looks_like_cpp, parse};
use super::syntax::{named_kids, node_text};
use super::syntax::{KindStr, WalkKinds};
use super::types::{CALLBACK_PARAM, ITEM_OF, ITEM_SUFFIX, LOCAL_FUNCTION, RETURNED_BY, UNBOUND};
use super::CompactString;
use super::{
    text, Call, Chunk, ChunkKind, ChunkOptions, Def, FileExtract, Import, Language, Spec, SymbolTag,
};
use std::collections::hash_map::Entry;

pub(super) fn extract_code(
    lang: Language,
    repo: &str,
    rel_path: &str,
    source: &str,
    opts: &ChunkOptions,
) -> Option<FileExtract> {
    let header = lang == Language::C && rel_path.ends_with(".h");
    // `.h` files are C by default; one with C++-only syntax is parsed as C++ straight away, and
    // a header that only parses as C++ is read as C++.
    let first = if header && looks_like_cpp(source) {
        Language::Cpp
    } else {
        lang
    };
    let (mut tree, mut spec) = parse(first, source)?;
    if header && first == Language::C && tree.root_node().has_error() {
        if let Some((t, s)) = parse(Language::Cpp, source) {
            if !t.root_node().has_error() {
                tree = t;
                spec = s;
            }
        }
    }
    let root = tree.root_node();
    let mut b = Builder {
        lang,
        spec,
        src: source,
        lines: LineIndex::new(source),
        opts,
        id_prefix: format!(
            "{} {} {}",
            lang.name(),
            if repo.is_empty() { "." } else { repo },
            rel_path
        ),
        chunks: Vec::new(),
        depth: Vec::new(),
        node_chunk: HashMap::default(),
        ids: HashMap::default(),
        covered: Vec::new(),
        pending_owner: Vec::new(),
    };
    let defs = collect_defs(spec, root, source, 0);
    for d in &defs {
        b.emit(d, None, "", false);
    }
    b.resolve_owners();
    b.leftovers();
    let (imports, calls, module_bindings, member_bindings) = b.walk(root);
    if opts.headers {
        let lines = &b.lines;
        let heads = super::header::headers(rel_path, &b.chunks, |line| {
            lines.end(line.saturating_sub(1) as usize) as u32
        });
        for h in heads {
            let depth = h.parent.map_or(0, |p| b.depth[p] + 1);
            b.push(h, depth);
        }
    }
    let mut fx = b.finish(imports, calls, root.has_error());
    fx.module_bindings = module_bindings;
    fx.member_bindings = member_bindings;
    Some(fx)
}

/// The chunk-building state for one code file.
struct Builder<'s> {
    lang: Language,
    spec: &'static dyn Spec,
    src: &'s str,
    lines: LineIndex,
    opts: &'s ChunkOptions,
    id_prefix: String,
    chunks: Vec<Chunk>,
    /// Nesting depth of each chunk (for sorting parents first).
    depth: Vec<u32>,
    /// Node id of a definition's outer node and def node → its symbol chunk.
    node_chunk: HashMap<usize, usize>,
    /// Symbol id (without dedup counter) → times used.
    ids: HashMap<(CompactString, SymbolTag), u32>,
    /// Byte ranges of top-level symbol chunks (for leftovers).
    covered: Vec<(usize, usize)>,
    /// Out-of-line methods whose owner type may be in this file: (chunk, owner qualified).
    pending_owner: Vec<(usize, String)>,
}

struct Emitted {
    index: usize,
}

impl<'s> Builder<'s> {
    /// Start of a definition including the comments/attributes directly above it, moved back to
    /// the start of its line when only whitespace precedes it there.
    fn def_start(&self, outer: Node) -> usize {
        let src = self.src;
        let mut start = outer.start_byte();
        let mut start_row = outer.start_position().row;
        let mut prev = outer.prev_named_sibling();
        while let Some(p) = prev {
            if !self.spec.is_leading(p, src) {
                break;
            }
            let p_end_row = p.end_position().row;
            if p_end_row + 1 < start_row || p_end_row > start_row {
                break;
            }
            if !line_prefix_blank(src, &self.lines, p.start_byte()) {
                break;
            }
            start = p.start_byte();
            start_row = p.start_position().row;
            prev = p.prev_named_sibling();
        }
        if line_prefix_blank(src, &self.lines, start) {
            start = self.lines.start(self.lines.line0(start));
        }
        start
    }

    fn too_big(&self, start: usize, end: usize) -> bool {
        if end <= start {
            return false;
        }
        let (a, b) = self.lines.range(start, end);
        b - a + 1 > self.opts.max_chunk_lines || end - start > self.opts.max_chunk_bytes
    }

    /// The tag of the next symbol of `qualified` and `kind`'s suffix in this file: the
    /// n-th of them is told apart by `(n)` ([`FileExtract::symbol_id`]).
    fn symbol_tag(&mut self, qualified: &str, kind: ChunkKind) -> SymbolTag {
        let first = SymbolTag::new(kind, 1);
        let n = self
            .ids
            .entry((CompactString::from(qualified), first))
            .or_insert(0);
        *n += 1;
        SymbolTag::new(kind, *n)
    }

    fn push(&mut self, chunk: Chunk, depth: u32) -> usize {
        self.chunks.push(chunk);
        self.depth.push(depth);
        self.chunks.len() - 1
    }

    fn emit(
        &mut self,
        d: &DefNode,
        parent: Option<usize>,
        prefix: &str,
        parent_is_type: bool,
    ) -> Emitted {
        let def = &d.def;
        let mut kind = def.kind;
        if kind == ChunkKind::Function && (parent_is_type || !def.scope.is_empty()) {
            kind = ChunkKind::Method;
        }
        let name = def.name.as_str();
        let mut owner = String::new();
        let qualified = if !def.scope.is_empty() {
            owner = join_path(prefix, &def.scope.join("/"));
            format!("{owner}#{name}")
        } else if prefix.is_empty() {
            name.to_string()
        } else if parent_is_type && kind.is_callable() {
            format!("{prefix}#{name}")
        } else {
            format!("{prefix}/{name}")
        };
        let symbol = self.symbol_tag(&qualified, kind);
        let start = self.def_start(d.outer);
        let end = d.outer.end_byte().max(start);
        let depth = parent.map(|p| self.depth[p] + 1).unwrap_or(0);
        if parent.is_none() {
            self.covered.push((start, end));
        }
        let (start_line, end_line) = self.lines.range(start, end);
        let chunk = Chunk {
            kind,
            name: name.into(),
            qualified: qualified.as_str().into(),
            symbol,
            start_line,
            end_line,
            start_byte: start as u32,
            end_byte: trim_end(self.src, start, end) as u32,
            text: String::new(),
            parent,
        };
        let index = self.push(chunk, depth);
        self.node_chunk.insert(d.outer.id(), index);
        self.node_chunk.insert(def.node.id(), index);
        if !owner.is_empty() {
            self.pending_owner.push((index, owner));
        }
        if kind.is_callable() {
            self.fill_function(index, d, start, end);
        } else {
            let is_type = kind.is_type();
            let mut child_ranges = Vec::new();
            for c in &d.children {
                let e = self.emit(c, Some(index), &qualified, is_type);
                let cs = self.chunks[e.index].start_byte as usize;
                let ce = d_end(c);
                child_ranges.push((cs, ce));
            }
            self.fill_container(index, d, start, end, &child_ranges);
        }
        Emitted { index }
    }

    /// Text of a function chunk; splits long bodies into body parts.
    fn fill_function(&mut self, index: usize, d: &DefNode, start: usize, end: usize) {
        let src = self.src;
        if !self.too_big(start, end) {
            let e = trim_end(src, start, end);
            self.chunks[index].text = src[start..e].to_string();
            return;
        }
        let signature = self.signature(&d.def, start);
        let sig_lines = signature.lines().count() as u32 + 1;
        // Statement groups: byte ranges starting at a line start.
        let mut units: Vec<(usize, usize)> = Vec::new();
        if let Some(body) = d.def.body {
            let mut stmts = named_kids(body);
            if stmts.len() == 1 && stmts[0].kind_str() == "statement_list" {
                stmts = named_kids(stmts[0]);
            }
            for s in stmts {
                let (ss, se) = (s.start_byte(), s.end_byte());
                if ss < start || se > end || se <= ss {
                    continue;
                }
                let ls = self.lines.start(self.lines.line0(ss));
                let prev_end = units.last().map(|u| u.1).unwrap_or(start);
                if ls >= prev_end && ls > start && line_prefix_blank(src, &self.lines, ss) {
                    units.push((ls, se));
                } else if let Some(last) = units.last_mut() {
                    last.1 = last.1.max(se);
                }
            }
        }
        if units.is_empty() {
            // No statements to split at (expression body, parse trouble): cut by lines after
            // the first line.
            let first_line_end = self.lines.end(self.lines.line0(start));
            if first_line_end < end {
                units.push((first_line_end, end));
            }
        }
        // Units bigger than the limits are cut into line pieces.
        let max_lines = self.opts.max_chunk_lines.saturating_sub(sig_lines).max(8);
        let max_bytes = self
            .opts
            .max_chunk_bytes
            .saturating_sub(signature.len() + 8)
            .max(256);
        let mut groups = Vec::new();
        for (us, ue) in units {
            if self.lines.range(us, ue).1 - self.lines.range(us, ue).0 < max_lines
                && ue - us <= max_bytes
            {
                groups.push((us, ue));
                continue;
            }
            for piece in line_pieces(src, &self.lines, us, ue, max_lines, max_bytes) {
                groups.push(piece);
            }
        }
        // Greedy packing: the head keeps the signature; each later part starts at a group.
        let mut parts: Vec<(usize, usize)> = Vec::new();
        let mut cur = start;
        let n = groups.len();
        for (i, &(gs, ge)) in groups.iter().enumerate() {
            let tentative_end = if i + 1 == n { end } else { ge };
            let fits = {
                let (a, b) = self.lines.range(cur, tentative_end.max(cur + 1));
                let lines = b - a + 1;
                let bytes = tentative_end.saturating_sub(cur);
                if parts.is_empty() {
                    lines <= self.opts.max_chunk_lines && bytes <= self.opts.max_chunk_bytes
                } else {
                    lines <= max_lines && bytes <= max_bytes
                }
            };
            if !fits && cur < gs {
                parts.push((cur, gs));
                cur = gs;
            }
        }
        parts.push((cur, end));
        // Head.
        let (hs, he) = parts[0];
        let he = trim_end(src, hs, he).max(hs);
        {
            let (a, b) = self.lines.range(hs, he.max(hs + 1));
            let c = &mut self.chunks[index];
            c.start_line = a;
            c.end_line = b;
            c.end_byte = he as u32;
            c.text = src[hs..he].to_string();
        }
        let depth = self.depth[index] + 1;
        let (name, qualified) = (
            self.chunks[index].name.clone(),
            self.chunks[index].qualified.clone(),
        );
        let marker = format!("    {} …", self.spec.comment());
        for &(ps, pe) in &parts[1..] {
            let pe = trim_end(src, ps, pe);
            if pe <= ps {
                continue;
            }
            let (a, b) = self.lines.range(ps, pe);
            let text = format!("{signature}\n{marker}\n{}", &src[ps..pe]);
            self.push(
                Chunk {
                    kind: ChunkKind::BodyPart,
                    name: name.clone(),
                    qualified: qualified.clone(),
                    symbol: SymbolTag::NONE,
                    start_line: a,
                    end_line: b,
                    start_byte: ps as u32,
                    end_byte: pe as u32,
                    text,
                    parent: Some(index),
                },
                depth,
            );
        }
    }

    /// Signature lines of a function: from the start of its definition node to the line where
    /// the body opens (Python: the line before the first statement).
    fn signature(&self, def: &Def, chunk_start: usize) -> String {
        let src = self.src;
        let node_start = def.node.start_byte().max(chunk_start);
        let s = self.lines.start(self.lines.line0(node_start));
        let mut e = match def.body {
            Some(body) => {
                let brow = self.lines.line0(body.start_byte());
                let srow = self.lines.line0(node_start);
                let btxt = node_text(body, src);
                if brow > srow && !(btxt.starts_with('{') || btxt.starts_with(':')) {
                    self.lines.end(brow - 1)
                } else {
                    self.lines.end(brow)
                }
            }
            None => self.lines.end(self.lines.line0(node_start)),
        };
        // Cap very long signatures.
        let (a, b) = self.lines.range(s, e.max(s + 1));
        if b - a + 1 > 8 {
            e = self.lines.end(a as usize - 1 + 7);
        }
        if e - s > 600 {
            e = floor_boundary(src, s + 600);
        }
        src[s..e.max(s)].trim_end().to_string()
    }

    /// Text of a type/module chunk: the whole thing when small, else its header and members
    /// without the nested symbols (which have their own chunks); members beyond the limits go
    /// to body parts.
    fn fill_container(
        &mut self,
        index: usize,
        d: &DefNode,
        start: usize,
        end: usize,
        children: &[(usize, usize)],
    ) {
        let src = self.src;
        if !self.too_big(start, end) {
            let e = trim_end(src, start, end);
            self.chunks[index].text = src[start..e].to_string();
            return;
        }
        let first = self.lines.line0(start);
        let last = self.lines.line0(end.max(start + 1) - 1);
        let mut skip = vec![false; last - first + 1];
        for &(cs, ce) in children {
            if ce <= cs {
                continue;
            }
            let a = self.lines.line0(cs);
            let b = self.lines.line0(ce - 1);
            let type_end = trim_end(src, start, end);
            for l in a.max(first)..=b.min(last) {
                // Keep the type's own first and last line (header and closing brace) unless
                // the nested symbol runs to the very end (Python).
                let keep = (l == first && cs > start) || (l == last && ce < type_end);
                if !keep {
                    skip[l - first] = true;
                }
            }
        }
        let mut kept: Vec<String> = Vec::new();
        let marker = self.spec.comment();
        let mut l = first;
        while l <= last {
            if skip[l - first] {
                let line = &src[self.lines.start(l)..self.lines.end(l)];
                let indent: String = line
                    .chars()
                    .take_while(|c| *c == ' ' || *c == '\t')
                    .collect();
                let m = format!("{indent}{marker} …");
                // Blank lines between two removed symbols collapse into one marker.
                while kept.last().is_some_and(|k| k.trim().is_empty()) {
                    kept.pop();
                }
                if kept.last().map(|k| k.trim()) != Some(m.trim()) {
                    kept.push(m);
                }
                while l <= last && skip[l - first] {
                    l += 1;
                }
                continue;
            }
            let ls = self.lines.start(l).max(start);
            let le = self.lines.end(l).min(end);
            if le > ls {
                kept.push(src[ls..le].trim_end_matches(['\n', '\r']).to_string());
            }
            l += 1;
        }
        // Drop blank lines next to the markers, then pack into the limits.
        let max_lines = self.opts.max_chunk_lines as usize;
        let max_bytes = self.opts.max_chunk_bytes;
        let mut pieces: Vec<Vec<String>> = vec![Vec::new()];
        let mut bytes = 0usize;
        for line in kept {
            let cur = pieces.last_mut().expect("non-empty");
            if !cur.is_empty() && (cur.len() + 1 > max_lines || bytes + line.len() + 1 > max_bytes)
            {
                pieces.push(Vec::new());
                bytes = 0;
            }
            bytes += line.len() + 1;
            pieces.last_mut().expect("non-empty").push(line);
        }
        let mut pieces = pieces.into_iter();
        let head = pieces.next().unwrap_or_default();
        self.chunks[index].text = head.join("\n");
        let header = self.signature(&Def::new(d.def.kind, "", d.def.node), start);
        let header = header.lines().next().unwrap_or("").to_string();
        let depth = self.depth[index] + 1;
        let (name, qualified) = (
            self.chunks[index].name.clone(),
            self.chunks[index].qualified.clone(),
        );
        let (cs, ce) = (self.chunks[index].start_byte, self.chunks[index].end_byte);
        let (sl, el) = (self.chunks[index].start_line, self.chunks[index].end_line);
        for p in pieces {
            if p.iter().all(|l| l.trim().is_empty()) {
                continue;
            }
            self.push(
                Chunk {
                    kind: ChunkKind::BodyPart,
                    name: name.clone(),
                    qualified: qualified.clone(),
                    symbol: SymbolTag::NONE,
                    start_line: sl,
                    end_line: el,
                    start_byte: cs,
                    end_byte: ce,
                    text: format!("{header}\n    {marker} …\n{}", p.join("\n")),
                    parent: Some(index),
                },
                depth,
            );
        }
    }

    /// Points out-of-line methods (Go receivers, C++ `Foo::bar`) at their type when it is
    /// defined in this file.
    fn resolve_owners(&mut self) {
        if self.pending_owner.is_empty() {
            return;
        }
        let mut types: HashMap<&str, usize> = HashMap::default();
        for (i, c) in self.chunks.iter().enumerate() {
            if c.kind.is_type() && c.kind != ChunkKind::Impl {
                types.entry(c.qualified.as_str()).or_insert(i);
            }
        }
        let mut set = Vec::new();
        for (i, owner) in &self.pending_owner {
            if let Some(&t) = types.get(owner.as_str()) {
                set.push((*i, t));
                continue;
            }
            // `Shape::f` defined outside `namespace geo`: match `geo/Shape` when unique.
            let tail = format!("/{owner}");
            let mut found = types.iter().filter(|(q, _)| q.ends_with(&tail));
            if let (Some((_, &t)), None) = (found.next(), found.next()) {
                set.push((*i, t));
            }
        }
        for (i, t) in set {
            // The type is a closer owner than an enclosing namespace/module (`namespace ns {
            // Foo Foo::bar() {} }`); body parts of the method keep pointing at the method.
            let replace = match self.chunks[i].parent {
                None => true,
                Some(p) => self.chunks[p].kind == ChunkKind::Module,
            };
            if replace {
                self.chunks[i].parent = Some(t);
            }
        }
    }

    /// Top-level leftovers: contiguous uncovered lines as TopLevel windows.
    fn leftovers(&mut self) {
        let n = self.lines.count();
        let mut covered = vec![false; n];
        for &(s, e) in &self.covered {
            if e <= s {
                continue;
            }
            let a = self.lines.line0(s);
            let b = self.lines.line0(e - 1);
            for c in covered.iter_mut().take(b + 1).skip(a) {
                *c = true;
            }
        }
        let mut l = 0;
        let mut new = Vec::new();
        while l < n {
            if covered[l] {
                l += 1;
                continue;
            }
            let run_start = l;
            while l < n && !covered[l] {
                l += 1;
            }
            new.extend(text::line_windows(
                self.src,
                &self.lines,
                run_start,
                l - 1,
                self.opts.window_lines as usize,
                0,
                self.opts.max_chunk_bytes,
                ChunkKind::TopLevel,
            ));
        }
        for c in new {
            self.push(c, 0);
        }
    }

    /// One pass over the tree for imports, calls and the typed names that calls' receivers
    /// may refer to (bindings are scoped to the innermost symbol chunk, `self.x`/`this.x` to
    /// the chunk's owner type; a binding counts for calls after it in source order).
    /// The file's imports, its calls, its module-level bindings (sorted by name) and its
    /// types' field bindings (sorted).
    #[allow(clippy::type_complexity)]
    fn walk(
        &self,
        root: Node,
    ) -> (
        Vec<Import>,
        Vec<Call>,
        Vec<(CompactString, CompactString)>,
        Vec<(CompactString, CompactString, CompactString)>,
    ) {
        let src = self.src;
        let mut imports = Vec::new();
        let mut calls = Vec::new();
        let mut bindings: HashMap<(usize, String), String> = HashMap::default();
        let mut found: Vec<(String, Option<String>)> = Vec::new();
        let mut bound: Vec<(String, String)> = Vec::new();
        let mut module: HashMap<String, String> = HashMap::default();
        let mut scoped: Vec<Scoped> = Vec::new();
        let kinds = WalkKinds::of(&root.language(), self.spec.walk_kinds());
        let mut cursor = root.walk();
        // Stack of the innermost symbol chunk per depth.
        let mut current: Vec<Option<usize>> = vec![None];
        loop {
            let node = cursor.node();
            // Leaving a loop, a callback or a case: its variables' bindings end there.
            while let Some(s) = scoped.last().filter(|s| s.end <= node.start_byte()) {
                match s.old.clone() {
                    Some(old) => bindings.insert(s.key.clone(), old),
                    None => bindings.remove(&s.key),
                };
                scoped.pop();
            }
            let mut cur = *current.last().unwrap_or(&None);
            if let Some(&i) = self.node_chunk.get(&node.id()) {
                cur = Some(i);
            }
            // An import's subtree holds no calls. Anonymous nodes (`(`, `fn`, `::`) are
            // tokens no spec reads on its own (a macro's tokens are read from their
            // `token_tree`): about half the nodes, skipped.
            // So are named nodes of a kind none of the spec's walk functions reads
            // (`Spec::walk_kinds`): calling them at every node was a quarter of the walk.
            let wanted = kinds.wants(node) && node.is_named();
            let descend = !(wanted && self.spec.import(node, src, &mut imports));
            if descend && wanted {
                self.record_bindings(
                    node,
                    cur,
                    &mut bindings,
                    &mut bound,
                    &mut module,
                    &mut scoped,
                );
                if let Some(from) = cur {
                    self.record_calls(node, from, &bindings, &mut found, &mut calls);
                }
            }
            if descend && cursor.goto_first_child() {
                current.push(cur);
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    for imp in &mut imports {
                        imp.names.dedup();
                    }
                    let mut module: Vec<(CompactString, CompactString)> = module
                        .into_iter()
                        .map(|(name, ty)| (name.into(), ty.into()))
                        .collect();
                    module.sort_unstable();
                    let mut members: Vec<(CompactString, CompactString, CompactString)> = bindings
                        .into_iter()
                        .filter_map(|((scope, name), ty)| {
                            let owner = self.chunks.get(scope)?;
                            let field = member_field(&name)?;
                            (owner.kind.is_type()
                                && !owner.name.is_empty()
                                && ty != LOCAL_FUNCTION
                                && !ty.starts_with(CALLBACK_PARAM))
                            .then(|| (owner.name.clone(), field.into(), ty.into()))
                        })
                        .collect();
                    members.sort_unstable();
                    members.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
                    return (imports, calls, module, members);
                }
                current.pop();
            }
        }
    }

    /// Records the names whose type `node` states, in the scope they are seen from.
    fn record_bindings(
        &self,
        node: Node,
        cur: Option<usize>,
        bindings: &mut HashMap<(usize, String), String>,
        bound: &mut Vec<(String, String)>,
        module: &mut HashMap<String, String>,
        scoped: &mut Vec<Scoped>,
    ) {
        bound.clear();
        self.spec.bindings(node, self.src, bound);
        // What other files can import: names bound at the top level itself, not locals of a
        // callback that no symbol chunk holds (`describe(() => { const c = new Mock() })`).
        let exported = cur.is_none() && !bound.is_empty() && !inside_function(node);
        for (name, mut ty) in bound.drain(..) {
            // A loop's (or an item callback's) variable, and a type switch case's, live in
            // `node` only: what the name held before comes back after it.
            let block =
                ty.starts_with(ITEM_OF) || matches!(node.kind_str(), "type_case" | "default_case");
            if let Some(collection) = ty.strip_prefix(ITEM_OF) {
                // A loop variable: the item type the collection's own binding states, read
                // where the loop is. When none is stated the variable keeps what it held, as
                // a name rebound to a value of no stated type does (the resolver's bindings
                // are per function, and a loop over `windows.slice()` reusing the name of a
                // `window` another callback of the function made is, in practice, that type).
                let key = format!("{collection}{ITEM_SUFFIX}");
                let item = match cur {
                    Some(from) => self.binding_of(bindings, from, &key),
                    None => bindings.get(&(FILE_SCOPE, key)).cloned(),
                };
                match item {
                    Some(t) => ty = t,
                    None => continue,
                }
            }
            if exported
                && ty != LOCAL_FUNCTION
                && !ty.starts_with(CALLBACK_PARAM)
                && !name.ends_with(ITEM_SUFFIX)
                && ty != UNBOUND
            {
                module.insert(name.clone(), ty.clone());
            }
            let scope = match cur {
                // Module-level names (`_default_decoder = JSONDecoder()`) are seen by every
                // function of the file.
                None => FILE_SCOPE,
                Some(from) if is_member_path(&name) => self.owner_scope(from),
                Some(from) => from,
            };
            if block {
                for key in [name.clone(), format!("{name}{ITEM_SUFFIX}")] {
                    let key = (scope, key);
                    let old = bindings.get(&key).cloned();
                    scoped.push(Scoped {
                        end: node.end_byte(),
                        key,
                        old,
                    });
                }
            }
            if ty == UNBOUND {
                bindings.remove(&(scope, name));
                continue;
            }
            // A stated type is not replaced by a later assignment of a call's result whose
            // type is known only by the function's name (`#current?: Mutation` stays a
            // `Mutation` after `this.#current = cache.build(…)`): a field's, and a local's
            // where an assignment cannot change a variable's type (TypeScript, Java, Go, C,
            // C++). Elsewhere a local's is replaced: it may be a new variable (Rust `let x =
            // x.finish();`) or rebound to a value of another type (Python, JavaScript).
            let keeps_stated = is_member_path(&name)
                || matches!(
                    self.lang,
                    Language::TypeScript
                        | Language::Tsx
                        | Language::Java
                        | Language::Go
                        | Language::C
                        | Language::Cpp
                );
            // A name bound anew holds no item type until its statement states one (the spec
            // reports `name[]` after `name`).
            // A field assigned what a function returns keeps the items its declaration states
            // (as it keeps the stated type, above).
            let field_result = is_member_path(&name) && ty.starts_with(RETURNED_BY);
            let items = (!name.ends_with(ITEM_SUFFIX) && !field_result)
                .then(|| format!("{name}{ITEM_SUFFIX}"));
            let replaced = match bindings.entry((scope, name)) {
                Entry::Occupied(mut e) => {
                    let kept = e.get();
                    let keep = keeps_stated
                        && ty.starts_with(RETURNED_BY)
                        && !kept.starts_with(RETURNED_BY)
                        && kept != LOCAL_FUNCTION;
                    if !keep {
                        e.insert(ty);
                    }
                    !keep
                }
                Entry::Vacant(e) => {
                    e.insert(ty);
                    true
                }
            };
            if let (true, Some(items)) = (replaced, items) {
                bindings.remove(&(scope, items));
            }
        }
    }

    /// Records the calls at `node` (one, or several in a macro's token tree) made from chunk
    /// `from`, with their receivers' stated types.
    fn record_calls(
        &self,
        node: Node,
        from: usize,
        bindings: &HashMap<(usize, String), String>,
        found: &mut Vec<(String, Option<String>)>,
        calls: &mut Vec<Call>,
    ) {
        found.clear();
        if let Some(c) = self.spec.call(node, self.src) {
            found.push(c);
        }
        self.spec.token_calls(node, self.src, found);
        if found.is_empty() {
            return;
        }
        let line = node.start_position().row as u32 + 1;
        for (callee, qualifier) in found.drain(..) {
            if callee.is_empty() {
                continue;
            }
            let qualifier = qualifier.filter(|q| !q.is_empty());
            if qualifier.is_none()
                && self.binding_of(bindings, from, &callee).as_deref() == Some(LOCAL_FUNCTION)
            {
                // A closure or function value bound in the caller's scope.
                continue;
            }
            let receiver = qualifier
                .as_deref()
                .and_then(|q| self.binding_of(bindings, from, q));
            calls.push(Call {
                from,
                callee: callee.into(),
                qualifier: qualifier.map(Into::into),
                receiver: receiver.map(Into::into),
                line,
            });
        }
    }

    /// The chunk that `self.x`/`this.x` bindings made in chunk `i` belong to: its owner type
    /// (a method's parent), else the chunk itself.
    fn owner_scope(&self, i: usize) -> usize {
        let mut at = i;
        for _ in 0..8 {
            if self.chunks[at].kind.is_type() || self.chunks[at].kind == ChunkKind::Impl {
                // One scope per type name: a Rust struct's fields and its impl blocks' methods
                // meet there.
                let name = &self.chunks[at].name;
                return self
                    .chunks
                    .iter()
                    .position(|c| {
                        (c.kind.is_type() || c.kind == ChunkKind::Impl) && c.name == *name
                    })
                    .unwrap_or(at);
            }
            match self.chunks[at].parent {
                Some(p) => at = p,
                None => return i,
            }
        }
        i
    }

    /// The stated type of the qualifier `q` seen from chunk `from`: its own bindings, then its
    /// enclosing functions' (closures and nested functions see them), then the owner type's
    /// `self.x` bindings.
    fn binding_of(
        &self,
        bindings: &HashMap<(usize, String), String>,
        from: usize,
        q: &str,
    ) -> Option<String> {
        if bindings.is_empty() {
            return None;
        }
        if is_member_path(q) {
            return bindings
                .get(&(self.owner_scope(from), q.to_string()))
                .cloned();
        }
        let mut at = Some(from);
        let mut hops = 0;
        while let Some(i) = at {
            if let Some(t) = bindings.get(&(i, q.to_string())) {
                return Some(t.clone());
            }
            if !self.chunks[i].kind.is_callable() || hops > 8 {
                break;
            }
            at = self.chunks[i].parent;
            hops += 1;
        }
        if q.contains(['.', ':', '(']) {
            return None;
        }
        // A field used without `this.` (Java), then a module-level name.
        bindings
            .get(&(self.owner_scope(from), format!("this.{q}")))
            .or_else(|| bindings.get(&(FILE_SCOPE, q.to_string())))
            .cloned()
    }

    /// Sorts chunks (parents first) and remaps parent and call indices.
    fn finish(self, imports: Vec<Import>, mut calls: Vec<Call>, errors: bool) -> FileExtract {
        let Builder {
            chunks,
            depth,
            lang,
            id_prefix,
            ..
        } = self;
        let _ = lang;
        let mut order: Vec<usize> = (0..chunks.len()).collect();
        order.sort_by_key(|&i| {
            let c = &chunks[i];
            (
                c.start_byte,
                depth[i],
                std::cmp::Reverse(c.end_byte),
                c.kind == ChunkKind::BodyPart,
                c.kind == ChunkKind::Header,
                i,
            )
        });
        let mut remap = vec![0usize; chunks.len()];
        for (new, &old) in order.iter().enumerate() {
            remap[old] = new;
        }
        let mut slots: Vec<Option<Chunk>> = chunks.into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(slots.len());
        for &old in &order {
            if let Some(mut c) = slots[old].take() {
                c.parent = c.parent.map(|p| remap[p]);
                out.push(c);
            }
        }
        for call in &mut calls {
            call.from = remap[call.from];
        }
        FileExtract {
            chunks: out,
            imports,
            calls,
            module_bindings: Vec::new(),
            member_bindings: Vec::new(),
            had_parse_errors: errors,
            id_prefix,
        }
    }
}

/// A binding that ends with the node that made it (a loop's variable): at `end` (a byte
/// offset) the key gets `old` back, or loses its binding.
struct Scoped {
    end: usize,
    key: (usize, String),
    old: Option<String>,
}

/// The scope key of module-level bindings.
const FILE_SCOPE: usize = usize::MAX;

/// Whether `node` lies inside a function, lambda, closure or method (of any grammar).
fn inside_function(node: Node) -> bool {
    let mut at = node.parent();
    while let Some(n) = at {
        let k = n.kind_str();
        if k.contains("func")
            || k.contains("lambda")
            || k.contains("closure")
            || k.contains("method")
        {
            return true;
        }
        at = n.parent();
    }
    false
}

/// `self.x` / `this.x` (one member deep).
fn is_member_path(name: &str) -> bool {
    member_field(name.strip_suffix(ITEM_SUFFIX).unwrap_or(name)).is_some()
}

/// The `x` of `self.x` / `this.x` (one member deep).
fn member_field(name: &str) -> Option<&str> {
    name.strip_prefix("self.")
        .or_else(|| name.strip_prefix("this."))
        .filter(|r| !r.is_empty() && !r.contains(['.', '(', '[']))
}

fn d_end(d: &DefNode) -> usize {
    d.outer.end_byte()
}

fn join_path(prefix: &str, rest: &str) -> String {
    if prefix.is_empty() {
        rest.to_string()
    } else {
        format!("{prefix}/{rest}")
    }
}
