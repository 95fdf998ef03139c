//! What resolution reads from the text of a file's chunks, taken once while the text is there
//! ([`Declarations::of`]): the return type each function's signature states, the types each
//! type declaration extends or implements, the parameter types of the callbacks a function
//! takes, and a `Cargo.toml`'s package name. [`super::resolve`] reads these and never a
//! chunk's text, so a build can drop every parsed text before resolving (it is read again
//! when its segment is written): what the graph holds for the whole tree is names, ids,
//! calls, imports and these few strings per symbol, not the symbols' source.

use super::paths::file_name;
use crate::chunk::{
    base_type_name, put_str, put_varint, split_top, ChunkKind, FileExtract, Language, Reader,
};

/// What one symbol chunk's declaration states (empty parts are left out of [`Declarations`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Decl {
    /// A function's stated return type (a simple type name, `Self` as its owner).
    returns: Option<String>,
    /// A type's stated bases, in the order stated, without itself or repeats.
    bases: Vec<String>,
    /// Per argument of a function, the types of the parameters of the callback it takes
    /// there (`this:` parameters not counted); empty for an argument that is not a callback.
    callbacks: Vec<Vec<Option<String>>>,
}

impl Decl {
    fn is_empty(&self) -> bool {
        self.returns.is_none() && self.bases.is_empty() && self.callbacks.is_empty()
    }
}

/// What resolution needs from the text of one file's chunks (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declarations {
    /// (chunk index, what its declaration states), by chunk index; chunks that state nothing
    /// resolution uses are left out.
    chunks: Vec<(u32, Decl)>,
    /// A `Cargo.toml`'s `[package] name`, `-` read as `_`.
    package: Option<String>,
}

impl Declarations {
    /// Reads `extract`'s chunk texts (those of the file at `path`, in `language`). Chunks
    /// whose text is already gone state nothing.
    pub fn of(path: &str, language: Language, extract: &FileExtract) -> Declarations {
        let mut chunks = Vec::new();
        for (ci, c) in extract.chunks.iter().enumerate() {
            // Symbols resolution can reach, and Rust impl blocks: `impl Trait for Type` (an
            // impl chunk named `Type`) states a base of `Type`.
            let symbol = c.symbol.is_some() && callable_target(c.kind);
            if c.name.is_empty() || !(symbol || c.kind == ChunkKind::Impl) {
                continue;
            }
            let name = c.name.as_str();
            let mut d = Decl::default();
            if c.kind.is_callable() {
                // A trait's method that returns `Self` returns the implementing type, which
                // its declaration does not name.
                let in_trait = c
                    .parent
                    .and_then(|p| extract.chunks.get(p))
                    .is_some_and(|p| p.kind == ChunkKind::Trait);
                let owner = split_method(&c.qualified)
                    .map(|(p, _)| p.rsplit('/').next().unwrap_or(p))
                    .filter(|_| !in_trait);
                d.returns = declared_return(&c.text, name, language, owner);
            }
            if c.kind.is_type() {
                for b in declared_bases(&c.text, name, c.kind) {
                    if b != name && !d.bases.contains(&b) {
                        d.bases.push(b);
                    }
                }
            }
            if symbol {
                d.callbacks = callback_param_types(&c.text, name);
            }
            if !d.is_empty() {
                chunks.push((ci as u32, d));
            }
        }
        let package = (file_name(path) == "Cargo.toml")
            .then(|| extract.chunks.first())
            .flatten()
            .and_then(|c| cargo_package_name(&c.text));
        Declarations { chunks, package }
    }

    /// Appends these declarations to `out` (a build's facts cache, `build/facts.rs`): the
    /// package (0, or 1 and the name), then per chunk its index, the return type, the bases
    /// and the callbacks' parameter types.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let opt = |out: &mut Vec<u8>, s: Option<&str>| match s {
            None => out.push(0),
            Some(s) => {
                out.push(1);
                put_str(out, s);
            }
        };
        opt(out, self.package.as_deref());
        put_varint(out, self.chunks.len() as u64);
        for (ci, d) in &self.chunks {
            put_varint(out, u64::from(*ci));
            opt(out, d.returns.as_deref());
            put_varint(out, d.bases.len() as u64);
            for b in &d.bases {
                put_str(out, b);
            }
            put_varint(out, d.callbacks.len() as u64);
            for params in &d.callbacks {
                put_varint(out, params.len() as u64);
                for p in params {
                    opt(out, p.as_deref());
                }
            }
        }
    }

    /// What [`Declarations::encode`] wrote at the start of `r`, for a file of `chunks`
    /// chunks; `None` when malformed (counts are checked against the bytes left, chunk
    /// indexes against `chunks` and their order).
    pub(crate) fn decode(r: &mut Reader<'_>, chunks: usize) -> Option<Declarations> {
        fn opt(r: &mut Reader<'_>) -> Option<Option<String>> {
            match r.byte()? {
                0 => Some(None),
                1 => Some(Some(r.str()?.to_string())),
                _ => None,
            }
        }
        let package = opt(r)?;
        let n = r.count()?;
        let mut out = Vec::new();
        for _ in 0..n {
            let ci = r.u32()?;
            if ci as usize >= chunks || out.last().is_some_and(|(p, _)| *p >= ci) {
                return None;
            }
            let returns = opt(r)?;
            let k = r.count()?;
            let bases = (0..k)
                .map(|_| r.str().map(str::to_string))
                .collect::<Option<Vec<_>>>()?;
            let k = r.count()?;
            let mut callbacks = Vec::new();
            for _ in 0..k {
                let m = r.count()?;
                callbacks.push((0..m).map(|_| opt(r)).collect::<Option<Vec<_>>>()?);
            }
            out.push((
                ci,
                Decl {
                    returns,
                    bases,
                    callbacks,
                },
            ));
        }
        Some(Declarations {
            chunks: out,
            package,
        })
    }

    fn get(&self, chunk: usize) -> Option<&Decl> {
        let i = self
            .chunks
            .binary_search_by_key(&chunk, |(c, _)| *c as usize)
            .ok()?;
        Some(&self.chunks[i].1)
    }

    /// The return type chunk `chunk`'s signature states.
    pub(super) fn returns(&self, chunk: usize) -> Option<&str> {
        self.get(chunk)?.returns.as_deref()
    }

    /// The types chunk `chunk` (a type) states it extends or implements.
    pub(super) fn bases(&self, chunk: usize) -> &[String] {
        self.get(chunk).map_or(&[], |d| &d.bases)
    }

    /// The type chunk `chunk` (a function) states for parameter `param` of the callback it
    /// takes as argument `arg`.
    pub(super) fn callback_param(&self, chunk: usize, arg: usize, param: usize) -> Option<&str> {
        self.get(chunk)?.callbacks.get(arg)?.get(param)?.as_deref()
    }

    /// A `Cargo.toml`'s package name.
    pub(super) fn package(&self) -> Option<&str> {
        self.package.as_deref()
    }
}

// The signature readers: what a declaration's text states.

/// The types a type declaration says it extends or implements, from its header: Python
/// `class A(B, C, metaclass=M):`, TS/Java `class A<T> extends B<T> implements C, D {`, C++
/// `class A : public B {`, Rust `impl<T> Trait for A<T> {` (an impl chunk named `A`).
fn declared_bases<'t>(text: &'t str, name: &str, kind: ChunkKind) -> Vec<String> {
    // The header starts at the declaration (doc comments before it may hold braces) and ends
    // at its body's brace.
    let cut = |t: &'t str| -> &'t str { t.split('{').next().unwrap_or(t) };
    let mut out = Vec::new();
    let mut push = |t: &str| {
        let b = base_type_name(t.trim());
        if !b.is_empty()
            && b.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
        {
            out.push(b);
        }
    };
    if kind == ChunkKind::Impl {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("impl"))
            .map(cut);
        if let Some((tr, _)) = line.and_then(|l| l.split_once(" for ")) {
            let tr = tr.trim_start().trim_start_matches("impl");
            // Drop the impl's own generics: `impl<T: X> Trait<T>`.
            let tr = if tr.trim_start().starts_with('<') {
                skip_angle(tr.trim_start())
            } else {
                tr
            };
            push(tr);
        }
        return out;
    }
    // Go: `type A struct { *B; C; x int }` embeds B and C.
    if let Some(i) = text.find(&format!("type {name} struct")) {
        let body = text[i..].split_once('{').map_or("", |(_, b)| b);
        let body = body.split('}').next().unwrap_or("");
        for line in body.lines() {
            let l = line.split("//").next().unwrap_or("").trim();
            if !l.is_empty() && !l.contains(char::is_whitespace) {
                push(l.trim_start_matches('*'));
            }
        }
        return out;
    }
    let Some(at) = ["class ", "interface ", "struct "]
        .iter()
        .filter_map(|kw| {
            let pat = format!("{kw}{name}");
            text.find(&pat).map(|i| i + pat.len())
        })
        .min()
    else {
        return out;
    };
    let rest = cut(&text[at..]);
    let rest = if rest.starts_with('<') {
        skip_angle(rest)
    } else {
        rest
    };
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('(').filter(|_| kind != ChunkKind::Struct) {
        // Python (a Rust tuple struct's `struct W(Inner);` lists fields, not bases).
        for part in split_top(balanced(inner).unwrap_or(inner), ',') {
            if !part.contains('=') {
                push(part);
            }
        }
        return out;
    }
    if let Some(cpp) = rest.strip_prefix(':') {
        for part in split_top(cpp, ',') {
            let p = part
                .trim()
                .trim_start_matches("virtual ")
                .trim_start_matches("public ")
                .trim_start_matches("protected ")
                .trim_start_matches("private ")
                .trim_start_matches("virtual ");
            push(p);
        }
        return out;
    }
    for kw in ["extends ", "implements "] {
        if let Some(i) = rest.find(kw) {
            let after = &rest[i + kw.len()..];
            let end = ["implements ", "extends "]
                .iter()
                .filter_map(|k| after.find(k))
                .min()
                .unwrap_or(after.len());
            for part in split_top(&after[..end], ',') {
                push(part);
            }
        }
    }
    out
}

/// The return type a function's signature states: TS `name(…): T {`, Python
/// `def name(…) -> T:`, Rust `fn name(…) -> T`, Go `func (…) Name(…) *T {`. `Self` is the
/// owner type. Simple type names only (`Promise<T>` → `Promise`, which matches no project
/// type).
fn declared_return(text: &str, name: &str, lang: Language, owner: Option<&str>) -> Option<String> {
    let start = decl_pos(text, name)?;
    let mut rest = &text[start + name.len()..];
    if rest.starts_with('<') {
        rest = skip_angle(rest);
    }
    // Past the parameter list.
    let params = balanced(rest.trim_start().strip_prefix('(')?)?;
    let after = rest.trim_start()[params.len() + 2..].trim_start();
    let ty = match lang {
        Language::Go => {
            let t = after.split('{').next()?.trim();
            if t.starts_with('(') {
                // `(T, error)`: the first result.
                t.trim_start_matches('(').split(',').next()?.to_string()
            } else {
                t.to_string()
            }
        }
        Language::Python => after.strip_prefix("->")?.split(':').next()?.to_string(),
        Language::Rust => {
            let t = after.strip_prefix("->")?;
            t.split(['{', ';'])
                .next()?
                .split(" where")
                .next()?
                .to_string()
        }
        _ => after
            .strip_prefix(':')?
            .split(['{', ';'])
            .next()?
            .split("=>")
            .next()?
            .to_string(),
    };
    let ty = ty.trim().trim_matches('"').trim_matches('\'');
    let ty = ty.trim_start_matches(['*', '&']).trim();
    // An array or slice of a type (`Foo[]`, `[]Foo`, `[Foo]`) is not that type.
    if ty.starts_with('[') || ty.ends_with(']') {
        return None;
    }
    let t = base_type_name(ty);
    let t = if t == "Self" { owner?.to_string() } else { t };
    t.chars().next()?.is_uppercase().then_some(t)
}

/// Per argument of function `fname`'s signature in `text`, the types it states for the
/// parameters of the callback it takes there: for `operate<T>(init: (src: Observable<T>, sub:
/// Subscriber<T>) => void)`, argument 0 → `[Some("Observable"), Some("Subscriber")]` (simple
/// type names; `this:` parameters are not counted; a name that does not start upper-case is
/// `None`). An argument that is not a callback gets an empty list; trailing arguments that
/// state nothing are left out, so a signature without callbacks gives an empty table.
fn callback_param_types(text: &str, fname: &str) -> Vec<Vec<Option<String>>> {
    let Some(inner) = decl_pos(text, fname).and_then(|start| {
        let mut rest = &text[start + fname.len()..];
        if rest.starts_with('<') {
            rest = skip_angle(rest);
        }
        balanced(rest.strip_prefix('(')?)
    }) else {
        return Vec::new();
    };
    let callback = |p: &str| -> Vec<Option<String>> {
        let Some(fn_params) = (p.split_once(':'))
            .and_then(|(_, ty)| ty.trim_start().strip_prefix('('))
            .and_then(balanced)
        else {
            return Vec::new();
        };
        split_top(fn_params, ',')
            .into_iter()
            .filter(|x| !x.trim_start().starts_with("this"))
            .map(|x| {
                let t = base_type_name(x.split_once(':')?.1.trim());
                t.chars().next()?.is_uppercase().then_some(t)
            })
            .collect()
    };
    let mut table: Vec<Vec<Option<String>>> =
        split_top(inner, ',').into_iter().map(callback).collect();
    // Trailing arguments that state nothing are left out (a lookup past the end is `None`).
    while table
        .last()
        .is_some_and(|ps| ps.iter().all(Option::is_none))
    {
        table.pop();
    }
    table
}

/// Where a signature names `name` (followed by `(` or `<`): not a call (`x.name(`), not a
/// longer identifier, not in a comment line (doc examples often call the function).
fn decl_pos(text: &str, name: &str) -> Option<usize> {
    let is_id = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut from = 0;
    while let Some(p) = text[from..].find(name) {
        let at = from + p;
        from = at + name.len();
        let next = text[from..].chars().next();
        if !matches!(next, Some('(') | Some('<')) {
            continue;
        }
        let prev = text[..at].chars().next_back();
        if prev.is_some_and(|c| is_id(c) || c == '.') {
            continue;
        }
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let line = text[line_start..at].trim_start();
        if ["*", "//", "/*", "#"].iter().any(|m| line.starts_with(m)) {
            continue;
        }
        return Some(at);
    }
    None
}

/// The text up to the `)` that closes an already opened `(`.
fn balanced(s: &str) -> Option<&str> {
    let mut depth = 0;
    let mut prev = ' ';
    for (i, ch) in s.char_indices() {
        match ch {
            '(' | '<' | '[' | '{' => depth += 1,
            ')' if depth == 0 => return Some(&s[..i]),
            // `=>` and `->` are arrows, not closing brackets.
            '>' if prev == '=' || prev == '-' => {}
            ')' | '>' | ']' | '}' => depth -= 1,
            _ => {}
        }
        prev = ch;
    }
    None
}

/// `<…>rest` → `rest` (balanced).
fn skip_angle(s: &str) -> &str {
    let mut depth = 0;
    for (i, ch) in s.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return &s[i + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

/// `a/Foo#bar` → (`a/Foo`, `bar`); the method separator is the first `#` of the last path
/// segment, so a JS private method `Foo##bar` is (`Foo`, `#bar`).
pub(super) fn split_method(qualified: &str) -> Option<(&str, &str)> {
    let seg_start = qualified.rfind('/').map_or(0, |i| i + 1);
    let i = seg_start + qualified[seg_start..].find('#')?;
    Some((&qualified[..i], &qualified[i + 1..]))
}

/// `[package] name = "x"` of a Cargo.toml's text.
fn cargo_package_name(text: &str) -> Option<String> {
    let mut in_package = false;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_package = l == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        if let Some(rest) = l.strip_prefix("name") {
            let v = rest.trim_start().strip_prefix('=')?.trim();
            let v = v.trim_matches(|c| c == '"' || c == '\'');
            if !v.is_empty() {
                return Some(v.replace('-', "_"));
            }
        }
    }
    None
}

pub(super) fn callable_target(kind: ChunkKind) -> bool {
    kind.is_symbol() && !matches!(kind, ChunkKind::Impl | ChunkKind::Module)
}
