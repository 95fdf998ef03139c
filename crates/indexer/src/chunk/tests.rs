use super::*;

fn run(lang: Language, path: &str, src: &str) -> FileExtract {
    extract(lang, "repo", path, src, &ChunkOptions::default())
}

fn find<'a>(fx: &'a FileExtract, qualified: &str) -> &'a Chunk {
    fx.chunks
        .iter()
        .find(|c| c.qualified == qualified && c.kind != ChunkKind::BodyPart)
        .unwrap_or_else(|| panic!("no chunk {qualified}: {:#?}", summary(fx)))
}

fn idx(fx: &FileExtract, qualified: &str) -> usize {
    fx.chunks
        .iter()
        .position(|c| c.qualified == qualified && c.kind != ChunkKind::BodyPart)
        .unwrap_or_else(|| panic!("no chunk {qualified}"))
}

/// The symbol ids of a file's chunks that have one, in chunk order.
fn symbol_ids(fx: &FileExtract) -> Vec<String> {
    (fx.chunks.iter())
        .filter(|c| c.symbol.is_some())
        .map(|c| fx.symbol_id(c))
        .collect()
}

fn summary(fx: &FileExtract) -> Vec<String> {
    fx.chunks
        .iter()
        .map(|c| {
            format!(
                "{:?} {} L{}-{}",
                c.kind, c.qualified, c.start_line, c.end_line
            )
        })
        .collect()
}

/// (kind, qualified, start_line, end_line, parent qualified)
type Expect<'a> = (ChunkKind, &'a str, u32, u32, Option<&'a str>);

fn check_symbols(fx: &FileExtract, expected: &[Expect]) {
    for &(kind, q, s, e, parent) in expected {
        let c = find(fx, q);
        assert_eq!(c.kind, kind, "{q}");
        assert_eq!((c.start_line, c.end_line), (s, e), "{q} lines");
        let p = c.parent.map(|p| fx.chunks[p].qualified.as_str());
        assert_eq!(p, parent, "{q} parent");
    }
}

fn check_invariants(fx: &FileExtract, src: &str) {
    for (i, c) in fx.chunks.iter().enumerate() {
        assert!(c.start_byte <= c.end_byte && c.end_byte as usize <= src.len());
        assert!(c.start_line >= 1 && c.start_line <= c.end_line, "{i}");
        if let Some(p) = c.parent {
            assert!(p < fx.chunks.len());
        }
        if c.kind.is_symbol() {
            assert!(c.symbol.is_some());
            assert_eq!(fx.symbol_id(c).len(), c.symbol_id_len(&fx.id_prefix));
        } else {
            assert!(!c.symbol.is_some());
            assert!(fx.symbol_id(c).is_empty());
        }
        let slice = &src[c.start_byte as usize..c.end_byte as usize];
        let oversized_container = !c.kind.is_callable()
            && c.kind.is_symbol()
            && (slice.len() > 3000 || slice.lines().count() > 80);
        if c.kind != ChunkKind::BodyPart && c.kind != ChunkKind::Header && !oversized_container {
            assert_eq!(
                c.text,
                &src[c.start_byte as usize..c.end_byte as usize],
                "{i}"
            );
        }
    }
    for w in fx.chunks.windows(2) {
        assert!(w[0].start_byte <= w[1].start_byte);
    }
    for call in &fx.calls {
        assert!(fx.chunks[call.from].kind.is_symbol());
    }
    let mut ids = symbol_ids(fx);
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "symbol ids must be unique");
}

fn has_call(fx: &FileExtract, from: &str, callee: &str, qualifier: Option<&str>) -> bool {
    let f = idx(fx, from);
    fx.calls
        .iter()
        .any(|c| c.from == f && c.callee == callee && c.qualifier.as_deref() == qualifier)
}

fn has_import(fx: &FileExtract, module: &str, names: &[&str]) -> bool {
    fx.imports
        .iter()
        .any(|i| i.module == module && i.names.iter().map(|s| s.as_str()).eq(names.iter().copied()))
}

#[test]
fn rust_file() {
    let src = include_str!("testdata/sample_lib.rs.txt");
    let fx = run(Language::Rust, "src/lib.rs", src);
    check_invariants(&fx, src);
    use ChunkKind::*;
    check_symbols(
        &fx,
        &[
            (Struct, "Parser", 8, 12, None),
            (Method, "Parser#new", 15, 18, Some("Parser")),
            (Method, "Parser#parse", 20, 24, Some("Parser")),
            (Trait, "Visitor", 31, 36, None),
            (Method, "Visitor#done", 33, 35, Some("Visitor")),
            (Function, "helper", 44, 46, None),
            (Module, "inner", 48, 55, None),
            (Struct, "inner/Deep", 49, 49, Some("inner")),
            (Method, "inner/Deep#go", 51, 53, Some("inner/Deep")),
        ],
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "Parser")),
        "rust repo src/lib.rs/Parser#"
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "Parser#parse")),
        "rust repo src/lib.rs/Parser#parse()."
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "inner")),
        "rust repo src/lib.rs/inner/"
    );
    // Two impls of Parser plus the struct: ids deduplicated.
    let impls: Vec<&Chunk> = fx
        .chunks
        .iter()
        .filter(|c| c.kind == Impl && c.name == "Parser")
        .collect();
    assert_eq!(impls.len(), 2);
    assert_eq!(fx.symbol_id(impls[0]), "rust repo src/lib.rs/Parser(2)#");
    assert_eq!(fx.symbol_id(impls[1]), "rust repo src/lib.rs/Parser(3)#");
    assert_eq!(
        fx.chunks[idx(&fx, "Parser#visit")]
            .parent
            .map(|p| fx.chunks[p].kind),
        Some(Impl)
    );
    // Doc comment and attribute belong to the struct.
    assert!(find(&fx, "Parser")
        .text
        .starts_with("/// A parser.\n#[derive(Debug)]"));
    // Top-level leftovers: inner doc, uses, mod decl, const.
    let top: Vec<&Chunk> = fx.chunks.iter().filter(|c| c.kind == TopLevel).collect();
    assert_eq!(top.len(), 1);
    assert_eq!((top[0].start_line, top[0].end_line), (1, 6));
    assert!(has_import(&fx, "std::collections", &["HashMap"]));
    assert!(has_import(&fx, "crate::graph", &["resolve", "EdgeKind"]));
    assert!(has_import(&fx, "util", &[]));
    assert!(has_call(&fx, "Parser#parse", "helper", None));
    assert!(has_call(&fx, "Parser#parse", "advance", Some("self")));
    assert!(has_call(&fx, "Parser#parse", "tidy", Some("util::")));
    assert!(has_call(&fx, "inner/Deep#go", "helper", Some("super::")));
    // Macros are not calls.
    assert!(!fx.calls.iter().any(|c| c.callee == "println"));
    assert!(!fx.had_parse_errors);
}

#[test]
fn rust_use_forms() {
    let src =
        "use a::b::{c, d::e as f, self};\nuse x::y::*;\nuse z;\nextern crate w;\nuse q::{self};\n";
    let fx = run(Language::Rust, "src/m.rs", src);
    assert!(has_import(&fx, "a::b", &["c"]));
    // `self` in a list binds the module itself, as `use a::b;` does.
    assert!(has_import(&fx, "a", &["b"]));
    assert!(!has_import(&fx, "a::b", &[]));
    assert!(has_import(&fx, "q", &[]));
    assert!(has_import(&fx, "a::b::d", &["e"]));
    assert!(has_import(&fx, "x::y", &[]));
    assert!(has_import(&fx, "z", &[]));
    assert!(has_import(&fx, "w", &[]));
}

#[test]
fn python_file() {
    let src = include_str!("testdata/a.py.txt");
    let fx = run(Language::Python, "pkg/a.py", src);
    check_invariants(&fx, src);
    use ChunkKind::*;
    check_symbols(
        &fx,
        &[
            (Class, "Service", 9, 28, None),
            (Method, "Service#make", 14, 16, Some("Service")),
            (Method, "Service#run", 18, 21, Some("Service")),
            (Class, "Service/Inner", 26, 28, Some("Service")),
            (Method, "Service/Inner#deep", 27, 28, Some("Service/Inner")),
            (Function, "helper", 31, 34, None),
        ],
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "Service")),
        "python repo pkg/a.py/Service#"
    );
    assert!(find(&fx, "Service")
        .text
        .starts_with("# A service.\n@dataclass\nclass Service"));
    assert!(find(&fx, "Service#make")
        .text
        .trim_start()
        .starts_with("@staticmethod"));
    // Nested function: no chunk of its own.
    assert!(!fx.chunks.iter().any(|c| c.name == "nested"));
    assert!(has_import(&fx, "os.path", &[]));
    assert!(has_import(&fx, "..core.base", &["Base", "helper"]));
    assert!(has_import(&fx, ".", &["sibling"]));
    assert!(has_call(&fx, "Service#run", "join", Some("os.path")));
    assert!(has_call(&fx, "Service#run", "log", Some("self")));
    assert!(has_call(&fx, "Service#run", "helper", None));
    assert!(has_call(&fx, "helper", "nested", None));
    assert!(!fx.calls.iter().any(|c| c.callee == "print"));
    let top: Vec<(u32, u32)> = fx
        .chunks
        .iter()
        .filter(|c| c.kind == TopLevel)
        .map(|c| (c.start_line, c.end_line))
        .collect();
    assert_eq!(top, vec![(1, 6), (36, 37)]);
}

#[test]
fn typescript_file() {
    let src = include_str!("testdata/a.ts.txt");
    let fx = run(Language::TypeScript, "src/a.ts", src);
    check_invariants(&fx, src);
    use ChunkKind::*;
    check_symbols(
        &fx,
        &[
            (Function, "add", 6, 9, None),
            (Function, "sum", 11, 11, None),
            (Interface, "Shape", 13, 15, None),
            (Module, "Geo", 17, 19, None),
            (Function, "Geo/dist", 18, 18, Some("Geo")),
            (Class, "Circle", 21, 27, None),
            (Method, "Circle#constructor", 24, 24, Some("Circle")),
            (Method, "Circle#area", 25, 25, Some("Circle")),
            (Method, "Circle#scale", 26, 26, Some("Circle")),
            (Enum, "Color", 29, 29, None),
        ],
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "add")),
        "typescript repo src/a.ts/add()."
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "Geo")),
        "typescript repo src/a.ts/Geo/"
    );
    assert!(find(&fx, "add")
        .text
        .starts_with("/** Adds. */\nexport const add"));
    assert!(find(&fx, "Circle").text.starts_with("@Injectable()"));
    assert!(has_import(&fx, "./x", &["D", "a", "c"]));
    assert!(has_import(&fx, "../y", &[]));
    assert!(has_import(&fx, "./q", &["q"]));
    assert!(has_import(&fx, "./r", &[]));
    assert!(has_call(&fx, "add", "sum", None));
    assert!(has_call(&fx, "Circle#area", "scale", Some("this")));
    assert!(has_call(&fx, "Geo/dist", "sqrt", Some("Math")));
}

#[test]
fn tsx_file() {
    let src = include_str!("testdata/app.tsx.txt");
    let fx = run(Language::Tsx, "web/app.tsx", src);
    check_invariants(&fx, src);
    check_symbols(
        &fx,
        &[
            (ChunkKind::Function, "App", 4, 7, None),
            (ChunkKind::Function, "Counter", 9, 11, None),
        ],
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "App")),
        "tsx repo web/app.tsx/App()."
    );
    assert!(has_import(&fx, "react", &["React", "useState"]));
    assert!(has_import(&fx, "./Button", &["Button"]));
    assert!(has_call(&fx, "App", "useState", None));
    assert!(has_call(&fx, "Counter", "format", None));
    assert!(!fx.had_parse_errors);
}

#[test]
fn javascript_file() {
    let src = include_str!("testdata/b.js.txt");
    let fx = run(Language::JavaScript, "lib/b.js", src);
    check_invariants(&fx, src);
    use ChunkKind::*;
    check_symbols(
        &fx,
        &[
            (Function, "Animal", 4, 4, None),
            (Method, "Animal#speak", 5, 5, None),
            (Class, "Dog", 7, 9, None),
            (Method, "Dog#speak", 8, 8, Some("Dog")),
        ],
    );
    assert!(has_import(&fx, "fs", &[]));
    assert!(has_import(&fx, "./path-utils", &["join"]));
    assert!(has_call(&fx, "Dog#speak", "bark", None));
    assert!(has_call(&fx, "Animal#speak", "say", None));
}

#[test]
fn go_file() {
    let src = include_str!("testdata/main.go.txt");
    let fx = run(Language::Go, "cmd/main.go", src);
    check_invariants(&fx, src);
    use ChunkKind::*;
    check_symbols(
        &fx,
        &[
            (Struct, "Store", 9, 12, None),
            (Interface, "Getter", 14, 16, None),
            (Method, "Store#Get", 18, 21, Some("Store")),
            (Function, "main", 23, 27, None),
        ],
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "Store#Get")),
        "go repo cmd/main.go/Store#Get()."
    );
    assert!(has_import(&fx, "fmt", &[]));
    assert!(has_import(&fx, "example.com/proj/util", &[]));
    assert!(has_import(&fx, "strings", &[]));
    assert!(has_call(&fx, "main", "Get", Some("s")));
    assert!(has_call(&fx, "main", "Helper", Some("u")));
    assert!(has_call(&fx, "Store#Get", "ToUpper", Some("strings")));
    assert!(!fx.calls.iter().any(|c| c.callee == "make"));
}

#[test]
fn java_file() {
    let src = include_str!("testdata/Svc.java.txt");
    let fx = run(Language::Java, "src/com/acme/svc/Svc.java", src);
    check_invariants(&fx, src);
    use ChunkKind::*;
    check_symbols(
        &fx,
        &[
            (Class, "Svc", 7, 23, None),
            (Method, "Svc#Svc", 12, 12, Some("Svc")),
            (Method, "Svc#run", 14, 18, Some("Svc")),
            (Method, "Svc#helper", 20, 20, Some("Svc")),
            (Enum, "Svc/Mode", 22, 22, Some("Svc")),
            (Method, "Svc/Mode#code", 22, 22, Some("Svc/Mode")),
            (Interface, "Runner", 25, 25, None),
        ],
    );
    assert!(find(&fx, "Svc")
        .text
        .starts_with("/** Service. */\n@Component"));
    assert!(has_import(&fx, "com.acme.util.Strings", &["Strings"]));
    assert!(has_import(&fx, "com.acme.util.Strings", &["trim"]));
    assert!(has_import(&fx, "java.util", &[]));
    assert!(has_call(&fx, "Svc#run", "helper", None));
    assert!(has_call(&fx, "Svc#run", "clean", Some("Strings")));
    assert!(has_call(&fx, "Svc#run", "Worker", None));
    assert!(has_call(&fx, "Svc#run", "go", Some("new Worker()")));
}

#[test]
fn c_file() {
    let src = include_str!("testdata/x.c.txt");
    let fx = run(Language::C, "src/x.c", src);
    check_invariants(&fx, src);
    use ChunkKind::*;
    check_symbols(
        &fx,
        &[
            (Struct, "point", 4, 5, None),
            (Struct, "size_t2", 7, 7, None),
            (Function, "find", 9, 11, None),
            (Function, "dump", 14, 14, None),
        ],
    );
    assert!(has_import(&fx, "x.h", &[]));
    assert!(has_import(&fx, "stdio.h", &[]));
    assert!(has_call(&fx, "find", "lookup", None));
    assert!(has_call(&fx, "find", "get", Some("p")));
}

#[test]
fn cpp_file() {
    let src = include_str!("testdata/y.cpp.txt");
    let fx = run(Language::Cpp, "src/y.cpp", src);
    check_invariants(&fx, src);
    use ChunkKind::*;
    check_symbols(
        &fx,
        &[
            (Module, "geo", 4, 14, None),
            (Class, "geo/Shape", 5, 10, Some("geo")),
            (Method, "geo/Shape#describe", 8, 8, Some("geo/Shape")),
            (Function, "geo/twice", 12, 13, Some("geo")),
            (Method, "geo/Shape#scaled", 16, 18, Some("geo/Shape")),
            (Method, "Shape#other", 20, 20, Some("geo/Shape")),
        ],
    );
    assert_eq!(
        fx.symbol_id(find(&fx, "geo/Shape#scaled")),
        "cpp repo src/y.cpp/geo/Shape#scaled()."
    );
    assert!(has_import(&fx, "y.hpp", &[]));
    assert!(has_call(&fx, "Shape#other", "sort", Some("std")));
    assert!(has_call(&fx, "Shape#other", "Shape", None));
    assert!(has_call(&fx, "geo/Shape#describe", "area", None));
}

fn long_rust_fn() -> String {
    let mut l = vec![
        "use std::fmt;".to_string(),
        String::new(),
        "/// Long one.".to_string(),
        "pub fn long_fn(a: u32,".to_string(),
        "               b: u32) -> u32 {".to_string(),
    ];
    for i in 0..60 {
        l.push(format!("    let v{i} = compute(a, {i});"));
    }
    l.push("    if a > b {".into());
    for i in 0..100 {
        l.push(format!("        step{i}(b);"));
    }
    l.push("    }".into());
    for i in 0..30 {
        l.push(format!("    finish(v{i});"));
    }
    l.push("    a + b".into());
    l.push("}".into());
    l.join("\n") + "\n"
}

#[test]
fn long_function_is_split_into_body_parts() {
    let src = long_rust_fn();
    let fx = run(Language::Rust, "src/long.rs", &src);
    check_invariants(&fx, &src);
    let head_i = idx(&fx, "long_fn");
    let head = &fx.chunks[head_i];
    assert_eq!(head.kind, ChunkKind::Function);
    assert_eq!(head.start_line, 3);
    assert!(head.end_line <= 3 + 79);
    let parts: Vec<&Chunk> = fx
        .chunks
        .iter()
        .filter(|c| c.kind == ChunkKind::BodyPart)
        .collect();
    assert!(parts.len() >= 2, "{:?}", summary(&fx));
    let opts = ChunkOptions::default();
    let mut prev_end = head.end_line;
    for p in &parts {
        assert_eq!(p.parent, Some(head_i));
        assert_eq!(p.name, "long_fn");
        assert!(!p.symbol.is_some());
        assert!(
            p.text
                .starts_with("pub fn long_fn(a: u32,\n               b: u32) -> u32 {\n    // …\n"),
            "{}",
            p.text
        );
        assert!(p.text.lines().count() as u32 <= opts.max_chunk_lines);
        assert!(p.text.len() <= opts.max_chunk_bytes);
        // Parts follow each other and start at a line start.
        assert!(p.start_line > prev_end);
        prev_end = p.end_line;
        let body = &src[p.start_byte as usize..p.end_byte as usize];
        assert!(p.text.ends_with(body));
    }
    // The first part starts at the statement boundary `if a > b {` (the 60 lets fit the head).
    assert!(parts[0].text.contains("\n    if a > b {\n"));
    assert_eq!(parts.last().unwrap().end_line, 3 + 2 + 60 + 102 + 30 + 2);
    // Calls in later parts still come from the function symbol.
    assert!(fx
        .calls
        .iter()
        .any(|c| c.callee == "finish" && c.from == head_i));
}

#[test]
fn python_body_part_context_uses_hash() {
    let mut src = String::from("def big(x):\n");
    for i in 0..200 {
        src.push_str(&format!("    y{i} = work(x, {i})\n"));
    }
    let fx = run(Language::Python, "big.py", &src);
    check_invariants(&fx, &src);
    let parts: Vec<&Chunk> = fx
        .chunks
        .iter()
        .filter(|c| c.kind == ChunkKind::BodyPart)
        .collect();
    assert!(parts.len() >= 2);
    assert!(parts[0].text.starts_with("def big(x):\n    # …\n    y"));
}

#[test]
fn big_type_keeps_header_and_fields() {
    let mut src = String::from("class Big:\n    a = 1\n");
    for m in 0..8 {
        src.push_str(&format!("\n    def m{m}(self):\n"));
        for i in 0..12 {
            src.push_str(&format!("        x{i} = self.call{i}()\n"));
        }
    }
    let fx = run(Language::Python, "big.py", &src);
    check_invariants(&fx, &src);
    let class = find(&fx, "Big");
    assert_eq!(class.text, "class Big:\n    a = 1\n    # …");
    assert_eq!((class.start_line, class.end_line), (1, 2 + 8 * 14));
    let methods = fx
        .chunks
        .iter()
        .filter(|c| c.kind == ChunkKind::Method)
        .count();
    assert_eq!(methods, 8);
}

#[test]
fn top_level_leftovers_are_windowed() {
    let mut src = String::new();
    for i in 0..100 {
        src.push_str(&format!("const C{i}: u32 = {i};\n"));
    }
    src.push_str("\n\n\nfn f() {}\n\n\n");
    for i in 0..3 {
        src.push_str(&format!("static S{i}: u32 = {i};\n"));
    }
    let fx = run(Language::Rust, "src/c.rs", &src);
    check_invariants(&fx, &src);
    let top: Vec<(u32, u32)> = fx
        .chunks
        .iter()
        .filter(|c| c.kind == ChunkKind::TopLevel)
        .map(|c| (c.start_line, c.end_line))
        .collect();
    assert_eq!(top, vec![(1, 40), (41, 80), (81, 100), (107, 109)]);
    assert_eq!(find(&fx, "f").start_line, 104);
}

#[test]
fn markdown_windows_split_at_headings() {
    let mut src = String::from("# Title\n\nIntro line.\n\n## Install\n\n");
    for i in 0..50 {
        src.push_str(&format!("step {i}\n"));
    }
    src.push_str("```sh\n# not a heading\n```\n## Usage\n\nRun it.\n");
    let fx = run(Language::Markdown, "README.md", &src);
    check_invariants(&fx, &src);
    let w: Vec<(String, u32, u32)> = fx
        .chunks
        .iter()
        .map(|c| (c.name.to_string(), c.start_line, c.end_line))
        .collect();
    assert!(fx.chunks.iter().all(|c| c.kind == ChunkKind::Window));
    assert_eq!(w[0], ("Title".to_string(), 1, 3));
    assert_eq!(w[1], ("Install".to_string(), 5, 44));
    // Overlap of 5 lines inside the long section.
    assert_eq!(w[2], ("Install".to_string(), 40, 59));
    assert_eq!(w[3], ("Usage".to_string(), 60, 62));
    assert_eq!(w.len(), 4);
}

#[test]
fn text_windows_overlap() {
    let src: String = (0..100).map(|i| format!("line {i}\n")).collect();
    let fx = run(Language::Text, "notes.txt", &src);
    let w: Vec<(u32, u32)> = fx
        .chunks
        .iter()
        .map(|c| (c.start_line, c.end_line))
        .collect();
    assert_eq!(w, vec![(1, 40), (36, 75), (71, 100)]);
    assert!(fx
        .chunks
        .iter()
        .all(|c| c.name.is_empty() && c.kind == ChunkKind::Window));
}

#[test]
fn long_single_line_is_cut_by_bytes() {
    let src = "x".repeat(10_000);
    let fx = run(Language::Json, "data.json", &src);
    assert_eq!(fx.chunks.len(), 4);
    assert!(fx
        .chunks
        .iter()
        .all(|c| c.text.len() <= 3000 && c.start_line == 1));
    let minified = format!("var a={};", "1+".repeat(5000) + "1");
    let fx = run(Language::JavaScript, "min.js", &minified);
    assert!(fx.chunks.iter().all(|c| c.text.len() <= 3000));
}

#[test]
fn syntax_errors_still_give_chunks() {
    let src = "fn good() -> u32 {\n    1\n}\n\nfn broken( {\n    let x = ;\n}\n\nstruct After { a: u32 }\n";
    let fx = run(Language::Rust, "src/bad.rs", src);
    assert!(fx.had_parse_errors);
    assert!(fx.chunks.iter().any(|c| c.name == "good"));
    assert!(!fx.chunks.is_empty());
    check_invariants(&fx, src);
    let py = "def ok():\n    return 1\n\ndef bad(:\n    pass\n";
    let fx = run(Language::Python, "bad.py", py);
    assert!(fx.had_parse_errors);
    assert!(fx.chunks.iter().any(|c| c.name == "ok"));
}

#[test]
fn empty_file_has_no_chunks() {
    for lang in Language::ALL {
        let fx = run(lang, "empty", "");
        assert!(fx.chunks.is_empty() && fx.imports.is_empty() && fx.calls.is_empty());
        let fx = run(lang, "blank", "\n\n   \n");
        assert!(fx.chunks.is_empty());
    }
}

#[test]
fn garbage_never_panics() {
    let inputs = [
        "}}}{{{",
        "\u{0}\u{1}binary\u{ff}",
        "class",
        "def",
        "fn (",
        "#include",
        "<<<>>>",
        "é\n\n\tü",
    ];
    for lang in Language::ALL {
        for s in inputs {
            let fx = run(lang, "g", s);
            check_invariants(&fx, s);
        }
    }
}

#[test]
fn repo_empty_uses_dot() {
    let fx = extract(
        Language::Go,
        "",
        "a.go",
        "package a\nfunc F() {}\n",
        &ChunkOptions::default(),
    );
    assert_eq!(fx.symbol_id(find(&fx, "F")), "go . a.go/F().");
}

#[test]
fn header_with_cpp_falls_back_to_cpp() {
    let src = "#pragma once\nnamespace n {\nclass A {\npublic:\n  int f() { return g(); }\n};\n}\n";
    let fx = run(Language::C, "inc/a.h", src);
    assert!(!fx.had_parse_errors);
    assert_eq!(fx.symbol_id(find(&fx, "n/A#f")), "c repo inc/a.h/n/A#f().");
}

#[test]
fn language_and_kind_names() {
    use std::path::Path;
    let cases = [
        ("a.rs", Some(Language::Rust)),
        ("a.pyi", Some(Language::Python)),
        ("a.mts", Some(Language::TypeScript)),
        ("a.tsx", Some(Language::Tsx)),
        ("a.jsx", Some(Language::JavaScript)),
        ("a.cjs", Some(Language::JavaScript)),
        ("a.go", Some(Language::Go)),
        ("A.java", Some(Language::Java)),
        ("a.h", Some(Language::C)),
        ("a.hpp", Some(Language::Cpp)),
        ("a.cc", Some(Language::Cpp)),
        ("README.md", Some(Language::Markdown)),
        ("Cargo.toml", Some(Language::Toml)),
        ("a.yml", Some(Language::Yaml)),
        ("a.json", Some(Language::Json)),
        ("run.sh", Some(Language::Shell)),
        ("Makefile", Some(Language::Text)),
        ("Dockerfile", Some(Language::Text)),
        ("LICENSE", Some(Language::Text)),
        ("schema.sql", Some(Language::Text)),
        ("build.gradle", Some(Language::Text)),
        ("x.png", None),
        ("x.bin", None),
        ("noext", None),
    ];
    for (p, want) in cases {
        assert_eq!(Language::from_path(Path::new(p)), want, "{p}");
    }
    for l in Language::ALL {
        assert_eq!(Language::from_name(l.name()), Some(l));
    }
    for k in ChunkKind::ALL {
        assert_eq!(ChunkKind::from_name(k.name()), Some(k));
    }
    assert_eq!(ChunkKind::BodyPart.name(), "body_part");
    assert_eq!(ChunkKind::TopLevel.name(), "top_level");
    assert!(Language::Go.is_code() && !Language::Markdown.is_code());
}

/// Invariants over real files: every source file of this workspace.
#[test]
fn invariants_hold_on_workspace_sources() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut stack = vec![root.join("crates"), root.join("scripts")];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(
        files.len() > 10,
        "expected the workspace sources, found {}",
        files.len()
    );
    for path in files {
        let path = path.to_string_lossy().to_string();
        let Ok(src) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Some(lang) = Language::from_path(std::path::Path::new(&path)) else {
            continue;
        };
        let t = std::time::Instant::now();
        let fx = run(lang, &path, &src);
        check_invariants(&fx, &src);
        println!(
            "{path}: {} bytes, {} chunks, {} imports, {} calls, errors={} in {:?}",
            src.len(),
            fx.chunks.len(),
            fx.imports.len(),
            fx.calls.len(),
            fx.had_parse_errors,
            t.elapsed()
        );
    }
}

/// Every language's fixture: (language, file name, source).
const FIXTURES: [(Language, &str, &str); 9] = [
    (
        Language::Rust,
        "lib.rs",
        include_str!("testdata/sample_lib.rs.txt"),
    ),
    (Language::Python, "a.py", include_str!("testdata/a.py.txt")),
    (
        Language::TypeScript,
        "a.ts",
        include_str!("testdata/a.ts.txt"),
    ),
    (
        Language::Tsx,
        "app.tsx",
        include_str!("testdata/app.tsx.txt"),
    ),
    (
        Language::JavaScript,
        "b.js",
        include_str!("testdata/b.js.txt"),
    ),
    (
        Language::Go,
        "main.go",
        include_str!("testdata/main.go.txt"),
    ),
    (
        Language::Java,
        "Svc.java",
        include_str!("testdata/Svc.java.txt"),
    ),
    (Language::C, "x.c", include_str!("testdata/x.c.txt")),
    (Language::Cpp, "y.cpp", include_str!("testdata/y.cpp.txt")),
];

/// `kind_str` (the per-grammar table) names every node of every fixture, aliases and `ERROR`
/// nodes included, exactly as tree-sitter's `kind` does.
#[test]
fn kind_table_matches_tree_sitter_kind() {
    use syntax::KindStr;
    let fixtures = FIXTURES.iter().map(|&(lang, _, src)| (lang, src));
    // Broken on purpose: ERROR and MISSING nodes.
    let broken = (Language::Rust, "fn broken( { let x = ; impl for {} }}");
    let mut errors = 0;
    for (lang, src) in fixtures.chain([broken]) {
        let (tree, _) = parse::parse(lang, src).expect("grammar");
        let mut c = tree.walk();
        let mut nodes = 0;
        loop {
            let n = c.node();
            assert_eq!(n.kind_str(), n.kind(), "{lang:?} node {n:?}");
            errors += usize::from(n.is_error());
            nodes += 1;
            if c.goto_first_child() || c.goto_next_sibling() {
                continue;
            }
            while c.goto_parent() && !c.goto_next_sibling() {}
            if c.depth() == 0 {
                break;
            }
        }
        assert!(nodes > 10, "{lang:?}: {nodes} nodes");
    }
    assert!(errors > 0, "the broken fixture has ERROR nodes");
}

/// The walk through each spec's `walk_kinds` finds exactly what the walk over every named node
/// finds (chunks, imports, calls): on every fixture, a broken file, and every source file of
/// this repository (its Rust crates, the call-graph fixtures in Go, Python, TypeScript, C and
/// Java, its scripts).
#[test]
fn walk_kinds_cover_the_specs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files: Vec<(Language, String, String)> = FIXTURES
        .iter()
        .map(|&(lang, path, src)| (lang, path.to_string(), src.to_string()))
        .collect();
    files.push((
        Language::Rust,
        "broken.rs".into(),
        "fn broken( { let x = f(; impl for {} }}".into(),
    ));
    for e in ignore::WalkBuilder::new(&root).build().flatten() {
        let p = e.path();
        let Some(lang) = Language::from_path(p) else {
            continue;
        };
        if let Ok(src) = std::fs::read_to_string(p) {
            files.push((lang, p.display().to_string(), src));
        }
    }
    use std::collections::HashMap;
    let mut calls: HashMap<Language, usize> = HashMap::new();
    let mut imports: HashMap<Language, usize> = HashMap::new();
    for (lang, path, src) in &files {
        let filtered = run(*lang, path, src);
        syntax::WALK_EVERY_KIND.with(|w| w.set(true));
        let every = run(*lang, path, src);
        syntax::WALK_EVERY_KIND.with(|w| w.set(false));
        assert_eq!(filtered.imports, every.imports, "{path}: imports");
        assert_eq!(filtered.calls, every.calls, "{path}: calls");
        assert_eq!(filtered, every, "{path}");
        *calls.entry(*lang).or_default() += every.calls.len();
        *imports.entry(*lang).or_default() += every.imports.len();
    }
    // Not vacuous: every language family's files hold calls and imports.
    for lang in [
        Language::Rust,
        Language::Python,
        Language::TypeScript,
        Language::Go,
    ] {
        assert!(
            calls.get(&lang).copied().unwrap_or(0) > 50,
            "{lang:?}: {calls:?}"
        );
        assert!(
            imports.get(&lang).copied().unwrap_or(0) > 5,
            "{lang:?}: {imports:?}"
        );
    }
    for lang in [
        Language::JavaScript,
        Language::Java,
        Language::C,
        Language::Cpp,
    ] {
        assert!(
            calls.get(&lang).copied().unwrap_or(0) > 0,
            "{lang:?}: {calls:?}"
        );
    }
}

#[test]
fn repeated_symbols_are_numbered_and_ids_are_made_at_their_length() {
    // Twelve definitions of one name: `f().`, then `f(2)().` ... `f(12)().`.
    let src: String = (0..12)
        .map(|i| format!("def f():\n    return {i}\n\n"))
        .collect();
    let fx = run(Language::Python, "pkg/m.py", &src);
    let ids = symbol_ids(&fx);
    let want: Vec<String> = (1..=12)
        .map(|n| match n {
            1 => "python repo pkg/m.py/f().".to_string(),
            n => format!("python repo pkg/m.py/f({n})()."),
        })
        .collect();
    assert_eq!(ids, want);
    for c in &fx.chunks {
        assert_eq!(
            c.symbol_id(&fx.id_prefix).len(),
            c.symbol_id_len(&fx.id_prefix)
        );
    }
}

/// A build holds every chunk of its tree until its graph is resolved (the text moves out
/// when its segment is written): the record stays small, and its symbol id is not in it.
#[test]
fn chunks_stay_small() {
    assert!(std::mem::size_of::<Chunk>() <= 112);
    assert_eq!(std::mem::size_of::<SymbolTag>(), 4);
}

#[test]
fn symbols_are_numbered_per_qualified_name_and_suffix() {
    // A module and a type of one name end in different suffixes: each is the first of its
    // kind. A second type of that name is the second.
    let src = "mod a {}\nstruct a;\nimpl a {}\n";
    let fx = run(Language::Rust, "src/lib.rs", src);
    let mut ids = symbol_ids(&fx);
    ids.sort();
    assert_eq!(
        ids,
        vec![
            "rust repo src/lib.rs/a#",
            "rust repo src/lib.rs/a(2)#",
            "rust repo src/lib.rs/a/",
        ]
    );
}
