//! Tree-sitter parsing: the grammar and [`Spec`] of a language, one cached parser per language
//! per thread, and the C/C++ header sniff.

use std::collections::HashMap;

use super::{c, go, java, js, python, rust, Language, Spec};

fn grammar(lang: Language) -> Option<(tree_sitter::Language, &'static dyn Spec)> {
    Some(match lang {
        Language::Rust => (tree_sitter_rust::LANGUAGE.into(), &rust::RustSpec),
        Language::Python => (tree_sitter_python::LANGUAGE.into(), &python::PythonSpec),
        Language::TypeScript => (
            tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            &js::JsSpec,
        ),
        Language::Tsx => (tree_sitter_typescript::LANGUAGE_TSX.into(), &js::JsSpec),
        Language::JavaScript => (tree_sitter_javascript::LANGUAGE.into(), &js::JsSpec),
        Language::Go => (tree_sitter_go::LANGUAGE.into(), &go::GoSpec),
        Language::Java => (tree_sitter_java::LANGUAGE.into(), &java::JavaSpec),
        Language::C => (tree_sitter_c::LANGUAGE.into(), &c::CSpec),
        Language::Cpp => (tree_sitter_cpp::LANGUAGE.into(), &c::CSpec),
        _ => return None,
    })
}

thread_local! {
    /// One parser per language per thread: creating a parser and loading its language for every
    /// file costs allocations and table set-up that a long walk would repeat thousands of times.
    static PARSERS: std::cell::RefCell<HashMap<Language, tree_sitter::Parser>> =
        std::cell::RefCell::new(HashMap::new());
}

pub(super) fn parse(
    lang: Language,
    source: &str,
) -> Option<(tree_sitter::Tree, &'static dyn Spec)> {
    let (ts_lang, spec) = grammar(lang)?;
    PARSERS.with(|cell| {
        let mut parsers = cell.borrow_mut();
        let parser = match parsers.entry(lang) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                crate::alloc::fix_tree_sitter_allocator();
                let mut p = tree_sitter::Parser::new();
                p.set_language(&ts_lang).ok()?;
                v.insert(p)
            }
        };
        // A previous parse that was cut short leaves state behind; start clean.
        parser.reset();
        let tree = parser.parse(source, None)?;
        Some((tree, spec))
    })
}

/// Cheap check for C++-only syntax in a header.
pub(super) fn looks_like_cpp(source: &str) -> bool {
    [
        "namespace ",
        "template <",
        "template<",
        "std::",
        "class ",
        "public:",
        "private:",
    ]
    .iter()
    .any(|m| source.contains(m))
}
