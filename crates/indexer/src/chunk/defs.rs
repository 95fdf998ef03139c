//! The symbol tree of a file: the definitions a [`Spec`] finds among the items of a file,
//! module or type body, through wrappers and containers, nested up to [`MAX_DEF_DEPTH`].

use tree_sitter::Node;

use super::{Class, Def, Spec};

/// A definition with its range and nested definitions.
pub(super) struct DefNode<'t> {
    pub(super) def: Def<'t>,
    /// The outermost node of the definition (wrapper included).
    pub(super) outer: Node<'t>,
    pub(super) children: Vec<DefNode<'t>>,
}

const MAX_DEF_DEPTH: usize = 48;

pub(super) fn collect_defs<'t>(
    spec: &dyn Spec,
    container: Node<'t>,
    src: &str,
    depth: usize,
) -> Vec<DefNode<'t>> {
    let mut out = Vec::new();
    if depth > MAX_DEF_DEPTH {
        return out;
    }
    let mut cursor = container.walk();
    let kids: Vec<Node<'t>> = container.named_children(&mut cursor).collect();
    for child in kids {
        match spec.classify(child, src) {
            Class::Def(def) => out.push(def_node(spec, def, child, src, depth)),
            Class::Wrapper => {
                if let Some(def) = find_wrapped(spec, child, src, 0) {
                    out.push(def_node(spec, def, child, src, depth));
                }
            }
            Class::Container => out.extend(collect_defs(spec, child, src, depth + 1)),
            Class::Other => {}
        }
    }
    out
}

fn find_wrapped<'t>(spec: &dyn Spec, node: Node<'t>, src: &str, depth: usize) -> Option<Def<'t>> {
    if depth > 4 {
        return None;
    }
    let mut cursor = node.walk();
    let kids: Vec<Node<'t>> = node.named_children(&mut cursor).collect();
    for child in kids {
        match spec.classify(child, src) {
            Class::Def(def) => return Some(def),
            Class::Wrapper => {
                if let Some(d) = find_wrapped(spec, child, src, depth + 1) {
                    return Some(d);
                }
            }
            _ => {}
        }
    }
    None
}

fn def_node<'t>(
    spec: &dyn Spec,
    def: Def<'t>,
    outer: Node<'t>,
    src: &str,
    depth: usize,
) -> DefNode<'t> {
    let children = match (def.kind.is_callable(), def.body) {
        (false, Some(body)) => collect_defs(spec, body, src, depth + 1),
        _ => Vec::new(),
    };
    DefNode {
        def,
        outer,
        children,
    }
}
