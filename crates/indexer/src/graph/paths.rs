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
    crate_src(path).to_string()
}

/// [`rust_crate_src`] as a prefix of `path` (the path up to its last `src` directory, or
/// the file's directory when there is none).
pub(super) fn crate_src(path: &str) -> &str {
    let dir = dir_of(path);
    let mut from = 0;
    let mut end = None;
    for seg in dir.split('/') {
        if seg == "src" {
            end = Some(from + seg.len());
        }
        from += seg.len() + 1;
    }
    end.map_or(dir, |e| &path[..e])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_src_is_the_last_src_directory_above_the_file() {
        for (path, want) in [
            ("a/src/lib.rs", "a/src"),
            ("src/main.rs", "src"),
            ("a/src/x/src/y/z.rs", "a/src/x/src"),
            ("a/srcs/b.rs", "a/srcs"),
            ("a/b/c.rs", "a/b"),
            ("c.rs", ""),
            ("src", ""),
            ("a/src", "a"),
        ] {
            assert_eq!(crate_src(path), want, "{path}");
            assert_eq!(rust_crate_src(path), want, "{path}");
        }
    }
}
