//! The `indexer` and `queryd` binaries together, as a user runs them: what a build reads is
//! what `queryd search` can return, so a symlink leading out of the repository must not bring
//! outside files into the index.

mod common;

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_queryd");

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env("CIX_MODEL_DIR", common::model_dir())
        .output()
        .expect("run a binary")
}

fn described(what: &str, o: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A repository linking to a file and a directory outside it: `indexer build` skips both as
/// `outside root` (naming them), and `queryd search` for a word only they hold finds nothing;
/// with `--follow-external-symlinks` the same search finds it. Links inside it to a hidden file
/// and into a git-ignored directory are skipped in either mode (named), until `--hidden
/// --no-ignore` lets their targets in.
#[cfg(unix)]
#[test]
fn symlinks_out_of_the_repository_are_not_indexed() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(outside.join("lib")).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(
        outside.join("passwd.py"),
        "SECRET = 'xylophagous_quokka_secret'\n",
    )
    .unwrap();
    std::fs::write(
        outside.join("lib/vendored.py"),
        "def gallimaufry_vendored_helper():\n    return 'gallimaufry'\n",
    )
    .unwrap();
    std::fs::write(repo.join("app.py"), "def main():\n    return 1\n").unwrap();
    std::os::unix::fs::symlink(outside.join("passwd.py"), repo.join("passwd.py")).unwrap();
    std::os::unix::fs::symlink(outside.join("lib"), repo.join("vendor")).unwrap();
    std::fs::create_dir_all(repo.join("secrets")).unwrap();
    std::fs::write(repo.join(".gitignore"), "secrets/\n").unwrap();
    std::fs::write(repo.join(".env"), "TOKEN = 'ptarmigan_env_secret'\n").unwrap();
    std::fs::write(
        repo.join("secrets/keys.py"),
        "KEY = 'quillwort_ignored_key'\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(".env", repo.join("settings.py")).unwrap();
    std::os::unix::fs::symlink("secrets/keys.py", repo.join("keys.py")).unwrap();
    let indexer = cix_tests::sibling_bin(BIN, "indexer");
    let index = tmp.path().join("index");
    let (repo_s, index_s) = (repo.to_str().unwrap(), index.to_str().unwrap());

    let o = run(&indexer, &["build", repo_s, "--out", index_s, "--quiet"]);
    assert!(o.status.success(), "{}", described("build", &o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("2 outside root") && out.contains("2 symlink to an excluded path"),
        "{}",
        described("build", &o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("passwd.py") && err.contains("vendor") && err.contains("outside the root"),
        "{}",
        described("build", &o)
    );
    for link in ["settings.py", "keys.py"] {
        assert!(
            err.lines()
                .any(|l| l.contains(link) && l.contains("hidden-file rule leave out")),
            "{}",
            described("build", &o)
        );
    }
    let search = |word: &str| {
        let o = run(
            Path::new(BIN),
            &[
                "search", "--index", index_s, "--mode", "lexical", "--json", word,
            ],
        );
        assert!(o.status.success(), "{}", described("search", &o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for word in ["xylophagous_quokka_secret", "gallimaufry_vendored_helper"] {
        let hits = search(word);
        assert!(
            !hits.contains(&format!("{word}'"))
                && !hits.contains("vendored.py")
                && !hits.contains("passwd.py"),
            "{word} leaked: {hits}"
        );
    }
    let excluded_unfound = |what: &str| {
        for word in ["ptarmigan_env_secret", "quillwort_ignored_key"] {
            let hits = search(word);
            assert!(
                !hits.contains(word) && !hits.contains("settings.py") && !hits.contains("keys.py"),
                "{what}: {word} leaked: {hits}"
            );
        }
    };
    excluded_unfound("default build");

    // Asked for explicitly, the links are followed.
    let o = run(
        &indexer,
        &[
            "build",
            repo_s,
            "--out",
            index_s,
            "--quiet",
            "--follow-external-symlinks",
        ],
    );
    assert!(
        o.status.success(),
        "{}",
        described("build --follow-external-symlinks", &o)
    );
    assert!(search("xylophagous_quokka_secret").contains("passwd.py"));
    assert!(search("gallimaufry_vendored_helper").contains("vendor/vendored.py"));
    excluded_unfound("--follow-external-symlinks");

    let o = run(
        &indexer,
        &[
            "build",
            repo_s,
            "--out",
            index_s,
            "--quiet",
            "--hidden",
            "--no-ignore",
        ],
    );
    assert!(
        o.status.success(),
        "{}",
        described("build --hidden --no-ignore", &o)
    );
    assert!(search("ptarmigan_env_secret").contains("settings.py"));
    assert!(search("quillwort_ignored_key").contains("keys.py"));
}

/// `--device`: `queryd search --device cpu` embeds on the CPU and answers; in a build without
/// GPU backends `auto` says so (`--debug` names the encoder's device) and an explicit GPU
/// device is refused with the feature to rebuild with, before anything is searched.
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
#[test]
fn search_device_choice_is_explicit() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(
        repo.join("app.py"),
        "def parse_config(path):\n    return open(path).read()\n",
    )
    .unwrap();
    let indexer = cix_tests::sibling_bin(BIN, "indexer");
    let index = tmp.path().join("index");
    let (repo_s, index_s) = (repo.to_str().unwrap(), index.to_str().unwrap());
    let o = run(&indexer, &["build", repo_s, "--out", index_s, "--quiet"]);
    assert!(o.status.success(), "{}", described("build", &o));

    let search = |device: &str| {
        run(
            Path::new(BIN),
            &[
                "search",
                "--index",
                index_s,
                "--device",
                device,
                "--debug",
                "--json",
                "read the configuration file",
            ],
        )
    };
    for device in ["cpu", "auto"] {
        let o = search(device);
        assert!(o.status.success(), "{}", described(device, &o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("parse_config"),
            "{}",
            described(device, &o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("encoder: cpu"), "{}", described(device, &o));
        if device == "auto" {
            assert!(
                err.contains("built without GPU features"),
                "{}",
                described(device, &o)
            );
        }
    }
    for device in ["cuda", "wgpu"] {
        let o = search(device);
        assert!(!o.status.success(), "{}", described(device, &o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("rebuild with --features {device}")),
            "{}",
            described(device, &o)
        );
    }
}

/// `queryd search --path` reads an absolute path inside the indexed root as the same path
/// relative to it (an agent's or a shell's absolute path finds what the relative one finds),
/// anchored at the root for a pattern right under it, and refuses one outside every root.
#[test]
fn search_paths_may_be_absolute_inside_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("sub")).unwrap();
    std::fs::write(
        repo.join("app.py"),
        "def parse_config(path):\n    return open(path).read()\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("sub/other.py"),
        "def parse_config_again(path):\n    return open(path).read()\n",
    )
    .unwrap();
    let indexer = cix_tests::sibling_bin(BIN, "indexer");
    let index = tmp.path().join("index");
    let (repo_s, index_s) = (repo.to_str().unwrap(), index.to_str().unwrap());
    let o = run(&indexer, &["build", repo_s, "--out", index_s, "--quiet"]);
    assert!(o.status.success(), "{}", described("build", &o));
    let root = std::fs::canonicalize(&repo).unwrap();
    let root = root.to_str().unwrap();
    let paths = |path: &str| -> Result<Vec<String>, String> {
        let o = run(
            Path::new(BIN),
            &[
                "search",
                "--index",
                index_s,
                "--mode",
                "lexical",
                "--json",
                "--path",
                path,
                "parse_config",
            ],
        );
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).into_owned());
        }
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let mut p: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["path"].as_str().unwrap().to_string())
            .collect();
        p.sort();
        p.dedup();
        Ok(p)
    };
    assert_eq!(paths("sub/").unwrap(), ["sub/other.py"]);
    assert_eq!(paths(&format!("{root}/sub")).unwrap(), ["sub/other.py"]);
    assert_eq!(paths(&format!("{root}/*.py")).unwrap(), ["app.py"]);
    assert_eq!(
        paths(&format!("{root}/**/*.py")).unwrap(),
        ["app.py", "sub/other.py"]
    );
    let err = paths("/not/an/indexed/root").unwrap_err();
    assert!(err.contains("not inside an indexed root"), "{err}");
}
