//! `indexer push`: upload what the remote lacks, seal, commit a generation.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::PutMode;

use format::manifest::TombstoneRef;
use format::segment::{dir_name, SEGMENT_JSON};
use format::{IndexManifest, SegmentMeta};

use crate::layout::{
    manifest_key, now_ms, segment_key, tombstone_file, tombstone_key, Latest, RemoteManifest,
    LATEST, REMOTE_FORMAT,
};
use crate::{io_err, Remote, Result, SyncError};

/// How to push.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// Also push the memory segments (agents' memories; never the write-ahead log).
    pub with_memories: bool,
    /// Uploads in flight at once.
    pub concurrency: usize,
    /// Files of at least this many bytes go up as multipart uploads.
    pub multipart_threshold: u64,
    /// Part size of multipart uploads (S3 needs at least 5 MiB).
    pub part_size: usize,
    /// Test hook: fail with [`SyncError::Stopped`] once this many objects were uploaded, as a
    /// push killed at that point would stop.
    #[doc(hidden)]
    pub stop_after_puts: Option<u64>,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            with_memories: false,
            concurrency: 8,
            multipart_threshold: 64 << 20,
            part_size: 16 << 20,
            stop_after_puts: None,
        }
    }
}

/// What a push did.
#[derive(Debug, Clone, Default)]
pub struct PushReport {
    /// The remote's newest generation after the push.
    pub generation: u64,
    /// Whether this push committed `generation` (false: the remote already held this index).
    pub committed: bool,
    pub segments_uploaded: usize,
    /// Segments the remote already had (sealed), not uploaded again.
    pub segments_reused: usize,
    pub files_uploaded: usize,
    pub bytes_uploaded: u64,
    /// Requests of the whole push: `Stats::snapshot` order.
    pub requests: [u64; 7],
    pub seconds: f64,
}

/// A push whose segments are uploaded and sealed, not yet committed: [`PendingPush::commit`]
/// creates its generation. Two pushes prepared against the same remote generation race in
/// `commit`; exactly one wins.
#[derive(Debug)]
pub struct PendingPush {
    remote: Remote,
    dir: PathBuf,
    opts: PushOptions,
    manifest: RemoteManifest,
    bytes: Bytes,
    reused: Vec<String>,
    report: PushReport,
    started: Instant,
}

/// Pushes the index in `dir` to `remote`: prepare, then commit.
pub fn push(dir: &Path, remote: &Remote, opts: &PushOptions) -> Result<PushReport> {
    match PendingPush::prepare(dir, remote, opts)? {
        Ok(pending) => pending.commit(),
        Err(up_to_date) => {
            if opts.with_memories {
                // The remote holds them already, perhaps from a push made before pushes
                // recorded what they sent: recorded now. (A segment flushed since the check
                // is local anyway; a pull must not add it back once deleted either.)
                let sent: Vec<String> = IndexManifest::read(dir)?
                    .memory_segments
                    .iter()
                    .map(|s| s.id.clone())
                    .collect();
                remember_sent_memories(dir, &sent)?;
            }
            Ok(up_to_date)
        }
    }
}

impl PendingPush {
    /// Checks the store honours conditional writes, reads the local MANIFEST, uploads every
    /// segment and tombstone file the remote lacks (segment files first, each segment's seal
    /// last) and builds the manifest of the next generation. `Err(report)` inside `Ok`: the
    /// remote's newest generation already holds this index; nothing was uploaded.
    pub fn prepare(
        dir: &Path,
        remote: &Remote,
        opts: &PushOptions,
    ) -> Result<std::result::Result<PendingPush, PushReport>> {
        remote.require_writable("push")?;
        let started = Instant::now();
        let before = remote.stats().snapshot();
        let local = IndexManifest::read(dir)?;
        remote
            .block_on(async {
                probe_conditional_writes(remote).await?;
                let head = remote.head_manifest().await?;
                let generation = match head
                    .as_ref()
                    .map_or(Some(1), |h| h.generation.checked_add(1))
                {
                    Some(g) => g,
                    None => {
                        return Err(SyncError::Corrupt {
                            key: crate::layout::LATEST.to_string(),
                            reason: "the newest manifest's generation is the largest there is: \
                                     no push can follow it"
                                .into(),
                        })
                    }
                };
                let index = remote_index(&local, generation, opts.with_memories);
                if let Some(h) = head.as_ref().filter(|h| h.same_content(&index)) {
                    advance_latest(remote, h.generation).await?;
                    return Ok(Err(PushReport {
                        generation: h.generation,
                        committed: false,
                        requests: diff(remote.stats().snapshot(), before),
                        seconds: started.elapsed().as_secs_f64(),
                        ..PushReport::default()
                    }));
                }
                let puts = AtomicU64::new(0);
                let mut report = PushReport::default();
                let mut reused = Vec::new();
                let entries: Vec<_> = index
                    .segments
                    .iter()
                    .chain(&index.memory_segments)
                    .cloned()
                    .collect();
                for (entry, local_entry) in entries.iter().zip(
                    local.segments.iter().chain(
                        opts.with_memories
                            .then_some(&local.memory_segments)
                            .into_iter()
                            .flatten(),
                    ),
                ) {
                    match upload_segment(remote, dir, &entry.id, opts, &puts, &mut report).await? {
                        true => report.segments_uploaded += 1,
                        false => {
                            report.segments_reused += 1;
                            reused.push(entry.id.clone());
                        }
                    }
                    if let (Some(t), Some(lt)) = (&entry.tombstones, &local_entry.tombstones) {
                        upload_tombstone(remote, dir, t, lt, &puts, opts, &mut report).await?;
                    }
                }
                let manifest = RemoteManifest {
                    remote_format: REMOTE_FORMAT,
                    generation,
                    created_unix_ms: now_ms(),
                    index,
                };
                let bytes = Bytes::from(
                    serde_json::to_vec_pretty(&manifest)
                        .map_err(|e| SyncError::Mismatch(e.to_string()))?,
                );
                Ok(Ok(PendingPush {
                    remote: remote.clone(),
                    dir: dir.to_path_buf(),
                    opts: opts.clone(),
                    manifest,
                    bytes,
                    reused,
                    report,
                    started,
                }))
            })
            .map(|r| {
                r.map(|mut p| {
                    p.report.requests = diff(remote.stats().snapshot(), before);
                    p
                })
            })
    }

    /// The generation this push will try to create.
    pub fn generation(&self) -> u64 {
        self.manifest.generation
    }

    /// Creates `manifests/<generation>.json` if absent. Refused (another pusher got there
    /// first) or unclear (the put failed without an answer): the manifest is read back and
    /// compared byte for byte; ours: committed, theirs: [`SyncError::Conflict`]. Then checks
    /// that the reused segments are still sealed (re-uploading any a concurrent `gc-remote`
    /// removed) and moves `latest` forward.
    pub fn commit(self) -> Result<PushReport> {
        let PendingPush {
            remote,
            dir,
            opts,
            manifest,
            bytes,
            reused,
            mut report,
            started,
        } = self;
        let before = remote.stats().snapshot();
        let generation = manifest.generation;
        let key = manifest_key(generation);
        // Before the remote can name them: a later pull into this index must not add back the
        // memory segments it sent (a memory deleted here after the push would come back).
        let sent: Vec<String> = manifest
            .index
            .memory_segments
            .iter()
            .map(|s| s.id.clone())
            .collect();
        remember_sent_memories(&dir, &sent)?;
        remote.block_on(async {
            match remote.put_raw(&key, bytes.clone(), PutMode::Create).await {
                Ok(_) => {}
                Err(e) => {
                    let refused = matches!(
                        e,
                        object_store::Error::AlreadyExists { .. }
                            | object_store::Error::Precondition { .. }
                    );
                    match remote.get_bytes(&key).await? {
                        Some(theirs) if theirs == bytes => {}
                        Some(_) => {
                            return Err(SyncError::Conflict {
                                url: remote.url().to_string(),
                                generation,
                            })
                        }
                        // Refused, yet not readable: another writer's put is still in flight
                        // (S3 answers 409 then); it wins.
                        None if refused => {
                            return Err(SyncError::Conflict {
                                url: remote.url().to_string(),
                                generation,
                            })
                        }
                        None => {
                            return Err(SyncError::Store {
                                url: remote.url().to_string(),
                                op: "PUT",
                                key,
                                source: Box::new(e),
                            })
                        }
                    }
                }
            }
            let puts = AtomicU64::new(0);
            let mut opts = opts;
            opts.stop_after_puts = None;
            for id in &reused {
                ensure_segment(&remote, &dir, id, &opts, &puts, &mut report).await?;
            }
            advance_latest(&remote, generation).await
        })?;
        let after = diff(remote.stats().snapshot(), before);
        for (r, a) in report.requests.iter_mut().zip(after) {
            *r += a;
        }
        report.generation = generation;
        report.committed = true;
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }
}

/// Adds `ids` (memory segments this index is sending to a remote) to its MANIFEST's
/// `pulled_memory_segments`, the segments a pull never adds again; a new generation, under
/// the directory lock (a server may flush meanwhile). Nothing to do when all are there.
/// Recorded before the remote commit: if that fails, the ids name segments that are local
/// anyway (or were deleted here, which a pull must not undo either).
fn remember_sent_memories(dir: &Path, ids: &[String]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let _lock = format::manifest::DirLock::acquire(dir)?;
    let mut m = IndexManifest::read(dir)?;
    let before = m.pulled_memory_segments.len();
    for id in ids {
        if !m.pulled_memory_segments.contains(id) {
            m.pulled_memory_segments.push(id.clone());
        }
    }
    if m.pulled_memory_segments.len() != before {
        m.generation += 1;
        m.commit(dir)?;
    }
    Ok(())
}

fn diff(a: [u64; 7], b: [u64; 7]) -> [u64; 7] {
    std::array::from_fn(|i| a[i] - b[i])
}

/// The pushed form of `local`: tombstone files renamed by content, memory segments only when
/// asked, no memory LSN.
fn remote_index(local: &IndexManifest, generation: u64, with_memories: bool) -> IndexManifest {
    let rename = |entries: &[format::SegmentEntry]| {
        entries
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if let Some(t) = e.tombstones.as_mut() {
                    t.file = tombstone_file(&e.id, &t.blake3);
                }
                e
            })
            .collect()
    };
    IndexManifest {
        format_version: local.format_version,
        generation,
        model_id: local.model_id.clone(),
        dim: local.dim,
        segments: rename(&local.segments),
        memory_segments: if with_memories {
            rename(&local.memory_segments)
        } else {
            Vec::new()
        },
        memory_lsn: 0,
        roots: local.roots.clone(),
        pulled_memory_segments: Vec::new(),
        // What this machine deleted stays here (it is read only by this machine's pulls).
        deleted_memories: Default::default(),
        pulled_from: None,
    }
}

/// Puts a probe object twice with create-if-absent: the second must be refused.
async fn probe_conditional_writes(remote: &Remote) -> Result<()> {
    let key = format!("probe/{}", uuid::Uuid::now_v7());
    let no = || SyncError::NoConditionalWrites {
        url: remote.url().to_string(),
    };
    match remote
        .put_raw(&key, Bytes::from_static(b"1"), PutMode::Create)
        .await
    {
        Ok(_) => {}
        Err(object_store::Error::NotImplemented { .. }) => return Err(no()),
        Err(e) => {
            return Err(SyncError::Store {
                url: remote.url().to_string(),
                op: "PUT (conditional-write probe)",
                key,
                source: Box::new(e),
            })
        }
    }
    let second = remote
        .put_raw(&key, Bytes::from_static(b"2"), PutMode::Create)
        .await;
    remote.delete(&key).await?;
    match second {
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => Ok(()),
        Ok(_) | Err(object_store::Error::NotImplemented { .. }) => Err(no()),
        Err(e) => Err(SyncError::Store {
            url: remote.url().to_string(),
            op: "PUT (conditional-write probe)",
            key,
            source: Box::new(e),
        }),
    }
}

/// Moves `latest` to `generation` unless it already names a later one: a conditional update
/// where the store has one, else (file://) a plain overwrite after the check. Readers probe
/// forward from `latest`, so a pointer left behind costs a request, never a generation.
pub(crate) async fn advance_latest(remote: &Remote, generation: u64) -> Result<()> {
    let ours = Bytes::from(serde_json::to_vec(&Latest { generation }).expect("serialises"));
    for _ in 0..16 {
        let current = remote.get_versioned(LATEST).await?;
        let mode = match current {
            Some((b, version)) => {
                let g = serde_json::from_slice::<Latest>(&b).map_or(0, |l| l.generation);
                if g >= generation {
                    return Ok(());
                }
                PutMode::Update(version)
            }
            None => PutMode::Create,
        };
        match remote.put_raw(LATEST, ours.clone(), mode).await {
            Ok(_) => return Ok(()),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => continue,
            Err(object_store::Error::NotImplemented { .. }) => {
                return remote.put(LATEST, ours.clone()).await
            }
            Err(e) => {
                return Err(SyncError::Store {
                    url: remote.url().to_string(),
                    op: "PUT",
                    key: LATEST.into(),
                    source: Box::new(e),
                })
            }
        }
    }
    Ok(())
}

fn count_put(puts: &AtomicU64, opts: &PushOptions) -> Result<()> {
    let n = puts.fetch_add(1, Ordering::SeqCst) + 1;
    match opts.stop_after_puts {
        Some(stop) if n >= stop => Err(SyncError::Stopped(n)),
        _ => Ok(()),
    }
}

/// Uploads segment `id` unless the remote has it sealed; returns whether it uploaded.
async fn upload_segment(
    remote: &Remote,
    dir: &Path,
    id: &str,
    opts: &PushOptions,
    puts: &AtomicU64,
    report: &mut PushReport,
) -> Result<bool> {
    let seal = segment_key(id, SEGMENT_JSON);
    let (seg_dir, json, meta) = local_segment(dir, id)?;
    if remote.head(&seal).await?.is_some() {
        // Put the seal again (same bytes): its new age keeps `gc-remote`, which spares
        // segments with an object younger than its grace period, away from a segment this
        // push is about to name.
        remote.put(&seal, Bytes::from(json)).await?;
        return Ok(false);
    }
    let results: Vec<(bool, u64)> = futures::stream::iter(meta.files.iter().map(|f| {
        let path = seg_dir.join(&f.name);
        let key = segment_key(id, &f.name);
        async move {
            if remote.head(&key).await?.is_some_and(|m| m.size == f.size) {
                return Ok((false, 0));
            }
            upload_file(remote, &key, &path, f.size, &f.blake3, opts).await?;
            count_put(puts, opts)?;
            Ok::<_, SyncError>((true, f.size))
        }
    }))
    .buffer_unordered(opts.concurrency.max(1))
    .try_collect()
    .await?;
    for (up, n) in results {
        if up {
            report.files_uploaded += 1;
            report.bytes_uploaded += n;
        }
    }
    remote.put(&seal, Bytes::from(json.clone())).await?;
    count_put(puts, opts)?;
    report.files_uploaded += 1;
    report.bytes_uploaded += json.len() as u64;
    Ok(true)
}

/// A local segment's directory, `segment.json` bytes (checked against the id) and metadata.
fn local_segment(dir: &Path, id: &str) -> Result<(PathBuf, Vec<u8>, SegmentMeta)> {
    let seg_dir = dir.join(dir_name(id));
    let json_path = seg_dir.join(SEGMENT_JSON);
    let json = std::fs::read(&json_path).map_err(io_err(&json_path))?;
    if format::segment::segment_id(&json) != id {
        return Err(SyncError::Corrupt {
            key: json_path.display().to_string(),
            reason: "does not hash to its segment id: run `indexer verify`".into(),
        });
    }
    let meta: SegmentMeta = serde_json::from_slice(&json).map_err(|e| SyncError::Corrupt {
        key: json_path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((seg_dir, json, meta))
}

/// After a commit: every file and the seal of reused segment `id` must still be there (a
/// concurrent `gc-remote` may have removed them); what is missing is uploaded again, the seal
/// last.
async fn ensure_segment(
    remote: &Remote,
    dir: &Path,
    id: &str,
    opts: &PushOptions,
    puts: &AtomicU64,
    report: &mut PushReport,
) -> Result<()> {
    let (seg_dir, json, meta) = local_segment(dir, id)?;
    let mut repaired = false;
    for f in &meta.files {
        let key = segment_key(id, &f.name);
        if remote.head(&key).await?.is_none_or(|m| m.size != f.size) {
            upload_file(
                remote,
                &key,
                &seg_dir.join(&f.name),
                f.size,
                &f.blake3,
                opts,
            )
            .await?;
            count_put(puts, opts)?;
            report.files_uploaded += 1;
            report.bytes_uploaded += f.size;
            repaired = true;
        }
    }
    let seal = segment_key(id, SEGMENT_JSON);
    if repaired || remote.head(&seal).await?.is_none() {
        eprintln!(
            "push: segment {id} lost objects in {} while this push committed (a concurrent \
             gc-remote?); uploaded them again",
            remote.url()
        );
        remote.put(&seal, Bytes::from(json)).await?;
    }
    Ok(())
}

/// Uploads one local file, checking it against its recorded size and hash (a local file that
/// changed is refused, and a multipart object already written is deleted again).
async fn upload_file(
    remote: &Remote,
    key: &str,
    path: &Path,
    size: u64,
    blake3: &str,
    opts: &PushOptions,
) -> Result<()> {
    let bad = |reason: String| SyncError::Corrupt {
        key: path.display().to_string(),
        reason: format!("{reason}: run `indexer verify`"),
    };
    let len = std::fs::metadata(path).map_err(io_err(path))?.len();
    if len != size {
        return Err(bad(format!("{len} bytes, segment.json says {size}")));
    }
    if size > 0 && size >= opts.multipart_threshold {
        remote
            .put_file_multipart(key, path, opts.part_size.max(5 << 20))
            .await?;
        let hash = hash_file(path)?;
        if hash != blake3 {
            remote.delete(key).await?;
            return Err(bad("blake3 does not match segment.json".into()));
        }
        return Ok(());
    }
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    if format::blake3_hex(&bytes) != blake3 {
        return Err(bad("blake3 does not match segment.json".into()));
    }
    remote.put(key, Bytes::from(bytes)).await
}

pub(crate) fn hash_file(path: &Path) -> Result<String> {
    format::blake3_file_hex(path).map_err(io_err(path))
}

async fn upload_tombstone(
    remote: &Remote,
    dir: &Path,
    t: &TombstoneRef,
    local: &TombstoneRef,
    puts: &AtomicU64,
    opts: &PushOptions,
    report: &mut PushReport,
) -> Result<()> {
    // Always put (a few bytes, content-addressed): a tombstone file already there gets a new
    // age, which keeps `gc-remote` away from it.
    let key = tombstone_key(&t.blake3);
    let path = dir.join(&local.file);
    let bytes = std::fs::read(&path).map_err(io_err(&path))?;
    if format::blake3_hex(&bytes) != t.blake3 {
        return Err(SyncError::Corrupt {
            key: path.display().to_string(),
            reason: "does not match its MANIFEST hash: run `indexer verify`".into(),
        });
    }
    let n = bytes.len() as u64;
    remote.put(&key, Bytes::from(bytes)).await?;
    count_put(puts, opts)?;
    report.files_uploaded += 1;
    report.bytes_uploaded += n;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::stream::BoxStream;
    use object_store::memory::InMemory;
    use object_store::path::Path as Key;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        PutMultipartOptions, PutOptions, PutPayload, PutResult,
    };

    use super::*;

    /// An S3-compatible server that ignores `If-None-Match: *`: every put overwrites.
    #[derive(Debug)]
    struct Overwrites(InMemory);

    impl std::fmt::Display for Overwrites {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Overwrites")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Overwrites {
        async fn put_opts(
            &self,
            location: &Key,
            payload: PutPayload,
            mut opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            opts.mode = PutMode::Overwrite;
            self.0.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Key,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Key,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            self.0.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Key>>,
        ) -> BoxStream<'static, object_store::Result<Key>> {
            self.0.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Key>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Key>,
        ) -> object_store::Result<ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Key,
            to: &Key,
            options: CopyOptions,
        ) -> object_store::Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }

    #[test]
    fn stores_that_ignore_conditional_writes_are_refused() {
        let bad = Remote::with_store("s3://lying", Arc::new(Overwrites(InMemory::new())));
        let e = bad.block_on(probe_conditional_writes(&bad)).unwrap_err();
        assert!(matches!(e, SyncError::NoConditionalWrites { .. }), "{e}");
        // The probe cleans up after itself.
        assert!(bad.block_on(bad.list("probe/")).unwrap().is_empty());
        let good = Remote::with_store("memory://", Arc::new(InMemory::new()));
        good.block_on(probe_conditional_writes(&good)).unwrap();
    }

    #[test]
    fn latest_only_moves_forward() {
        let r = Remote::with_store("memory://", Arc::new(InMemory::new()));
        let read = || {
            let b = r.block_on(r.get_bytes(LATEST)).unwrap().unwrap();
            serde_json::from_slice::<Latest>(&b).unwrap().generation
        };
        r.block_on(advance_latest(&r, 3)).unwrap();
        assert_eq!(read(), 3);
        r.block_on(advance_latest(&r, 2)).unwrap();
        assert_eq!(read(), 3);
        r.block_on(advance_latest(&r, 5)).unwrap();
        assert_eq!(read(), 5);
    }
}
