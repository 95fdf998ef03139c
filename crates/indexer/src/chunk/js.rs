//! JavaScript, TypeScript and TSX: functions (also `const f = () => {}` / function expressions
//! assigned at top level, and `X.prototype.f = function…`), classes, methods (also arrow
//! function fields), interfaces, enums, namespaces/modules; ES imports, `export … from`,
//! `require()` and `import()`; calls and `new`.

use tree_sitter::Node;

use super::syntax::KindStr;
use super::types::{compact_all, compact_pairs};
use super::types::{CALLBACK_PARAM, ITEM_OF, ITEM_SUFFIX, MODULE_ALIAS, RETURNED_BY};
use super::{
    base_type_name, compact, field_text, item_type, loop_item, named_kids, node_text, split_top,
    ChunkKind, Class, Def, Import, Spec,
};

pub(crate) struct JsSpec;

/// The untyped parameters of a function passed as an argument (`operate((source, subscriber)
/// => …)`, `new Observable((subscriber) => …)`): their types are the ones the called
/// function's signature states for that argument, looked up when calls are resolved.
fn callback_params(f: Node, src: &str, out: &mut Vec<(String, String)>) {
    let Some(args) = f.parent().filter(|p| p.kind_str() == "arguments") else {
        return;
    };
    let Some(call) = args.parent() else { return };
    let params: Vec<Node> = match f.child_by_field_name("parameters") {
        Some(ps) => named_kids(ps),
        None => f.child_by_field_name("parameter").into_iter().collect(),
    };
    // `this.observers.forEach((o) => o.next())`: an array method's callback gets the items.
    let method = (call.kind_str() == "call_expression")
        .then(|| call.child_by_field_name("function"))
        .flatten()
        .filter(|c| c.kind_str() == "member_expression");
    if let Some(m) = method
        .filter(|m| field_text(*m, "property", src).is_some_and(|p| ITEM_CALLBACKS.contains(&p)))
    {
        let first_arg = named_kids(args).first().is_some_and(|a| a.id() == f.id());
        let collection = field_text(m, "object", src).and_then(loop_item);
        if let (true, Some((collection, false)), Some(id)) = (
            first_arg,
            collection,
            params.first().copied().and_then(untyped),
        ) {
            out.push((
                node_text(id, src).to_string(),
                format!("{ITEM_OF}{collection}"),
            ));
        }
        return;
    }
    let callee = match call.kind_str() {
        "call_expression" => call
            .child_by_field_name("function")
            .filter(|c| c.kind_str() == "identifier")
            .map(|c| node_text(c, src).to_string()),
        "new_expression" => call
            .child_by_field_name("constructor")
            .filter(|c| c.kind_str() == "identifier")
            .map(|c| format!("new {}", node_text(c, src))),
        _ => None,
    };
    let Some(callee) = callee else { return };
    let Some(arg) = named_kids(args).iter().position(|a| a.id() == f.id()) else {
        return;
    };
    for (j, p) in params.iter().enumerate() {
        if let Some(id) = untyped(*p) {
            out.push((
                node_text(id, src).to_string(),
                format!("{CALLBACK_PARAM}{callee}/{arg}/{j}"),
            ));
        }
    }
}

/// A parameter's name when its type is not stated.
fn untyped(p: Node) -> Option<Node> {
    match p.kind_str() {
        "identifier" => Some(p),
        "required_parameter" | "optional_parameter" if p.child_by_field_name("type").is_none() => p
            .child_by_field_name("pattern")
            .filter(|x| x.kind_str() == "identifier"),
        _ => None,
    }
}

/// Array (and `Set`) methods whose callback's first parameter is an item.
const ITEM_CALLBACKS: &[&str] = &[
    "forEach",
    "map",
    "flatMap",
    "filter",
    "find",
    "findLast",
    "findIndex",
    "findLastIndex",
    "some",
    "every",
];

/// A type annotation's class names: `Foo<T>` → `Foo`; a union `A<T> | B | undefined` →
/// `A|B` (the resolver tries each).
fn stated_type(t: &str) -> String {
    let names: Vec<String> = split_top(t, '|')
        .into_iter()
        .map(base_type_name)
        .filter(|n| n.chars().next().is_some_and(char::is_uppercase))
        .collect();
    names.join("|")
}

fn is_function_value(kind: &str) -> bool {
    matches!(
        kind,
        "arrow_function" | "function_expression" | "function" | "generator_function"
    )
}

/// The function a declarator/field value stands for: the value itself, or the first function
/// argument of a wrapping call (`React.memo(() => …)`, `forwardRef(function …)`).
fn function_value(value: Node) -> Option<Node> {
    if is_function_value(value.kind_str()) {
        return Some(value);
    }
    if value.kind_str() == "call_expression" {
        let args = value.child_by_field_name("arguments")?;
        return named_kids(args)
            .into_iter()
            .find(|a| is_function_value(a.kind_str()));
    }
    None
}

fn unquote(s: &str) -> String {
    s.trim_matches(|c| c == '"' || c == '\'' || c == '`')
        .to_string()
}

impl Spec for JsSpec {
    fn walk_kinds(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "import_statement",
            "export_statement",
            "call_expression",
            "new_expression",
            "arrow_function",
            "function_expression",
            "function",
            "generator_function",
            "variable_declarator",
            "public_field_definition",
            "field_definition",
            "required_parameter",
            "optional_parameter",
            "assignment_expression",
            "for_in_statement",
        ])
    }

    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t> {
        let name = || field_text(node, "name", src).unwrap_or("").to_string();
        let body = node.child_by_field_name("body");
        match node.kind_str() {
            "function_declaration" | "generator_function_declaration" => {
                Class::Def(Def::new(ChunkKind::Function, name(), node).body(body))
            }
            "method_definition" => {
                Class::Def(Def::new(ChunkKind::Function, name(), node).body(body))
            }
            "class_declaration" | "abstract_class_declaration" | "class" => {
                if name().is_empty() {
                    return Class::Other;
                }
                Class::Def(Def::new(ChunkKind::Class, name(), node).body(body))
            }
            "interface_declaration" => Class::Def(Def::new(ChunkKind::Interface, name(), node)),
            "enum_declaration" => Class::Def(Def::new(ChunkKind::Enum, name(), node)),
            "internal_module" | "module" => {
                let n = unquote(&compact(field_text(node, "name", src).unwrap_or("")));
                if n.is_empty() {
                    return Class::Other;
                }
                Class::Def(Def::new(ChunkKind::Module, n.replace('.', "/"), node).body(body))
            }
            "public_field_definition" | "field_definition" => {
                let n = field_text(node, "name", src)
                    .or_else(|| field_text(node, "property", src))
                    .unwrap_or("");
                match node.child_by_field_name("value").and_then(function_value) {
                    Some(f) if !n.is_empty() => Class::Def(
                        Def::new(ChunkKind::Function, n, node).body(f.child_by_field_name("body")),
                    ),
                    _ => Class::Other,
                }
            }
            "lexical_declaration" | "variable_declaration" => {
                let decls: Vec<Node> = named_kids(node)
                    .into_iter()
                    .filter(|n| n.kind_str() == "variable_declarator")
                    .collect();
                if decls.len() != 1 {
                    return Class::Other;
                }
                let d = decls[0];
                let name_node = match d.child_by_field_name("name") {
                    Some(n) if n.kind_str() == "identifier" => n,
                    _ => return Class::Other,
                };
                let n = node_text(name_node, src);
                let value = match d.child_by_field_name("value") {
                    Some(v) => v,
                    None => return Class::Other,
                };
                if value.kind_str() == "class" {
                    return Class::Def(
                        Def::new(ChunkKind::Class, n, node).body(value.child_by_field_name("body")),
                    );
                }
                match function_value(value) {
                    Some(f) => Class::Def(
                        Def::new(ChunkKind::Function, n, node).body(f.child_by_field_name("body")),
                    ),
                    None => Class::Other,
                }
            }
            "expression_statement" => {
                let inner = match node.named_child(0) {
                    Some(i) => i,
                    None => return Class::Other,
                };
                match inner.kind_str() {
                    "internal_module" | "module" => Class::Wrapper,
                    "assignment_expression" => {
                        let (left, right) = match (
                            inner.child_by_field_name("left"),
                            inner.child_by_field_name("right"),
                        ) {
                            (Some(l), Some(r)) => (l, r),
                            _ => return Class::Other,
                        };
                        let f = match function_value(right) {
                            Some(f) if is_function_value(right.kind_str()) => f,
                            _ => return Class::Other,
                        };
                        let body = f.child_by_field_name("body");
                        match left.kind_str() {
                            "identifier" => Class::Def(
                                Def::new(ChunkKind::Function, node_text(left, src), node)
                                    .body(body),
                            ),
                            "member_expression" => {
                                let prop = field_text(left, "property", src).unwrap_or("");
                                if prop.is_empty() {
                                    return Class::Other;
                                }
                                let mut def = Def::new(ChunkKind::Function, prop, node).body(body);
                                // `Foo.prototype.bar = function…` is a method of Foo.
                                if let Some(obj) = left.child_by_field_name("object") {
                                    if obj.kind_str() == "member_expression"
                                        && field_text(obj, "property", src) == Some("prototype")
                                    {
                                        if let Some(t) = field_text(obj, "object", src) {
                                            def.scope = vec![compact(t)];
                                        }
                                    }
                                }
                                Class::Def(def)
                            }
                            _ => Class::Other,
                        }
                    }
                    _ => Class::Other,
                }
            }
            "export_statement" | "ambient_declaration" => Class::Wrapper,
            _ => Class::Other,
        }
    }

    fn is_leading(&self, node: Node, _src: &str) -> bool {
        matches!(node.kind_str(), "comment" | "decorator")
    }

    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool {
        // Read only for an import: `start_position` costs a call per node otherwise.
        let line = || node.start_position().row as u32 + 1;
        match node.kind_str() {
            "import_statement" => {
                let source = node.child_by_field_name("source").or_else(|| {
                    named_kids(node)
                        .into_iter()
                        .find(|n| n.kind_str() == "import_require_clause")
                        .and_then(|c| c.child_by_field_name("source"))
                });
                let mut names = Vec::new();
                let mut aliases = Vec::new();
                for c in named_kids(node) {
                    if c.kind_str() == "import_clause" {
                        for k in named_kids(c) {
                            match k.kind_str() {
                                "identifier" => names.push(node_text(k, src).to_string()),
                                "namespace_import" => {
                                    if let Some(id) = named_kids(k)
                                        .into_iter()
                                        .find(|n| n.kind_str() == "identifier")
                                    {
                                        aliases.push((
                                            node_text(id, src).to_string(),
                                            MODULE_ALIAS.to_string(),
                                        ));
                                    }
                                }
                                "named_imports" => {
                                    for s in named_kids(k) {
                                        if let Some(n) = field_text(s, "name", src) {
                                            let n = unquote(n);
                                            if let Some(a) = field_text(s, "alias", src) {
                                                aliases.push((a.to_string(), n.clone()));
                                            }
                                            names.push(n);
                                        }
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                }
                if let Some(s) = source {
                    out.push(Import {
                        module: unquote(node_text(s, src)).into(),
                        names: compact_all(names),
                        line: line(),
                        aliases: compact_pairs(aliases),
                    });
                }
                true
            }
            "export_statement" => {
                let Some(s) = node.child_by_field_name("source") else {
                    return false;
                };
                let mut names = Vec::new();
                for c in named_kids(node) {
                    if c.kind_str() == "export_clause" {
                        for k in named_kids(c) {
                            if let Some(n) = field_text(k, "name", src) {
                                names.push(unquote(n));
                            }
                        }
                    }
                }
                out.push(Import {
                    module: unquote(node_text(s, src)).into(),
                    names: compact_all(names),
                    line: line(),
                    ..Default::default()
                });
                true
            }
            "call_expression" => {
                let Some(f) = node.child_by_field_name("function") else {
                    return false;
                };
                let is_import = f.kind_str() == "import"
                    || (f.kind_str() == "identifier" && node_text(f, src) == "require");
                if !is_import {
                    return false;
                }
                let arg = node
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0));
                let Some(arg) = arg.filter(|a| a.kind_str() == "string") else {
                    return false;
                };
                let mut names = Vec::new();
                let mut aliases = Vec::new();
                if let Some(p) = node.parent() {
                    if p.kind_str() == "variable_declarator" {
                        if let Some(pat) = p.child_by_field_name("name") {
                            if pat.kind_str() == "identifier" {
                                aliases.push((
                                    node_text(pat, src).to_string(),
                                    MODULE_ALIAS.to_string(),
                                ));
                            }
                            if pat.kind_str() == "object_pattern" {
                                for k in named_kids(pat) {
                                    match k.kind_str() {
                                        "shorthand_property_identifier_pattern" => {
                                            names.push(node_text(k, src).to_string())
                                        }
                                        "pair_pattern" => {
                                            if let Some(n) = field_text(k, "key", src) {
                                                names.push(unquote(n));
                                            }
                                        }
                                        _ => {}
                                    }
                                }
                            }
                        }
                    }
                }
                out.push(Import {
                    module: unquote(node_text(arg, src)).into(),
                    names: compact_all(names),
                    line: line(),
                    aliases: compact_pairs(aliases),
                });
                true
            }
            _ => false,
        }
    }

    fn bindings(&self, node: Node, src: &str, out: &mut Vec<(String, String)>) {
        if is_function_value(node.kind_str()) {
            callback_params(node, src, out);
            return;
        }
        if node.kind_str() == "for_in_statement" {
            // `for (const o of this.observers)`: the item type (not `for … in`, whose
            // variable is a key).
            let of = node
                .child_by_field_name("operator")
                .is_some_and(|o| node_text(o, src) == "of");
            let (Some(left), Some(right)) = (
                node.child_by_field_name("left"),
                node.child_by_field_name("right"),
            ) else {
                return;
            };
            if let (true, "identifier", Some((collection, false))) =
                (of, left.kind_str(), loop_item(node_text(right, src)))
            {
                out.push((
                    node_text(left, src).to_string(),
                    format!("{ITEM_OF}{collection}"),
                ));
            }
            return;
        }
        let (name, ty, value) = match node.kind_str() {
            "variable_declarator" | "public_field_definition" | "field_definition" => (
                node.child_by_field_name("name")
                    .or_else(|| node.child_by_field_name("property")),
                node.child_by_field_name("type"),
                node.child_by_field_name("value"),
            ),
            "required_parameter" | "optional_parameter" => (
                node.child_by_field_name("pattern"),
                node.child_by_field_name("type"),
                None,
            ),
            "assignment_expression" => (
                node.child_by_field_name("left"),
                None,
                node.child_by_field_name("right"),
            ),
            _ => return,
        };
        let Some(name) = name else { return };
        let mut local = match name.kind_str() {
            "identifier" | "property_identifier" | "private_property_identifier" => {
                node_text(name, src).to_string()
            }
            "member_expression" => compact(node_text(name, src)),
            _ => return,
        };
        if matches!(
            node.kind_str(),
            "public_field_definition" | "field_definition"
        ) {
            local = format!("this.{local}");
        }
        let item = ty
            .and_then(|t| item_type(node_text(t, src).trim_start_matches(':')))
            .filter(|t| t.chars().next().is_some_and(char::is_uppercase));
        let ty = ty
            .map(|t| stated_type(node_text(t, src).trim_start_matches(':')))
            .or_else(|| {
                let mut v = value?;
                if v.kind_str() == "await_expression" {
                    v = v.named_child(0)?;
                }
                match v.kind_str() {
                    "new_expression" => Some(base_type_name(field_text(v, "constructor", src)?)),
                    "call_expression" => {
                        let f = v.child_by_field_name("function")?;
                        let name = match f.kind_str() {
                            "identifier" => node_text(f, src),
                            "member_expression" => field_text(f, "property", src)?,
                            _ => return None,
                        };
                        Some(format!("{RETURNED_BY}{name}"))
                    }
                    _ => None,
                }
            });
        if let Some(t) = ty.filter(|t| {
            t.starts_with(RETURNED_BY) || t.chars().next().is_some_and(char::is_uppercase)
        }) {
            out.push((local.clone(), t));
        }
        if let Some(item) = item {
            out.push((format!("{local}{ITEM_SUFFIX}"), item));
        }
    }

    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)> {
        let (f, is_new) = match node.kind_str() {
            "call_expression" => (node.child_by_field_name("function")?, false),
            "new_expression" => (node.child_by_field_name("constructor")?, true),
            _ => return None,
        };
        let _ = is_new;
        match f.kind_str() {
            "identifier" => Some((node_text(f, src).to_string(), None)),
            "member_expression" => {
                let prop = f.child_by_field_name("property")?;
                Some((
                    node_text(prop, src).to_string(),
                    field_text(f, "object", src).map(compact),
                ))
            }
            _ => None,
        }
    }
}
