//! What the memory tools take: code references and memories as agents write them (completed
//! and validated into records), the memory filters shared by listing, search and the graph
//! tools, and the input checks.

use format::memory::{
    clip, normalize_tag, validate_new_code_ref, validate_record, CodeRef, MemoryRecord,
};
use memory::coderefs::{self, FileError, RefCtx};
use memory::search::MemFilter;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::tools::common::{ToolError, ToolResult};

/// Most memories in one `add_memories` or `delete_memories` call.
pub const MAX_BATCH: usize = 256;

/// A code reference as a tool takes it: a `path` with lines, a `uri`, or a `symbol_id` /
/// `symbol` resolved through the code index. Missing parts are completed (see
/// [`CodeRefInput::complete`]).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeRefInput {
    /// Repository-relative path with `/` separators.
    #[serde(default)]
    pub path: Option<String>,
    /// First line, 1-based.
    #[serde(default)]
    pub start_line: Option<u32>,
    /// Last line, inclusive.
    #[serde(default)]
    pub end_line: Option<u32>,
    /// `file:<path>#L<start>-L<end>` instead of path and lines.
    #[serde(default)]
    pub uri: Option<String>,
    /// Repository name (needed only when several indexed roots hold the path).
    #[serde(default)]
    pub repo: Option<String>,
    /// The index's symbol id of the referenced code.
    #[serde(default)]
    pub symbol_id: Option<String>,
    /// A symbol name or qualified name (`Type::method`), resolved through the code index.
    #[serde(default)]
    pub symbol: Option<String>,
    /// Default: `HEAD` of the git work tree holding the file.
    #[serde(default)]
    pub git_commit: Option<String>,
    /// `sha256:` + 64 lower-case hex digits of the referenced lines; default: computed from
    /// the file.
    #[serde(default)]
    pub code_hash: Option<String>,
}

impl CodeRefInput {
    /// A complete reference: location from `uri`, path + lines or the symbol; path confined
    /// to the indexed roots; file and lines must exist; hash and git commit computed when not
    /// given. With no roots recorded in the index, the reference is kept as given (it cannot
    /// be verified). `repo`, `symbol_id`, `git_commit` and `code_hash` as given are checked
    /// first ([`validate_new_code_ref`]).
    pub fn complete(self, ctx: &RefCtx<'_>, now: i64) -> Result<CodeRef, String> {
        let given = CodeRef {
            repo: self.repo.clone().unwrap_or_default(),
            path: String::new(),
            start_line: 1,
            end_line: 1,
            symbol_id: self.symbol_id.clone().unwrap_or_default(),
            git_commit: self.git_commit.clone().unwrap_or_default(),
            code_hash: self.code_hash.clone().unwrap_or_default(),
            created_at: now,
            last_verified_at: None,
            stale_since: None,
            confidence: None,
            reason: String::new(),
        };
        validate_new_code_ref(&given).map_err(|e| e.to_string())?;
        let mut path = self.path.filter(|p| !p.trim().is_empty());
        let (mut start, mut end) = (self.start_line, self.end_line);
        if let Some(u) = &self.uri {
            let (p, a, b) = coderefs::parse_uri(u).map_err(|e| e.to_string())?;
            if path.as_ref().is_some_and(|x| x.trim() != p)
                || start.is_some_and(|x| x != a)
                || end.is_some_and(|x| x != b)
            {
                return Err(format!(
                    "`uri` {} disagrees with path/start_line/end_line",
                    clip(u)
                ));
            }
            path = Some(p);
            start = Some(a);
            end = Some(b);
        }
        let mut repo = self.repo.unwrap_or_default();
        let mut symbol_id = self.symbol_id.unwrap_or_default();
        let symbol = self.symbol.filter(|s| !s.trim().is_empty());
        if path.is_none() {
            let Some(sym) = (!symbol_id.is_empty())
                .then(|| symbol_id.clone())
                .or(symbol)
            else {
                return Err(
                    "a code reference needs a `path` with lines, a `uri` or a `symbol_id` / `symbol`"
                        .into(),
                );
            };
            let found = ctx.code.resolve(&sym);
            let node = match found.as_slice() {
                [n] => *n,
                [] => {
                    let close = ctx.code.suggest(&sym, 5);
                    return Err(format!(
                        "no indexed symbol `{}`{}",
                        clip(&sym),
                        if close.is_empty() {
                            String::new()
                        } else {
                            format!("; close names: {}", close.join(", "))
                        }
                    ));
                }
                many => {
                    return Err(format!(
                        "`{}` names {} symbols; pass one symbol_id: {}",
                        clip(&sym),
                        many.len(),
                        many.iter()
                            .take(5)
                            .map(|&n| ctx.code.chunk(n).symbol_id.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            };
            let c = ctx.code.chunk(node);
            let f = ctx.code.file(node);
            path = Some(f.path.to_string());
            if repo.is_empty() {
                repo = f.repo.to_string();
            }
            symbol_id = c.symbol_id.to_string();
            start = start.or(Some(c.start_line.to_native()));
            end = end.or(Some(c.end_line.to_native()));
        }
        let path =
            coderefs::clean_path(path.as_deref().unwrap_or_default()).map_err(|e| e.to_string())?;
        let (Some(start), Some(end)) = (start, end.or(start)) else {
            return Err(format!(
                "code reference `{path}` needs `start_line` and `end_line` (or a uri ending in #L<start>-L<end>)"
            ));
        };
        if start == 0 || end < start {
            return Err(format!(
                "code reference lines {start}-{end} are invalid: lines are 1-based and end ≥ start"
            ));
        }
        let mut r = CodeRef {
            repo,
            path,
            start_line: start,
            end_line: end,
            symbol_id,
            git_commit: self.git_commit.unwrap_or_default(),
            code_hash: self.code_hash.unwrap_or_default(),
            created_at: now,
            last_verified_at: None,
            stale_since: None,
            confidence: None,
            reason: String::new(),
        };
        let Some((root, full)) =
            coderefs::resolve_readable(ctx, &r.repo, &r.path).map_err(|e| e.to_string())?
        else {
            r.reason = "unverified: the index records no source roots".into();
            return Ok(r);
        };
        r.repo = root.repo.clone();
        let view = ctx.cache.get(&full, &root).map_err(|e| match e {
            FileError::Missing => format!(
                "code reference `{}`: no such file under the root {} of `{}`",
                clip(&r.path),
                root.path,
                root.repo
            ),
            FileError::TooLarge { size, limit } => format!(
                "code reference `{}` (under the root {} of `{}`): the file is {size} bytes, over the {limit}-byte ({} MiB) limit on files code references name; reference a smaller file",
                clip(&r.path),
                root.path,
                root.repo,
                limit >> 20
            ),
            FileError::Unreadable(why) => format!(
                "code reference `{}` (under the root {} of `{}`): the file cannot be read: {why}",
                clip(&r.path),
                root.path,
                root.repo
            ),
        })?;
        let current = coderefs::block_hash(&view.lines, start, end).ok_or_else(|| {
            format!(
                "code reference `{}` lines {start}-{end}: the file has {} lines",
                r.path,
                view.lines.len()
            )
        })?;
        // A given `code_hash` was checked by `validate_new_code_ref`.
        if r.code_hash.is_empty() {
            r.code_hash = current.clone();
        }
        if r.code_hash == current {
            r.last_verified_at = Some(now);
        }
        if r.git_commit.is_empty() {
            r.git_commit = coderefs::git_head(&full).unwrap_or_default();
        }
        if r.symbol_id.is_empty() {
            r.symbol_id = ctx
                .code
                .innermost_symbol(&r.path, start, end)
                .unwrap_or_default();
        }
        Ok(r)
    }
}

/// One memory to add.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryInput {
    /// What to remember: one fact, decision or lesson (at most 16 KiB).
    pub text: String,
    /// Free-form kind, e.g. `decision`, `bug`, `convention`, `preference` (default `note`).
    #[serde(default)]
    pub category: Option<String>,
    /// `user`, `session`, `project` (default), `team` or `org`.
    #[serde(default)]
    pub scope: Option<String>,
    /// What the memory is about (a component, service, person…).
    #[serde(default)]
    pub entity: Option<String>,
    /// `key` or `key=value`.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// `user`, `agent` (default) or `inferred`.
    #[serde(default)]
    pub source: Option<String>,
    /// References backing the memory (ADRs, PRs, URLs).
    #[serde(default)]
    pub evidence: Option<Vec<String>>,
    /// Code the memory is about.
    #[serde(default)]
    pub code_refs: Option<Vec<CodeRefInput>>,
    /// The session (a conversation, a work session, a ticket) the memory belongs to, stored as
    /// the tag `session=<id>`: search scores a memory together with the other memories of its
    /// session.
    #[serde(default)]
    pub session: Option<String>,
    /// When what the memory records happened: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC),
    /// default now. Stored as `created_at`, which time filters, recency and relative dates in
    /// questions ("last May") read.
    #[serde(default)]
    pub time: Option<String>,
}

/// Parses `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS[.fff]][Z]` (UTC) into Unix milliseconds.
pub fn parse_time(what: &str, s: &str) -> ToolResult<i64> {
    memory::time::parse_utc(s).ok_or_else(|| {
        ToolError::InvalidInput(format!(
            "`{what}` = `{}` is not a date; use YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC)",
            format::memory::clip(s)
        ))
    })
}

/// Canonical, sorted, unique tags.
pub fn canonical_tags(tags: &[String]) -> ToolResult<Vec<String>> {
    let mut out = tags
        .iter()
        .map(|t| normalize_tag(t).map_err(|e| ToolError::InvalidInput(e.to_string())))
        .collect::<ToolResult<Vec<_>>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// Completes a tool's code references (see [`CodeRefInput::complete`]).
pub(crate) fn complete_refs(
    refs: Option<Vec<CodeRefInput>>,
    ctx: &RefCtx<'_>,
    now: i64,
) -> ToolResult<Vec<CodeRef>> {
    refs.unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.complete(ctx, now)
                .map_err(|e| ToolError::InvalidInput(format!("code_refs[{i}]: {e}")))
        })
        .collect()
}

pub(crate) fn record_from(
    input: MemoryInput,
    id: String,
    now: i64,
    code_refs: Vec<CodeRef>,
) -> ToolResult<MemoryRecord> {
    let created = match input.time.as_deref() {
        Some(t) => parse_time("time", t)?,
        None => now,
    };
    let mut tags = input.tags.unwrap_or_default();
    if let Some(s) = input.session.as_deref().map(str::trim) {
        if s.is_empty() {
            return Err(ToolError::InvalidInput(
                "`session` is empty; leave it out or name the session".into(),
            ));
        }
        tags.retain(|t| format::memory::tag_key(t.trim()) != memory::search::SESSION_TAG);
        tags.push(format!("{}={s}", memory::search::SESSION_TAG));
    }
    let r = MemoryRecord {
        id,
        text: input.text,
        category: input
            .category
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "note".into()),
        scope: input.scope.unwrap_or_else(|| "project".into()),
        entity: input
            .entity
            .map(|e| e.trim().to_string())
            .unwrap_or_default(),
        tags: canonical_tags(&tags)?,
        source: input.source.unwrap_or_else(|| "agent".into()),
        evidence: input.evidence.unwrap_or_default(),
        code_refs,
        created_at: created,
        updated_at: now.max(created),
        state: "active".into(),
        similar: vec![],
    };
    validate_record(&r).map_err(|e| ToolError::InvalidInput(e.to_string()))?;
    Ok(r)
}

/// Filters shared by `list_memories` and `search_memory`.
#[derive(Debug, Clone, Default)]
pub struct MemoryFilterArgs {
    pub category: Option<String>,
    pub scope: Option<String>,
    pub entity: Option<String>,
    pub source: Option<String>,
    pub tags: Option<Vec<String>>,
    pub tags_mode: Option<String>,
    pub created_after: Option<String>,
    pub created_before: Option<String>,
    pub state: Option<String>,
}

/// Declares an argument struct with the memory filter fields inline (serde's `flatten` cannot
/// be combined with `deny_unknown_fields`, which unknown-argument errors need).
macro_rules! with_memory_filters {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
            /// Only this category (exact).
            #[serde(default)]
            pub category: Option<String>,
            /// Only this scope: user, session, project, team or org.
            #[serde(default)]
            pub scope: Option<String>,
            /// Only memories about this entity (case-insensitive).
            #[serde(default)]
            pub entity: Option<String>,
            /// Only this source: user, agent or inferred.
            #[serde(default)]
            pub source: Option<String>,
            /// Only memories with these tags: `key` (any value) or `key=value`.
            #[serde(default)]
            pub tags: Option<Vec<String>>,
            /// `all` (default) or `any` of `tags`.
            #[serde(default)]
            pub tags_mode: Option<String>,
            /// Created at or after this time: YYYY-MM-DD or RFC 3339, UTC.
            #[serde(default)]
            pub created_after: Option<String>,
            /// Created before this time.
            #[serde(default)]
            pub created_before: Option<String>,
            /// `active` (default), `archived`, `deleted` or `all`.
            #[serde(default)]
            pub state: Option<String>,
        }

        impl $name {
            pub(crate) fn filter_args(&self) -> MemoryFilterArgs {
                MemoryFilterArgs {
                    category: self.category.clone(),
                    scope: self.scope.clone(),
                    entity: self.entity.clone(),
                    source: self.source.clone(),
                    tags: self.tags.clone(),
                    tags_mode: self.tags_mode.clone(),
                    created_after: self.created_after.clone(),
                    created_before: self.created_before.clone(),
                    state: self.state.clone(),
                }
            }
        }
    };
}

pub(crate) use with_memory_filters;

impl MemoryFilterArgs {
    pub(crate) fn filter(&self) -> ToolResult<MemFilter> {
        let one = |what: &str,
                   v: &Option<String>,
                   allowed: &[&str]|
         -> ToolResult<Option<String>> {
            match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(s) if allowed.is_empty() || allowed.contains(&s) => Ok(Some(s.to_string())),
                Some(s) => Err(ToolError::InvalidInput(format!(
                    "unknown {what} `{}`; expected one of: {}",
                    format::memory::clip(s),
                    allowed.join(", ")
                ))),
            }
        };
        let states = match self.state.as_deref().map(str::trim) {
            None | Some("") | Some("active") => vec!["active".to_string()],
            Some("all") => format::memory::STATES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            Some(s) if format::memory::STATES.contains(&s) => vec![s.to_string()],
            Some(s) => {
                return Err(ToolError::InvalidInput(format!(
                    "unknown state `{}`; expected active, archived, deleted or all",
                    format::memory::clip(s)
                )))
            }
        };
        Ok(MemFilter {
            category: one("category", &self.category, &[])?,
            scope: one("scope", &self.scope, &format::memory::SCOPES)?,
            entity: one("entity", &self.entity, &[])?,
            source: one("source", &self.source, &format::memory::SOURCES)?,
            tags: canonical_tags(self.tags.as_deref().unwrap_or_default())?,
            tags_all: match self.tags_mode.as_deref() {
                None | Some("all") => true,
                Some("any") => false,
                Some(m) => {
                    return Err(ToolError::InvalidInput(format!(
                        "unknown tags_mode `{}`; expected all or any",
                        format::memory::clip(m)
                    )))
                }
            },
            created_after: self
                .created_after
                .as_deref()
                .map(|s| parse_time("created_after", s))
                .transpose()?,
            created_before: self
                .created_before
                .as_deref()
                .map(|s| parse_time("created_before", s))
                .transpose()?,
            states,
        })
    }
}

pub(crate) fn one_of(
    what: &str,
    v: Option<String>,
    allowed: &[&str],
) -> ToolResult<Option<String>> {
    match v {
        Some(s) if !allowed.contains(&s.as_str()) => Err(ToolError::InvalidInput(format!(
            "unknown {what} `{}`; expected one of: {}",
            format::memory::clip(&s),
            allowed.join(", ")
        ))),
        v => Ok(v),
    }
}

pub(crate) fn check_id(id: &str) -> ToolResult<()> {
    if format::memory::is_uuid(id) {
        Ok(())
    } else {
        Err(ToolError::InvalidInput(format!(
            "`{}` is not a memory id; ids are lower-case UUIDs as returned by add_memories",
            id.chars().take(80).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::manifest::RootEntry;
    use memory::coderefs::{FileCache, MAX_FILE_BYTES};

    struct Fx {
        _index: tempfile::TempDir,
        root: tempfile::TempDir,
        roots: Vec<RootEntry>,
        code: code::CodeView,
        cache: FileCache,
    }

    fn fixture() -> Fx {
        let index = tempfile::tempdir().unwrap();
        format::IndexManifest::empty("m", 4)
            .commit(index.path())
            .unwrap();
        let code = code::CodeView::open(index.path()).unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("src")).unwrap();
        std::fs::write(root.path().join("src/a.rs"), "fn a() {\n    1\n}\n").unwrap();
        let roots = vec![RootEntry {
            repo: "app".into(),
            path: std::fs::canonicalize(root.path())
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            ..RootEntry::default()
        }];
        Fx {
            _index: index,
            root,
            roots,
            code,
            cache: FileCache::default(),
        }
    }

    impl Fx {
        fn complete(&self, r: CodeRefInput) -> Result<CodeRef, String> {
            self.complete_with(&self.roots, r)
        }

        fn complete_with(&self, roots: &[RootEntry], r: CodeRefInput) -> Result<CodeRef, String> {
            let ctx = RefCtx {
                roots,
                cache: &self.cache,
                code: &self.code,
            };
            r.complete(&ctx, 1_000)
        }
    }

    fn at(path: &str, start: u32, end: u32) -> CodeRefInput {
        CodeRefInput {
            path: Some(path.into()),
            start_line: Some(start),
            end_line: Some(end),
            ..Default::default()
        }
    }

    #[test]
    fn complete_computes_and_checks_the_hash() {
        let fx = fixture();
        let r = fx.complete(at("src/a.rs", 1, 3)).unwrap();
        assert_eq!(r.repo, "app");
        assert!(
            format::memory::is_code_hash(&r.code_hash),
            "{}",
            r.code_hash
        );
        assert_eq!(r.last_verified_at, Some(1_000));
        // The same hash given: verified; another well-formed one: kept, not verified.
        let same = fx
            .complete(CodeRefInput {
                code_hash: Some(r.code_hash.clone()),
                ..at("src/a.rs", 1, 3)
            })
            .unwrap();
        assert_eq!(same.last_verified_at, Some(1_000));
        let other = format!("sha256:{}", "0".repeat(64));
        let kept = fx
            .complete(CodeRefInput {
                code_hash: Some(other.clone()),
                ..at("src/a.rs", 1, 3)
            })
            .unwrap();
        assert_eq!((kept.code_hash, kept.last_verified_at), (other, None));
        // Malformed hashes are refused, with the value clipped, roots or not.
        for bad in [
            "sha256:abc".to_string(),
            format!("sha256:{}", r.code_hash[7..].to_uppercase()),
            format!("sha256:{}0", &r.code_hash[7..]),
            format!("sha256:{}", "f".repeat(100_000)),
        ] {
            for roots in [&fx.roots[..], &[]] {
                let e = fx
                    .complete_with(
                        roots,
                        CodeRefInput {
                            code_hash: Some(bad.clone()),
                            ..at("src/a.rs", 1, 3)
                        },
                    )
                    .unwrap_err();
                assert!(e.contains("64 lower-case hex digits"), "{e}");
                assert!(e.len() < 300, "clipped: {e}");
            }
        }
    }

    #[test]
    fn complete_refuses_bad_fields() {
        let fx = fixture();
        let with = |f: &dyn Fn(&mut CodeRefInput)| {
            let mut r = at("src/a.rs", 1, 3);
            f(&mut r);
            fx.complete(r).unwrap_err()
        };
        let e = with(&|r| r.git_commit = Some(format!("\x1b[31m{}", "a".repeat(100_000))));
        assert!(
            e.contains("`git_commit` is 100005 bytes; at most 256"),
            "{e}"
        );
        let e = with(&|r| r.git_commit = Some("abc\x1b[2J".into()));
        assert!(e.contains("git_commit") && e.contains("U+001B"), "{e}");
        let e = with(&|r| r.symbol_id = Some("s".repeat(1025)));
        assert!(e.contains("`symbol_id` is 1025 bytes; at most 1024"), "{e}");
        let e = with(&|r| r.symbol_id = Some("a\u{7}b".into()));
        assert!(e.contains("symbol_id") && e.contains("U+0007"), "{e}");
        let e = with(&|r| r.repo = Some("app\u{0}".into()));
        assert!(e.contains("repo") && e.contains("U+0000"), "{e}");
        let e = with(&|r| r.repo = Some("r".repeat(300)));
        assert!(e.contains("`repo` is 300 bytes"), "{e}");
        let e = fx.complete(at(".git/config", 1, 1)).unwrap_err();
        assert!(e.contains("`.git`"), "{e}");
        let e = fx.complete(at("sub/.git/HEAD", 1, 1)).unwrap_err();
        assert!(e.contains("`.git`"), "{e}");
    }

    /// A file over the size limit is not read: the error names the file, its size and the
    /// limit (not "no such file").
    #[test]
    fn complete_refuses_files_over_the_limit() {
        let fx = fixture();
        let f = std::fs::File::create(fx.root.path().join("src/huge.rs")).unwrap();
        f.set_len(MAX_FILE_BYTES + 10).unwrap();
        let e = fx.complete(at("src/huge.rs", 1, 1)).unwrap_err();
        assert!(
            e.contains("src/huge.rs")
                && e.contains(&format!("{} bytes", MAX_FILE_BYTES + 10))
                && e.contains(&format!("{MAX_FILE_BYTES}-byte (16 MiB) limit")),
            "{e}"
        );
        assert!(!e.contains("no such file"), "{e}");
        let e = fx.complete(at("src/none.rs", 1, 1)).unwrap_err();
        assert!(e.contains("no such file"), "{e}");
    }
}
