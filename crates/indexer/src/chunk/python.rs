//! Python: functions, classes (decorators included); `import`/`from … import`; calls.

use tree_sitter::Node;

use super::syntax::KindStr;
use super::types::{compact_all, compact_pairs};
use super::types::{ITEM_OF, ITEM_SUFFIX, LOCAL_FUNCTION, MODULE_ALIAS, RETURNED_BY, UNBOUND};
use super::{
    base_type_name, compact, field_text, item_type, loop_item, node_text, ChunkKind, Class, Def,
    Import, Spec,
};

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

/// A capitalised name that is not a typing construct (`Optional`, `List`, …): a class.
fn is_class_name(t: &str) -> bool {
    // A private class (`_Accumulator`) is a class too.
    t.trim_start_matches('_')
        .chars()
        .next()
        .is_some_and(char::is_uppercase)
        && !matches!(
            t,
            "Optional" | "List" | "Dict" | "Set" | "Tuple" | "Union" | "Any" | "Callable" | "Type"
        )
}

/// `Foo(..)` or `mod.Foo(..)`: the class a call constructs.
fn constructed_class(v: Node, src: &str) -> Option<String> {
    if v.kind_str() != "call" {
        return None;
    }
    let f = v.child_by_field_name("function")?;
    let name = match f.kind_str() {
        "identifier" => node_text(f, src),
        "attribute" => field_text(f, "attribute", src)?,
        _ => return None,
    };
    is_class_name(name).then(|| name.to_string())
}

impl Spec for PythonSpec {
    fn walk_kinds(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "import_statement",
            "import_from_statement",
            "future_import_statement",
            "call",
            "assignment",
            "typed_parameter",
            "typed_default_parameter",
            "for_statement",
            "list_comprehension",
            "set_comprehension",
            "dictionary_comprehension",
            "generator_expression",
        ])
    }

    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t> {
        let name = || field_text(node, "name", src).unwrap_or("").to_string();
        let body = node.child_by_field_name("body");
        match node.kind_str() {
            "function_definition" => {
                Class::Def(Def::new(ChunkKind::Function, name(), node).body(body))
            }
            "class_definition" => Class::Def(Def::new(ChunkKind::Class, name(), node).body(body)),
            "decorated_definition" => Class::Wrapper,
            _ => Class::Other,
        }
    }

    fn is_leading(&self, node: Node, _src: &str) -> bool {
        node.kind_str() == "comment"
    }

    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool {
        // Read only for an import: `start_position` costs a call per node otherwise.
        let line = || node.start_position().row as u32 + 1;
        match node.kind_str() {
            "import_statement" => {
                let mut c = node.walk();
                for n in node.children_by_field_name("name", &mut c) {
                    let (m, alias) = match n.kind_str() {
                        "aliased_import" => (
                            field_text(n, "name", src).unwrap_or(""),
                            field_text(n, "alias", src),
                        ),
                        _ => (node_text(n, src), None),
                    };
                    if !m.is_empty() {
                        let module = compact(m);
                        let local = alias.map(compact).unwrap_or_else(|| module.clone());
                        out.push(Import {
                            module: module.into(),
                            names: Vec::new(),
                            line: line(),
                            aliases: vec![(local.into(), MODULE_ALIAS.into())],
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
                let mut aliases = Vec::new();
                let mut c = node.walk();
                for n in node.children_by_field_name("name", &mut c) {
                    let (t, alias) = match n.kind_str() {
                        "aliased_import" => (
                            field_text(n, "name", src).unwrap_or(""),
                            field_text(n, "alias", src),
                        ),
                        _ => (node_text(n, src), None),
                    };
                    if !t.is_empty() {
                        names.push(compact(t));
                        if let Some(a) = alias {
                            aliases.push((compact(a), compact(t)));
                        }
                    }
                }
                if !module.is_empty() {
                    out.push(Import {
                        module: module.into(),
                        names: compact_all(names),
                        line: line(),
                        aliases: compact_pairs(aliases),
                    });
                }
                true
            }
            "future_import_statement" => true,
            _ => false,
        }
    }

    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)> {
        if node.kind_str() != "call" {
            return None;
        }
        let f = node.child_by_field_name("function")?;
        match f.kind_str() {
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

    fn bindings(&self, node: Node, src: &str, out: &mut Vec<(String, String)>) {
        match node.kind_str() {
            "assignment" => {
                let Some(left) = node.child_by_field_name("left") else {
                    return;
                };
                if !matches!(left.kind_str(), "identifier" | "attribute") {
                    return;
                }
                if node
                    .child_by_field_name("right")
                    .is_some_and(|r| r.kind_str() == "lambda")
                {
                    out.push((compact(node_text(left, src)), LOCAL_FUNCTION.to_string()));
                    return;
                }
                let right = node.child_by_field_name("right");
                let stated = field_text(node, "type", src);
                let ty = stated
                    .map(base_type_name)
                    .or_else(|| constructed_class(right?, src));
                let left = compact(node_text(left, src));
                if let Some(ty) = ty.filter(|t| is_class_name(t)) {
                    out.push((left.clone(), ty));
                } else if let Some(f) = right
                    .filter(|r| r.kind_str() == "call")
                    .and_then(|r| r.child_by_field_name("function"))
                {
                    let name = match f.kind_str() {
                        "identifier" => Some(node_text(f, src)),
                        "attribute" => field_text(f, "attribute", src),
                        _ => None,
                    };
                    if let Some(n) = name {
                        out.push((left.clone(), format!("{RETURNED_BY}{n}")));
                    }
                }
                // `self.handlers: list[Handler] = []`: what a loop over it binds. A local
                // assigned anything else holds none of the items an older value stated (a
                // field keeps its declaration's).
                let item = stated.and_then(item_type).filter(|t| is_class_name(t));
                let local = !left.contains('.');
                match item {
                    Some(item) => out.push((format!("{left}{ITEM_SUFFIX}"), item)),
                    None if local => {
                        out.push((format!("{left}{ITEM_SUFFIX}"), UNBOUND.to_string()));
                    }
                    None => {}
                }
            }
            "typed_parameter" | "typed_default_parameter" => {
                let name = node.child_by_field_name("name").or_else(|| {
                    let mut c = node.walk();
                    let first = node.named_children(&mut c).next();
                    first.filter(|n| n.kind_str() == "identifier")
                });
                let stated = field_text(node, "type", src);
                let Some(n) = name.map(|n| node_text(n, src)) else {
                    return;
                };
                if let Some(t) = stated.map(base_type_name).filter(|t| is_class_name(t)) {
                    out.push((n.to_string(), t));
                }
                if let Some(item) = stated.and_then(item_type).filter(|t| is_class_name(t)) {
                    out.push((format!("{n}{ITEM_SUFFIX}"), item));
                }
            }
            "list_comprehension"
            | "set_comprehension"
            | "dictionary_comprehension"
            | "generator_expression" => {
                // `any(h.matches(r) for h in self.handlers)`: its clauses bind before the
                // body, which comes first in the source.
                let mut c = node.walk();
                for clause in node.named_children(&mut c) {
                    if clause.kind_str() == "for_in_clause" {
                        self.bindings(clause, src, out);
                    }
                }
            }
            "for_statement" | "for_in_clause" => {
                // `for h in self.handlers:`, `for i, h in enumerate(handlers):`.
                let (Some(left), Some(right)) = (
                    node.child_by_field_name("left"),
                    node.child_by_field_name("right"),
                ) else {
                    return;
                };
                let Some((collection, enumerated)) = loop_item(node_text(right, src)) else {
                    return;
                };
                let var = if enumerated {
                    match left.kind_str() {
                        "pattern_list" | "tuple_pattern" if left.named_child_count() == 2 => {
                            left.named_child(1)
                        }
                        _ => None,
                    }
                } else {
                    Some(left)
                };
                if let Some(v) = var.filter(|v| v.kind_str() == "identifier") {
                    out.push((
                        node_text(v, src).to_string(),
                        format!("{ITEM_OF}{collection}"),
                    ));
                }
            }
            _ => {}
        }
    }

    fn comment(&self) -> &'static str {
        "#"
    }
}
