//! Small helpers shared by the language [`Spec`](super::Spec)s and the builder: node text,
//! named children, and normalised qualifiers and type names.

use std::rc::Rc;

use tree_sitter::Node;

use super::lines::floor_boundary;

thread_local! {
    /// Per grammar seen on this thread, its node kind names by kind id.
    static KIND_NAMES: std::cell::RefCell<Vec<(tree_sitter::Language, Vec<&'static str>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// [`Node::kind`] from a per-grammar table: the same name (`kind_id` is the public symbol,
/// aliases included, whose name `kind` reads), without `kind`'s `strlen` and UTF-8 check on
/// every call, which the specs make for every node of every file (6.8% of the parse phase).
pub(crate) trait KindStr {
    fn kind_str(&self) -> &'static str;
}

impl KindStr for Node<'_> {
    #[inline]
    fn kind_str(&self) -> &'static str {
        let id = self.kind_id() as usize;
        let lang = self.language();
        KIND_NAMES
            .with(|cell| {
                let mut tables = cell.borrow_mut();
                let at = match tables.iter().position(|(l, _)| *l == *lang) {
                    Some(at) => at,
                    None => {
                        tables.push(((*lang).clone(), names_by_id(&lang)));
                        tables.len() - 1
                    }
                };
                tables[at].1.get(id).copied().filter(|s| !s.is_empty())
            })
            // `ERROR` (id 65535) and anything else outside the table.
            .unwrap_or_else(|| self.kind())
    }
}

/// `lang`'s node kind names by kind id; `""` for an id without one.
fn names_by_id(lang: &tree_sitter::Language) -> Vec<&'static str> {
    (0..lang.node_kind_count())
        .map(|i| {
            u16::try_from(i)
                .ok()
                .and_then(|i| lang.node_kind_for_id(i))
                .unwrap_or("")
        })
        .collect()
}

/// The named node kinds a [`Spec`](super::Spec)'s walk functions (`import`, `call`,
/// `token_calls`, `bindings`) act on ([`Spec::walk_kinds`](super::Spec::walk_kinds)), as a
/// table by kind id of one grammar: the walk over a file's tree calls them at these nodes
/// only. Ids outside the table (`ERROR`) and ids without a name are always wanted.
pub(crate) struct WalkKinds(Option<Rc<[bool]>>);

/// A grammar, a kind list (by address and length) and the list's table in that grammar.
type WalkTable = (tree_sitter::Language, (usize, usize), Rc<[bool]>);

thread_local! {
    /// Per grammar and kind list seen on this thread, its table.
    static WALK_TABLES: std::cell::RefCell<Vec<WalkTable>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
thread_local! {
    /// Tests: every named node is wanted (the walk as it was before the filter).
    pub(crate) static WALK_EVERY_KIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl WalkKinds {
    /// The table of `kinds` in `lang` (made once per thread); every kind when `kinds` is
    /// `None`.
    pub(crate) fn of(lang: &tree_sitter::Language, kinds: Option<&'static [&'static str]>) -> Self {
        #[cfg(test)]
        if WALK_EVERY_KIND.with(std::cell::Cell::get) {
            return WalkKinds(None);
        }
        let Some(kinds) = kinds else {
            return WalkKinds(None);
        };
        let key = (kinds.as_ptr() as usize, kinds.len());
        WALK_TABLES.with(|cell| {
            let mut tables = cell.borrow_mut();
            if let Some((_, _, t)) = tables.iter().find(|(l, k, _)| l == lang && *k == key) {
                return WalkKinds(Some(t.clone()));
            }
            let table: Rc<[bool]> = names_by_id(lang)
                .into_iter()
                .map(|name| name.is_empty() || kinds.contains(&name))
                .collect();
            tables.push((lang.clone(), key, table.clone()));
            WalkKinds(Some(table))
        })
    }

    /// Whether the walk functions may act on `node`.
    #[inline]
    pub(crate) fn wants(&self, node: Node) -> bool {
        match &self.0 {
            None => true,
            Some(t) => t.get(usize::from(node.kind_id())).copied().unwrap_or(true),
        }
    }
}

pub(crate) fn node_text<'a>(node: Node, src: &'a str) -> &'a str {
    src.get(node.byte_range()).unwrap_or("")
}

pub(crate) fn field_text<'a>(node: Node, field: &str, src: &'a str) -> Option<&'a str> {
    node.child_by_field_name(field).map(|n| node_text(n, src))
}

/// Text with all whitespace removed, cut to a sane length (for qualifiers and type names).
pub(crate) fn compact(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut pending_space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space {
            let word = |ch: char| ch.is_alphanumeric() || ch == '_' || ch == '$';
            if out.chars().next_back().is_some_and(word) && word(c) {
                out.push(' ');
            }
            pending_space = false;
        }
        out.push(c);
    }
    if out.len() > 120 {
        let cut = floor_boundary(&out, 120);
        out.truncate(cut);
    }
    out
}

/// `Foo<T>` → `Foo`, `a::b::Foo<T>` → `Foo`, `*Foo` → `Foo`, `&'a mut Foo` → `Foo`.
pub(crate) fn base_type_name(s: &str) -> String {
    let mut depth = 0i32;
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '<' | '[' | '(' => depth += 1,
            '>' | ']' | ')' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.replace("::", ".");
    let last = out.rsplit('.').next().unwrap_or("");
    let last = last
        .trim_start_matches(['&', '*'])
        .trim_start_matches("'static")
        .trim();
    let last = last
        .strip_prefix("mut ")
        .or_else(|| last.strip_prefix("dyn "))
        .unwrap_or(last)
        .trim();
    let last = last.rsplit(' ').next().unwrap_or(last);
    last.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$' || c == '~'))
        .to_string()
}

/// Splits `s` at `sep` outside brackets (`<>`, `()`, `[]`, `{}`; the `>` of `=>` and `->`
/// closes nothing), dropping blank parts: parameter lists at `,`, TS unions at `|`.
pub(crate) fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let mut prev = ' ';
    for (i, ch) in s.char_indices() {
        let was = prev;
        prev = ch;
        match ch {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' if was == '=' || was == '-' => {}
            '>' | ')' | ']' | '}' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

pub(crate) fn named_kids(node: Node) -> Vec<Node> {
    let mut c = node.walk();
    node.named_children(&mut c).collect()
}
