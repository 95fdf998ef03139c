//! Tests of [`super`]: paths, hashes, the file cache, relocation and `git_head`.
use super::*;

fn lines(s: &str) -> Vec<String> {
    s.lines().map(str::to_string).collect()
}

#[test]
fn uri_round_trip_and_errors() {
    for (p, a, b) in [("src/a.rs", 42, 87), ("x/y z.py", 3, 3)] {
        let u = uri(p, a, b);
        assert_eq!(parse_uri(&u).unwrap(), (p.to_string(), a, b));
    }
    assert_eq!(uri("a.rs", 1, 2), "file:a.rs#L1-L2");
    assert_eq!(uri("a.rs", 7, 7), "file:a.rs#L7");
    for bad in [
        "a.rs#L1",
        "file:a.rs",
        "file:a.rs#1-2",
        "file:#L1",
        "file:a.rs#Lx",
    ] {
        assert!(parse_uri(bad).is_err(), "{bad}");
    }
}

#[test]
fn hash_of_a_known_block() {
    let l = lines("fn a() {\n    1\n}\n");
    // sha256("fn a() {\n    1\n}")
    let h = block_hash(&l, 1, 3).unwrap();
    let mut s = Sha256::new();
    s.update(b"fn a() {\n    1\n}");
    let want: String = s.finalize().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(h, format!("sha256:{want}"));
    // Trailing spaces and CRLF do not change it.
    assert_eq!(
        block_hash(&lines("fn a() {  \r\n    1\r\n}\r\n"), 1, 3).unwrap(),
        h
    );
    assert!(block_hash(&l, 0, 1).is_none() && block_hash(&l, 2, 1).is_none());
    assert!(block_hash(&l, 3, 4).is_none());
}

#[test]
fn paths_are_cleaned_and_confined() {
    assert_eq!(clean_path("./src//a.rs").unwrap(), "src/a.rs");
    assert_eq!(clean_path("src\\a.rs").unwrap(), "src/a.rs");
    for bad in ["../a.rs", "/etc/passwd", "", "src/../../x", "."] {
        assert!(clean_path(bad).is_err(), "{bad}");
    }
    let d = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(d.path()).unwrap();
    let app = base.join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(base.join("app-old")).unwrap();
    std::fs::write(base.join("app-old/secret.rs"), "x").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(base.join("app-old"), app.join("link")).unwrap();
    let roots = vec![RootEntry {
        repo: "app".into(),
        path: app.to_string_lossy().into_owned(),
        ..RootEntry::default()
    }];
    assert!(resolve_path(&roots, "", "src/new.rs").unwrap().is_some());
    assert!(resolve_path(&roots, "other", "a.rs").is_err());
    #[cfg(unix)]
    assert!(resolve_path(&roots, "", "link/secret.rs")
        .unwrap_err()
        .to_string()
        .contains("outside the root"));
    assert!(resolve_path(&[], "", "a.rs").unwrap().is_none());
}

#[test]
fn git_head_reads_refs_and_packed_refs() {
    let d = tempfile::tempdir().unwrap();
    let git = d.path().join(".git");
    std::fs::create_dir_all(git.join("refs/heads")).unwrap();
    std::fs::create_dir_all(d.path().join("src/deep")).unwrap();
    let sha = "0123456789abcdef0123456789abcdef01234567";
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(git.join("refs/heads/main"), format!("{sha}\n")).unwrap();
    assert_eq!(git_head(&d.path().join("src/deep")).as_deref(), Some(sha));
    std::fs::remove_file(git.join("refs/heads/main")).unwrap();
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    std::fs::write(
        git.join("packed-refs"),
        format!("# pack-refs with: peeled\n{other} refs/heads/main\n"),
    )
    .unwrap();
    assert_eq!(git_head(d.path()).as_deref(), Some(other));
    std::fs::write(git.join("HEAD"), format!("{sha}\n")).unwrap();
    assert_eq!(git_head(d.path()).as_deref(), Some(sha), "detached HEAD");
    let none = tempfile::tempdir().unwrap();
    assert!(
        git_head(none.path()).is_none() || none.path().ancestors().any(|p| p.join(".git").exists())
    );
}

/// `HEAD` names a ref under `refs/` only, and git files are read only when small and
/// regular: a crafted `HEAD` pointing at a device or outside the repository reads nothing.
#[test]
fn git_head_reads_only_small_ref_files() {
    let d = tempfile::tempdir().unwrap();
    let git = d.path().join(".git");
    std::fs::create_dir_all(git.join("refs/heads")).unwrap();
    let sha = "0123456789abcdef0123456789abcdef01234567";
    std::fs::write(git.join("refs/heads/main"), format!("{sha}\n")).unwrap();
    std::fs::write(d.path().join("outside"), format!("{sha}\n")).unwrap();
    for head in [
        "ref: /dev/zero",
        "ref: refs/../../outside",
        "ref: ../outside",
    ] {
        std::fs::write(git.join("HEAD"), head).unwrap();
        assert_eq!(git_head(d.path()), None, "{head}");
    }
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    assert_eq!(git_head(d.path()).as_deref(), Some(sha));
    std::fs::write(git.join("refs/heads/main"), "x".repeat(5000)).unwrap();
    assert_eq!(git_head(d.path()), None);
}

/// A checking context over `root` (repo `app`) with an empty code index.
struct Fixture {
    _index: tempfile::TempDir,
    roots: Vec<RootEntry>,
    code: CodeView,
    cache: FileCache,
}

impl Fixture {
    fn new(root: &Path, cache: FileCache) -> Fixture {
        let index = tempfile::tempdir().unwrap();
        format::IndexManifest::empty("m", 4)
            .commit(index.path())
            .unwrap();
        let code = CodeView::open(index.path()).unwrap();
        Fixture {
            _index: index,
            roots: vec![RootEntry {
                repo: "app".into(),
                path: std::fs::canonicalize(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                ..RootEntry::default()
            }],
            code,
            cache,
        }
    }

    fn check(&self, r: &CodeRef) -> RefStatus {
        let ctx = RefCtx {
            roots: &self.roots,
            cache: &self.cache,
            code: &self.code,
        };
        check_ref(&ctx, r)
    }
}

fn code_ref(path: &str, start: u32, end: u32, hash: String) -> CodeRef {
    CodeRef {
        repo: String::new(),
        path: path.into(),
        start_line: start,
        end_line: end,
        symbol_id: String::new(),
        git_commit: String::new(),
        code_hash: hash,
        created_at: 0,
        last_verified_at: None,
        stale_since: None,
        confidence: None,
        reason: String::new(),
    }
}

fn numbered(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("line {i}")).collect()
}

#[test]
fn git_components_are_refused() {
    for bad in [".git/config", "sub/.git/HEAD", ".GIT/config", "./.git"] {
        let e = clean_path(bad).unwrap_err();
        assert!(matches!(e, CodeRefError::GitDir(_)), "{bad}: {e}");
        assert!(e.to_string().contains("`.git`"), "{e}");
    }
    for ok in [".github/workflows/ci.yml", ".gitignore", "src/git/mod.rs"] {
        assert!(clean_path(ok).is_ok(), "{ok}");
    }
}

/// The search goes outward from the old start: the nearest match wins, the lower start on
/// a tie; a start past the end of a shorter file searches down from the last block.
#[test]
fn relocation_is_nearest_first_lower_on_ties() {
    let block = ["fn moved() {", "    body()", "}"];
    let h = {
        let l: Vec<String> = block.iter().map(|s| s.to_string()).collect();
        block_hash(&l, 1, 3).unwrap()
    };
    let with_at = |n: usize, at: &[usize]| {
        let mut l = numbered(n);
        for &a in at {
            for (i, b) in block.iter().enumerate() {
                l[a - 1 + i] = b.to_string();
            }
        }
        l
    };
    // Equal distance (2) below and above: the lower start.
    assert_eq!(
        relocate(&with_at(100, &[48, 52]), &h, 50, 3, u64::MAX),
        Some(48)
    );
    // Nearer above than below.
    assert_eq!(
        relocate(&with_at(100, &[46, 52]), &h, 50, 3, u64::MAX),
        Some(52)
    );
    // Nearer below.
    assert_eq!(
        relocate(&with_at(100, &[49, 53]), &h, 50, 3, u64::MAX),
        Some(49)
    );
    // At the start itself, and far away at either end.
    assert_eq!(
        relocate(&with_at(100, &[50]), &h, 50, 3, u64::MAX),
        Some(50)
    );
    assert_eq!(relocate(&with_at(100, &[1]), &h, 50, 3, u64::MAX), Some(1));
    assert_eq!(
        relocate(&with_at(100, &[98]), &h, 50, 3, u64::MAX),
        Some(98)
    );
    // The old start lies past the end of the file now.
    assert_eq!(
        relocate(&with_at(30, &[20, 28]), &h, 90, 3, u64::MAX),
        Some(28)
    );
    assert_eq!(relocate(&with_at(100, &[]), &h, 50, 3, u64::MAX), None);
    assert_eq!(relocate(&with_at(2, &[]), &h, 1, 3, u64::MAX), None);
    // The budget: 56 is the 13th start tried (50, 49, 51, … 44, 56), 3 lines each.
    let l = with_at(100, &[56]);
    assert_eq!(relocate(&l, &h, 50, 3, 3 * 13), Some(56));
    assert_eq!(relocate(&l, &h, 50, 3, 3 * 13 - 1), None);
    // A block longer than the budget is never hashed.
    assert_eq!(relocate(&with_at(100, &[50]), &h, 50, 3, 2), None);
    // Same as an exhaustive scan for every start and every placement.
    let l = with_at(20, &[5, 13]);
    for start in 1..=25u32 {
        let want = [5u32, 13]
            .into_iter()
            .min_by_key(|&s| (s.abs_diff(start), s));
        assert_eq!(relocate(&l, &h, start, 3, u64::MAX), want, "start {start}");
    }
}

/// check_ref on files: fresh, relocated, stale (changed, deleted); a long stale block in
/// a long file is answered promptly; a file over the size limit is unverified, not read
/// and not `deleted`; a malformed recorded hash is unverified.
#[test]
fn check_ref_on_files() {
    let d = tempfile::tempdir().unwrap();
    let fx = Fixture::new(d.path(), FileCache::default());
    let text = |l: &[String]| l.join("\n") + "\n";
    let mut l = numbered(200);
    std::fs::write(d.path().join("a.rs"), text(&l)).unwrap();
    let h = block_hash(&l, 10, 12).unwrap();
    assert_eq!(
        fx.check(&code_ref("a.rs", 10, 12, h.clone())),
        RefStatus::Fresh
    );
    l.insert(0, "// new first line".into());
    std::fs::write(d.path().join("a.rs"), text(&l)).unwrap();
    fx.cache.clear();
    assert_eq!(
        fx.check(&code_ref("a.rs", 10, 12, h.clone())),
        RefStatus::Relocated { start: 11, end: 13 }
    );
    l[11] = "edited".into();
    std::fs::write(d.path().join("a.rs"), text(&l)).unwrap();
    fx.cache.clear();
    assert!(matches!(
        fx.check(&code_ref("a.rs", 10, 12, h.clone())),
        RefStatus::Stale { reason } if reason.starts_with("changed")
    ));
    assert_eq!(
        fx.check(&code_ref("gone.rs", 10, 12, h.clone())),
        RefStatus::Stale {
            reason: "deleted".into()
        }
    );
    let st = fx.check(&code_ref("a.rs", 10, 12, "sha256:abc".into()));
    assert!(
        matches!(&st, RefStatus::Unverified { reason } if reason.contains("sha256:abc")),
        "{st:?}"
    );
    let st = fx.check(&code_ref(".git/config", 1, 1, h.clone()));
    assert!(matches!(st, RefStatus::Unverified { .. }), "{st:?}");

    // 15,000 stale lines in a 30,000-line file: bounded work, then stale.
    let long = numbered(30_000);
    std::fs::write(d.path().join("long.rs"), text(&long)).unwrap();
    let t = std::time::Instant::now();
    let st = fx.check(&code_ref("long.rs", 7_000, 21_999, h.clone()));
    assert!(st.is_stale(), "{st:?}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );

    // Over the size limit: unverified with the reason, never read.
    let big = std::fs::File::create(d.path().join("big.bin")).unwrap();
    big.set_len(MAX_FILE_BYTES + 1).unwrap();
    let st = fx.check(&code_ref("big.bin", 1, 1, h.clone()));
    match &st {
        RefStatus::Unverified { reason } => assert!(
            reason.contains(&format!("{} bytes", MAX_FILE_BYTES + 1)) && reason.contains("16 MiB"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fx.cache
            .get(&d.path().join("big.bin"), &fx.roots[0])
            .unwrap_err(),
        FileError::TooLarge {
            size: MAX_FILE_BYTES + 1,
            limit: MAX_FILE_BYTES
        }
    );
}

/// The cache keeps at most its byte budget (starting over past it) and never holds a file
/// over the per-file limit.
#[test]
fn file_cache_is_bounded() {
    let d = tempfile::tempdir().unwrap();
    let root = root_of(d.path());
    let c = FileCache::with_limits(4096, 100, 10_000);
    let line = "x".repeat(99);
    for i in 0..20 {
        let p = d.path().join(format!("f{i}.rs"));
        std::fs::write(&p, format!("{line}\n").repeat(30)).unwrap();
        let v = c.get(&p, &root).unwrap();
        assert_eq!(v.lines.len(), 30);
        let (files, bytes) = c.held();
        assert!(
            files >= 1 && bytes <= 10_000,
            "{files} files, {bytes} bytes"
        );
    }
    let (files, _) = c.held();
    assert!(files < 20);
    // Re-reading a changed file replaces its entry and its cost.
    let p = d.path().join("f19.rs");
    let before = c.held();
    std::fs::write(&p, "short\n").unwrap();
    assert_eq!(c.get(&p, &root).unwrap().lines, ["short"]);
    assert!(c.held().1 < before.1);
    // Over the per-file limit: refused, whatever the cache holds.
    let big = d.path().join("big.rs");
    std::fs::write(&big, "y".repeat(5000)).unwrap();
    assert_eq!(
        c.get(&big, &root).unwrap_err(),
        FileError::TooLarge {
            size: 5000,
            limit: 4096
        }
    );
    assert_eq!(
        c.get(&d.path().join("nope.rs"), &root).unwrap_err(),
        FileError::Missing
    );
    assert_eq!(c.get(d.path(), &root).unwrap_err(), FileError::Missing);
    // The file count still bounds it.
    let c = FileCache::with_limits(4096, 3, u64::MAX);
    for i in 0..10 {
        c.get(&d.path().join(format!("f{i}.rs")), &root).unwrap();
        assert!(c.held().0 <= 3);
    }
    c.clear();
    assert_eq!(c.held(), (0, 0));
}

/// A stored reference (from a dump, a pulled memory segment, or made before the file was
/// ignored) to a file the root's ignore files keep out of the index is not read: it stays
/// unverified, whatever hash it carries, so it cannot confirm a guess at the file's lines.
#[test]
fn stored_references_to_ignored_files_are_not_read() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join(".gitignore"), ".env\n").unwrap();
    std::fs::write(d.path().join(".env"), "TOKEN=hunter2\n").unwrap();
    std::fs::write(d.path().join("kept.py"), "TOKEN=hunter2\n").unwrap();
    let fx = Fixture::new(d.path(), FileCache::default());
    let guess = block_hash(&["TOKEN=hunter2".to_string()], 1, 1).unwrap();
    match fx.check(&code_ref(".env", 1, 1, guess.clone())) {
        RefStatus::Unverified { reason } => assert!(reason.contains(".env"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(fx.cache.held().0, 0, "nothing was read");
    // Nor through a link whose own name the rules admit.
    std::os::unix::fs::symlink(".env", d.path().join("notes.py")).unwrap();
    match fx.check(&code_ref("notes.py", 1, 1, guess.clone())) {
        RefStatus::Unverified { reason } => assert!(reason.contains("notes.py"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(fx.cache.held().0, 0, "nothing was read through the link");
    // The same lines in a file the walk admits are checked as usual.
    assert!(
        matches!(
            fx.check(&code_ref("kept.py", 1, 1, guess)),
            RefStatus::Fresh
        ),
        "kept.py"
    );
}

fn root_of(dir: &Path) -> RootEntry {
    RootEntry {
        repo: "app".into(),
        path: std::fs::canonicalize(dir)
            .unwrap()
            .to_string_lossy()
            .into_owned(),
        ..RootEntry::default()
    }
}

/// A file is checked where it is when opened, not where its path was confined: a symlink out
/// of the root (swapped in after the check) is not read, unless the root follows such links.
#[test]
fn the_cache_reads_nothing_that_resolves_outside_the_root() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "TOKEN=abc\n").unwrap();
    let d = tempfile::tempdir().unwrap();
    let link = d.path().join("a.rs");
    std::os::unix::fs::symlink(outside.path().join("secret"), &link).unwrap();
    let inner = d.path().join("b.rs");
    std::fs::write(&inner, "fn b() {}\n").unwrap();
    let root = root_of(d.path());
    let c = FileCache::default();
    match c.get(&link, &root).unwrap_err() {
        FileError::Unreadable(m) => assert!(m.contains("outside the root"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.held().0, 0);
    // A link inside the root is read.
    let inner_link = d.path().join("c.rs");
    std::os::unix::fs::symlink(&inner, &inner_link).unwrap();
    assert_eq!(c.get(&inner_link, &root).unwrap().lines, ["fn b() {}"]);
    let follows = RootEntry {
        follow_external_symlinks: true,
        ..root.clone()
    };
    assert_eq!(c.get(&link, &follows).unwrap().lines, ["TOKEN=abc"]);
}

#[test]
fn confidence_bounds() {
    let mut m = MemoryRecord {
        id: "0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e7f".into(),
        text: "t".into(),
        category: "note".into(),
        scope: "project".into(),
        entity: String::new(),
        tags: vec![],
        source: "user".into(),
        evidence: vec![],
        code_refs: vec![],
        created_at: 0,
        updated_at: 1_000,
        state: "active".into(),
        similar: vec![],
    };
    // A new user memory: ≥ 0.8.
    assert!(confidence(&m, &[], 1_000) >= 0.8);
    m.evidence = vec!["a".into(), "b".into(), "c".into()];
    assert!((confidence(&m, &[], 1_000) - 1.0).abs() < 1e-6);
    // Stale: ≤ 0.5 whatever else holds.
    let stale = [RefStatus::Stale {
        reason: "deleted".into(),
    }];
    assert!(confidence(&m, &stale, 1_000) <= 0.5);
    // Never verified, agent source, no evidence: 0.15 + 0 + 0.3 + 0.14.
    m.source = "agent".into();
    m.evidence.clear();
    m.code_refs = vec![CodeRef {
        repo: String::new(),
        path: "a.rs".into(),
        start_line: 1,
        end_line: 1,
        symbol_id: String::new(),
        git_commit: String::new(),
        code_hash: String::new(),
        created_at: 0,
        last_verified_at: None,
        stale_since: None,
        confidence: None,
        reason: String::new(),
    }];
    assert!((confidence(&m, &[RefStatus::Fresh], 0) - 0.59).abs() < 1e-6);
    // Verification decays linearly to 0 over 30 days.
    m.code_refs[0].last_verified_at = Some(0);
    let c15 = confidence(&m, &[RefStatus::Fresh], 15 * 86_400_000);
    assert!((c15 - (0.15 + 0.3 + 0.14)).abs() < 1e-6, "{c15}");
    for now in [0, 10 * 86_400_000, 400 * 86_400_000] {
        let c = confidence(&m, &[RefStatus::Fresh], now);
        assert!((0.0..=1.0).contains(&c));
    }
}
