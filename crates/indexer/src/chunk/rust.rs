//! Rust: functions, structs/unions, enums, traits, impls, inline modules; `use`/`mod x;`/
//! `extern crate` imports; calls (macros are not calls).

use tree_sitter::Node;

use super::syntax::KindStr;
use super::types::{compact_all, compact_pairs};
use super::types::{ITEM_OF, ITEM_SUFFIX, LOCAL_FUNCTION, RETURNED_BY, UNBOUND};
use super::{
    base_type_name, compact, field_text, item_type, loop_item, named_kids, node_text, ChunkKind,
    Class, Def, Import, Spec,
};

pub(crate) struct RustSpec;

impl Spec for RustSpec {
    fn walk_kinds(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "use_declaration",
            "mod_item",
            "extern_crate_declaration",
            "call_expression",
            "token_tree",
            "field_declaration",
            "let_declaration",
            "parameter",
            "for_expression",
            "closure_expression",
        ])
    }

    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t> {
        let name = || field_text(node, "name", src).unwrap_or("").to_string();
        let body = node.child_by_field_name("body");
        match node.kind_str() {
            "function_item" => Class::Def(Def::new(ChunkKind::Function, name(), node).body(body)),
            "struct_item" | "union_item" => Class::Def(Def::new(ChunkKind::Struct, name(), node)),
            "enum_item" => Class::Def(Def::new(ChunkKind::Enum, name(), node)),
            "trait_item" => Class::Def(Def::new(ChunkKind::Trait, name(), node).body(body)),
            "impl_item" => {
                let ty = field_text(node, "type", src).map(base_type_name);
                match ty {
                    Some(t) if !t.is_empty() => {
                        Class::Def(Def::new(ChunkKind::Impl, t, node).body(body))
                    }
                    _ => Class::Other,
                }
            }
            "mod_item" if body.is_some() => {
                Class::Def(Def::new(ChunkKind::Module, name(), node).body(body))
            }
            _ => Class::Other,
        }
    }

    fn is_leading(&self, node: Node, src: &str) -> bool {
        match node.kind_str() {
            "line_comment" | "block_comment" => {
                let t = node_text(node, src);
                !(t.starts_with("//!") || t.starts_with("/*!"))
            }
            "attribute_item" => true,
            _ => false,
        }
    }

    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool {
        // Read only for an import: `start_position` costs a call per node otherwise.
        let line = || node.start_position().row as u32 + 1;
        match node.kind_str() {
            "use_declaration" => {
                if let Some(arg) = node.child_by_field_name("argument") {
                    flatten_use(arg, "", src, line(), out);
                }
                true
            }
            "mod_item" if node.child_by_field_name("body").is_none() => {
                if let Some(n) = field_text(node, "name", src) {
                    out.push(Import {
                        module: n.into(),
                        names: Vec::new(),
                        line: line(),
                        ..Default::default()
                    });
                }
                true
            }
            "extern_crate_declaration" => {
                if let Some(n) = field_text(node, "name", src) {
                    out.push(Import {
                        module: n.into(),
                        names: Vec::new(),
                        line: line(),
                        ..Default::default()
                    });
                }
                true
            }
            _ => false,
        }
    }

    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)> {
        if node.kind_str() != "call_expression" {
            return None;
        }
        let mut f = node.child_by_field_name("function")?;
        if f.kind_str() == "generic_function" {
            f = f.child_by_field_name("function")?;
        }
        let (callee, qualifier) = match f.kind_str() {
            "identifier" => (node_text(f, src).to_string(), None),
            // A path qualifier keeps its `::` (`self::f` is a module path, `self.f` a method).
            "scoped_identifier" => (
                field_text(f, "name", src)?.to_string(),
                field_text(f, "path", src).map(|p| format!("{}::", compact(p))),
            ),
            "field_expression" => (
                field_text(f, "field", src)?.to_string(),
                field_text(f, "value", src).map(compact),
            ),
            _ => return None,
        };
        if matches!(callee.as_str(), "Some" | "Ok" | "Err") {
            return None;
        }
        Some((callee, qualifier))
    }

    fn token_calls(&self, node: Node, src: &str, out: &mut Vec<(String, Option<String>)>) {
        if node.kind_str() != "token_tree" {
            return;
        }
        let mut c = node.walk();
        let kids: Vec<Node> = node.children(&mut c).collect();
        for (i, k) in kids.iter().enumerate() {
            if k.kind_str() != "identifier" {
                continue;
            }
            let Some(next) = kids.get(i + 1) else {
                continue;
            };
            if next.kind_str() != "token_tree" || !node_text(*next, src).starts_with('(') {
                continue;
            }
            let callee = node_text(*k, src);
            if matches!(callee, "Some" | "Ok" | "Err") {
                continue;
            }
            // The qualifier: `a::b::f(`, `x.f(`, `self.x.f(` (tokens before the name).
            let mut parts: Vec<&str> = Vec::new();
            let mut j = i;
            while j >= 2 {
                let sep = node_text(kids[j - 1], src);
                if sep != "::" && sep != "." {
                    break;
                }
                let prev = kids[j - 2];
                if !matches!(
                    prev.kind_str(),
                    "identifier" | "self" | "super" | "crate" | "primitive_type"
                ) && !node_text(prev, src)
                    .chars()
                    .all(|ch| ch.is_alphanumeric() || ch == '_')
                {
                    break;
                }
                parts.push(sep);
                parts.push(node_text(prev, src));
                j -= 2;
            }
            parts.reverse();
            // `parts` reads `a :: b ::` (a path keeps its trailing `::`, as in `call`) or
            // `x .` (a receiver loses its `.`).
            if parts.last() == Some(&".") {
                parts.pop();
            }
            let qualifier = (!parts.is_empty()).then(|| parts.concat());
            out.push((callee.to_string(), qualifier));
        }
    }

    fn bindings(&self, node: Node, src: &str, out: &mut Vec<(String, String)>) {
        if node.kind_str() == "field_declaration" {
            // A struct field: `self.name` has the stated type in the type's methods.
            if let (Some(n), Some(text)) =
                (field_text(node, "name", src), field_text(node, "type", src))
            {
                let t = base_type_name(text);
                if t.chars().next().is_some_and(char::is_uppercase) {
                    out.push((format!("self.{n}"), t));
                }
                if let Some(item) = item_type(text).filter(|t| is_named_type(t)) {
                    out.push((format!("self.{n}{ITEM_SUFFIX}"), item));
                }
            }
            return;
        }
        if node.kind_str() == "closure_expression" {
            // `self.servers.iter().map(|s| s.start())`: an iterator adapter's closure gets
            // the items (its first parameter, or the second of an enumerated pair).
            let Some(args) = node.parent().filter(|a| a.kind_str() == "arguments") else {
                return;
            };
            let first_arg = named_kids(args)
                .first()
                .is_some_and(|a| a.id() == node.id());
            let Some(f) = args
                .parent()
                .filter(|c| c.kind_str() == "call_expression")
                .and_then(|c| c.child_by_field_name("function"))
                .filter(|f| f.kind_str() == "field_expression")
            else {
                return;
            };
            let adapter = field_text(f, "field", src).is_some_and(|m| ITEM_ADAPTERS.contains(&m));
            let collection = field_text(f, "value", src).and_then(loop_item);
            let param = node
                .child_by_field_name("parameters")
                .and_then(|ps| named_kids(ps).first().copied());
            if let (true, true, Some((collection, enumerated)), Some(p)) =
                (first_arg, adapter, collection, param)
            {
                let p = if enumerated {
                    (p.kind_str() == "tuple_pattern" && p.named_child_count() == 2)
                        .then(|| p.named_child(1))
                        .flatten()
                } else {
                    Some(p)
                };
                if let Some(var) = p.and_then(|p| pattern_name(p, src)) {
                    out.push((var.to_string(), format!("{ITEM_OF}{collection}")));
                }
            }
            return;
        }
        if node.kind_str() == "for_expression" {
            // `for x in &self.items`, `for (i, x) in xs.iter().enumerate()`: the item type.
            let (Some(pat), Some(value)) = (
                node.child_by_field_name("pattern"),
                node.child_by_field_name("value"),
            ) else {
                return;
            };
            let Some((collection, enumerated)) = loop_item(node_text(value, src)) else {
                return;
            };
            let pat = if enumerated {
                match pat.kind_str() {
                    "tuple_pattern" if pat.named_child_count() == 2 => pat.named_child(1),
                    _ => None,
                }
            } else {
                Some(pat)
            };
            if let Some(var) = pat.and_then(|p| pattern_name(p, src)) {
                out.push((var.to_string(), format!("{ITEM_OF}{collection}")));
            }
            return;
        }
        let (pat, ty, value) = match node.kind_str() {
            "let_declaration" => (
                node.child_by_field_name("pattern"),
                node.child_by_field_name("type"),
                node.child_by_field_name("value"),
            ),
            "parameter" => (
                node.child_by_field_name("pattern"),
                node.child_by_field_name("type"),
                None,
            ),
            _ => return,
        };
        let Some(pat) = pat else { return };
        let pat = if pat.kind_str() == "mut_pattern" {
            pat.named_child(0).unwrap_or(pat)
        } else {
            pat
        };
        if pat.kind_str() != "identifier" {
            return;
        }
        let name = node_text(pat, src).to_string();
        if value.is_some_and(|v| v.kind_str() == "closure_expression") {
            out.push((name, LOCAL_FUNCTION.to_string()));
            return;
        }
        let ty_node = ty;
        let ty = ty
            .map(|t| base_type_name(node_text(t, src)))
            .or_else(|| value.and_then(|v| constructed_type(v, src)));
        let item = ty_node
            .and_then(|t| item_type(node_text(t, src)))
            .filter(|t| is_named_type(t));
        if let Some(ty) = ty.filter(|t| t.chars().next().is_some_and(char::is_uppercase)) {
            if ty != "Self" {
                out.push((name.clone(), ty));
            }
        } else if let Some(n) = value.and_then(|v| returned_by(v, src)) {
            out.push((name.clone(), format!("{RETURNED_BY}{n}")));
        }
        if let Some(item) = item {
            out.push((format!("{name}{ITEM_SUFFIX}"), item));
        } else if node.kind_str() == "let_declaration" {
            // A `let` is a new variable: it holds none of the items an older one stated
            // (`let xs = &self.list;` after `xs: Vec<Server>`).
            out.push((format!("{name}{ITEM_SUFFIX}"), UNBOUND.to_string()));
        }
    }
}

/// Iterator adapters whose closure's first parameter is an item (or a reference to one).
const ITEM_ADAPTERS: &[&str] = &[
    "for_each",
    "try_for_each",
    "map",
    "filter",
    "filter_map",
    "flat_map",
    "find",
    "find_map",
    "any",
    "all",
    "position",
    "inspect",
    "take_while",
    "skip_while",
    "map_while",
    "max_by_key",
    "min_by_key",
    "partition",
];

/// A type name a Rust binding may hold: capitalised, and not `Self` (whose meaning is the
/// impl's, not the trait's).
fn is_named_type(t: &str) -> bool {
    t.chars().next().is_some_and(char::is_uppercase) && t != "Self"
}

/// The variable a loop pattern binds: `x`, `mut x`, `&x`, `&mut x`.
fn pattern_name<'s>(pat: Node, src: &'s str) -> Option<&'s str> {
    match pat.kind_str() {
        "identifier" => Some(node_text(pat, src)),
        "mut_pattern" | "reference_pattern" | "ref_pattern" => {
            let mut c = pat.walk();
            let inner = pat
                .named_children(&mut c)
                .find(|n| n.kind_str() != "mutable_specifier");
            inner.and_then(|n| pattern_name(n, src))
        }
        _ => None,
    }
}

/// The function whose result a Rust expression is: `f(..)`, `a::f(..)`, `x.f(..)`, `f(..)?`.
fn returned_by<'s>(v: Node, src: &'s str) -> Option<&'s str> {
    let v = if v.kind_str() == "try_expression" {
        v.named_child(0)?
    } else {
        v
    };
    if v.kind_str() != "call_expression" {
        return None;
    }
    let f = v.child_by_field_name("function")?;
    match f.kind_str() {
        "identifier" => Some(node_text(f, src)),
        "scoped_identifier" => field_text(f, "name", src),
        "field_expression" => field_text(f, "field", src),
        _ => None,
    }
}

/// The type a Rust expression evidently constructs: `Foo::new(..)`/`Foo::with(..)` (a path
/// whose last type segment is capitalised), `Foo { .. }`, `&Foo { .. }`, `Foo(..)`.
fn constructed_type(v: Node, src: &str) -> Option<String> {
    match v.kind_str() {
        "reference_expression" | "try_expression" => {
            constructed_type(v.child_by_field_name("value").or(v.named_child(0))?, src)
        }
        "struct_expression" => Some(base_type_name(field_text(v, "name", src)?)),
        "call_expression" => {
            let f = v.child_by_field_name("function")?;
            match f.kind_str() {
                "scoped_identifier" => {
                    let path = f.child_by_field_name("path")?;
                    let name = field_text(f, "name", src)?;
                    let ty = base_type_name(node_text(path, src));
                    // `Foo::new()` constructs Foo; `Foo::from_str()` and the like too, but a
                    // `Result`/`Option`-returning constructor is still a Foo once `?`-ed.
                    (!name.is_empty()).then_some(ty)
                }
                "identifier" => {
                    let n = node_text(f, src);
                    n.chars().next()?.is_uppercase().then(|| n.to_string())
                }
                _ => None,
            }
        }
        _ => None,
    }
}

fn join(prefix: &str, rest: &str) -> String {
    match (prefix.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}::{rest}"),
    }
}

/// Flattens a `use` tree into imports: `a::b::{c, d}` → module `a::b` names `[c, d]`;
/// `a::b::C` → module `a::b` names `[C]`; `a::*` → module `a`; `a` → module `a`.
fn flatten_use(node: Node, prefix: &str, src: &str, line: u32, out: &mut Vec<Import>) {
    match node.kind_str() {
        "scoped_identifier" => {
            let path = field_text(node, "path", src)
                .map(compact)
                .unwrap_or_default();
            let name = field_text(node, "name", src).unwrap_or("").to_string();
            push(out, join(prefix, &path), vec![name], line);
        }
        "identifier" | "crate" | "super" | "self" | "metavariable" => {
            let t = node_text(node, src);
            if prefix.is_empty() {
                push(out, t.to_string(), Vec::new(), line);
            } else if t == "self" {
                push_self(out, prefix, line);
            } else {
                push(out, prefix.to_string(), vec![t.to_string()], line);
            }
        }
        "use_as_clause" => {
            if let Some(p) = node.child_by_field_name("path") {
                let before = out.len();
                flatten_use(p, prefix, src, line, out);
                let alias = field_text(node, "alias", src).unwrap_or("");
                if let Some(imp) = out[before..].last_mut() {
                    if let (false, Some(orig)) = (alias.is_empty(), imp.names.last().cloned()) {
                        imp.aliases.push((alias.into(), orig));
                    }
                }
            }
        }
        "use_wildcard" => {
            let t = compact(node_text(node, src));
            let m = t.trim_end_matches('*').trim_end_matches("::");
            push(out, join(prefix, m), Vec::new(), line);
        }
        "scoped_use_list" => {
            let path = field_text(node, "path", src)
                .map(compact)
                .unwrap_or_default();
            let full = join(prefix, &path);
            if let Some(list) = node.child_by_field_name("list") {
                flatten_list(list, &full, src, line, out);
            }
        }
        "use_list" => flatten_list(node, prefix, src, line, out),
        _ => {}
    }
}

fn flatten_list(list: Node, prefix: &str, src: &str, line: u32, out: &mut Vec<Import>) {
    let mut names = Vec::new();
    let mut aliases = Vec::new();
    let mut whole = false;
    let mut c = list.walk();
    for item in list.named_children(&mut c) {
        match item.kind_str() {
            "identifier" => names.push(node_text(item, src).to_string()),
            "self" => whole = true,
            "use_as_clause" => match item.child_by_field_name("path") {
                Some(p) if p.kind_str() == "identifier" => {
                    let orig = node_text(p, src).to_string();
                    if let Some(a) = field_text(item, "alias", src) {
                        aliases.push((a.to_string(), orig.clone()));
                    }
                    names.push(orig);
                }
                Some(_) => flatten_use(item, prefix, src, line, out),
                None => {}
            },
            _ => flatten_use(item, prefix, src, line, out),
        }
    }
    if !names.is_empty() {
        push(out, prefix.to_string(), names, line);
        if let Some(last) = out.last_mut() {
            last.aliases = compact_pairs(aliases);
        }
    }
    if whole {
        push_self(out, prefix, line);
    }
}

/// `a::b::{self}` binds the module `b`, as `use a::b;` does (module `a`, name `b`; a lone
/// `foo::{self}` is `use foo;`). Not module `a::b` without names: that reads as `a::b::*`.
fn push_self(out: &mut Vec<Import>, prefix: &str, line: u32) {
    match prefix.rsplit_once("::") {
        Some((parent, last)) => push(out, parent.to_string(), vec![last.to_string()], line),
        None => push(out, prefix.to_string(), Vec::new(), line),
    }
}

fn push(out: &mut Vec<Import>, module: String, names: Vec<String>, line: u32) {
    if module.is_empty() && names.is_empty() {
        return;
    }
    out.push(Import {
        module: module.into(),
        names: compact_all(names),
        line,
        aliases: Vec::new(),
    });
}
