//! The interface each language family implements for the chunking engine: [`Spec`], and the
//! [`Def`]/[`Class`] it reports for tree-sitter nodes.

use tree_sitter::Node;

use super::types::{ChunkKind, Import};

/// The per-language part of the engine: which nodes are symbols, imports and calls.
pub(crate) trait Spec: Sync {
    /// What `node` is, when met among the items of a file, module or type body.
    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t>;
    /// Comments, attributes and decorators that belong to the symbol right below them.
    fn is_leading(&self, node: Node, src: &str) -> bool;
    /// Appends the import(s) `node` stands for; returns true when `node` was one (its subtree is
    /// then not searched further for calls).
    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool;
    /// `(callee, qualifier)` when `node` is a call site.
    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)>;
    /// Calls written inside a macro's token tree (`assert_eq!(1, f(x))`), which the grammar
    /// does not parse as calls: `(callee, qualifier)` for each, appended to `out`.
    fn token_calls(&self, _node: Node, _src: &str, _out: &mut Vec<(String, Option<String>)>) {}
    /// Names whose type the code states at `node`, appended to `out` as `(name, type)`: typed
    /// parameters and locals, locals and `self.x`/`this.x` assigned a constructor call.
    fn bindings(&self, _node: Node, _src: &str, _out: &mut Vec<(String, String)>) {}
    /// Every named node kind at which [`Self::import`], [`Self::call`], [`Self::token_calls`]
    /// or [`Self::bindings`] can add anything or return true: the walk over a file's tree
    /// calls them at nodes of these kinds only (most nodes are identifiers, literals and
    /// expressions none of them reads). `None`: at every named node. A kind one of them
    /// starts to read must be added here; `tests::walk_kinds_cover_the_specs` compares the
    /// walk with and without this list on every language's test files.
    fn walk_kinds(&self) -> Option<&'static [&'static str]> {
        None
    }
    /// Line-comment marker used in the `… ` context line of body parts.
    fn comment(&self) -> &'static str {
        "//"
    }
}

/// A symbol definition found by a [`Spec`].
pub(crate) struct Def<'t> {
    /// Function (turned into Method inside a type), Class, Struct, Enum, Trait, Interface, Impl
    /// or Module.
    pub kind: ChunkKind,
    pub name: String,
    /// The node whose start is the start of the signature (for body-part context).
    pub node: Node<'t>,
    /// Functions: the body block (its children are the statements to split at).
    /// Types/modules: the node whose children are members (searched for nested symbols).
    pub body: Option<Node<'t>>,
    /// Explicit owner path for out-of-line methods (Go receivers, C++ `ns::Foo::bar`).
    pub scope: Vec<String>,
}

impl<'t> Def<'t> {
    pub fn new(kind: ChunkKind, name: impl Into<String>, node: Node<'t>) -> Self {
        Def {
            kind,
            name: name.into(),
            node,
            body: None,
            scope: Vec::new(),
        }
    }
    pub fn body(mut self, body: Option<Node<'t>>) -> Self {
        self.body = body;
        self
    }
}

pub(crate) enum Class<'t> {
    /// A symbol.
    Def(Def<'t>),
    /// A node wrapping a definition (decorators, `export`, `template<…>`): the inner definition's
    /// chunk starts at the wrapper.
    Wrapper,
    /// A block whose children are items (preprocessor conditionals, `extern "C" {}`, grouped Go
    /// type declarations).
    Container,
    /// Anything else.
    Other,
}
