//! `index_status`: what is served (generation, segments, counts), its health and the caches.

use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ms, Debug, ToolResult};
use crate::engine::{unix_secs, Engine};
use memory::store::LogAccess;

/// The served index: health, generation, segments, live chunks and files, languages, model,
/// index age, reload errors and embedding-cache statistics.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SegmentStatus {
    pub id: String,
    pub chunks: u32,
    pub live_chunks: u64,
    pub files: u32,
    pub vector_index: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StatusAnswer {
    /// `ok`, or `degraded` when something is wrong: a newer index generation could not be
    /// loaded (the previous one is still served; see `reload_error`), the memory log is damaged
    /// (see `memory_log_damage`), a code segment is left out (`left_out`), or a problem was
    /// found while serving (`problems`).
    pub health: &'static str,
    /// `read-write`; `read-only (held by pid N)` when another queryd holds the memory log (its
    /// writes are followed); `read-only (damaged log)`; `read-only (<why>)` otherwise.
    pub memories: String,
    /// A damaged record followed by valid ones in the memory log: where, which LSNs are not
    /// served, and the fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_log_damage: Option<LogDamage>,
    pub index_dir: String,
    pub generation: u64,
    pub model_id: String,
    pub dim: u32,
    pub segments: Vec<SegmentStatus>,
    pub live_chunks: u64,
    pub files: u64,
    /// Live chunks per language.
    pub languages: std::collections::BTreeMap<String, u64>,
    /// Seconds since the served MANIFEST was written: by a code build, a pull, a merge, and
    /// also a memory flush or ingest, so it says nothing about how old the code is (see
    /// `code_age_s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_age_s: Option<u64>,
    /// Seconds since the newest served code segment was written into this directory (by a
    /// build that found changed files, a merge or a pull). A build that finds nothing changed
    /// writes none, so the code may be fresher than this says, never older.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_age_s: Option<u64>,
    /// Seconds since this generation was loaded.
    pub loaded_s_ago: u64,
    pub reloads: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reload_error: Option<String>,
    /// Code segments the index names but this server does not serve (they failed to open, or
    /// their checksums failed after open): their files are missing from every answer. Rebuild
    /// them with `indexer build` on the same roots.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// Problems found while serving: a damaged memory segment, a tool that failed with an
    /// internal error, damaged text (newest last).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<crate::integrity::Problem>,
    pub uptime_s: u64,
    pub embed_cache: CacheStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// A code segment left out of what is served.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LeftOut {
    pub id: String,
    /// The damaged file.
    pub path: String,
    pub error: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LogDamage {
    /// Byte offset of the first damaged record, and of the first valid record after it.
    pub bad_offset: u64,
    pub resume_offset: u64,
    /// Why the record is bad (checksum mismatch, implausible length, ...).
    pub reason: String,
    /// Last LSN served (the valid prefix, whole batches).
    pub last_good_lsn: u64,
    /// Valid records after the damage, not served, and their LSN range.
    pub records_after: u64,
    pub lsns_after: String,
    /// Intact records of the broken batch before the damage, not served.
    pub unreplayed_before: u64,
    /// What to do.
    pub fix: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CacheStatus {
    pub entries: usize,
    pub hits: u64,
    pub misses: u64,
}

impl Engine {
    pub fn index_status(&self, a: &StatusArgs) -> ToolResult<StatusAnswer> {
        let t0 = Instant::now();
        let snap = self.snapshot();
        let now = SystemTime::now();
        let age = |t: SystemTime| now.duration_since(t).map_or(0, |d| d.as_secs());
        let mut languages = std::collections::BTreeMap::new();
        let mut files = 0u64;
        let mut segments = Vec::new();
        let mut newest_code: Option<std::time::SystemTime> = None;
        for ls in &snap.code.index.segments {
            let dir = self.dir().join(format::segment::dir_name(ls.segment.id()));
            if let Ok(t) = std::fs::metadata(&dir).and_then(|m| m.modified()) {
                newest_code = newest_code.max(Some(t));
            }
            let t = ls.segment.table();
            for f in t.files.iter() {
                let first = f.first_chunk.to_native();
                let live = (first..first + f.chunk_count.to_native())
                    .filter(|c| !ls.tombstones.contains(*c))
                    .count() as u64;
                if live > 0 {
                    files += 1;
                    *languages.entry(f.language.to_string()).or_insert(0) += live;
                }
            }
            let m = ls.segment.meta();
            segments.push(SegmentStatus {
                id: ls.segment.id().chars().take(16).collect(),
                chunks: m.chunk_count,
                live_chunks: u64::from(m.chunk_count) - ls.tombstones.len(),
                files: m.file_count,
                vector_index: m.vector_index.clone(),
            });
        }
        let failure = self.last_failure();
        let left_out: Vec<LeftOut> = snap
            .code
            .index
            .damaged
            .iter()
            .map(|d| LeftOut {
                id: d.id.clone(),
                path: d.path.display().to_string(),
                error: d.error.clone(),
            })
            .collect();
        let problems = self.problems();

        let damage = self.memory_log_damage();
        let memories = match (self.memory_access(), self.memory_writes_disabled()) {
            (LogAccess::Writer, None) => "read-write".to_string(),
            (LogAccess::HeldElsewhere, _) => match memory::wal::holder_pid(self.dir()) {
                Some(pid) => format!("read-only (held by pid {pid})"),
                None => "read-only (held by another queryd)".to_string(),
            },
            (LogAccess::Damaged, _) => "read-only (damaged log)".to_string(),
            (_, why) => format!("read-only ({})", why.unwrap_or_default()),
        };
        // A second server reading the log another one holds, or a server of a read-only
        // index, is normal; writes disabled for any other reason (a damaged log, records of
        // another model, a log that could not be opened) leave memories that cannot be
        // written, or not all served.
        let writes_broken = !matches!(
            self.memory_access(),
            LogAccess::HeldElsewhere | LogAccess::ReadOnly
        ) && self.memory_writes_disabled().is_some();
        let healthy = failure.is_none()
            && damage.is_none()
            && !writes_broken
            && left_out.is_empty()
            && problems.is_empty();
        Ok(StatusAnswer {
            health: if healthy { "ok" } else { "degraded" },
            memories,
            memory_log_damage: damage.map(|d| LogDamage {
                bad_offset: d.bad_offset,
                resume_offset: d.resume_offset,
                reason: d.reason.clone(),
                last_good_lsn: d.last_good_lsn,
                records_after: d.records_after,
                lsns_after: format!("{}-{}", d.first_lsn_after, d.last_lsn_after),
                unreplayed_before: d.unreplayed_before,
                fix: format!(
                    "stop every queryd on this index, then run `queryd repair-wal --index {}`",
                    self.dir().display()
                ),
            }),
            index_dir: self.dir().display().to_string(),
            generation: snap.generation(),
            model_id: snap.code.index.manifest.model_id.clone(),
            dim: snap.code.index.manifest.dim,
            segments,
            live_chunks: snap.code.index.live_chunks(),
            files,
            languages,
            index_age_s: snap.manifest_mtime.map(age),
            code_age_s: newest_code.map(age),
            loaded_s_ago: age(snap.loaded_at),
            reloads: self.reloads.load(Ordering::Relaxed),
            reload_error: failure.map(|f| format!("{} (at unix {})", f.error, f.at_unix)),
            left_out,
            problems,
            uptime_s: unix_secs(now).saturating_sub(unix_secs(self.started)),
            embed_cache: CacheStatus {
                entries: self.cache.len(),
                hits: self.cache.hits.load(Ordering::Relaxed),
                misses: self.cache.misses.load(Ordering::Relaxed),
            },
            debug: a.debug.then(|| Debug {
                other_ms: ms(t0.elapsed()),
                total_ms: ms(t0.elapsed()),
                generation: snap.generation(),
                ..Debug::default()
            }),
        })
    }
}
