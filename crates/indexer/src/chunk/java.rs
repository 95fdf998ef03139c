//! Java: classes, records, interfaces (and annotation types), enums, methods and constructors;
//! `import` (static and wildcard); method invocations and `new`.

use tree_sitter::Node;

use super::syntax::KindStr;
use super::types::compact_all;
use super::{
    base_type_name, compact, field_text, named_kids, node_text, ChunkKind, Class, Def, Import, Spec,
};

pub(crate) struct JavaSpec;

impl Spec for JavaSpec {
    fn walk_kinds(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "import_declaration",
            "local_variable_declaration",
            "field_declaration",
            "formal_parameter",
            "enhanced_for_statement",
            "method_invocation",
            "object_creation_expression",
        ])
    }

    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t> {
        let name = || field_text(node, "name", src).unwrap_or("").to_string();
        let body = node.child_by_field_name("body");
        match node.kind_str() {
            "class_declaration" | "record_declaration" => {
                Class::Def(Def::new(ChunkKind::Class, name(), node).body(body))
            }
            "interface_declaration" | "annotation_type_declaration" => {
                Class::Def(Def::new(ChunkKind::Interface, name(), node).body(body))
            }
            "enum_declaration" => Class::Def(Def::new(ChunkKind::Enum, name(), node).body(body)),
            "method_declaration"
            | "constructor_declaration"
            | "compact_constructor_declaration" => {
                if body.is_none() {
                    // Abstract and interface methods stay in their type's text.
                    return Class::Other;
                }
                Class::Def(Def::new(ChunkKind::Function, name(), node).body(body))
            }
            "enum_body_declarations" => Class::Container,
            _ => Class::Other,
        }
    }

    fn is_leading(&self, node: Node, _src: &str) -> bool {
        matches!(node.kind_str(), "line_comment" | "block_comment")
    }

    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool {
        if node.kind_str() != "import_declaration" {
            return false;
        }
        let text = compact(node_text(node, src));
        let is_static = text.starts_with("import static");
        let kids = named_kids(node);
        let path = kids
            .iter()
            .find(|k| matches!(k.kind_str(), "scoped_identifier" | "identifier"))
            .map(|k| compact(node_text(*k, src)))
            .unwrap_or_default();
        let wildcard = kids.iter().any(|k| k.kind_str() == "asterisk");
        if path.is_empty() {
            return true;
        }
        let line = node.start_position().row as u32 + 1;
        let (module, names) = if wildcard {
            (path, Vec::new())
        } else if is_static {
            match path.rsplit_once('.') {
                Some((m, n)) => (m.to_string(), vec![n.to_string()]),
                None => (path, Vec::new()),
            }
        } else {
            let last = path.rsplit('.').next().unwrap_or("").to_string();
            (path, vec![last])
        };
        out.push(Import {
            module: module.into(),
            names: compact_all(names),
            line,
            ..Default::default()
        });
        true
    }

    fn bindings(&self, node: Node, src: &str, out: &mut Vec<(String, String)>) {
        let field = match node.kind_str() {
            "local_variable_declaration" => false,
            "field_declaration" => true,
            "formal_parameter" | "enhanced_for_statement" => {
                // A parameter, or `for (Handler h : handlers)`: the stated type (not `var`).
                if let (Some(t), Some(n)) =
                    (field_text(node, "type", src), field_text(node, "name", src))
                {
                    if t != "var" {
                        out.push((n.to_string(), base_type_name(t)));
                    }
                }
                return;
            }
            _ => return,
        };
        let Some(t) = field_text(node, "type", src).map(base_type_name) else {
            return;
        };
        let mut c = node.walk();
        for d in node.children_by_field_name("declarator", &mut c) {
            if let Some(n) = field_text(d, "name", src) {
                let n = if field {
                    format!("this.{n}")
                } else {
                    n.to_string()
                };
                out.push((n, t.clone()));
            }
        }
    }

    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)> {
        match node.kind_str() {
            "method_invocation" => Some((
                field_text(node, "name", src)?.to_string(),
                field_text(node, "object", src).map(compact),
            )),
            "object_creation_expression" => {
                let t = field_text(node, "type", src)?;
                Some((base_type_name(t), None))
            }
            _ => None,
        }
    }
}
