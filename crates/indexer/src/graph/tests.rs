use super::*;
use crate::chunk::{extract, ChunkKind, ChunkOptions, FileExtract, Language, PackedCalls};

fn build(files: &[(&str, &str)]) -> (Vec<String>, Vec<FileExtract>, Vec<Language>) {
    let mut paths = Vec::new();
    let mut fxs = Vec::new();
    let mut langs = Vec::new();
    for (p, src) in files {
        let lang = Language::from_path(std::path::Path::new(p)).expect("lang");
        fxs.push(extract(lang, "r", p, src, &ChunkOptions::default()));
        paths.push(p.to_string());
        langs.push(lang);
    }
    (paths, fxs, langs)
}

/// Resolves `files`; every test also checks that resolution as a build runs it reads no chunk
/// text and resolves packed calls as it does the values: the same files with every text
/// dropped after [`Declarations::of`] and their calls handed over packed
/// ([`resolve_packed_calls`]) give the same edges.
fn edges(files: &[(&str, &str)]) -> (Vec<ResolvedEdge>, Vec<String>, Vec<FileExtract>) {
    let (paths, fxs, langs) = build(files);
    let decls: Vec<Declarations> = (paths.iter().zip(&fxs).zip(&langs))
        .map(|((p, e), l)| Declarations::of(p, *l, e))
        .collect();
    let resolve_over = |fxs: &[FileExtract], packed: Option<Vec<PackedCalls>>| {
        let facts: Vec<FileFacts> = (paths.iter().zip(fxs).zip(&langs).zip(&decls))
            .map(|(((p, e), l), d)| FileFacts {
                path: p,
                language: *l,
                extract: e,
                decls: d,
            })
            .collect();
        match packed {
            Some(calls) => resolve_packed_calls(&facts, calls),
            None => resolve(&facts),
        }
    };
    let e = resolve_over(&fxs, None);
    let mut dropped = fxs.clone();
    for c in dropped.iter_mut().flat_map(|x| x.chunks.iter_mut()) {
        c.text = String::new();
    }
    let packed = dropped
        .iter_mut()
        .map(|x| PackedCalls::pack(&std::mem::take(&mut x.calls)))
        .collect();
    assert_eq!(
        resolve_over(&dropped, Some(packed)),
        e,
        "resolution read a chunk's text, or resolved packed calls differently"
    );
    (e, paths, fxs)
}

fn chunk_of(fxs: &[FileExtract], file: usize, qualified: &str) -> NodeRef {
    let chunk = fxs[file]
        .chunks
        .iter()
        .position(|c| c.qualified == qualified && c.symbol.is_some())
        .unwrap_or_else(|| panic!("no {qualified} in file {file}"));
    NodeRef::chunk(file, chunk)
}

fn call_edge(es: &[ResolvedEdge], src: NodeRef, dst: NodeRef) -> Option<bool> {
    es.iter()
        .find(|e| e.kind == EdgeKind::Calls && e.src == src && e.dst == dst)
        .map(|e| e.resolved)
}

fn imports(es: &[ResolvedEdge], from: usize) -> Vec<usize> {
    es.iter()
        .filter(|e| e.kind == EdgeKind::Imports && e.src == NodeRef::file(from))
        .map(|e| match e.dst {
            NodeRef::File(f) => f as usize,
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn contains_edges() {
    let (es, _, fxs) = edges(&[(
        "src/a.rs",
        "struct A;\nimpl A {\n    fn f(&self) {}\n}\nfn g() {}\n",
    )]);
    let impl_ref = NodeRef::chunk(
        0,
        fxs[0]
            .chunks
            .iter()
            .position(|c| c.kind == ChunkKind::Impl)
            .unwrap(),
    );
    let contains: Vec<(NodeRef, NodeRef)> = es
        .iter()
        .filter(|e| e.kind == EdgeKind::Contains)
        .map(|e| (e.src, e.dst))
        .collect();
    assert!(contains.contains(&(NodeRef::file(0), chunk_of(&fxs, 0, "A"))));
    assert!(contains.contains(&(NodeRef::file(0), chunk_of(&fxs, 0, "g"))));
    assert!(contains.contains(&(NodeRef::file(0), impl_ref)));
    assert!(contains.contains(&(impl_ref, chunk_of(&fxs, 0, "A#f"))));
    assert_eq!(contains.len(), 4);
    assert!(es.iter().all(|e| e.resolved));
}

#[test]
fn same_file_call_resolved_and_self_prefers_own_type() {
    let src = "class A:\n    def run(self):\n        self.go()\n        helper()\n    def go(self):\n        pass\n\nclass B:\n    def go(self):\n        pass\n\ndef helper():\n    return A()\n";
    let (es, _, fxs) = edges(&[("m.py", src)]);
    let run = chunk_of(&fxs, 0, "A#run");
    assert_eq!(call_edge(&es, run, chunk_of(&fxs, 0, "A#go")), Some(true));
    assert_eq!(call_edge(&es, run, chunk_of(&fxs, 0, "B#go")), None);
    assert_eq!(call_edge(&es, run, chunk_of(&fxs, 0, "helper")), Some(true));
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 0, "helper"), chunk_of(&fxs, 0, "A")),
        Some(true)
    );
}

#[test]
fn cross_file_call_via_import_resolved() {
    let (es, _, fxs) = edges(&[
        (
            "pkg/main.py",
            "from .util import parse\n\ndef main():\n    parse('x')\n",
        ),
        ("pkg/util.py", "def parse(s):\n    return s\n"),
        ("other/util2.py", "def parse(s):\n    return 2\n"),
    ]);
    assert_eq!(imports(&es, 0), vec![1]);
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 0, "main"), chunk_of(&fxs, 1, "parse")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 0, "main"), chunk_of(&fxs, 2, "parse")),
        None
    );
}

#[test]
fn global_unique_inferred_and_ambiguous_dropped() {
    let (es, _, fxs) = edges(&[
        (
            "a/x.go",
            "package a\nfunc Run() {\n\tUnique()\n\tTwice()\n\tNear()\n}\n",
        ),
        (
            "b/y.go",
            "package b\nfunc Unique() {}\nfunc Twice() {}\nfunc Near() {}\n",
        ),
        ("c/z.go", "package c\nfunc Twice() {}\nfunc Near() {}\n"),
        ("a/w.go", "package a\nfunc Near() {}\n"),
    ]);
    let run = chunk_of(&fxs, 0, "Run");
    assert_eq!(
        call_edge(&es, run, chunk_of(&fxs, 1, "Unique")),
        Some(false)
    );
    assert!(!es
        .iter()
        .any(|e| e.kind == EdgeKind::Calls && e.src == run && e.dst == chunk_of(&fxs, 1, "Twice")));
    assert!(!es
        .iter()
        .any(|e| e.kind == EdgeKind::Calls && e.src == run && e.dst == chunk_of(&fxs, 2, "Twice")));
    // Several candidates, one in the caller's own package: Go sees it unqualified (exact).
    assert_eq!(call_edge(&es, run, chunk_of(&fxs, 3, "Near")), Some(true));
    let calls = es.iter().filter(|e| e.kind == EdgeKind::Calls).count();
    assert_eq!(calls, 2);
}

#[test]
fn python_import_edges() {
    let (es, _, _) = edges(&[
        ("app/main.py", "import app.models\nfrom app.services import billing\nfrom . import views\nfrom .helpers.text import slug\nimport os\n"),
        ("app/models.py", "class M: pass\n"),
        ("app/services/__init__.py", "\n"),
        ("app/services/billing.py", "def pay(): pass\n"),
        ("app/views.py", "def v(): pass\n"),
        ("app/helpers/text.py", "def slug(): pass\n"),
        ("app/__init__.py", "\n"),
    ]);
    // `from . import views` imports the package `app` itself too.
    assert_eq!(imports(&es, 0), vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn js_import_edges() {
    let (es, _, fxs) = edges(&[
        ("web/src/app.ts", "import { helper } from './util';\nimport Comp from '../components/Comp';\nimport x from './esm.js';\nimport lodash from 'lodash';\nconst c = require('./cfg');\nexport function main() { helper(); }\n"),
        ("web/src/util.ts", "export function helper() {}\n"),
        ("web/components/Comp/index.tsx", "export default function Comp() { return null; }\n"),
        ("web/src/esm.ts", "export const x = 1;\n"),
        ("web/src/cfg.js", "module.exports = {};\n"),
    ]);
    assert_eq!(imports(&es, 0), vec![1, 2, 3, 4]);
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 0, "main"), chunk_of(&fxs, 1, "helper")),
        Some(true)
    );
}

#[test]
fn rust_import_edges() {
    let (es, _, fxs) = edges(&[
        (
            "crates/core/src/lib.rs",
            "pub mod graph;\nmod chunk;\nuse crate::graph::resolve;\npub fn top() { resolve(); }\n",
        ),
        (
            "crates/core/src/graph.rs",
            "use super::chunk::Chunk;\nuse self::inner::X;\nmod inner;\npub fn resolve() {}\n",
        ),
        ("crates/core/src/chunk/mod.rs", "pub struct Chunk;\n"),
        ("crates/core/src/graph/inner.rs", "pub struct X;\n"),
        (
            "crates/app/src/main.rs",
            "use core::graph::resolve;\nfn main() { resolve(); }\n",
        ),
    ]);
    assert_eq!(imports(&es, 0), vec![1, 2]);
    assert_eq!(imports(&es, 1), vec![2, 3]);
    assert_eq!(imports(&es, 4), vec![1]);
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 4, "main"), chunk_of(&fxs, 1, "resolve")),
        Some(true)
    );
}

#[test]
fn c_go_java_import_edges() {
    let (es, _, _) = edges(&[
        ("src/main.c", "#include \"util.h\"\n#include \"net/sock.h\"\n#include <stdio.h>\nint main() { return 0; }\n"),
        ("src/util.h", "int util(void);\n"),
        ("include/net/sock.h", "int sock(void);\n"),
        ("cmd/app/main.go", "package main\nimport (\n\t\"example.com/proj/pkg/store\"\n\t\"fmt\"\n)\nfunc main() {}\n"),
        ("pkg/store/store.go", "package store\nfunc Get() {}\n"),
        ("pkg/store/store_test.go", "package store\n"),
        ("src/main/java/com/acme/App.java", "package com.acme;\nimport com.acme.util.Strings;\nimport com.acme.model.*;\nclass App {}\n"),
        ("src/main/java/com/acme/util/Strings.java", "package com.acme.util;\nclass Strings {}\n"),
        ("src/main/java/com/acme/model/User.java", "package com.acme.model;\nclass User {}\n"),
    ]);
    assert_eq!(imports(&es, 0), vec![1, 2]);
    assert_eq!(imports(&es, 3), vec![4]);
    assert_eq!(imports(&es, 6), vec![7, 8]);
}

#[test]
fn qualified_calls_and_methods() {
    let (es, _, fxs) = edges(&[
        ("src/a.rs", "use crate::b::Parser;\nfn run() {\n    let p = Parser::new();\n    p.parse();\n    len();\n}\n"),
        ("src/b.rs", "pub struct Parser;\nimpl Parser {\n    pub fn new() -> Self { Parser }\n    pub fn parse(&self) {}\n}\npub struct Other;\nimpl Other {\n    pub fn new() -> Self { Other }\n}\n"),
        ("src/c.rs", "pub struct T;\nimpl T { pub fn len(&self) -> usize { 0 } }\n"),
    ]);
    let run = chunk_of(&fxs, 0, "run");
    assert_eq!(
        call_edge(&es, run, chunk_of(&fxs, 1, "Parser#new")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, run, chunk_of(&fxs, 1, "Parser#parse")),
        Some(true)
    );
    // An unqualified call never resolves to a method of another file.
    assert!(!es
        .iter()
        .any(|e| e.kind == EdgeKind::Calls && e.dst == chunk_of(&fxs, 2, "T#len")));
}

#[test]
fn output_is_sorted_and_deterministic() {
    let files = [
        ("a.py", "from b import f\ndef g():\n    f()\n    g()\n"),
        ("b.py", "def f():\n    pass\n"),
    ];
    let (e1, _, _) = edges(&files);
    let (e2, _, _) = edges(&files);
    assert_eq!(e1, e2);
    let mut sorted = e1.clone();
    sorted.sort();
    assert_eq!(e1, sorted);
    assert!(e1
        .iter()
        .any(|e| e.kind == EdgeKind::Calls && e.src == e.dst));
}

fn calls_from(es: &[ResolvedEdge], src: NodeRef) -> Vec<(NodeRef, bool)> {
    es.iter()
        .filter(|e| e.kind == EdgeKind::Calls && e.src == src)
        .map(|e| (e.dst, e.resolved))
        .collect()
}

#[test]
fn calls_never_cross_languages_and_unknown_receivers_stay_unresolved() {
    let (es, paths, fxs) = edges(&[
        (
            "py/scanner.py",
            "def py_scanstring(s):\n    msg = 'bad {}'.format(s)\n    return s.format(1)\n",
        ),
        (
            "itoa/src/lib.rs",
            "pub struct Buffer {}\nimpl Buffer {\n    pub fn format(&mut self, i: u32) -> &str {\n        self.write(i)\n    }\n    fn write(&mut self, i: u32) -> &str { \"\" }\n}\n",
        ),
        (
            "web/a.ts",
            "export function run(x: any) {\n  return x.format();\n}\n",
        ),
    ]);
    for e in &es {
        if e.kind != EdgeKind::Calls {
            continue;
        }
        let (NodeRef::Chunk { file: a, .. }, NodeRef::Chunk { file: b, .. }) = (e.src, e.dst)
        else {
            continue;
        };
        assert_eq!(
            index::family(Language::from_path(std::path::Path::new(&paths[a as usize])).unwrap()),
            index::family(Language::from_path(std::path::Path::new(&paths[b as usize])).unwrap()),
            "cross-language edge {e:?}"
        );
    }
    assert!(calls_from(&es, chunk_of(&fxs, 0, "py_scanstring")).is_empty());
    assert!(calls_from(&es, chunk_of(&fxs, 2, "run")).is_empty());
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 1, "Buffer#format"),
            chunk_of(&fxs, 1, "Buffer#write")
        ),
        Some(true)
    );
}

#[test]
fn rust_tests_modules_macros_and_paths() {
    let (es, _, fxs) = edges(&[
        ("strsim/Cargo.toml", "[package]\nname = \"strsim\"\nversion = \"0.1.0\"\n"),
        (
            "strsim/src/lib.rs",
            "pub fn levenshtein(a: &str, b: &str) -> usize { 0 }\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn lev() {\n        assert_eq!(0, levenshtein(\"a\", \"a\"));\n    }\n    fn direct() -> usize { levenshtein(\"\", \"\") }\n}\n",
        ),
        (
            "strsim/tests/lib.rs",
            "use strsim::levenshtein;\n#[test]\nfn it() {\n    assert_eq!(3, levenshtein(\"kitten\", \"sitting\"));\n}\n",
        ),
        (
            "strsim/benches/benches.rs",
            "fn bench_lev() {\n    let _ = strsim::levenshtein(\"a\", \"b\");\n}\n",
        ),
        (
            "other/src/lib.rs",
            "pub fn levenshtein() {}\n",
        ),
    ]);
    let target = chunk_of(&fxs, 1, "levenshtein");
    for (file, caller) in [
        (1, "tests/lev"),
        (1, "tests/direct"),
        (2, "it"),
        (3, "bench_lev"),
    ] {
        assert_eq!(
            call_edge(&es, chunk_of(&fxs, file, caller), target),
            Some(true),
            "{caller}"
        );
    }
}

#[test]
fn python_aliases_and_stated_receivers() {
    let (es, _, fxs) = edges(&[
        (
            "pkg/decoder.py",
            "class JSONDecoder:\n    def __init__(self):\n        self.scanner = Scanner()\n    def decode(self, s):\n        return self.raw_decode(s)\n    def raw_decode(self, s):\n        return self.scanner.scan(s)\n\nclass Scanner:\n    def scan(self, s):\n        return s\n",
        ),
        (
            "pkg/__init__.py",
            "from .decoder import JSONDecoder as Dec\nimport pkg.decoder as dmod\n\ndef loads(s):\n    d = Dec()\n    return d.decode(s)\n\ndef loads2(s, d: JSONDecoder):\n    return dmod.JSONDecoder().decode(s)\n\ndef unknown(x):\n    return x.decode()\n",
        ),
    ]);
    let dec = |q| chunk_of(&fxs, 0, q);
    let init = |q| chunk_of(&fxs, 1, q);
    assert_eq!(
        call_edge(
            &es,
            dec("JSONDecoder#decode"),
            dec("JSONDecoder#raw_decode")
        ),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, dec("JSONDecoder#raw_decode"), dec("Scanner#scan")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, dec("JSONDecoder#__init__"), dec("Scanner")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, init("loads"), dec("JSONDecoder")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, init("loads"), dec("JSONDecoder#decode")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, init("loads2"), dec("JSONDecoder")),
        Some(true)
    );
    assert!(calls_from(&es, init("unknown")).is_empty());
}

#[test]
fn module_level_instances_are_stated_receivers() {
    let (es, _, fxs) = edges(&[(
        "json/__init__.py",
        "class JSONDecoder:\n    def decode(self, s):\n        return s\n\n_default_decoder = JSONDecoder()\n\ndef loads(s):\n    return _default_decoder.decode(s)\n",
    )]);
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 0, "loads"),
            chunk_of(&fxs, 0, "JSONDecoder#decode")
        ),
        Some(true)
    );
}

#[test]
fn inherited_methods_and_super_calls() {
    let (es, _, fxs) = edges(&[
        (
            "src/Subject.ts",
            "export class Subject<T> extends Observable<T> {\n  next(v: T) {\n    this.check();\n  }\n  check() {}\n}\n",
        ),
        (
            "src/Replay.ts",
            "import { Subject } from './Subject';\nexport class ReplaySubject<T> extends Subject<T> {\n  next(v: T) {\n    super.next(v);\n    this.check();\n  }\n}\n",
        ),
        (
            "pkg/a.py",
            "class Base:\n    def run(self):\n        pass\n\nclass Child(Base, metaclass=M):\n    def go(self):\n        self.run()\n        super().run()\n",
        ),
    ]);
    let replay_next = chunk_of(&fxs, 1, "ReplaySubject#next");
    assert_eq!(
        call_edge(&es, replay_next, chunk_of(&fxs, 0, "Subject#next")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, replay_next, chunk_of(&fxs, 0, "Subject#check")),
        Some(true)
    );
    let go = chunk_of(&fxs, 2, "Child#go");
    assert_eq!(
        call_edge(&es, go, chunk_of(&fxs, 2, "Base#run")),
        Some(true)
    );
}

#[test]
fn callback_parameters_take_the_types_the_callee_states() {
    let (es, _, fxs) = edges(&[
        (
            "src/Subscriber.ts",
            "export class Subscriber<T> {\n  next(v: T) {}\n}\n",
        ),
        (
            "src/lift.ts",
            "import { Subscriber } from './Subscriber';\nexport function operate<T>(init: (source: Observable<T>, subscriber: Subscriber<T>) => void) {}\n",
        ),
        (
            "src/map.ts",
            "import { operate } from './lift';\nexport function map(f: any) {\n  return operate((source, subscriber) => {\n    subscriber.next(f(1));\n  });\n}\nexport function other(subscriber: any) {\n  subscriber.next(1);\n}\n",
        ),
    ]);
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 2, "map"),
            chunk_of(&fxs, 0, "Subscriber#next")
        ),
        Some(true)
    );
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 2, "other"),
            chunk_of(&fxs, 0, "Subscriber#next")
        ),
        None
    );
}

#[test]
fn chained_calls_use_the_stated_return_type() {
    let (es, _, fxs) = edges(&[
        (
            "src/cache.ts",
            "export class QueryCache {\n  getAll(): Array<Query> {\n    return [];\n  }\n}\n",
        ),
        (
            "src/client.ts",
            "import { QueryCache } from './cache';\nexport class QueryClient {\n  getQueryCache(): QueryCache {\n    return this.cache;\n  }\n}\nexport function dehydrate(client: QueryClient) {\n  return client\n    .getQueryCache()\n    .getAll();\n}\n",
        ),
    ]);
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 1, "dehydrate"),
            chunk_of(&fxs, 0, "QueryCache#getAll")
        ),
        Some(false)
    );
}

#[test]
fn a_return_type_is_used_only_when_every_function_of_the_name_states_it() {
    let parser = "class Parser:\n    def parse(self):\n        pass\n\ndef make() -> Parser:\n    return Parser()\n";
    let caller = "from a import make\n\ndef run():\n    p = make()\n    p.parse()\n";
    let other = |ret: &str| {
        format!("class Lexer:\n    def parse(self):\n        pass\n\ndef make() -> {ret}:\n    return {ret}()\n")
    };
    let edge = |third: &str| {
        let (es, _, fxs) = edges(&[("a.py", parser), ("b.py", caller), ("c.py", third)]);
        call_edge(
            &es,
            chunk_of(&fxs, 1, "run"),
            chunk_of(&fxs, 0, "Parser#parse"),
        )
    };
    // Both `make`s say `Parser`: the receiver's type is known.
    assert!(edge(&other("Parser")).is_some());
    // They disagree: no type, and `parse` is ambiguous.
    assert_eq!(edge(&other("Lexer")), None);
    // One states none: no type either.
    assert_eq!(
        edge(
            "class Lexer:\n    def parse(self):\n        pass\n\ndef make():\n    return Lexer()\n"
        ),
        None
    );
}

#[test]
fn a_provided_trait_method_is_found_through_the_impl_of_the_receiver_type() {
    let src = "pub trait Shape {\n    fn area(&self) -> f64;\n    fn describe(&self) -> String {\n        String::new()\n    }\n}\n\npub struct Circle;\n\nimpl Circle {\n    pub fn new() -> Self {\n        Circle\n    }\n    fn show(&self) {\n        self.describe();\n    }\n}\n\nimpl Shape for Circle {\n    fn area(&self) -> f64 {\n        1.0\n    }\n}\n\npub struct Square;\n\nimpl Shape for Square {\n    fn area(&self) -> f64 {\n        2.0\n    }\n    fn describe(&self) -> String {\n        String::new()\n    }\n}\n\npub fn report() {\n    let c = Circle::new();\n    c.describe();\n}\n";
    let (es, _, fxs) = edges(&[("src/geom.rs", src)]);
    // `impl Shape for Circle` makes `Shape` a base of `Circle`: the provided method, not
    // Square's override, through a stated receiver and through `self`.
    for caller in ["report", "Circle#show"] {
        let from = chunk_of(&fxs, 0, caller);
        assert_eq!(
            call_edge(&es, from, chunk_of(&fxs, 0, "Shape#describe")),
            Some(true),
            "{caller}"
        );
        assert_eq!(
            call_edge(&es, from, chunk_of(&fxs, 0, "Square#describe")),
            None,
            "{caller}"
        );
    }
}

#[test]
fn a_trait_impl_counts_only_in_the_crate_that_holds_it() {
    // Two crates each declare a `Circle`; only `b`'s implements `Shape`. A call on `a`'s
    // `Circle` must not reach `Shape`'s provided method through `b`'s impl.
    let shape =
        "pub trait Shape {\n    fn describe(&self) -> String {\n        String::new()\n    }\n}\n";
    let b = "use crate::shape::Shape;\n\npub struct Circle;\n\nimpl Circle {\n    pub fn new() -> Self {\n        Circle\n    }\n}\n\nimpl Shape for Circle {}\n\npub fn b_report() {\n    let c = Circle::new();\n    c.describe();\n}\n";
    let a = "pub struct Circle;\n\nimpl Circle {\n    pub fn new() -> Self {\n        Circle\n    }\n}\n\npub fn a_report() {\n    let c = Circle::new();\n    c.describe();\n}\n";
    let (es, _, fxs) = edges(&[
        ("b/src/shape.rs", shape),
        ("b/src/lib.rs", b),
        ("a/src/lib.rs", a),
    ]);
    let describe = chunk_of(&fxs, 0, "Shape#describe");
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 1, "b_report"), describe),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 2, "a_report"), describe),
        None
    );
}

#[test]
fn literals_new_instances_and_chains_with_arguments_state_the_receiver() {
    let go_pricing = "package pricing\n\ntype Discount struct {\n\tPercent int\n}\n\nfunc (d Discount) Apply(c int) int {\n\treturn c\n}\n\ntype Report struct{}\n\nfunc (r *Report) Render() string {\n\treturn \"\"\n}\n\nfunc Build(n int, m int) *Report {\n\treturn &Report{}\n}\n";
    let go_use = "package report\n\nimport \"example.com/shop/pricing\"\n\nfunc Half(c int) int {\n\treturn pricing.Discount{Percent: 50}.Apply(c)\n}\n\nfunc Quick() string {\n\treturn pricing.Build(1, pricing.Build(2, 3).N).Render()\n}\n";
    let ts = "export class Parser {\n  constructor(src: string) {}\n  parse(): number {\n    return 1;\n  }\n}\nexport class Other {\n  parse(): number {\n    return 2;\n  }\n}\nexport function run(src: string) {\n  return new Parser(src.trim()).parse();\n}\n";
    let (es, _, fxs) = edges(&[
        ("pricing/pricing.go", go_pricing),
        ("report/report.go", go_use),
        ("src/parser.ts", ts),
    ]);
    // A composite literal states its type: exact.
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 1, "Half"),
            chunk_of(&fxs, 0, "Discount#Apply")
        ),
        Some(true)
    );
    // A chain on a call with arguments: the resolved callee's stated return type.
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 1, "Quick"),
            chunk_of(&fxs, 0, "Report#Render")
        ),
        Some(true)
    );
    // `new Parser(…)` states its class, though `parse` has two owners.
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 2, "run"),
            chunk_of(&fxs, 2, "Parser#parse")
        ),
        Some(true)
    );
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 2, "run"),
            chunk_of(&fxs, 2, "Other#parse")
        ),
        None
    );
}

#[test]
fn a_chain_on_a_resolved_call_uses_that_functions_own_return_type() {
    // Every type has a `new`, so no return type is agreed by name; the call `Parser::new(…)`
    // resolves, and its declaration says `Self`.
    let src = "pub struct Parser;\n\nimpl Parser {\n    pub fn new(src: &str) -> Self {\n        Parser\n    }\n    pub fn parse(&self) {}\n}\n\npub struct Lexer;\n\nimpl Lexer {\n    pub fn new() -> Lexer {\n        Lexer\n    }\n    pub fn parse(&self) {}\n}\n\npub fn run(src: &str) {\n    Parser::new(src.trim()).parse();\n}\n";
    let (es, _, fxs) = edges(&[("src/lib.rs", src)]);
    let run = chunk_of(&fxs, 0, "run");
    assert_eq!(
        call_edge(&es, run, chunk_of(&fxs, 0, "Parser#parse")),
        Some(true)
    );
    assert_eq!(call_edge(&es, run, chunk_of(&fxs, 0, "Lexer#parse")), None);
}

#[test]
fn an_imported_module_level_instance_has_the_type_its_file_states() {
    let manager = "export class OnlineManager {\n  isOnline(): boolean {\n    return true;\n  }\n}\nexport class OtherManager {\n  isOnline(): boolean {\n    return false;\n  }\n}\nexport const onlineManager = new OnlineManager();\n";
    let user = "import { onlineManager } from './onlineManager';\nexport function canFetch() {\n  return onlineManager.isOnline();\n}\n";
    let py_lib = "class Decoder:\n    def decode(self, s):\n        return s\n\nclass Encoder:\n    def decode(self, s):\n        return s\n\ndefault_decoder = Decoder()\n";
    let py_user =
        "from lib import default_decoder as dd\n\ndef loads(s):\n    return dd.decode(s)\n";
    let (es, _, fxs) = edges(&[
        ("src/onlineManager.ts", manager),
        ("src/query.ts", user),
        ("lib.py", py_lib),
        ("app.py", py_user),
    ]);
    let can = chunk_of(&fxs, 1, "canFetch");
    assert_eq!(
        call_edge(&es, can, chunk_of(&fxs, 0, "OnlineManager#isOnline")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, can, chunk_of(&fxs, 0, "OtherManager#isOnline")),
        None
    );
    let loads = chunk_of(&fxs, 3, "loads");
    assert_eq!(
        call_edge(&es, loads, chunk_of(&fxs, 2, "Decoder#decode")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, loads, chunk_of(&fxs, 2, "Encoder#decode")),
        None
    );
}

#[test]
fn a_stated_field_type_outlives_an_assignment_typed_only_by_name() {
    let mutation = "export class Mutation {\n  execute(): number {\n    return 1;\n  }\n}\nexport class Query {\n  execute(): number {\n    return 2;\n  }\n}\n";
    let observer = "import { Mutation } from './mutation';\nexport class MutationObserver {\n  #current?: Mutation;\n  mutate() {\n    this.#current = this.cache().build();\n    return this.#current.execute();\n  }\n  cache(): any {\n    return null;\n  }\n}\n";
    let (es, _, fxs) = edges(&[("src/mutation.ts", mutation), ("src/observer.ts", observer)]);
    let mutate = chunk_of(&fxs, 1, "MutationObserver#mutate");
    assert_eq!(
        call_edge(&es, mutate, chunk_of(&fxs, 0, "Mutation#execute")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, mutate, chunk_of(&fxs, 0, "Query#execute")),
        None
    );
}

#[test]
fn rust_module_paths_see_the_modules_own_items_and_use_self_binds_the_module() {
    let lib = "pub mod text;\npub mod render;\n";
    let text = "pub mod escape;\n\npub fn format(w: &str) -> String {\n    escape::escape(w)\n}\n\npub fn join(a: &str) -> String {\n    a.to_string()\n}\n";
    let escape = "pub fn escape(s: &str) -> String {\n    s.to_string()\n}\n\npub fn twice(s: &str) -> String {\n    self::escape(s)\n}\n\n#[cfg(test)]\nmod tests {\n    fn escape(s: &str) -> String {\n        s.to_string()\n    }\n}\n";
    let render = "use crate::text::{self, join};\n\npub fn format(w: &str) -> String {\n    join(&text::format(w))\n}\n";
    let (es, _, fxs) = edges(&[
        ("src/lib.rs", lib),
        ("src/text.rs", text),
        ("src/text/escape.rs", escape),
        ("src/render.rs", render),
    ]);
    let top_escape = chunk_of(&fxs, 2, "escape");
    // `escape::escape` (a child module) and `self::escape`: the module's own `escape`, not
    // the one of its inline `mod tests`.
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 1, "format"), top_escape),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, chunk_of(&fxs, 2, "twice"), top_escape),
        Some(true)
    );
    // `use crate::text::{self, join}` binds `text` and `join`.
    let render_format = chunk_of(&fxs, 3, "format");
    assert_eq!(
        call_edge(&es, render_format, chunk_of(&fxs, 1, "format")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, render_format, chunk_of(&fxs, 1, "join")),
        Some(true)
    );
}

#[test]
fn a_private_python_class_is_a_stated_constructor() {
    let src = "class _Accumulator:\n    def push(self, x):\n        pass\n\nclass Other:\n    def push(self, x):\n        pass\n\nclass _Formatter:\n    def __init__(self):\n        self._line = _Accumulator()\n\n    def feed(self, x):\n        self._line.push(x)\n\ndef encode():\n    f = _Formatter()\n    f.feed(1)\n\ndef gettext_is_not_a_class():\n    s = _('text')\n    s.push(1)\n";
    let (es, _, fxs) = edges(&[("email/header.py", src)]);
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 0, "_Formatter#feed"),
            chunk_of(&fxs, 0, "_Accumulator#push")
        ),
        Some(true)
    );
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 0, "encode"),
            chunk_of(&fxs, 0, "_Formatter#feed")
        ),
        Some(true)
    );
    let g = chunk_of(&fxs, 0, "gettext_is_not_a_class");
    assert_eq!(
        call_edge(&es, g, chunk_of(&fxs, 0, "_Accumulator#push")),
        None
    );
}

#[test]
fn go_type_assertions_and_method_expressions_state_the_type() {
    let store = "package inv\n\ntype Store struct{}\n\nfunc (s *Store) Len() int {\n\treturn 0\n}\n\ntype Shelf struct{}\n\nfunc (s *Shelf) Len() int {\n\treturn 1\n}\n";
    let user = "package report\n\nimport inv \"example.com/shop/inv\"\n\nfunc Count(s *inv.Store) int {\n\treturn (*inv.Store).Len(s)\n}\n\nfunc Size(x any) int {\n\tif t, ok := x.(*inv.Shelf); ok {\n\t\treturn t.Len()\n\t}\n\treturn 0\n}\n";
    let (es, _, fxs) = edges(&[("inv/inv.go", store), ("report/report.go", user)]);
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 1, "Count"),
            chunk_of(&fxs, 0, "Store#Len")
        ),
        Some(true)
    );
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 1, "Count"),
            chunk_of(&fxs, 0, "Shelf#Len")
        ),
        None
    );
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 1, "Size"),
            chunk_of(&fxs, 0, "Shelf#Len")
        ),
        Some(true)
    );
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 1, "Size"),
            chunk_of(&fxs, 0, "Store#Len")
        ),
        None
    );
}

#[test]
fn python_explicit_super_reads_the_named_classs_bases() {
    let src = "class Generator:\n    def _handle_text(self, msg):\n        pass\n\nclass BytesGenerator(Generator):\n    def _handle_text(self, msg):\n        super(BytesGenerator, self)._handle_text(msg)\n";
    let (es, _, fxs) = edges(&[("email/generator.py", src)]);
    let caller = chunk_of(&fxs, 0, "BytesGenerator#_handle_text");
    assert_eq!(
        call_edge(&es, caller, chunk_of(&fxs, 0, "Generator#_handle_text")),
        Some(true)
    );
    assert_eq!(call_edge(&es, caller, caller), None);
}

#[test]
fn what_a_stated_receiver_must_not_claim() {
    // A Rust local rebound by `let` is a new variable: its old type does not carry over.
    let rust = "pub struct Builder;\n\nimpl Builder {\n    pub fn new() -> Builder {\n        Builder\n    }\n    pub fn finish(&self) -> Built {\n        Built\n    }\n    pub fn run(&self) {}\n}\n\npub struct Built;\n\nimpl Built {\n    pub fn go(&self) {}\n}\n\npub fn make() {\n    let x = Builder::new();\n    let x = x.finish();\n    x.run();\n}\n\npub trait Shape {\n    fn scaled(&self) -> Self;\n    fn describe(&self) {}\n}\n\npub fn show<S: Shape>(s: S) {\n    s.scaled().describe();\n}\n";
    // A type named in another file is that file's name for it; an array of a type is not it.
    let manager = "import { Manager as M } from './real';\nexport const manager = new M();\nexport class Item {\n  find(): number {\n    return 1;\n  }\n}\nexport function items(): Item[] {\n  return [];\n}\n";
    let real = "export class Manager {\n  ping(): number {\n    return 1;\n  }\n}\n";
    let user = "import { manager, items } from './manager';\nclass M {\n  ping(): number {\n    return 2;\n  }\n}\nexport function use() {\n  manager.ping();\n  items().find();\n}\n";
    // A local of a top-level callback is not a module-level instance.
    let spec = "export class Mock {\n  ping(): number {\n    return 3;\n  }\n}\ndescribe(() => {\n  const client = new Mock();\n});\nexport const client = makeClient();\n";
    let spec_user =
        "import { client } from './spec';\nexport function check() {\n  client.ping();\n}\n";
    let (es, _, fxs) = edges(&[
        ("src/lib.rs", rust),
        ("src/manager.ts", manager),
        ("src/real.ts", real),
        ("src/user.ts", user),
        ("src/spec.ts", spec),
        ("src/check.ts", spec_user),
    ]);
    let make = chunk_of(&fxs, 0, "make");
    assert_eq!(call_edge(&es, make, chunk_of(&fxs, 0, "Builder#run")), None);
    // `Self` of a trait's method is the implementing type, not the trait.
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 0, "show"),
            chunk_of(&fxs, 0, "Shape#describe")
        ),
        None
    );
    let use_ = chunk_of(&fxs, 3, "use");
    assert_eq!(
        call_edge(&es, use_, chunk_of(&fxs, 2, "Manager#ping")),
        Some(true)
    );
    assert_eq!(call_edge(&es, use_, chunk_of(&fxs, 3, "M#ping")), None);
    assert_eq!(call_edge(&es, use_, chunk_of(&fxs, 1, "Item#find")), None);
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 5, "check"),
            chunk_of(&fxs, 4, "Mock#ping")
        ),
        None
    );
}

#[test]
fn a_field_a_base_class_states_types_the_subclasss_calls() {
    let base = "export class Observable {\n  source: Observable | undefined;\n  subscribe(): number {\n    return 1;\n  }\n}\nexport class Other {\n  subscribe(): number {\n    return 2;\n  }\n}\n";
    let sub = "import { Observable } from './Observable';\nexport class Subject extends Observable {\n  run() {\n    return this.source.subscribe();\n  }\n}\n";
    let py = "class Transport:\n    def close(self):\n        pass\n\nclass Other:\n    def close(self):\n        pass\n\nclass Base:\n    def __init__(self):\n        self._transport = Transport()\n\nclass Proto(Base):\n    def stop(self):\n        self._transport.close()\n\nclass Plain:\n    def stop(self):\n        self._transport.close()\n";
    let (es, _, fxs) = edges(&[
        ("src/Observable.ts", base),
        ("src/Subject.ts", sub),
        ("proto.py", py),
    ]);
    let run = chunk_of(&fxs, 1, "Subject#run");
    assert_eq!(
        call_edge(&es, run, chunk_of(&fxs, 0, "Observable#subscribe")),
        Some(true)
    );
    assert_eq!(
        call_edge(&es, run, chunk_of(&fxs, 0, "Other#subscribe")),
        None
    );
    assert_eq!(
        call_edge(
            &es,
            chunk_of(&fxs, 2, "Proto#stop"),
            chunk_of(&fxs, 2, "Transport#close")
        ),
        Some(true)
    );
    // A class with no such base states nothing about `self._transport`.
    let plain = chunk_of(&fxs, 2, "Plain#stop");
    assert_eq!(
        call_edge(&es, plain, chunk_of(&fxs, 2, "Transport#close")),
        None
    );
    assert_eq!(
        call_edge(&es, plain, chunk_of(&fxs, 2, "Other#close")),
        None
    );
}

#[test]
fn loop_variables_take_the_item_type_their_collection_states() {
    // Two types with the same methods: by name alone every call below is ambiguous.
    let rust = "pub struct Server;\n\nimpl Server {\n    pub fn start(&self) {}\n}\n\npub struct Client;\n\nimpl Client {\n    pub fn start(&self) {}\n}\n\npub struct Pool {\n    servers: Vec<Server>,\n}\n\nimpl Pool {\n    pub fn start_all(&self) {\n        for s in &self.servers {\n            s.start();\n        }\n    }\n    pub fn each_start(&self) {\n        self.servers.iter().enumerate().for_each(|(i, s)| s.start());\n    }\n    pub fn folded(&self) -> usize {\n        self.servers.iter().fold(0, |n, s| {\n            s.start();\n            n\n        })\n    }\n}\n\npub fn each(list: &[Server]) {\n    for (i, s) in list.iter().enumerate() {\n        s.start();\n    }\n}\n\npub fn clients() -> Vec<Client> {\n    Vec::new()\n}\n\npub fn shadowed(xs: Vec<Server>) {\n    let xs = clients();\n    for x in xs {\n        x.start();\n    }\n}\n\npub fn after(c: &Client, servers: &[Server]) {\n    for c in servers {\n        c.start();\n    }\n    c.start();\n}\n\npub fn rebound(xs: Vec<Server>, ys: Vec<Client>) {\n    let xs = &ys;\n    for x in xs {\n        x.start();\n    }\n}\n\npub fn keyed(m: std::collections::HashMap<String, Server>) {\n    for s in m {\n        s.start();\n    }\n}\n";
    let py = "from typing import Sequence\n\nclass Handler:\n    def flush(self):\n        pass\n\nclass Other:\n    def flush(self):\n        pass\n\nclass Logger:\n    def __init__(self):\n        self.handlers: list[Handler] = []\n\n    def flush_all(self):\n        for h in self.handlers:\n            h.flush()\n\n    def flushed(self):\n        return [h.flush() for h in self.handlers]\n\ndef close_all(hs: Sequence[Handler]):\n    for i, h in enumerate(hs):\n        h.flush()\n\ndef names(hs: dict[str, Handler]):\n    for h in hs:\n        h.flush()\n";
    let ts = "export class Observer {\n  next(): number {\n    return 1;\n  }\n}\nexport class Other {\n  next(): number {\n    return 2;\n  }\n}\nexport class Subject {\n  observers: Observer[] = [];\n  emit() {\n    for (const o of this.observers) {\n      o.next();\n    }\n  }\n  ping() {\n    this.observers.forEach((o) => o.next());\n  }\n  pong() {\n    this.observers.reduce((acc, o) => o.next(), 0);\n  }\n}\nexport function all(xs: Array<Observer>) {\n  for (const x of xs) {\n    x.next();\n  }\n}\nexport function keys(xs: Observer[]) {\n  for (const k in xs) {\n    k.next();\n  }\n}\n";
    let go = "package srv\n\ntype Server struct{}\n\nfunc (s *Server) Start() {}\n\ntype Client struct{}\n\nfunc (c *Client) Start() {}\n\nfunc StartAll(servers []*Server) {\n\tfor _, s := range servers {\n\t\ts.Start()\n\t}\n}\n\nfunc Indexes(servers []*Server) {\n\tfor s := range servers {\n\t\ts.Start()\n\t}\n}\n\nfunc Dispatch(x any) {\n\tswitch v := x.(type) {\n\tcase *Server:\n\t\tv.Start()\n\t}\n}\n\nfunc Either(x any) {\n\tswitch v := x.(type) {\n\tcase *Server:\n\t\treturn\n\tcase *Client, *Server:\n\t\tv.Start()\n\tdefault:\n\t\tv.Start()\n\t}\n}\n";
    let (es, _, fxs) = edges(&[
        ("src/lib.rs", rust),
        ("log.py", py),
        ("src/subject.ts", ts),
        ("srv/srv.go", go),
    ]);
    let calls = |file: usize, from: &str, to: &str| {
        call_edge(&es, chunk_of(&fxs, file, from), chunk_of(&fxs, file, to))
    };
    assert_eq!(calls(0, "Pool#start_all", "Server#start"), Some(true));
    // An iterator adapter's closure gets the items; `fold`'s first parameter is not one.
    assert_eq!(calls(0, "Pool#each_start", "Server#start"), Some(true));
    assert_eq!(calls(0, "Pool#folded", "Server#start"), None);
    assert_eq!(calls(0, "each", "Server#start"), Some(true));
    assert_eq!(calls(0, "each", "Client#start"), None);
    // A name bound anew (`let xs = clients()`) no longer holds the old items; a map's loop
    // yields pairs.
    assert_eq!(calls(0, "shadowed", "Server#start"), None);
    assert_eq!(calls(0, "keyed", "Server#start"), None);
    assert_eq!(calls(0, "rebound", "Server#start"), None);
    // A loop's variable ends with the loop: the parameter it shadowed is back after it.
    assert_eq!(calls(0, "after", "Server#start"), Some(true));
    assert_eq!(calls(0, "after", "Client#start"), Some(true));
    assert_eq!(calls(1, "Logger#flush_all", "Handler#flush"), Some(true));
    assert_eq!(calls(1, "Logger#flushed", "Handler#flush"), Some(true));
    assert_eq!(calls(1, "close_all", "Handler#flush"), Some(true));
    assert_eq!(calls(1, "close_all", "Other#flush"), None);
    assert_eq!(calls(1, "names", "Handler#flush"), None);
    assert_eq!(calls(2, "Subject#emit", "Observer#next"), Some(true));
    assert_eq!(calls(2, "Subject#ping", "Observer#next"), Some(true));
    assert_eq!(calls(2, "Subject#pong", "Observer#next"), None);
    assert_eq!(calls(2, "all", "Observer#next"), Some(true));
    assert_eq!(calls(2, "all", "Other#next"), None);
    // `for … in` walks keys.
    assert_eq!(calls(2, "keys", "Observer#next"), None);
    assert_eq!(calls(3, "StartAll", "Server#Start"), Some(true));
    assert_eq!(calls(3, "StartAll", "Client#Start"), None);
    // One range variable is the index.
    assert_eq!(calls(3, "Indexes", "Server#Start"), None);
    assert_eq!(calls(3, "Dispatch", "Server#Start"), Some(true));
    // A case of several types, and the default, bind none of them.
    assert_eq!(calls(3, "Either", "Server#Start"), None);
    assert_eq!(calls(3, "Either", "Client#Start"), None);
}

/// A build holds every resolved edge of its tree until its segments are written.
#[test]
fn edges_stay_small() {
    assert!(std::mem::size_of::<ResolvedEdge>() <= 28);
    assert!(std::mem::size_of::<NodeRef>() <= 12);
}
