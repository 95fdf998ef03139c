//! Rust: functions, structs/unions, enums, traits, impls, inline modules; `use`/`mod x;`/
//! `extern crate` imports; calls (macros are not calls).

use tree_sitter::Node;

use super::{base_type_name, compact, field_text, node_text, ChunkKind, Class, Def, Import, Spec};

pub(crate) struct RustSpec;

impl Spec for RustSpec {
    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t> {
        let name = || field_text(node, "name", src).unwrap_or("").to_string();
        let body = node.child_by_field_name("body");
        match node.kind() {
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
        match node.kind() {
            "line_comment" | "block_comment" => {
                let t = node_text(node, src);
                !(t.starts_with("//!") || t.starts_with("/*!"))
            }
            "attribute_item" => true,
            _ => false,
        }
    }

    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool {
        let line = node.start_position().row as u32 + 1;
        match node.kind() {
            "use_declaration" => {
                if let Some(arg) = node.child_by_field_name("argument") {
                    flatten_use(arg, "", src, line, out);
                }
                true
            }
            "mod_item" if node.child_by_field_name("body").is_none() => {
                if let Some(n) = field_text(node, "name", src) {
                    out.push(Import {
                        module: n.to_string(),
                        names: Vec::new(),
                        line,
                    });
                }
                true
            }
            "extern_crate_declaration" => {
                if let Some(n) = field_text(node, "name", src) {
                    out.push(Import {
                        module: n.to_string(),
                        names: Vec::new(),
                        line,
                    });
                }
                true
            }
            _ => false,
        }
    }

    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)> {
        if node.kind() != "call_expression" {
            return None;
        }
        let mut f = node.child_by_field_name("function")?;
        if f.kind() == "generic_function" {
            f = f.child_by_field_name("function")?;
        }
        let (callee, qualifier) = match f.kind() {
            "identifier" => (node_text(f, src).to_string(), None),
            "scoped_identifier" => (
                field_text(f, "name", src)?.to_string(),
                field_text(f, "path", src).map(compact),
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
    match node.kind() {
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
                push(out, prefix.to_string(), Vec::new(), line);
            } else {
                push(out, prefix.to_string(), vec![t.to_string()], line);
            }
        }
        "use_as_clause" => {
            if let Some(p) = node.child_by_field_name("path") {
                flatten_use(p, prefix, src, line, out);
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
    let mut whole = false;
    let mut c = list.walk();
    for item in list.named_children(&mut c) {
        match item.kind() {
            "identifier" => names.push(node_text(item, src).to_string()),
            "self" => whole = true,
            "use_as_clause" => match item.child_by_field_name("path") {
                Some(p) if p.kind() == "identifier" => names.push(node_text(p, src).to_string()),
                Some(p) => flatten_use(p, prefix, src, line, out),
                None => {}
            },
            _ => flatten_use(item, prefix, src, line, out),
        }
    }
    if !names.is_empty() {
        push(out, prefix.to_string(), names, line);
    } else if whole {
        push(out, prefix.to_string(), Vec::new(), line);
    }
}

fn push(out: &mut Vec<Import>, module: String, names: Vec<String>, line: u32) {
    if module.is_empty() && names.is_empty() {
        return;
    }
    out.push(Import {
        module,
        names,
        line,
    });
}
