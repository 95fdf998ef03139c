//! Python: functions, classes (decorators included); `import`/`from … import`; calls.

use tree_sitter::Node;

use super::{compact, field_text, node_text, ChunkKind, Class, Def, Import, Spec};

pub(crate) struct PythonSpec;

/// Builtins whose calls are dropped.
const BUILTINS: &[&str] = &[
    "print",
    "len",
    "range",
    "isinstance",
    "issubclass",
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "set",
    "tuple",
    "type",
    "super",
    "getattr",
    "setattr",
    "hasattr",
    "enumerate",
    "zip",
    "map",
    "filter",
    "sorted",
    "reversed",
    "min",
    "max",
    "sum",
    "any",
    "all",
    "abs",
    "repr",
    "open",
    "iter",
    "next",
    "id",
    "hash",
    "round",
    "format",
    "vars",
    "dir",
    "callable",
    "frozenset",
    "bytes",
    "object",
    "divmod",
    "ord",
    "chr",
];

impl Spec for PythonSpec {
    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t> {
        let name = || field_text(node, "name", src).unwrap_or("").to_string();
        let body = node.child_by_field_name("body");
        match node.kind() {
            "function_definition" => {
                Class::Def(Def::new(ChunkKind::Function, name(), node).body(body))
            }
            "class_definition" => Class::Def(Def::new(ChunkKind::Class, name(), node).body(body)),
            "decorated_definition" => Class::Wrapper,
            _ => Class::Other,
        }
    }

    fn is_leading(&self, node: Node, _src: &str) -> bool {
        node.kind() == "comment"
    }

    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool {
        let line = node.start_position().row as u32 + 1;
        match node.kind() {
            "import_statement" => {
                let mut c = node.walk();
                for n in node.children_by_field_name("name", &mut c) {
                    let m = match n.kind() {
                        "aliased_import" => field_text(n, "name", src).unwrap_or(""),
                        _ => node_text(n, src),
                    };
                    if !m.is_empty() {
                        out.push(Import {
                            module: compact(m),
                            names: Vec::new(),
                            line,
                        });
                    }
                }
                true
            }
            "import_from_statement" => {
                let module = field_text(node, "module_name", src)
                    .map(compact)
                    .unwrap_or_default();
                let mut names = Vec::new();
                let mut c = node.walk();
                for n in node.children_by_field_name("name", &mut c) {
                    let t = match n.kind() {
                        "aliased_import" => field_text(n, "name", src).unwrap_or(""),
                        _ => node_text(n, src),
                    };
                    if !t.is_empty() {
                        names.push(compact(t));
                    }
                }
                if !module.is_empty() {
                    out.push(Import {
                        module,
                        names,
                        line,
                    });
                }
                true
            }
            "future_import_statement" => true,
            _ => false,
        }
    }

    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)> {
        if node.kind() != "call" {
            return None;
        }
        let f = node.child_by_field_name("function")?;
        match f.kind() {
            "identifier" => {
                let name = node_text(f, src);
                if BUILTINS.contains(&name) {
                    None
                } else {
                    Some((name.to_string(), None))
                }
            }
            "attribute" => Some((
                field_text(f, "attribute", src)?.to_string(),
                field_text(f, "object", src).map(compact),
            )),
            _ => None,
        }
    }

    fn comment(&self) -> &'static str {
        "#"
    }
}
