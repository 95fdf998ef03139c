//! Repository-relative path helpers (`/` separators) for import and call resolution.

pub(super) fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
}

pub(super) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

pub(super) fn join(dir: &str, rest: &str) -> String {
    if dir.is_empty() {
        rest.to_string()
    } else if rest.is_empty() {
        dir.to_string()
    } else {
        format!("{dir}/{rest}")
    }
}

/// Resolves `.` and `..` segments; `None` when the path leaves the repository.
pub(super) fn normalize(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            s => out.push(s),
        }
    }
    Some(out.join("/"))
}

/// Directory holding the submodules of a Rust file's module.
pub(super) fn rust_mod_dir(path: &str) -> String {
    let name = file_name(path);
    let dir = dir_of(path);
    if matches!(name, "mod.rs" | "lib.rs" | "main.rs") {
        dir.to_string()
    } else {
        join(dir, name.trim_end_matches(".rs"))
    }
}

/// The `src` directory of the crate a Rust file belongs to.
pub(super) fn rust_crate_src(path: &str) -> String {
    let segs: Vec<&str> = path.split('/').collect();
    if let Some(i) = segs[..segs.len().saturating_sub(1)]
        .iter()
        .rposition(|s| *s == "src")
    {
        return segs[..=i].join("/");
    }
    dir_of(path).to_string()
}
