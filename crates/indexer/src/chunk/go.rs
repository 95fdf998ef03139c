//! Go: functions, methods (qualified `Type#method` by receiver), struct and interface types;
//! imports (single and grouped); calls (builtins and basic-type conversions dropped).

use tree_sitter::Node;

use super::syntax::KindStr;
use super::types::compact_pairs;
use super::types::{ITEM_OF, ITEM_SUFFIX, MODULE_ALIAS, RETURNED_BY, UNBOUND};
use super::{
    base_type_name, compact, field_text, item_type, loop_item, named_kids, node_text, ChunkKind,
    Class, Def, Import, Spec,
};

pub(crate) struct GoSpec;

/// A Go import path's default package name: its last segment without a `.vN`/`vN` suffix.
fn go_package_name(path: &str) -> String {
    let mut segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segs.len() > 1
        && segs
            .last()
            .is_some_and(|s| s.starts_with('v') && s[1..].chars().all(|c| c.is_ascii_digit()))
    {
        segs.pop();
    }
    let last = segs.last().copied().unwrap_or("");
    let last = last.split('.').next().unwrap_or(last);
    last.trim_start_matches("go-").replace('-', "_")
}

const BUILTINS: &[&str] = &[
    "append", "cap", "clear", "close", "complex", "copy", "delete", "imag", "len", "make", "max",
    "min", "new", "panic", "print", "println", "real", "recover", "string", "int", "int8", "int16",
    "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "uintptr", "float32",
    "float64", "byte", "rune", "bool", "error", "any",
];

fn type_spec_def<'t>(spec: Node<'t>, range: Node<'t>, src: &str) -> Option<Def<'t>> {
    if spec.kind_str() != "type_spec" {
        return None;
    }
    let name = field_text(spec, "name", src)?;
    let kind = match spec.child_by_field_name("type")?.kind_str() {
        "struct_type" => ChunkKind::Struct,
        "interface_type" => ChunkKind::Interface,
        _ => return None,
    };
    Some(Def::new(kind, name, range))
}

impl Spec for GoSpec {
    fn walk_kinds(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "import_declaration",
            "parameter_declaration",
            "var_spec",
            "short_var_declaration",
            "call_expression",
            "for_statement",
            "type_case",
            "default_case",
        ])
    }

    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t> {
        let body = node.child_by_field_name("body");
        match node.kind_str() {
            "function_declaration" => {
                let name = field_text(node, "name", src).unwrap_or("");
                Class::Def(Def::new(ChunkKind::Function, name, node).body(body))
            }
            "method_declaration" => {
                let name = field_text(node, "name", src).unwrap_or("");
                let mut def = Def::new(ChunkKind::Method, name, node).body(body);
                let recv = node
                    .child_by_field_name("receiver")
                    .and_then(|r| {
                        named_kids(r)
                            .into_iter()
                            .find(|p| p.kind_str() == "parameter_declaration")
                    })
                    .and_then(|p| field_text(p, "type", src))
                    .map(base_type_name)
                    .unwrap_or_default();
                if !recv.is_empty() {
                    def.scope = vec![recv];
                }
                Class::Def(def)
            }
            "type_declaration" => {
                let specs = named_kids(node);
                if specs.len() == 1 {
                    match type_spec_def(specs[0], node, src) {
                        Some(d) => Class::Def(d),
                        None => Class::Other,
                    }
                } else {
                    Class::Container
                }
            }
            "type_spec" => match type_spec_def(node, node, src) {
                Some(d) => Class::Def(d),
                None => Class::Other,
            },
            _ => Class::Other,
        }
    }

    fn is_leading(&self, node: Node, _src: &str) -> bool {
        node.kind_str() == "comment"
    }

    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool {
        if node.kind_str() != "import_declaration" {
            return false;
        }
        let mut specs = Vec::new();
        for c in named_kids(node) {
            match c.kind_str() {
                "import_spec" => specs.push(c),
                "import_spec_list" => specs.extend(
                    named_kids(c)
                        .into_iter()
                        .filter(|s| s.kind_str() == "import_spec"),
                ),
                _ => {}
            }
        }
        for s in specs {
            if let Some(p) = field_text(s, "path", src) {
                let module = p.trim_matches(|c| c == '"' || c == '`').to_string();
                if !module.is_empty() {
                    // The package's local name: the explicit one, else the path's last segment
                    // (`gopkg.in/yaml.v3` → `yaml`, `x/v2` → `x`).
                    let local = field_text(s, "name", src)
                        .map(str::to_string)
                        .unwrap_or_else(|| go_package_name(&module));
                    let aliases = if matches!(local.as_str(), "_" | ".") || local.is_empty() {
                        Vec::new()
                    } else {
                        vec![(local, MODULE_ALIAS.to_string())]
                    };
                    out.push(Import {
                        module: module.into(),
                        names: Vec::new(),
                        line: s.start_position().row as u32 + 1,
                        aliases: compact_pairs(aliases),
                    });
                }
            }
        }
        true
    }

    fn bindings(&self, node: Node, src: &str, out: &mut Vec<(String, String)>) {
        match node.kind_str() {
            "parameter_declaration" | "var_spec" => {
                let Some(text) = field_text(node, "type", src) else {
                    return;
                };
                let (t, item) = (base_type_name(text), item_type(text));
                let mut c = node.walk();
                for n in node.children_by_field_name("name", &mut c) {
                    let n = node_text(n, src);
                    out.push((n.to_string(), t.clone()));
                    if let Some(item) = &item {
                        out.push((format!("{n}{ITEM_SUFFIX}"), item.clone()));
                    }
                }
            }
            "for_statement" => {
                // `for _, s := range servers`: the second variable is an item (the first
                // an index), for the loop (its body is beside the range clause).
                let mut c = node.walk();
                let Some(range) = node
                    .named_children(&mut c)
                    .find(|n| n.kind_str() == "range_clause")
                else {
                    return;
                };
                let (Some(l), Some(r)) = (
                    range.child_by_field_name("left"),
                    range.child_by_field_name("right"),
                ) else {
                    return;
                };
                let vars = named_kids(l);
                if let (2, Some((collection, false))) = (vars.len(), loop_item(node_text(r, src))) {
                    if vars[1].kind_str() == "identifier" {
                        let var = node_text(vars[1], src).to_string();
                        out.push((var, format!("{ITEM_OF}{collection}")));
                    }
                }
            }
            "type_case" | "default_case" => {
                // `switch v := x.(type) { case *T: v.M() }`: `v` is a `T` in a case of one
                // type; in a case of several, and the default, it is bound to none of them.
                let Some(alias) = node
                    .parent()
                    .filter(|p| p.kind_str() == "type_switch_statement")
                    .and_then(|p| p.child_by_field_name("alias"))
                else {
                    return;
                };
                let names = named_kids(alias);
                let [v] = names.as_slice() else { return };
                let mut c = node.walk();
                let types: Vec<Node> = node
                    .children_by_field_name("type", &mut c)
                    .filter(|t| t.is_named())
                    .collect();
                let ty = match types.as_slice() {
                    [t] if node_text(*t, src) != "nil" => base_type_name(node_text(*t, src)),
                    _ => UNBOUND.to_string(),
                };
                out.push((node_text(*v, src).to_string(), ty));
            }
            "short_var_declaration" => {
                let (Some(l), Some(r)) = (
                    node.child_by_field_name("left"),
                    node.child_by_field_name("right"),
                ) else {
                    return;
                };
                let (ls, rs) = (named_kids(l), named_kids(r));
                for (a, b) in ls.iter().zip(rs.iter()) {
                    let lit = if b.kind_str() == "unary_expression" {
                        b.child_by_field_name("operand")
                    } else {
                        Some(*b)
                    };
                    if a.kind_str() == "identifier" && b.kind_str() == "call_expression" {
                        let f = b.child_by_field_name("function");
                        let name = f.and_then(|f| match f.kind_str() {
                            "identifier" => Some(node_text(f, src)),
                            "selector_expression" => field_text(f, "field", src),
                            _ => None,
                        });
                        if let Some(n) = name {
                            out.push((node_text(*a, src).to_string(), format!("{RETURNED_BY}{n}")));
                        }
                        continue;
                    }
                    // `t, ok := x.(*pricing.Tax)`: the asserted type.
                    if a.kind_str() == "identifier" && b.kind_str() == "type_assertion_expression" {
                        if let Some(t) = field_text(*b, "type", src).map(base_type_name) {
                            out.push((node_text(*a, src).to_string(), t));
                        }
                        continue;
                    }
                    let Some(lit) = lit.filter(|x| x.kind_str() == "composite_literal") else {
                        continue;
                    };
                    if let (true, Some(t)) = (
                        a.kind_str() == "identifier",
                        field_text(lit, "type", src).map(base_type_name),
                    ) {
                        out.push((node_text(*a, src).to_string(), t));
                    }
                }
            }
            _ => {}
        }
    }

    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)> {
        if node.kind_str() != "call_expression" {
            return None;
        }
        let f = node.child_by_field_name("function")?;
        match f.kind_str() {
            "identifier" => {
                let n = node_text(f, src);
                if BUILTINS.contains(&n) {
                    None
                } else {
                    Some((n.to_string(), None))
                }
            }
            "selector_expression" => Some((
                field_text(f, "field", src)?.to_string(),
                field_text(f, "operand", src).map(compact),
            )),
            _ => None,
        }
    }
}
