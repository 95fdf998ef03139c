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

/// The item type of a sequence or set type as written, the type a `for` loop over it binds:
/// `Vec<Foo>`, `&[Foo]`, `[Foo; 4]`, `SmallVec<[Foo; 4]>`, `Arc<Vec<Foo>>` (Rust), `[]*Foo`
/// (Go), `Foo[]`, `Array<Foo>`, `Set<Foo>` (TypeScript), `list[Foo]`, `Sequence[Foo]`,
/// `tuple[Foo, ...]` (Python), `List<Foo>` (Java) → `Foo`. Maps (whose loops yield keys or
/// pairs), unions, nested arrays and anything else → `None`.
pub(crate) fn item_type(s: &str) -> Option<String> {
    let t = strip_refs(s);
    if let Some(inner) = t.strip_suffix("[]") {
        return item_name(inner);
    }
    if let Some(rest) = t.strip_prefix('[') {
        let close = closing(rest, '[', ']')?;
        let (inside, after) = (&rest[..close], rest[close + 1..].trim());
        return if after.is_empty() {
            // Rust `[Foo]`, `[Foo; 4]`; not a TypeScript tuple `[A, B]`.
            if split_top(inside, ',').len() > 1 {
                return None;
            }
            item_name(split_top(inside, ';').first()?)
        } else {
            item_name(after)
        };
    }
    let open = t.find(['<', '['])?;
    let (head, args) = (t[..open].trim(), &t[open + 1..]);
    let (o, c) = if t[open..].starts_with('<') {
        ('<', '>')
    } else {
        ('[', ']')
    };
    if closing(args, o, c)? + 1 != args.len() {
        return None;
    }
    let parts = split_top(&args[..args.len() - 1], ',');
    let one = parts.len() == 1;
    match head.rsplit(['.', ':']).next()? {
        // Wrappers whose loops walk what they hold (`Box<[Foo]>`, `Arc<Vec<Foo>>`) and
        // vectors whose parameter is the array they inline (`SmallVec<[Foo; 4]>`).
        "Box" | "Rc" | "Arc" | "SmallVec" | "ArrayVec" | "TinyVec" if one => item_type(parts[0]),
        "tuple" | "Tuple" if parts.len() == 2 && parts[1].trim() == "..." => item_name(parts[0]),
        "Vec" | "VecDeque" | "LinkedList" | "HashSet" | "BTreeSet" | "IndexSet" | "BinaryHeap"
        | "Array" | "ReadonlyArray" | "Set" | "ReadonlySet" | "Iterable" | "Iterator"
        | "IterableIterator" | "AsyncIterable" | "list" | "List" | "Sequence"
        | "MutableSequence" | "Collection" | "set" | "frozenset" | "FrozenSet" | "AbstractSet"
        | "MutableSet" | "deque" | "Deque" | "ArrayList" | "TreeSet" | "LinkedHashSet"
        | "SortedSet" | "NavigableSet" | "ArrayDeque" | "Queue"
            if one =>
        {
            item_name(parts[0])
        }
        _ => None,
    }
}

/// The named type an item type is, or `None` when the item is itself an array, a map, a
/// function, a union or a tuple.
fn item_name(t: &str) -> Option<String> {
    let t = strip_refs(t);
    if t.is_empty()
        || t.starts_with(['[', '(', '{'])
        || t.ends_with("[]")
        || t.contains('|')
        || split_top(t, ',').len() > 1
        || t.starts_with("map[")
        || t.starts_with("chan ")
        || t.starts_with("func")
        || t.starts_with("impl ")
    {
        return None;
    }
    Some(base_type_name(t)).filter(|n| !n.is_empty())
}

/// `t` without leading references and qualifiers: `&'a mut `, `*`, `readonly `, `const `.
fn strip_refs(t: &str) -> &str {
    let mut t = t.trim();
    loop {
        let before = t;
        t = t.trim_start_matches(['&', '*']).trim_start();
        if let Some(r) = t.strip_prefix('\'') {
            t = r
                .trim_start_matches(|c: char| c.is_alphanumeric() || c == '_')
                .trim_start();
        }
        for p in ["mut ", "readonly ", "const "] {
            if let Some(r) = t.strip_prefix(p) {
                t = r.trim_start();
            }
        }
        if t == before {
            return t;
        }
    }
}

/// The byte offset in `s` of the `close` that closes an `open` already consumed before `s`.
fn closing(s: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 1;
    for (i, ch) in s.char_indices() {
        if ch == open {
            depth += 1;
        } else if ch == close {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The collection a `for` loop walks when it is a name or a `self.x`/`this.x` field, written
/// as the bindings key it (`&self.items`, `items.iter()`, `&mut xs`, `xs.into_iter()` →
/// `self.items`, `items`, `xs`, `xs`), and whether the loop enumerates it
/// (`xs.iter().enumerate()`, Python's `enumerate(xs)`): then an item is each pair's second.
pub(crate) fn loop_item(iterable: &str) -> Option<(String, bool)> {
    let t = compact(iterable);
    let mut t = t.as_str();
    let mut enumerated = false;
    if let Some(r) = t.strip_suffix(".enumerate()") {
        (t, enumerated) = (r, true);
    } else if let Some(r) = t
        .strip_prefix("enumerate(")
        .and_then(|r| r.strip_suffix(')'))
    {
        (t, enumerated) = (r, true);
    }
    for suffix in [".iter()", ".iter_mut()", ".into_iter()"] {
        if let Some(r) = t.strip_suffix(suffix) {
            t = r;
            break;
        }
    }
    let t = t.trim_start_matches('&');
    let t = t.strip_prefix("mut ").unwrap_or(t);
    let ident = |s: &str| {
        let s = s.strip_prefix('#').unwrap_or(s);
        s.chars().next().is_some_and(|c| !c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
    };
    let ok = match t.split_once('.') {
        Some((head, field)) => matches!(head, "self" | "this") && ident(field),
        None => ident(t),
    };
    ok.then(|| (t.to_string(), enumerated))
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

#[cfg(test)]
mod item_tests {
    use super::{item_type, loop_item};

    #[test]
    fn item_types_of_sequences_and_sets() {
        let cases = [
            ("Vec<Server>", Some("Server")),
            ("&'a mut Vec<crate::net::Server>", Some("Server")),
            ("&[Server]", Some("Server")),
            ("[Server; 4]", Some("Server")),
            ("SmallVec<[Server; 4]>", Some("Server")),
            ("Arc<Vec<Server>>", Some("Server")),
            ("std::collections::BTreeSet<Key>", Some("Key")),
            ("Box<Server>", None),
            ("HashMap<String, Server>", None),
            ("Option<Server>", None),
            ("Vec<(Server, u32)>", None),
            ("Vec<Vec<Server>>", Some("Vec")),
            ("[]*Server", Some("Server")),
            ("[4]pkg.Server", Some("Server")),
            ("[][]Server", None),
            ("map[string]*Server", None),
            ("[]func()", None),
            ("Observer[]", Some("Observer")),
            ("[Listener, Editor]", None),
            ("[Listener]", Some("Listener")),
            ("readonly Observer<T>[]", Some("Observer")),
            ("(Observer | Other)[]", None),
            ("Observer[][]", None),
            ("Array<Observer>", Some("Observer")),
            ("ReadonlyArray<Observer | undefined>", None),
            ("Map<string, Observer>", None),
            ("list[Handler]", Some("Handler")),
            ("typing.Sequence[logging.Handler]", Some("Handler")),
            ("tuple[Handler, ...]", Some("Handler")),
            ("tuple[Handler, Other]", None),
            ("dict[str, Handler]", None),
            ("List<Handler>", Some("Handler")),
            ("Vec<Server", None),
            ("Vec<Server>>", None),
            ("", None),
        ];
        for (ty, want) in cases {
            assert_eq!(item_type(ty).as_deref(), want, "{ty}");
        }
    }

    #[test]
    fn loop_collections_are_names_or_own_fields() {
        let cases = [
            ("servers", Some(("servers", false))),
            ("&self.servers", Some(("self.servers", false))),
            ("&mut xs", Some(("xs", false))),
            ("self.servers.iter()", Some(("self.servers", false))),
            ("xs.iter_mut().enumerate()", Some(("xs", true))),
            ("enumerate(self.handlers)", Some(("self.handlers", true))),
            ("this.#observers", Some(("this.#observers", false))),
            ("a.b", None),
            ("self.a.b", None),
            ("servers()", None),
            ("xs.iter().rev()", None),
            ("0..n", None),
        ];
        for (text, want) in cases {
            let got = loop_item(text);
            assert_eq!(got.as_ref().map(|(c, e)| (c.as_str(), *e)), want, "{text}");
        }
    }
}
