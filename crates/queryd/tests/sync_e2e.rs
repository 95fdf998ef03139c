//! Segment sync end to end against a real S3-compatible server on loopback (moto's server
//! mode, installed by `scripts/setup.sh` into `.cache/moto`), a `file://` store, plain HTTP
//! (`python3 -m http.server` over a `file://` push) and `queryd --follow`: round trip with
//! identical search results, incremental pushes that upload only the new segment (counted
//! requests), pushes and pulls stopped part-way (nothing half-visible, the rerun completes and
//! resumes), corrupt / truncated / wrong-hash / missing objects (refused, local index
//! unchanged), two pushers racing for one generation (exactly one wins), remote GC.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use code::SearchOptions;
use sync::{PendingPush, PullOptions, PushOptions, Remote, SyncError};

const BIN: &str = env!("CARGO_BIN_EXE_queryd");
const BUCKET: &str = "cix";

// ---------------------------------------------------------------------------------------------
// A moto server for the whole test binary.

/// The watchdog process that runs moto (kept for the life of the test binary).
struct Moto(#[allow(dead_code)] Child);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `PYTHONPATH` for the Python helpers: `.cache/moto` where `scripts/setup.sh` installs moto.
fn python() -> Command {
    let mut c = Command::new("python3");
    let cached = cix_tests::workspace_root().join(".cache/moto");
    if cached.is_dir() {
        let mut path = cached.into_os_string();
        if let Some(old) = std::env::var_os("PYTHONPATH") {
            path.push(":");
            path.push(old);
        }
        c.env("PYTHONPATH", path);
    }
    c
}

/// One raw HTTP/1.1 request to `127.0.0.1:port` (creating the bucket: object_store does not
/// create buckets): the status and the body.
fn http(port: u16, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8_lossy(&out[..split]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, out[split + 4..].to_vec())
}

fn wait_for_port(port: u16, what: &str) {
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{what} did not start listening on port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts moto once (it exits with this test process: a watchdog shell kills it when the test
/// process is gone), creates the bucket and points the `AWS_*` variables at it.
fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(|| {
        let probe = python().args(["-c", "import moto.server"]).output();
        assert!(
            probe.as_ref().is_ok_and(|o| o.status.success()),
            "moto is not installed: run ./scripts/setup.sh (it installs moto[server,s3] into \
             .cache/moto): {probe:?}"
        );
        let port = free_port();
        let me = std::process::id();
        let child = python()
            .args([
                "-c",
                &format!(
                    "import os, subprocess, sys, time\n\
                     p = subprocess.Popen([sys.executable, '-m', 'moto.server', '-H', '127.0.0.1', '-p', '{port}'],\n\
                     \x20   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\
                     while True:\n\
                     \x20   time.sleep(0.5)\n\
                     \x20   try:\n\
                     \x20       os.kill({me}, 0)\n\
                     \x20   except OSError:\n\
                     \x20       p.kill(); break\n\
                     \x20   if p.poll() is not None: break\n"
                ),
            ])
            .spawn()
            .expect("start the moto watchdog");
        wait_for_port(port, "moto");
        let (status, body) = http(port, "PUT", &format!("/{BUCKET}"), b"");
        assert!(
            status == 200,
            "creating the bucket: {status} {}",
            String::from_utf8_lossy(&body)
        );
        // SAFETY: set once, before any test thread reads them (they all go through here first).
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ] {
            std::env::set_var(k, v);
        }
        Moto(child)
    })
}

/// A fresh prefix of the bucket.
fn s3(name: &str) -> Remote {
    moto();
    Remote::open(&format!("s3://{BUCKET}/{name}-{}", std::process::id())).unwrap()
}

/// The key of `rel` of `remote` in the bucket.
fn object(remote: &Remote, rel: &str) -> String {
    let prefix = remote
        .url()
        .strip_prefix(&format!("s3://{BUCKET}/"))
        .unwrap();
    format!("{prefix}/{rel}")
}

/// Reads, writes or (`None`) deletes an object of the bucket directly, around our code.
fn raw(key: &str, write: Option<Option<&[u8]>>) -> Option<Vec<u8>> {
    use object_store::ObjectStoreExt;
    moto();
    let store = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(BUCKET)
        .build()
        .unwrap();
    let key = object_store::path::Path::from(key);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match write {
            None => Some(
                store
                    .get(&key)
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap()
                    .to_vec(),
            ),
            Some(Some(bytes)) => {
                store.put(&key, bytes.to_vec().into()).await.unwrap();
                None
            }
            Some(None) => {
                store.delete(&key).await.unwrap();
                None
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Indexes and what they answer.

/// What a few queries (lexical, vector, hybrid) return: path, symbol, rank order and score.
fn answers(dir: &Path) -> Vec<Vec<(String, String, u32)>> {
    let ix = format::Index::open(dir).unwrap();
    let q = cix_tests::embed_one("edit distance between two strings");
    let mut out: Vec<Vec<(String, String, u32)>> = Vec::new();
    for (text, vec) in [
        ("edit distance between two strings", Some(q.as_slice())),
        ("fetchPendingTodos", None),
        ("area of a circle", None),
    ] {
        let (hits, _) = code::search(&ix, text, vec, &SearchOptions::default()).unwrap();
        out.push(
            hits.iter()
                .map(|h| (h.path.clone(), h.symbol_id.clone(), h.score.to_bits()))
                .collect(),
        );
    }
    assert!(out.iter().all(|a| !a.is_empty()), "{out:?}");
    out
}

/// Edits one file of the fixture and rebuilds the index incrementally: one new segment.
fn change_one_file(ix: &cix_tests::Indexed, marker: &str) {
    let p = ix.repo.join("src/lib.rs");
    let mut text = std::fs::read_to_string(&p).unwrap();
    text.push_str(&format!(
        "\n/// {marker}\npub fn {marker}_helper() -> u32 {{ 7 }}\n"
    ));
    std::fs::write(&p, text).unwrap();
    cix_tests::build_index(&ix.repo, &ix.index);
}

fn generation(dir: &Path) -> u64 {
    format::IndexManifest::read(dir).unwrap().generation
}

fn code_segments(dir: &Path) -> usize {
    format::IndexManifest::read(dir).unwrap().segments.len()
}

fn push(dir: &Path, remote: &Remote) -> sync::PushReport {
    sync::push(dir, remote, &PushOptions::default()).unwrap()
}

fn pull(remote: &Remote, dir: &Path) -> sync::PullReport {
    sync::pull(remote, dir, &PullOptions::default()).unwrap()
}

// ---------------------------------------------------------------------------------------------

/// Push → pull → identical answers; an unchanged pull moves only the pointer; an unchanged push
/// commits nothing; after a one-file change the push uploads exactly the new segment (and its
/// tombstone file) and the pull downloads only it. Every file goes up as a multipart upload.
#[test]
fn s3_round_trip_then_incremental() {
    let ix = cix_tests::indexed_fixture();
    let remote = s3("round-trip");
    let segments = code_segments(&ix.index);
    let opts = PushOptions {
        multipart_threshold: 1,
        ..PushOptions::default()
    };
    let r = sync::push(&ix.index, &remote, &opts).unwrap();
    assert!(r.committed && r.generation == 1, "{r:?}");
    assert_eq!((r.segments_uploaded, r.segments_reused), (segments, 0));

    let local = ix.tmp.path().join("pulled");
    let p = pull(&remote, &local);
    assert_eq!(
        (p.generation, p.segments_downloaded),
        (1, segments),
        "{p:?}"
    );
    assert_eq!(answers(&local), answers(&ix.index));
    assert!(indexer::inspect::verify(&local).is_empty());

    // Nothing changed: the pointer, one probe and the manifest are all a pull reads.
    let again = pull(&remote, &local);
    assert!(again.up_to_date, "{again:?}");
    let [gets, heads, puts, deletes, lists, up, _down] = again.requests;
    assert_eq!((gets, heads, puts, deletes, lists, up), (2, 1, 0, 0, 0, 0));
    let unchanged = push(&ix.index, &remote);
    assert!(!unchanged.committed && unchanged.generation == 1);
    assert_eq!(unchanged.files_uploaded, 0);

    // One file changed: one new segment (plus the old segment's tombstone file).
    change_one_file(&ix, "sync_marker");
    assert_eq!(code_segments(&ix.index), segments + 1);
    let before = remote.stats().snapshot();
    let r2 = push(&ix.index, &remote);
    assert!(r2.committed && r2.generation == 2, "{r2:?}");
    assert_eq!((r2.segments_uploaded, r2.segments_reused), (1, segments));
    let m = format::IndexManifest::read(&ix.index).unwrap();
    let new = m.segments.last().unwrap();
    let new_files = format::Segment::open(&ix.index, &new.id, &m.model_id, m.dim)
        .unwrap()
        .meta()
        .files
        .len()
        + 1;
    let tombstones = m.segments.iter().filter(|s| s.tombstones.is_some()).count();
    assert_eq!(r2.files_uploaded, new_files + tombstones, "{r2:?}");
    // Puts: the two probe puts, the new files, the tombstone files, the reused segments' seals
    // again (their new age keeps a concurrent gc-remote away), the manifest, `latest`.
    let puts = remote.stats().snapshot()[2] - before[2];
    assert_eq!(puts as usize, 2 + new_files + tombstones + segments + 2);

    let p2 = pull(&remote, &local);
    assert_eq!(
        (p2.segments_downloaded, p2.segments_present),
        (1, segments),
        "{p2:?}"
    );
    assert_eq!(answers(&local), answers(&ix.index));
    assert_eq!(generation(&local), 2);
}

/// Two pushers prepared against the same generation: the first commit wins, the second is
/// told so and changes nothing; its rerun commits the next generation.
#[test]
fn s3_two_pushers_race_for_one_generation() {
    let a = cix_tests::indexed_fixture();
    let b = cix_tests::indexed_fixture();
    change_one_file(&b, "other_pusher");
    let remote = s3("race");
    let pa = PendingPush::prepare(&a.index, &remote, &PushOptions::default())
        .unwrap()
        .unwrap();
    let pb = PendingPush::prepare(&b.index, &remote, &PushOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!((pa.generation(), pb.generation()), (1, 1));
    let won = pa.commit().unwrap();
    assert!(won.committed && won.generation == 1);
    match pb.commit() {
        Err(SyncError::Conflict { generation: 1, .. }) => {}
        other => panic!("the second pusher must lose generation 1: {other:?}"),
    }
    let local = a.tmp.path().join("pulled");
    assert_eq!(pull(&remote, &local).generation, 1);
    assert_eq!(answers(&local), answers(&a.index));
    let rerun = push(&b.index, &remote);
    assert_eq!(rerun.generation, 2);
    assert_eq!(pull(&remote, &local).generation, 2);
    assert_eq!(answers(&local), answers(&b.index));
}

/// A push stopped after two uploads leaves the remote at its generation (pulls see the old
/// index); the rerun skips what was uploaded. A pull stopped after two files leaves the local
/// index as it was; the rerun resumes from the verified files.
#[test]
fn s3_stopped_push_and_pull_leave_nothing_half_visible() {
    let ix = cix_tests::indexed_fixture();
    let remote = s3("stopped");
    push(&ix.index, &remote);
    let local = ix.tmp.path().join("pulled");
    pull(&remote, &local);
    let old_answers = answers(&local);
    let old_manifest = std::fs::read(local.join("MANIFEST")).unwrap();

    change_one_file(&ix, "stopped_marker");
    let stop = PushOptions {
        concurrency: 1,
        stop_after_puts: Some(2),
        ..PushOptions::default()
    };
    match sync::push(&ix.index, &remote, &stop) {
        Err(SyncError::Stopped(2)) => {}
        other => panic!("the push must stop after two uploads: {other:?}"),
    }
    let fresh = ix.tmp.path().join("fresh");
    assert_eq!(
        pull(&remote, &fresh).generation,
        1,
        "half a push is visible"
    );
    assert_eq!(answers(&fresh), old_answers);
    let rerun = push(&ix.index, &remote);
    assert_eq!(rerun.generation, 2);
    let m = format::IndexManifest::read(&ix.index).unwrap();
    let new = m.segments.last().unwrap();
    let files = format::Segment::open(&ix.index, &new.id, &m.model_id, m.dim)
        .unwrap()
        .meta()
        .files
        .len()
        + 1;
    let tombstones = m.segments.iter().filter(|s| s.tombstones.is_some()).count();
    // The two uploads before the stop: the old segment's tombstone file (put again by every
    // push: a few bytes, and its new age keeps gc-remote away) and one file of the new segment,
    // which the rerun skips.
    assert_eq!(rerun.files_uploaded + 1, files + tombstones, "{rerun:?}");

    let stop = PullOptions {
        concurrency: 1,
        stop_after_files: Some(2),
        ..PullOptions::default()
    };
    match sync::pull(&remote, &local, &stop) {
        Err(SyncError::Stopped(2)) => {}
        other => panic!("the pull must stop after two files: {other:?}"),
    }
    assert_eq!(std::fs::read(local.join("MANIFEST")).unwrap(), old_manifest);
    assert_eq!(answers(&local), old_answers);
    let resumed = pull(&remote, &local);
    assert_eq!(resumed.files_resumed, 2, "{resumed:?}");
    assert_eq!(answers(&local), answers(&ix.index));
    // The staging directory is emptied; only its lock file stays.
    let left: Vec<_> = std::fs::read_dir(local.join(".pull"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("LOCK")]);
}

/// Corrupt (same size), truncated, wrong-hash (`segment.json` not matching its id) and missing
/// objects: each pull fails naming the problem and leaves the local index byte for byte as it
/// was; with the object restored the pull completes.
#[test]
fn s3_damaged_objects_are_refused() {
    let ix = cix_tests::indexed_fixture();
    let remote = s3("damaged");
    push(&ix.index, &remote);
    let local = ix.tmp.path().join("pulled");
    pull(&remote, &local);
    let manifest = std::fs::read(local.join("MANIFEST")).unwrap();
    let old_answers = answers(&local);

    change_one_file(&ix, "damage_marker");
    push(&ix.index, &remote);
    let m = format::IndexManifest::read(&ix.index).unwrap();
    let new = m.segments.last().unwrap().id.clone();
    let seg = format::Segment::open(&ix.index, &new, &m.model_id, m.dim).unwrap();
    let biggest = seg
        .meta()
        .files
        .iter()
        .max_by_key(|f| f.size)
        .unwrap()
        .clone();
    let file_key = object(&remote, &format!("segments/seg-{new}/{}", biggest.name));
    let seal_key = object(&remote, &format!("segments/seg-{new}/segment.json"));
    let original = raw(&file_key, None).unwrap();
    assert_eq!(original.len() as u64, biggest.size);
    let seal = raw(&seal_key, None).unwrap();

    let mut flipped = original.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    let mut other_seal = seal.clone();
    other_seal.extend_from_slice(b" ");
    let cases: [(&str, &str, Option<&[u8]>, &str); 4] = [
        (
            "corrupt",
            &file_key,
            Some(&flipped),
            "blake3 does not match",
        ),
        ("truncated", &file_key, Some(&original[..mid]), "truncated"),
        (
            "wrong hash",
            &seal_key,
            Some(&other_seal),
            "does not hash to its segment id",
        ),
        ("missing", &file_key, None, "missing"),
    ];
    for (what, key, bytes, expect) in cases {
        raw(key, Some(bytes));
        let e = sync::pull(&remote, &local, &PullOptions::default())
            .expect_err(what)
            .to_string();
        assert!(e.contains(expect), "{what}: {e}");
        assert_eq!(
            std::fs::read(local.join("MANIFEST")).unwrap(),
            manifest,
            "{what}"
        );
        assert_eq!(answers(&local), old_answers, "{what}");
        // Restore.
        raw(&file_key, Some(Some(&original)));
        raw(&seal_key, Some(Some(&seal)));
    }
    let ok = pull(&remote, &local);
    assert_eq!(ok.generation, 2);
    assert_eq!(answers(&local), answers(&ix.index));
}

/// `gc-remote --keep 1`: older manifests go at once; unnamed segments only after the grace
/// period; what the kept generation names stays pullable.
#[test]
fn s3_gc_remote_keeps_what_retained_manifests_name() {
    let ix = cix_tests::indexed_fixture();
    let remote = s3("gc");
    push(&ix.index, &remote);
    change_one_file(&ix, "gc_one");
    push(&ix.index, &remote);
    let policy = indexer::merge::MergePolicy {
        budget: 1 << 30,
        max_segments: Some(1),
        deletes: true,
    };
    indexer::merge::merge(&ix.index, &policy, &indexer::progress::Progress::silent()).unwrap();
    let r3 = push(&ix.index, &remote);
    assert_eq!(r3.generation, 3);

    let young = sync::gc_remote(
        &remote,
        &sync::GcOptions {
            keep: 1,
            ..sync::GcOptions::default()
        },
    )
    .unwrap();
    assert_eq!(young.kept_generations, vec![3]);
    assert_eq!((young.manifests_removed, young.segments_removed), (2, 0));
    assert!(young.segments_too_young > 0, "{young:?}");
    let old = sync::gc_remote(
        &remote,
        &sync::GcOptions {
            keep: 1,
            grace: Duration::ZERO,
            dry_run: false,
        },
    )
    .unwrap();
    assert_eq!(old.segments_removed, young.segments_too_young, "{old:?}");
    let local = ix.tmp.path().join("pulled");
    assert_eq!(pull(&remote, &local).generation, 3);
    assert_eq!(answers(&local), answers(&ix.index));
}

/// A `file://` push served by `python3 -m http.server` pulls over plain HTTP; http(s):// is
/// refused as a push destination.
#[test]
fn http_pull_of_a_file_push() {
    let ix = cix_tests::indexed_fixture();
    let store = ix.tmp.path().join("store");
    let file = Remote::open(&format!("file://{}", store.display())).unwrap();
    push(&ix.index, &file);
    let port = free_port();
    let mut server = python()
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(&store)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start python3 -m http.server");
    wait_for_port(port, "http.server");
    let web = Remote::open(&format!("http://127.0.0.1:{port}/")).unwrap();
    let local = ix.tmp.path().join("pulled");
    let r = sync::pull(&web, &local, &PullOptions::default());
    let refused = sync::push(&ix.index, &web, &PushOptions::default());
    server.kill().ok();
    server.wait().ok();
    let r = r.unwrap();
    assert_eq!(r.generation, 1);
    assert_eq!(answers(&local), answers(&ix.index));
    let e = refused.unwrap_err().to_string();
    assert!(e.contains("pulls only"), "{e}");
}

/// A store rolled back (its newest manifest deleted, `latest` moved back) is refused by the
/// next pull into an index that pulled the newer generation from it, whatever the URL's
/// spelling, and nothing local changes; `allow_older` installs it, and the index answers as
/// that generation did. The recorded store carries no credentials.
#[test]
fn a_pull_refuses_an_older_generation_of_the_same_store() {
    let ix = cix_tests::indexed_fixture();
    let store = ix.tmp.path().join("store");
    let url = format!("file://{}", store.display());
    let remote = Remote::open(&url).unwrap();
    push(&ix.index, &remote);
    let local = ix.tmp.path().join("pulled");
    assert_eq!(pull(&remote, &local).generation, 1);
    let first = answers(&local);
    change_one_file(&ix, "rollback_marker");
    push(&ix.index, &remote);
    assert_eq!(pull(&remote, &local).generation, 2);
    let m = format::IndexManifest::read(&local).unwrap();
    let p = m.pulled_from.clone().unwrap();
    assert_eq!((p.store.as_str(), p.generation), (url.as_str(), 2));
    std::fs::remove_file(store.join("manifests/00000000000000000002.json")).unwrap();
    std::fs::write(store.join("latest"), br#"{"generation": 1}"#).unwrap();
    let before = std::fs::read(local.join("MANIFEST")).unwrap();
    for spelling in [url.clone(), format!("{url}/"), format!("{url}?x=1#y")] {
        let r = Remote::open(&spelling).unwrap();
        match sync::pull(&r, &local, &PullOptions::default()) {
            Err(
                e @ SyncError::Rollback {
                    found: 1,
                    pulled: 2,
                    ..
                },
            ) => {
                assert!(e.to_string().contains("--allow-older"), "{e}")
            }
            other => panic!("{spelling}: the rollback must be refused: {other:?}"),
        }
        assert_eq!(std::fs::read(local.join("MANIFEST")).unwrap(), before);
    }
    let older = PullOptions {
        allow_older: true,
        ..PullOptions::default()
    };
    let r = sync::pull(&remote, &local, &older).unwrap();
    assert_eq!(r.generation, 1);
    assert_eq!(answers(&local), first);
    let p = format::IndexManifest::read(&local)
        .unwrap()
        .pulled_from
        .unwrap();
    assert_eq!(p.generation, 1);
    // From then on generation 1 is the floor: the same pull without the flag is up to date.
    assert!(pull(&remote, &local).up_to_date);
    // An index up to date before the floor was recorded (pulled by an older binary) gets it
    // from a pull that downloads nothing.
    let mut m = format::IndexManifest::read(&local).unwrap();
    m.pulled_from = None;
    m.commit(&local).unwrap();
    assert!(pull(&remote, &local).up_to_date);
    let m = format::IndexManifest::read(&local).unwrap();
    assert_eq!(m.pulled_from.map(|p| p.generation), Some(1));
}

/// `queryd --follow`: pulls at start into a new directory, then serves each newly pushed
/// generation; memories written into the followed index survive the pulls.
#[test]
fn queryd_follow_serves_new_generations_and_keeps_memories() {
    let ix = cix_tests::indexed_fixture();
    let store = ix.tmp.path().join("store");
    let url = format!("file://{}", store.display());
    let remote = Remote::open(&url).unwrap();
    push(&ix.index, &remote);
    let local = ix.tmp.path().join("followed");
    let mut q = Command::new(BIN)
        .args(["--index"])
        .arg(&local)
        .args(["--follow", &url, "--follow-every", "300ms"])
        .env("CIX_MODEL_DIR", cix_tests::model_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = q.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |needle: &str| {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                seen.push(line.clone());
                if line.contains(needle) {
                    return;
                }
            }
        }
        panic!(
            "queryd never printed {needle:?}; stderr so far:\n{}",
            seen.join("\n")
        );
    };
    wait_for("pulled generation 1 of");
    wait_for("ready in");
    change_one_file(&ix, "follow_marker");
    push(&ix.index, &remote);
    wait_for("pulled generation 2 of");
    wait_for("now serving index generation");
    drop(q.stdin.take());
    q.kill().ok();
    q.wait().ok();
    assert_eq!(answers(&local), answers(&ix.index));

    // Memories ingested into the followed index stay through the next pull.
    let dump = ix.tmp.path().join("dump.jsonl");
    std::fs::write(&dump, "{\"text\": \"the follow test remembers this\"}\n").unwrap();
    let o = Command::new(cix_tests::sibling_bin(BIN, "indexer"))
        .args(["build", "--memories"])
        .arg(&dump)
        .arg("--out")
        .arg(&local)
        .env("CIX_MODEL_DIR", cix_tests::model_dir())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let memories = format::IndexManifest::read(&local).unwrap().memory_segments;
    assert_eq!(memories.len(), 1);
    change_one_file(&ix, "follow_again");
    push(&ix.index, &remote);
    pull(&remote, &local);
    let after = format::IndexManifest::read(&local).unwrap();
    assert_eq!(after.memory_segments, memories);
    assert_eq!(answers(&local), answers(&ix.index));
}

/// Runs the `indexer` binary (beside `queryd`) with the real model.
fn indexer_bin(args: &[&std::ffi::OsStr]) {
    let o = Command::new(cix_tests::sibling_bin(BIN, "indexer"))
        .args(args)
        .env("CIX_MODEL_DIR", cix_tests::model_dir())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "indexer {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `--with-memories`: a pull adds the pushed memory segment; a memory the puller then deletes
/// (its segment dropped, as a flush does when every record in it is deleted) does not come
/// back with the next pull; without the flag no memory leaves the machine.
#[test]
fn pushed_memories_arrive_once_and_local_deletes_stay_deleted() {
    let ix = cix_tests::indexed_fixture();
    let dump = ix.tmp.path().join("team.jsonl");
    std::fs::write(
        &dump,
        "{\"text\": \"the team agreed to keep retries at three\"}\n",
    )
    .unwrap();
    indexer_bin(&[
        "build".as_ref(),
        "--memories".as_ref(),
        dump.as_os_str(),
        "--out".as_ref(),
        ix.index.as_os_str(),
    ]);
    let store = ix.tmp.path().join("store");
    let remote = Remote::open(&format!("file://{}", store.display())).unwrap();
    let code_only = push(&ix.index, &remote);
    assert!(code_only.committed);
    let local = ix.tmp.path().join("pulled");
    pull(&remote, &local);
    assert!(format::IndexManifest::read(&local)
        .unwrap()
        .memory_segments
        .is_empty());

    let with = PushOptions {
        with_memories: true,
        ..PushOptions::default()
    };
    assert!(sync::push(&ix.index, &remote, &with).unwrap().committed);
    // The pusher records what it sent, as a pull records what it added.
    let sent = format::IndexManifest::read(&ix.index).unwrap();
    assert_eq!(sent.pulled_memory_segments.len(), 1, "{sent:?}");
    assert_eq!(sent.pulled_memory_segments[0], sent.memory_segments[0].id);
    // As pushed by a build that did not record it: pushing again (nothing new to send)
    // records it.
    let mut unrecorded = sent.clone();
    unrecorded.pulled_memory_segments.clear();
    unrecorded.generation += 1;
    unrecorded.commit(&ix.index).unwrap();
    assert!(!sync::push(&ix.index, &remote, &with).unwrap().committed);
    assert_eq!(
        format::IndexManifest::read(&ix.index)
            .unwrap()
            .pulled_memory_segments,
        sent.pulled_memory_segments
    );
    let p = pull(&remote, &local);
    assert_eq!(p.memory_segments_added, 1, "{p:?}");
    let mut m = format::IndexManifest::read(&local).unwrap();
    assert_eq!(m.memory_segments.len(), 1);
    assert_eq!(m.pulled_memory_segments.len(), 1);

    // Deleted here: the segment leaves the MANIFEST.
    m.memory_segments.clear();
    m.generation += 1;
    m.commit(&local).unwrap();
    change_one_file(&ix, "memories_marker");
    assert!(sync::push(&ix.index, &remote, &with).unwrap().committed);
    let p = pull(&remote, &local);
    assert_eq!(p.memory_segments_added, 0, "{p:?}");
    let after = format::IndexManifest::read(&local).unwrap();
    assert!(
        after.memory_segments.is_empty(),
        "a deleted memory came back"
    );
    assert_eq!(answers(&local), answers(&ix.index));

    // Deleted on the machine that pushed it: pulling its own push back does not revive it.
    let mut m = format::IndexManifest::read(&ix.index).unwrap();
    m.memory_segments.clear();
    m.generation += 1;
    m.commit(&ix.index).unwrap();
    let p = pull(&remote, &ix.index);
    assert_eq!(p.memory_segments_added, 0, "{p:?}");
    assert!(
        format::IndexManifest::read(&ix.index)
            .unwrap()
            .memory_segments
            .is_empty(),
        "a memory deleted by its pusher came back"
    );
}

/// The fixture's index with `dump` (memory JSON lines) ingested (`indexer build --memories`),
/// pushed with its memories to a `file://` store and pulled into a second directory: the store
/// and that directory.
fn team_memories_pushed_and_pulled(ix: &cix_tests::Indexed, dump: &str) -> (Remote, PathBuf) {
    let dump_file = ix.tmp.path().join("team.jsonl");
    std::fs::write(&dump_file, dump).unwrap();
    let dump = &dump_file;
    indexer_bin(&[
        "build".as_ref(),
        "--memories".as_ref(),
        dump.as_os_str(),
        "--out".as_ref(),
        ix.index.as_os_str(),
    ]);
    let store = ix.tmp.path().join("store");
    let remote = Remote::open(&format!("file://{}", store.display())).unwrap();
    let with = PushOptions {
        with_memories: true,
        ..PushOptions::default()
    };
    assert!(sync::push(&ix.index, &remote, &with).unwrap().committed);
    let b = ix.tmp.path().join("b");
    pull(&remote, &b);
    (remote, b)
}

/// The live memories of `dir` (segments and log), by id: text.
fn memories_of(dir: &Path) -> std::collections::BTreeMap<String, String> {
    memory::store::export(dir)
        .unwrap()
        .memories
        .into_iter()
        .map(|m| (m.id, m.text))
        .collect()
}

/// A memory deleted on one machine does not come back when another machine, which had pulled
/// it, merges its memory segments (a new segment id holding it) and pushes them: the pull
/// leaves that copy out (`memories_deleted_here`), while the other machine's new memories
/// arrive. Not even when the deleted copy's `updated_at` lies ahead of this machine's clock
/// (the deletion counts from it). A copy the other machine updated after the deletion does
/// come back, although the deletion was flushed after that update, and leaves the list.
#[test]
fn a_memory_deleted_here_does_not_return_in_another_machines_merged_segment() {
    use engine::tools::memory::args::{AddMemoriesArgs, DeleteMemoriesArgs, UpdateMemoryArgs};
    use serde_json::json;
    let ix = cix_tests::indexed_fixture();
    // Stamped far ahead of any clock (2100), as another machine's clock might.
    let (remote, b) = team_memories_pushed_and_pulled(
        &ix,
        "{\"text\": \"the team agreed to keep retries at three\", \"created_at\": 1700000000000, \
         \"updated_at\": 4102444800000}\n\
         {\"text\": \"deploys happen on tuesdays only\"}\n",
    );
    let with = PushOptions {
        with_memories: true,
        ..PushOptions::default()
    };
    let team = memories_of(&ix.index);
    assert_eq!(memories_of(&b), team);
    let id_of = |word: &str| {
        team.iter()
            .find(|(_, t)| t.contains(word))
            .map(|(id, _)| id.clone())
            .unwrap()
    };
    let (retries, deploys) = (id_of("retries"), id_of("deploys"));

    // A deletes both; its server flushes later.
    let model = cix_tests::model_dir();
    let a_engine = engine::Engine::open(&ix.index, &model).unwrap();
    let del: DeleteMemoriesArgs =
        serde_json::from_value(json!({"ids": [retries, deploys]})).unwrap();
    a_engine.delete_memories(&del).unwrap();
    std::thread::sleep(Duration::from_millis(5));

    // B updates one of them (after A's delete), then writes memories of its own, one flush
    // each, until a flush merges its memory segments (the pulled one included) into one.
    let b_engine = engine::Engine::open(&b, &model).unwrap();
    let upd: UpdateMemoryArgs =
        serde_json::from_value(json!({"id": deploys, "text": "deploys happen on wednesdays now"}))
            .unwrap();
    b_engine.update_memory(&upd).unwrap();
    let pulled = format::IndexManifest::read(&b).unwrap().memory_segments[0]
        .id
        .clone();
    let mut mine = 0;
    while format::IndexManifest::read(&b)
        .unwrap()
        .memory_segments
        .iter()
        .any(|s| s.id == pulled)
    {
        let add: AddMemoriesArgs = serde_json::from_value(
            json!({"memories": [{"text": format!("b's own note number {mine} about caches")}]}),
        )
        .unwrap();
        b_engine.add_memories(&add).unwrap();
        b_engine.flush_memories().unwrap().unwrap();
        mine += 1;
        assert!(mine <= 20, "no merge after {mine} flushes");
    }
    drop(b_engine);
    let b_manifest = format::IndexManifest::read(&b).unwrap();
    assert_eq!(b_manifest.memory_segments.len(), 1, "{b_manifest:?}");
    assert!(memories_of(&b).contains_key(&retries));
    assert!(sync::push(&b, &remote, &with).unwrap().committed);

    // A's flush now, after B's update.
    a_engine.flush_memories().unwrap().unwrap();
    drop(a_engine);
    let deleted = format::IndexManifest::read(&ix.index)
        .unwrap()
        .deleted_memories;
    assert_eq!(deleted.get(&retries), Some(&4102444800000), "{deleted:?}");
    assert!(deleted.contains_key(&deploys), "{deleted:?}");

    let p = pull(&remote, &ix.index);
    assert_eq!(p.memory_segments_added, 1, "{p:?}");
    assert_eq!(p.memories_deleted_here, 1, "{p:?}");
    let a_now = memories_of(&ix.index);
    assert!(!a_now.contains_key(&retries), "a deleted memory came back");
    assert_eq!(
        a_now.get(&deploys).map(String::as_str),
        Some("deploys happen on wednesdays now"),
        "the newer copy"
    );
    assert_eq!(a_now.len(), 1 + mine, "{a_now:?}");
    let deleted = format::IndexManifest::read(&ix.index)
        .unwrap()
        .deleted_memories;
    assert!(deleted.contains_key(&retries) && !deleted.contains_key(&deploys));
}

/// A machine that pulled memories, wrote one of its own and deleted the pulled ones (the flush
/// drops their segment) loses its MANIFEST. A pull refuses (it would commit a MANIFEST without
/// the machine's own memory segment and without the record of the deletions);
/// `indexer build --rebuild` recovers the index from disk and the memory ledger beside the
/// MANIFEST, and the next pull neither loses the own memory nor brings the deleted ones back.
#[test]
fn deletions_survive_a_manifest_recovery_and_the_next_pull() {
    use engine::tools::memory::args::{AddMemoriesArgs, DeleteMemoriesArgs};
    use serde_json::json;
    let ix = cix_tests::indexed_fixture();
    let (remote, b) = team_memories_pushed_and_pulled(
        &ix,
        "{\"text\": \"the team agreed to keep retries at three\"}\n\
         {\"text\": \"deploys happen on tuesdays\"}\n",
    );
    let ids: Vec<String> = memories_of(&b).into_keys().collect();
    assert_eq!(ids.len(), 2);

    let b_engine = engine::Engine::open(&b, &cix_tests::model_dir()).unwrap();
    let add: AddMemoriesArgs =
        serde_json::from_value(json!({"memories": [{"text": "b keeps its caches warm"}]})).unwrap();
    b_engine.add_memories(&add).unwrap();
    b_engine.flush_memories().unwrap().unwrap();
    let del: DeleteMemoriesArgs = serde_json::from_value(json!({ "ids": ids })).unwrap();
    b_engine.delete_memories(&del).unwrap();
    b_engine.flush_memories().unwrap().unwrap();
    drop(b_engine);
    let before = format::IndexManifest::read(&b).unwrap();
    assert_eq!(before.deleted_memories.len(), 2, "{before:?}");
    let own = memories_of(&b);
    assert_eq!(own.len(), 1, "{own:?}");

    std::fs::remove_file(b.join(format::manifest::MANIFEST)).unwrap();
    let refused = sync::pull(&remote, &b, &PullOptions::default()).unwrap_err();
    let why = refused.to_string();
    assert!(
        why.contains("no MANIFEST") && why.contains("--rebuild") && why.contains("memory segment"),
        "{why}"
    );
    indexer_bin(&[
        "build".as_ref(),
        ix.repo.as_os_str(),
        "--out".as_ref(),
        b.as_os_str(),
        "--rebuild".as_ref(),
    ]);
    let after = format::IndexManifest::read(&b).unwrap();
    assert_eq!(after.ledger(), before.ledger());
    assert_eq!(memories_of(&b), own);

    let p = pull(&remote, &b);
    assert_eq!(p.memory_segments_added, 0, "{p:?}");
    assert_eq!(memories_of(&b), own, "a deleted memory came back");
}

/// Writes one memory segment holding `recs` (unit vectors) into the index at `dir` and commits
/// it, as a store writer could make one.
fn add_memory_segment(dir: &Path, recs: Vec<format::memory::MemoryRecord>) {
    let mut m = format::IndexManifest::read(dir).unwrap();
    let dim = m.dim as usize;
    let mut v = vec![0.0f32; dim * recs.len()];
    for i in 0..recs.len() {
        v[i * dim] = 1.0;
    }
    let (id, meta) = format::SegmentBuilder::for_memories(recs, v)
        .write(dir, &m.model_id.clone(), dim)
        .unwrap();
    m.memory_segments.push(format::SegmentEntry {
        id,
        chunks: meta.chunk_count,
        tombstones: None,
    });
    m.generation += 1;
    m.commit(dir).unwrap();
}

/// What a store writer sends is checked like what an agent writes: a record of a pulled memory
/// segment that a memory tool would refuse is left out and counted (a control character, which
/// older versions stored, is not a reason); a copy of a
/// memory deleted here stamped days ahead of this clock does not undo the deletion; and a
/// staging directory that is a symlink is refused before anything is staged or deleted.
#[test]
fn a_store_writer_cannot_smuggle_memories_or_redirect_the_staging_directory() {
    use engine::tools::memory::args::DeleteMemoriesArgs;
    use serde_json::json;
    let ix = cix_tests::indexed_fixture();
    let dump = ix.tmp.path().join("team.jsonl");
    std::fs::write(
        &dump,
        "{\"text\": \"the team agreed to keep retries at three\"}\n",
    )
    .unwrap();
    indexer_bin(&[
        "build".as_ref(),
        "--memories".as_ref(),
        dump.as_os_str(),
        "--out".as_ref(),
        ix.index.as_os_str(),
    ]);
    let store = ix.tmp.path().join("store");
    let remote = Remote::open(&format!("file://{}", store.display())).unwrap();
    let with = PushOptions {
        with_memories: true,
        ..PushOptions::default()
    };
    assert!(sync::push(&ix.index, &remote, &with).unwrap().committed);
    let x = memories_of(&ix.index).into_keys().next().unwrap();
    let a = engine::Engine::open(&ix.index, &cix_tests::model_dir()).unwrap();
    let del: DeleteMemoriesArgs = serde_json::from_value(json!({"ids": [x]})).unwrap();
    a.delete_memories(&del).unwrap();
    a.flush_memories().unwrap().unwrap();
    drop(a);

    // The writer's copy of X, stamped two days ahead.
    let writer = ix.tmp.path().join("writer");
    pull(&remote, &writer);
    let now = format::memory::now_ms();
    let record = |id: &str, text: &str, updated: i64| -> format::memory::MemoryRecord {
        serde_json::from_value(json!({
            "id": id, "text": text, "category": "note", "scope": "project", "entity": "",
            "tags": [], "source": "agent", "evidence": [], "code_refs": [],
            "created_at": now - 1000, "updated_at": updated, "state": "active", "similar": []
        }))
        .unwrap()
    };
    add_memory_segment(
        &writer,
        vec![record(
            &x,
            "retries are unlimited now",
            now + 2 * 86_400_000,
        )],
    );
    assert!(sync::push(&writer, &remote, &with).unwrap().committed);
    let p = pull(&remote, &ix.index);
    assert_eq!(p.memories_deleted_here, 1, "{p:?}");
    assert!(
        !memories_of(&ix.index).contains_key(&x),
        "revived by a future stamp"
    );

    // A record no memory tool would store, beside one with a tab in its evidence (stored by
    // versions before control characters were refused).
    let legacy = "0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e7f";
    let mut old = record(legacy, "an older memory", now);
    old.evidence = vec!["see\tthe log".into()];
    add_memory_segment(&writer, vec![old, record("not-a-uuid", "smuggled", now)]);
    assert!(sync::push(&writer, &remote, &with).unwrap().committed);
    let p = pull(&remote, &ix.index);
    assert_eq!(p.memories_refused, 1, "{p:?}");
    assert!(
        p.memories_refused_why
            .as_deref()
            .unwrap()
            .contains("not-a-uuid"),
        "{p:?}"
    );
    let now_there = memories_of(&ix.index);
    assert!(now_there.contains_key(legacy) && !now_there.contains_key("not-a-uuid"));

    // `.pull` as a symlink to somewhere else: refused, nothing there touched.
    let victim = ix.tmp.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep.txt"), "mine").unwrap();
    let target = ix.tmp.path().join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::os::unix::fs::symlink(&victim, target.join(".pull")).unwrap();
    let err = sync::pull(&remote, &target, &PullOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a directory"), "{err}");
    assert_eq!(
        std::fs::read_to_string(victim.join("keep.txt")).unwrap(),
        "mine"
    );
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
}

/// Memories that only the memory log holds (a server's first memories, before its first
/// flush) count as memories: a pull of another model's index is refused and changes nothing,
/// and so is a pull into a directory that holds a log but no MANIFEST (whatever model the
/// log's header names).
#[test]
fn a_pull_of_another_model_keeps_memories_only_the_log_holds() {
    let ix = cix_tests::indexed_fixture();
    let store = ix.tmp.path().join("store");
    let remote = Remote::open(&format!("file://{}", store.display())).unwrap();
    push(&ix.index, &remote);
    let local = ix.tmp.path().join("pulled");
    pull(&remote, &local);
    let mut m = format::IndexManifest::read(&local).unwrap();
    assert!(m.memory_segments.is_empty() && m.memory_lsn == 0);
    // The pusher's roots (its paths and walk rules) are not taken over: a store's writer must
    // not choose what this machine's `reindex` walks.
    assert!(!format::IndexManifest::read(&ix.index)
        .unwrap()
        .roots
        .is_empty());
    assert!(m.roots.is_empty(), "{:?}", m.roots);
    m.model_id = "another-model".into();
    m.commit(&local).unwrap();
    let log = local.join(format::manifest::MEMORY_WAL_FILE);
    let logged = b"CIXWAL01 a record or two".to_vec();
    std::fs::write(&log, &logged).unwrap();
    let before = std::fs::read(local.join(format::manifest::MANIFEST)).unwrap();
    match sync::pull(&remote, &local, &PullOptions::default()) {
        Err(SyncError::Mismatch(why)) => assert!(why.contains("another-model"), "{why}"),
        other => panic!("expected a model mismatch, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(local.join(format::manifest::MANIFEST)).unwrap(),
        before
    );
    assert_eq!(std::fs::read(&log).unwrap(), logged);

    let bare = ix.tmp.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::write(bare.join(format::manifest::MEMORY_WAL_FILE), &logged).unwrap();
    match sync::pull(&remote, &bare, &PullOptions::default()) {
        Err(SyncError::Mismatch(why)) => assert!(why.contains("no MANIFEST"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!bare.join(format::manifest::MANIFEST).exists());

    // A log whose header names its model is refused too, the store's model included (the
    // memory segments beside it are not known without a MANIFEST), and the refusal names it.
    let pushed = format::IndexManifest::read(&ix.index).unwrap();
    let log_of = |id: &str| {
        let mut b = format::walhead::encode(&format::walhead::LogModel {
            id: id.into(),
            dim: pushed.dim,
        });
        b.extend_from_slice(b"a record or two");
        b
    };
    let other = log_of("another-model@0000000000000000");
    std::fs::write(bare.join(format::manifest::MEMORY_WAL_FILE), &other).unwrap();
    match sync::pull(&remote, &bare, &PullOptions::default()) {
        Err(SyncError::Mismatch(why)) => {
            assert!(why.contains("another-model@0000000000000000"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!bare.join(format::manifest::MANIFEST).exists());
    assert_eq!(
        std::fs::read(bare.join(format::manifest::MEMORY_WAL_FILE)).unwrap(),
        other
    );
    let same = log_of(&pushed.model_id);
    std::fs::write(bare.join(format::manifest::MEMORY_WAL_FILE), &same).unwrap();
    match sync::pull(&remote, &bare, &PullOptions::default()) {
        Err(SyncError::Mismatch(why)) => {
            assert!(
                why.contains(&pushed.model_id) && why.contains("--rebuild"),
                "{why}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!bare.join(format::manifest::MANIFEST).exists());
    assert_eq!(
        std::fs::read(bare.join(format::manifest::MEMORY_WAL_FILE)).unwrap(),
        same
    );
}

/// A local tombstone file that is not what the manifest's hash says is downloaded again, the
/// damaged one kept aside, whether the index is on an older generation or already on the
/// remote's; before, the pull refused on the hash and could not repair it.
#[test]
fn a_damaged_local_tombstone_file_is_downloaded_again() {
    let ix = cix_tests::indexed_fixture();
    let store = ix.tmp.path().join("store");
    let remote = Remote::open(&format!("file://{}", store.display())).unwrap();
    push(&ix.index, &remote);
    let local = ix.tmp.path().join("pulled");
    pull(&remote, &local);
    change_one_file(&ix, "tomb_marker");
    push(&ix.index, &remote);
    // The remote's file names, as a pull elsewhere writes them.
    let scratch = ix.tmp.path().join("scratch");
    pull(&remote, &scratch);
    let m = format::IndexManifest::read(&scratch).unwrap();
    let t = m
        .segments
        .iter()
        .find_map(|s| s.tombstones.clone())
        .expect("the changed file's old chunks are tombstoned");
    let original = std::fs::read(scratch.join(&t.file)).unwrap();
    for on_generation in [false, true] {
        // A file of that name that is not the remote's (flipped bytes, as a disk error leaves).
        let mut bad = original.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xFF;
        std::fs::write(local.join(&t.file), &bad).unwrap();
        let r = pull(&remote, &local);
        assert!(!r.up_to_date, "{on_generation}: {r:?}");
        assert_eq!(r.segments_replaced.len(), 1, "{r:?}");
        let (aside, why) = &r.segments_replaced[0];
        assert!(why.contains(&t.file) && why.contains("checksum"), "{why}");
        assert_eq!(std::fs::read(aside).unwrap(), bad);
        assert_eq!(std::fs::read(local.join(&t.file)).unwrap(), original);
        format::Index::open(&local).unwrap();
        assert_eq!(answers(&local), answers(&scratch));
        assert!(pull(&remote, &local).up_to_date);
    }
}

/// A local copy of a segment that is not what its name says (a file cut short, a
/// `segment.json` missing) is not taken for the segment: the pull downloads it again, keeps the
/// damaged copy aside (never deleted) and says so; the index then opens whole.
#[test]
fn a_damaged_local_copy_of_a_segment_is_downloaded_again() {
    let ix = cix_tests::indexed_fixture();
    let store = ix.tmp.path().join("store");
    let remote = Remote::open(&format!("file://{}", store.display())).unwrap();
    push(&ix.index, &remote);
    let m = format::IndexManifest::read(&ix.index).unwrap();
    let id = m.segments[0].id.clone();
    let name = format::segment::dir_name(&id);
    for damage in ["cut", "no segment.json"] {
        let local = ix
            .tmp
            .path()
            .join(format!("pulled-{}", damage.replace(' ', "-")));
        cix_tests::copy_dir(&ix.index.join(&name), &local.join(&name));
        let (file, why) = if damage == "cut" {
            let f = local.join(&name).join("vectors.f32");
            let len = std::fs::metadata(&f).unwrap().len();
            let b = std::fs::read(&f).unwrap();
            std::fs::write(&f, &b[..(len / 2) as usize]).unwrap();
            (f, "vectors.f32 is")
        } else {
            let f = local.join(&name).join(format::segment::SEGMENT_JSON);
            std::fs::remove_file(&f).unwrap();
            (f, "segment.json is missing")
        };
        let r = sync::pull(&remote, &local, &PullOptions::default()).unwrap();
        assert_eq!(r.segments_replaced.len(), 1, "{damage}: {r:?}");
        let (aside, reason) = &r.segments_replaced[0];
        assert!(reason.contains(why), "{damage}: {reason}");
        assert!(
            aside
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{name}.bak-")),
            "{}",
            aside.display()
        );
        // The damaged copy is kept as it was; the segment in place is the store's.
        let kept = aside.join(file.file_name().unwrap());
        assert_eq!(kept.exists(), damage == "cut", "{}", kept.display());
        let original = ix.index.join(&name).join("vectors.f32");
        assert_eq!(
            std::fs::read(local.join(&name).join("vectors.f32")).unwrap(),
            std::fs::read(&original).unwrap()
        );
        format::Index::open(&local).unwrap();
        // Garbage collection leaves the copy kept aside alone.
        format::Index::collect_garbage(&local).unwrap();
        assert!(aside.exists());

        // Damaged again once the index holds that generation: the pull is not "up to date".
        let f = local.join(&name).join("vectors.f32");
        std::fs::write(&f, b"short").unwrap();
        let r = sync::pull(&remote, &local, &PullOptions::default()).unwrap();
        assert!(!r.up_to_date && r.segments_replaced.len() == 1, "{r:?}");
        format::Index::open(&local).unwrap();
        assert!(
            sync::pull(&remote, &local, &PullOptions::default())
                .unwrap()
                .up_to_date
        );
    }
}

/// A web server over `dir` that, for any path ending in `stall`, sends the headers and half of
/// the body, then hangs: a pull reading it blocks there until it is killed.
fn stalling_server(dir: &Path, stall: &str) -> (Child, u16) {
    let port = free_port();
    let script = format!(
        "import functools, http.server, os, time\n\
         class H(http.server.SimpleHTTPRequestHandler):\n\
         \x20   def do_GET(self):\n\
         \x20       if self.path.endswith({stall:?}):\n\
         \x20           p = self.translate_path(self.path)\n\
         \x20           data = open(p, 'rb').read()\n\
         \x20           self.send_response(200)\n\
         \x20           self.send_header('Content-Length', str(len(data)))\n\
         \x20           self.end_headers()\n\
         \x20           self.wfile.write(data[: len(data) // 2]); self.wfile.flush()\n\
         \x20           time.sleep(3600)\n\
         \x20       return super().do_GET()\n\
         \x20   def log_message(self, *a):\n\
         \x20       pass\n\
         h = functools.partial(H, directory={dir:?})\n\
         http.server.ThreadingHTTPServer(('127.0.0.1', {port}), h).serve_forever()\n",
        dir = dir.display().to_string(),
    );
    let child = python()
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the stalling web server");
    wait_for_port(port, "the stalling web server");
    (child, port)
}

/// `indexer pull` killed (SIGKILL) while a file is half downloaded: the local index is byte
/// for byte as it was and serves the same answers; the rerun completes, reusing the files
/// that were verified before the kill.
#[cfg(unix)]
#[test]
fn killed_pull_leaves_the_index_and_the_rerun_resumes() {
    let ix = cix_tests::indexed_fixture();
    let store = ix.tmp.path().join("store");
    let file = Remote::open(&format!("file://{}", store.display())).unwrap();
    push(&ix.index, &file);
    let local = ix.tmp.path().join("pulled");
    pull(&file, &local);
    let manifest = std::fs::read(local.join("MANIFEST")).unwrap();
    let old_answers = answers(&local);
    change_one_file(&ix, "killed_pull");
    push(&ix.index, &file);

    let (mut server, port) = stalling_server(&store, "vectors.f32");
    let mut puller = Command::new(cix_tests::sibling_bin(BIN, "indexer"))
        .args(["pull", &format!("http://127.0.0.1:{port}/"), "--out"])
        .arg(&local)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until some file of the new segment is verified in .pull/ and the stalled one is
    // half there, then kill.
    let t = Instant::now();
    let staged = |suffix: &str| -> usize {
        let Ok(segs) = std::fs::read_dir(local.join(".pull")) else {
            return 0;
        };
        segs.flatten()
            .filter(|s| s.path().is_dir())
            .flat_map(|s| std::fs::read_dir(s.path()).into_iter().flatten().flatten())
            .filter(|f| f.file_name().to_string_lossy().ends_with(suffix))
            .count()
    };
    while !(staged(".rkyv") > 0 && staged(".part") > 0) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the pull never reached the stalled file"
        );
        assert!(
            puller.try_wait().unwrap().is_none(),
            "the pull ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    puller.kill().unwrap();
    puller.wait().unwrap();
    server.kill().ok();
    server.wait().ok();
    assert_eq!(std::fs::read(local.join("MANIFEST")).unwrap(), manifest);
    assert_eq!(answers(&local), old_answers);

    let r = pull(&file, &local);
    assert_eq!(r.generation, 2);
    assert!(r.files_resumed > 0, "{r:?}");
    assert_eq!(answers(&local), answers(&ix.index));
}
