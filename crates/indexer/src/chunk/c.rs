//! C and C++: functions (C++ out-of-line `ns::Foo::bar` definitions become methods qualified
//! `ns/Foo#bar`), structs/unions/classes/enums (also through `typedef`), C++ namespaces and
//! in-class methods, templates; `#include`; calls and `new`.

use tree_sitter::Node;

use super::syntax::KindStr;
use super::{
    base_type_name, compact, field_text, named_kids, node_text, ChunkKind, Class, Def, Import, Spec,
};

pub(crate) struct CSpec;

/// The innermost declarator naming a function definition (`int *f(…)`, `T& A::b(…)`).
fn function_name_node(decl: Node) -> Option<Node> {
    let mut d = decl;
    for _ in 0..16 {
        match d.kind_str() {
            "function_declarator" => return d.child_by_field_name("declarator"),
            "pointer_declarator"
            | "reference_declarator"
            | "parenthesized_declarator"
            | "attributed_declarator" => {
                d = d.child_by_field_name("declarator").or_else(|| {
                    named_kids(d)
                        .into_iter()
                        .find(|k| k.kind_str().ends_with("declarator"))
                })?;
            }
            _ => return None,
        }
    }
    None
}

/// Splits `a::b::Foo<T>::bar` into (`["a","b","Foo"]`, `bar`).
fn split_qualified(text: &str) -> (Vec<String>, String) {
    let t = compact(text);
    // Remove template arguments.
    let mut depth = 0i32;
    let mut clean = String::new();
    for c in t.chars() {
        match c {
            '<' if !clean.ends_with("operator") => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => clean.push(c),
            _ => {}
        }
    }
    let mut parts: Vec<String> = clean
        .split("::")
        .filter(|s| !s.is_empty())
        .map(|s| s.to_string())
        .collect();
    let name = parts.pop().unwrap_or_default();
    (parts, name)
}

fn type_body_def<'t>(
    spec: Node<'t>,
    range: Node<'t>,
    name: Option<&str>,
    src: &str,
) -> Option<Def<'t>> {
    let kind = match spec.kind_str() {
        "struct_specifier" | "union_specifier" => ChunkKind::Struct,
        "class_specifier" => ChunkKind::Class,
        "enum_specifier" => ChunkKind::Enum,
        _ => return None,
    };
    let body = spec.child_by_field_name("body")?;
    let own = field_text(spec, "name", src).map(base_type_name);
    let n = match own {
        Some(n) if !n.is_empty() => n,
        _ => name.map(base_type_name)?,
    };
    if n.is_empty() {
        return None;
    }
    let body = if kind == ChunkKind::Enum {
        None
    } else {
        Some(body)
    };
    Some(Def::new(kind, n, range).body(body))
}

impl Spec for CSpec {
    fn walk_kinds(&self) -> Option<&'static [&'static str]> {
        Some(&["preproc_include", "call_expression", "new_expression"])
    }

    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t> {
        match node.kind_str() {
            "function_definition" => {
                let Some(decl) = node.child_by_field_name("declarator") else {
                    return Class::Other;
                };
                let Some(name_node) = function_name_node(decl) else {
                    return Class::Other;
                };
                let (scope, name) = split_qualified(node_text(name_node, src));
                if name.is_empty() {
                    return Class::Other;
                }
                let mut def = Def::new(ChunkKind::Function, name, node)
                    .body(node.child_by_field_name("body"));
                def.scope = scope;
                Class::Def(def)
            }
            "struct_specifier" | "union_specifier" | "class_specifier" | "enum_specifier" => {
                match type_body_def(node, node, None, src) {
                    Some(d) => Class::Def(d),
                    None => Class::Other,
                }
            }
            "type_definition" | "declaration" | "field_declaration" => {
                let Some(ty) = node.child_by_field_name("type") else {
                    return Class::Other;
                };
                let decl = field_text(node, "declarator", src);
                let decl_name = if node.kind_str() == "type_definition" {
                    decl
                } else {
                    None
                };
                match type_body_def(ty, node, decl_name, src) {
                    Some(d) => Class::Def(d),
                    None => Class::Other,
                }
            }
            "namespace_definition" => {
                let body = node.child_by_field_name("body");
                match field_text(node, "name", src) {
                    Some(n) if !n.trim().is_empty() => Class::Def(
                        Def::new(ChunkKind::Module, compact(n).replace("::", "/"), node).body(body),
                    ),
                    _ => Class::Container,
                }
            }
            "template_declaration" => Class::Wrapper,
            "linkage_specification"
            | "declaration_list"
            | "preproc_if"
            | "preproc_ifdef"
            | "preproc_else"
            | "preproc_elif"
            | "preproc_elifdef" => Class::Container,
            _ => Class::Other,
        }
    }

    fn is_leading(&self, node: Node, _src: &str) -> bool {
        node.kind_str() == "comment"
    }

    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool {
        if node.kind_str() != "preproc_include" {
            return false;
        }
        if let Some(p) = field_text(node, "path", src) {
            let module = p
                .trim()
                .trim_matches(|c| c == '"' || c == '<' || c == '>')
                .to_string();
            if !module.is_empty() {
                out.push(Import {
                    module: module.into(),
                    names: Vec::new(),
                    line: node.start_position().row as u32 + 1,
                    ..Default::default()
                });
            }
        }
        true
    }

    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)> {
        match node.kind_str() {
            "call_expression" => {
                let f = node.child_by_field_name("function")?;
                match f.kind_str() {
                    "identifier" => Some((node_text(f, src).to_string(), None)),
                    "field_expression" => {
                        let field = f.child_by_field_name("field")?;
                        let name = match field.kind_str() {
                            "field_identifier" => node_text(field, src).to_string(),
                            _ => split_qualified(node_text(field, src))
                                .1
                                .trim_start_matches("template")
                                .to_string(),
                        };
                        Some((name, field_text(f, "argument", src).map(compact)))
                    }
                    "qualified_identifier" | "template_function" => {
                        let (scope, name) = split_qualified(node_text(f, src));
                        let q = if scope.is_empty() {
                            None
                        } else {
                            Some(scope.join("::"))
                        };
                        Some((name, q))
                    }
                    _ => None,
                }
            }
            "new_expression" => {
                let t = field_text(node, "type", src)?;
                let (_, name) = split_qualified(t);
                Some((name, None))
            }
            _ => None,
        }
    }
}
