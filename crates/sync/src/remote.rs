//! A remote: an object store and a prefix, opened from a URL, counting every request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path as Key;
use object_store::{
    GetOptions, GetResult, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, PutResult, UpdateVersion,
};

use crate::layout::{manifest_key, RemoteManifest, LATEST};
use crate::{Result, SyncError};

/// Requests made and bytes moved through one [`Remote`] (object bodies only).
#[derive(Debug, Default)]
pub struct Stats {
    pub gets: AtomicU64,
    pub heads: AtomicU64,
    pub puts: AtomicU64,
    pub deletes: AtomicU64,
    pub lists: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
}

impl Stats {
    /// `(gets, heads, puts, deletes, lists, bytes_up, bytes_down)`.
    pub fn snapshot(&self) -> [u64; 7] {
        [
            &self.gets,
            &self.heads,
            &self.puts,
            &self.deletes,
            &self.lists,
            &self.bytes_up,
            &self.bytes_down,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }

    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Where segments are pushed to or pulled from.
#[derive(Clone)]
pub struct Remote {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    writable: bool,
    /// A `file://` store's directory (symlinks resolved): no key may lead through a symbolic
    /// link out of it ([`Remote::confine`]).
    local: Option<std::path::PathBuf>,
    stats: Arc<Stats>,
    /// The runtime every request of this remote runs on (one, so pooled connections stay
    /// usable from one call to the next).
    rt: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).finish()
    }
}

impl Remote {
    /// Opens `url`: `s3://bucket/prefix` (credentials, region and endpoint from the standard
    /// `AWS_*` variables, including `AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP`),
    /// `gs://bucket/prefix` (`GOOGLE_*`), `az://container/prefix` (`AZURE_*`),
    /// `file:///absolute/path` and, for pulls only, `http://` / `https://`. Makes no request.
    pub fn open(url: &str) -> Result<Remote> {
        let bad = |reason: String| SyncError::BadUrl {
            url: url.to_string(),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| {
            bad(format!(
                "not a URL ({e}); use s3://, gs://, az://, file:///abs/path or http(s)://"
            ))
        })?;
        let path_prefix = parsed.path().trim_matches('/').to_string();
        let store_err = |e: object_store::Error| bad(e.to_string());
        let (store, prefix, writable): (Arc<dyn ObjectStore>, String, bool) = match parsed.scheme()
        {
            "s3" | "s3a" => (
                Arc::new(
                    object_store::aws::AmazonS3Builder::from_env()
                        .with_url(url)
                        .build()
                        .map_err(store_err)?,
                ),
                path_prefix,
                true,
            ),
            "gs" => (
                Arc::new(
                    object_store::gcp::GoogleCloudStorageBuilder::from_env()
                        .with_url(url)
                        .build()
                        .map_err(store_err)?,
                ),
                path_prefix,
                true,
            ),
            "az" | "azure" | "abfs" | "abfss" => (
                Arc::new(
                    object_store::azure::MicrosoftAzureBuilder::from_env()
                        .with_url(url)
                        .build()
                        .map_err(store_err)?,
                ),
                path_prefix,
                true,
            ),
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad("not an absolute local path".into()))?;
                format::fsio::create_dir_all(&dir).map_err(|e| bad(e.to_string()))?;
                (
                    Arc::new(
                        object_store::local::LocalFileSystem::new_with_prefix(&dir)
                            .map_err(store_err)?,
                    ),
                    String::new(),
                    true,
                )
            }
            "http" | "https" => (
                Arc::new(
                    object_store::http::HttpBuilder::new()
                        .with_url(url)
                        // The URL's scheme says plain HTTP is wanted.
                        .with_client_options(
                            object_store::ClientOptions::new()
                                .with_allow_http(parsed.scheme() == "http"),
                        )
                        .build()
                        .map_err(store_err)?,
                ),
                String::new(),
                false,
            ),
            s => {
                return Err(bad(format!(
                    "unsupported scheme {s}:// (use s3://, gs://, az://, file:// or http(s)://)"
                )))
            }
        };
        let local = (parsed.scheme() == "file")
            .then(|| parsed.to_file_path().ok())
            .flatten()
            .map(|d| std::fs::canonicalize(&d).unwrap_or(d));
        Ok(Remote {
            url: url.to_string(),
            store,
            prefix,
            writable,
            local,
            stats: Arc::new(Stats::default()),
            rt: Arc::new(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(crate::io_err(std::path::Path::new("<tokio runtime>")))?,
            ),
        })
    }

    /// Runs `f` to completion on this remote's runtime (callers are synchronous: the indexer's
    /// commands, queryd's follow thread, tests; never call it from inside a tokio runtime).
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// A remote over `store` (tests: stores that misbehave).
    #[cfg(test)]
    pub(crate) fn with_store(url: &str, store: Arc<dyn ObjectStore>) -> Remote {
        Remote {
            url: url.to_string(),
            store,
            prefix: "p".into(),
            writable: true,
            local: None,
            stats: Arc::new(Stats::default()),
            rt: Arc::new(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap(),
            ),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The store as a pull records it (`MANIFEST`'s `pulled_from`): the URL without user,
    /// password, query or fragment (no credentials on disk) and without trailing slashes.
    pub fn store_id(&self) -> String {
        let mut id = match url::Url::parse(&self.url) {
            Ok(mut u) => {
                let _ = u.set_username("");
                let _ = u.set_password(None);
                u.set_query(None);
                u.set_fragment(None);
                u.to_string()
            }
            Err(_) => self.url.clone(),
        };
        while id.ends_with('/') && !id.ends_with("://") {
            id.pop();
        }
        id
    }

    /// Requests and bytes so far (shared by clones).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub(crate) fn require_writable(&self, what: &str) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(SyncError::Unsupported {
                url: self.url.clone(),
                what: format!("{what} needs a writable store; http(s):// is for pulls only"),
            })
        }
    }

    pub(crate) fn key(&self, rel: &str) -> Key {
        if self.prefix.is_empty() {
            Key::from(rel)
        } else {
            Key::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// `rel` of a full key, if it is under the prefix.
    pub(crate) fn rel<'k>(&self, key: &'k Key) -> Option<&'k str> {
        let k = key.as_ref();
        if self.prefix.is_empty() {
            Some(k)
        } else {
            k.strip_prefix(self.prefix.as_str())?.strip_prefix('/')
        }
    }

    /// For a `file://` store: refuses `rel` when its path below the store's directory passes
    /// through a symbolic link (a file or a directory), which would make a pull read, or a
    /// push write, outside the store, or ends at something that is neither a file nor a
    /// directory (a FIFO would block the read for ever). Other stores have no links. This
    /// stops links that are in place when a request is made, not someone who swaps a
    /// directory for a link between the check and the request (README, "Share an index").
    pub(crate) fn confine(&self, rel: &str) -> Result<()> {
        let Some(root) = &self.local else {
            return Ok(());
        };
        let mut at = root.clone();
        for part in self.key(rel).as_ref().split('/').filter(|p| !p.is_empty()) {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) => self.plain(rel, &at, m.file_type())?,
                // Absent (or under a file): the request itself says so.
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(libc::ENOTDIR) =>
                {
                    return Ok(())
                }
                Err(e) => return Err(crate::io_err(&at)(e)),
            }
        }
        Ok(())
    }

    /// `Ok` for a directory or a regular file at `at` (of the key `rel`), else why not.
    fn plain(&self, rel: &str, at: &std::path::Path, t: std::fs::FileType) -> Result<()> {
        if t.is_dir() || t.is_file() {
            return Ok(());
        }
        let what = if t.is_symlink() {
            let to = std::fs::read_link(at).unwrap_or_default();
            format!("a symbolic link (to {})", to.display())
        } else {
            "neither a file nor a directory".to_string()
        };
        Err(SyncError::Corrupt {
            key: rel.to_string(),
            reason: format!(
                "{} is {what}: nothing is read or written through links or special files \
                 in a file:// store",
                at.display()
            ),
        })
    }

    /// For a `file://` store: refuses a listing under `rel_prefix` when anything below it is
    /// a link or a special file (the store's listing would follow links out of the store).
    fn confine_tree(&self, rel_prefix: &str) -> Result<()> {
        self.confine(rel_prefix)?;
        let Some(root) = &self.local else {
            return Ok(());
        };
        let key = self.key(rel_prefix);
        let mut todo = vec![root.join(key.as_ref())];
        while let Some(dir) = todo.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // A file named like the prefix: the listing holds nothing under it.
                Err(_) if dir.is_file() => continue,
                Err(e) => return Err(crate::io_err(&dir)(e)),
            };
            for e in entries {
                let e = e.map_err(crate::io_err(&dir))?;
                let t = e.file_type().map_err(crate::io_err(&e.path()))?;
                self.plain(rel_prefix, &e.path(), t)?;
                if t.is_dir() {
                    todo.push(e.path());
                }
            }
        }
        Ok(())
    }

    fn err(&self, op: &'static str, rel: &str, source: object_store::Error) -> SyncError {
        SyncError::Store {
            url: self.url.clone(),
            op,
            key: rel.to_string(),
            source: Box::new(source),
        }
    }

    /// Metadata of `rel`, `None` when absent.
    pub(crate) async fn head(&self, rel: &str) -> Result<Option<ObjectMeta>> {
        self.confine(rel)?;
        Stats::add(&self.stats.heads, 1);
        match self.store.head(&self.key(rel)).await {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("HEAD", rel, e)),
        }
    }

    /// The whole object, `None` when absent.
    pub(crate) async fn get_bytes(&self, rel: &str) -> Result<Option<Bytes>> {
        self.confine(rel)?;
        Stats::add(&self.stats.gets, 1);
        let r = match self.store.get(&self.key(rel)).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err("GET", rel, e)),
        };
        let b = self.read_capped(rel, r).await?;
        Stats::add(&self.stats.bytes_down, b.len() as u64);
        Ok(Some(b))
    }

    /// The body of `r` (a GET of `rel`), refused past [`max_object_bytes`]: these objects are
    /// read whole into memory, and a remote that serves an endless or enormous one must not
    /// run a pull (or a following server) out of it.
    async fn read_capped(&self, rel: &str, r: object_store::GetResult) -> Result<Bytes> {
        let max = max_object_bytes(rel);
        let too_large = |n: u64| SyncError::Corrupt {
            key: rel.to_string(),
            reason: format!("{n} bytes or more, over the {max} bytes such an object can hold"),
        };
        if r.meta.size > max {
            return Err(too_large(r.meta.size));
        }
        let mut out: Vec<u8> = Vec::with_capacity(r.meta.size as usize);
        use futures::StreamExt;
        let mut body = r.into_stream();
        while let Some(part) = body.next().await {
            let part = part.map_err(|e| self.err("GET", rel, e))?;
            if (out.len() + part.len()) as u64 > max {
                return Err(too_large((out.len() + part.len()) as u64));
            }
            out.extend_from_slice(&part);
        }
        Ok(Bytes::from(out))
    }

    /// The whole object with the version a conditional update needs, `None` when absent.
    pub(crate) async fn get_versioned(&self, rel: &str) -> Result<Option<(Bytes, UpdateVersion)>> {
        self.confine(rel)?;
        Stats::add(&self.stats.gets, 1);
        let r = match self.store.get(&self.key(rel)).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err("GET", rel, e)),
        };
        let version = UpdateVersion {
            e_tag: r.meta.e_tag.clone(),
            version: r.meta.version.clone(),
        };
        let b = self.read_capped(rel, r).await?;
        Stats::add(&self.stats.bytes_down, b.len() as u64);
        Ok(Some((b, version)))
    }

    /// A conditional GET: `Ok(None)` when absent, `Ok(Some(None))` when not modified since
    /// `etag`.
    pub(crate) async fn get_if_changed(
        &self,
        rel: &str,
        etag: Option<&str>,
    ) -> Result<Option<Option<(Bytes, Option<String>)>>> {
        self.confine(rel)?;
        Stats::add(&self.stats.gets, 1);
        let opts = GetOptions {
            if_none_match: etag.map(str::to_string),
            ..GetOptions::default()
        };
        match self.store.get_opts(&self.key(rel), opts).await {
            Ok(r) => {
                let etag = r.meta.e_tag.clone();
                let b = self.read_capped(rel, r).await?;
                Stats::add(&self.stats.bytes_down, b.len() as u64);
                Ok(Some(Some((b, etag))))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(object_store::Error::NotModified { .. }) => Ok(Some(None)),
            Err(e) => Err(self.err("GET", rel, e)),
        }
    }

    /// A streaming GET.
    pub(crate) async fn get_stream(&self, rel: &str) -> Result<Option<GetResult>> {
        self.confine(rel)?;
        Stats::add(&self.stats.gets, 1);
        match self.store.get(&self.key(rel)).await {
            Ok(r) => Ok(Some(r)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("GET", rel, e)),
        }
    }

    pub(crate) fn count_down(&self, n: u64) {
        Stats::add(&self.stats.bytes_down, n);
    }

    pub(crate) fn read_error(&self, rel: &str, e: object_store::Error) -> SyncError {
        self.err("GET", rel, e)
    }

    /// A put with `mode`; the store's error is returned as is, for the caller to decide.
    pub(crate) async fn put_raw(
        &self,
        rel: &str,
        bytes: Bytes,
        mode: PutMode,
    ) -> std::result::Result<PutResult, object_store::Error> {
        if let Err(e) = self.confine(rel) {
            return Err(object_store::Error::Generic {
                store: "file",
                source: Box::new(e),
            });
        }
        Stats::add(&self.stats.puts, 1);
        let n = bytes.len() as u64;
        let r = self
            .store
            .put_opts(
                &self.key(rel),
                PutPayload::from_bytes(bytes),
                PutOptions {
                    mode,
                    ..PutOptions::default()
                },
            )
            .await;
        if r.is_ok() {
            Stats::add(&self.stats.bytes_up, n);
        }
        r
    }

    pub(crate) async fn put(&self, rel: &str, bytes: Bytes) -> Result<()> {
        self.put_raw(rel, bytes, PutMode::Overwrite)
            .await
            .map(|_| ())
            .map_err(|e| self.err("PUT", rel, e))
    }

    /// Uploads the file at `path` as `rel` in parts of `part` bytes (a multipart upload, for
    /// large files).
    pub(crate) async fn put_file_multipart(
        &self,
        rel: &str,
        path: &std::path::Path,
        part: usize,
    ) -> Result<()> {
        self.confine(rel)?;
        Stats::add(&self.stats.puts, 1);
        let upload = self
            .store
            .put_multipart(&self.key(rel))
            .await
            .map_err(|e| self.err("PUT (multipart)", rel, e))?;
        let mut w = object_store::WriteMultipart::new_with_chunk_size(upload, part);
        let r = self.write_parts(&mut w, rel, path, part).await;
        if let Err(e) = r {
            // Leave no parts behind on the store (S3 keeps them, and bills them, until aborted).
            let _ = w.abort().await;
            return Err(e);
        }
        w.finish()
            .await
            .map_err(|e| self.err("PUT (multipart)", rel, e))?;
        Ok(())
    }

    async fn write_parts(
        &self,
        w: &mut object_store::WriteMultipart,
        rel: &str,
        path: &std::path::Path,
        part: usize,
    ) -> Result<()> {
        use tokio::io::AsyncReadExt;
        let mut f = tokio::fs::File::open(path)
            .await
            .map_err(crate::io_err(path))?;
        let mut buf = vec![0u8; part];
        loop {
            w.wait_for_capacity(4)
                .await
                .map_err(|e| self.err("PUT (multipart)", rel, e))?;
            let mut filled = 0;
            while filled < buf.len() {
                let n = f
                    .read(&mut buf[filled..])
                    .await
                    .map_err(crate::io_err(path))?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            w.write(&buf[..filled]);
            Stats::add(&self.stats.bytes_up, filled as u64);
            if filled < buf.len() {
                break;
            }
        }
        Ok(())
    }

    pub(crate) async fn delete(&self, rel: &str) -> Result<()> {
        self.confine(rel)?;
        Stats::add(&self.stats.deletes, 1);
        match self.store.delete(&self.key(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("DELETE", rel, e)),
        }
    }

    /// Every object under `rel_prefix`.
    pub(crate) async fn list(&self, rel_prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.confine_tree(rel_prefix)?;
        use futures::TryStreamExt;
        Stats::add(&self.stats.lists, 1);
        let p = self.key(rel_prefix);
        self.store
            .list(Some(&p))
            .try_collect()
            .await
            .map_err(|e| self.err("LIST", rel_prefix, e))
    }

    /// The newest committed generation and its manifest: from the `latest` hint, probing
    /// forward for manifests committed after it.
    pub(crate) async fn head_manifest(&self) -> Result<Option<RemoteManifest>> {
        let start = match self.get_bytes(LATEST).await? {
            Some(b) => {
                serde_json::from_slice::<crate::layout::Latest>(&b)
                    .map_err(|e| SyncError::Corrupt {
                        key: LATEST.into(),
                        reason: format!("not a pointer: {e}"),
                    })?
                    .generation
            }
            None => 0,
        };
        let mut g = start;
        let mut probed = 0u64;
        while let Some(next) = g.checked_add(1) {
            if self.head(&manifest_key(next)).await?.is_none() {
                break;
            }
            probed += 1;
            if probed > MAX_MANIFESTS_AHEAD {
                // A push moves `latest` forward as it commits: this many manifests past it
                // is a store that answers every HEAD (a web server's fallback page) or one
                // that misleads, and the probe would never end.
                return Err(SyncError::Corrupt {
                    key: manifest_key(next),
                    reason: format!(
                        "more than {MAX_MANIFESTS_AHEAD} manifests exist past the one `latest` \
                         names (generation {start}); does the store answer every request \
                         (a web server's fallback page)?"
                    ),
                });
            }
            g = next;
        }
        if g == 0 {
            return Ok(None);
        }
        let key = manifest_key(g);
        let bytes = self
            .get_bytes(&key)
            .await?
            .ok_or_else(|| SyncError::Corrupt {
                key: key.clone(),
                reason: format!("`latest` names generation {g}, which is missing"),
            })?;
        let m = RemoteManifest::parse(&key, &bytes)?;
        if m.generation != g {
            return Err(SyncError::Corrupt {
                key,
                reason: format!("holds generation {}", m.generation),
            });
        }
        Ok(Some(m))
    }
}

/// Manifests probed past the one `latest` names before the store is refused (see
/// `head_manifest`).
const MAX_MANIFESTS_AHEAD: u64 = 10_000;

/// The largest object of key `rel` read whole into memory: `latest` (a pointer), a manifest, a
/// segment's `segment.json`, a tombstone file. Segment files are streamed to disk, checked
/// against the sizes their `segment.json` states.
fn max_object_bytes(rel: &str) -> u64 {
    if rel == crate::layout::LATEST {
        64 << 10
    } else if rel.ends_with(format::segment::SEGMENT_JSON) {
        16 << 20
    } else {
        // Manifests (a few hundred bytes per segment) and tombstone files (a bit per chunk).
        256 << 20
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_before_any_request() {
        for (url, says) in [
            ("not a url", "not a URL"),
            ("ftp://host/x", "unsupported scheme ftp://"),
            ("file://relative/x", "absolute"),
        ] {
            let e = Remote::open(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        let web = Remote::open("http://127.0.0.1:9/some/prefix").unwrap();
        let e = web.require_writable("push").unwrap_err().to_string();
        assert!(e.contains("pulls only"), "{e}");
    }

    /// Objects read whole are bounded: an enormous `latest` is refused, not buffered; and a
    /// store answering every HEAD (here: more manifests than any push leaves past `latest`)
    /// ends the probe with an error instead of probing for ever.
    #[test]
    fn a_remote_cannot_make_a_pull_read_without_end() {
        use object_store::memory::InMemory;
        let r = Remote::with_store("memory://", Arc::new(InMemory::new()));
        let huge = Bytes::from(vec![b' '; (64 << 10) + 1]);
        r.block_on(r.put_raw(LATEST, huge, PutMode::Overwrite))
            .unwrap();
        let e = r.block_on(r.head_manifest()).unwrap_err().to_string();
        assert!(e.contains("over the 65536 bytes"), "{e}");

        let r = Remote::with_store("memory://", Arc::new(InMemory::new()));
        for g in 1..=MAX_MANIFESTS_AHEAD + 1 {
            r.block_on(r.put_raw(
                &manifest_key(g),
                Bytes::from_static(b"{}"),
                PutMode::Overwrite,
            ))
            .unwrap();
        }
        let e = r.block_on(r.head_manifest()).unwrap_err().to_string();
        assert!(e.contains("answer every request"), "{e}");
    }

    #[test]
    fn an_empty_file_store_has_no_manifest() {
        let tmp = tempfile::tempdir().unwrap();
        let r = Remote::open(&format!("file://{}", tmp.path().join("store").display())).unwrap();
        assert!(r.block_on(r.head_manifest()).unwrap().is_none());
        assert_eq!(r.key("latest").as_ref(), "latest");
        let s3 = Remote::open("s3://bucket/a/b/").unwrap();
        assert_eq!(s3.key("latest").as_ref(), "a/b/latest");
        assert_eq!(s3.rel(&s3.key("manifests/x")), Some("manifests/x"));
    }

    /// A `file://` store reads and writes nothing through a symbolic link: neither a linked
    /// object nor one under a linked directory, whatever the link points at.
    #[cfg(unix)]
    #[test]
    fn a_file_store_follows_no_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, outside) = (tmp.path().join("store"), tmp.path().join("outside"));
        std::fs::create_dir_all(store.join("segments")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"not the store's").unwrap();
        std::fs::write(store.join("segments/real"), b"the store's").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), store.join("segments/linked")).unwrap();
        std::os::unix::fs::symlink(&outside, store.join("elsewhere")).unwrap();
        let r = Remote::open(&format!("file://{}", store.display())).unwrap();
        let got = r.block_on(r.get_bytes("segments/real")).unwrap();
        assert_eq!(got.as_deref(), Some(&b"the store's"[..]));
        for key in ["segments/linked", "elsewhere/secret"] {
            let e = r.block_on(r.get_bytes(key)).unwrap_err().to_string();
            assert!(e.contains("symbolic link"), "{key}: {e}");
            assert!(r.block_on(r.head(key)).is_err(), "{key}");
            assert!(r.block_on(r.get_stream(key)).is_err(), "{key}");
        }
        assert!(r.block_on(r.list("elsewhere")).is_err());
        // A listing of the whole store refuses too, before anything is listed or deleted.
        let e = r.block_on(r.list("")).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let e = r
            .block_on(r.put("elsewhere/planted", Bytes::from_static(b"x")))
            .unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(!outside.join("planted").exists());
        assert!(r.block_on(r.delete("elsewhere/secret")).is_err());
        assert!(outside.join("secret").exists());
        // Absent keys stay absent, and a store reached through a link of its own is used.
        assert!(r.block_on(r.get_bytes("segments/none")).unwrap().is_none());
        assert!(r
            .block_on(r.get_bytes("segments/real/below"))
            .is_err_and(|e| {
                !e.to_string().contains("symbolic link") && !e.to_string().contains("neither")
            }));
        // A FIFO would block a read for ever: refused, as is a listing that holds one.
        let fifo = store.join("segments/fifo");
        let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o644) }, 0);
        let e = r.block_on(r.get_bytes("segments/fifo")).unwrap_err();
        assert!(e.to_string().contains("neither a file"), "{e}");
        assert!(r.block_on(r.list("segments")).is_err());
        std::fs::remove_file(&fifo).unwrap();
        std::fs::remove_file(store.join("segments/linked")).unwrap();
        let listed = r.block_on(r.list("segments")).unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        std::os::unix::fs::symlink(&store, tmp.path().join("store-link")).unwrap();
        let via = Remote::open(&format!(
            "file://{}",
            tmp.path().join("store-link").display()
        ));
        let via = via.unwrap();
        assert!(via
            .block_on(via.get_bytes("segments/real"))
            .unwrap()
            .is_some());
    }
}
