//! The memory write tools: `add_memories` (validate, complete code references, embed, SIMILAR
//! links, then one logged batch), `update_memory`, `delete_memories`, and `put_memories` (the
//! benches' direct write).

use std::time::Instant;

use format::memory::{validate_record, MemoryRecord};
use format::vectors::DEFAULT_NPROBE;
use memory::similar::similar_for;
use memory::wal::WalOp;
use memory::{new_id, now_ms};

use super::args::*;
use super::input::*;
use super::output::*;
use crate::engine::Engine;
use crate::tools::common::{ms, Debug, ToolError, ToolResult};

impl Engine {
    pub fn add_memories(&self, a: &AddMemoriesArgs) -> ToolResult<AddMemoriesAnswer> {
        let t0 = Instant::now();
        if a.memories.is_empty() {
            return Err(ToolError::InvalidInput(
                "`memories` is empty; pass at least one {\"text\": …}".into(),
            ));
        }
        if a.memories.len() > MAX_BATCH {
            return Err(ToolError::InvalidInput(format!(
                "{} memories in one call; at most {MAX_BATCH}: split the batch",
                a.memories.len()
            )));
        }
        let now = now_ms();
        let mut recs = Vec::with_capacity(a.memories.len());
        let snap = self.snapshot();
        let ctx = self.ref_ctx(&snap);
        for (i, m) in a.memories.iter().enumerate() {
            let r = complete_refs(m.code_refs.clone(), &ctx, now)
                .and_then(|refs| record_from(m.clone(), new_id(), now, refs))
                .map_err(|e| match e {
                    ToolError::InvalidInput(s) if a.memories.len() > 1 => {
                        ToolError::InvalidInput(format!("memory {i}: {s}; nothing was added"))
                    }
                    e => e,
                })?;
            recs.push(r);
        }
        // Code links suggested by identifiers in the texts.
        let mut suggested_links = Vec::new();
        for (i, r) in recs.iter_mut().enumerate() {
            for (matched, conf, mut cr) in
                crate::tools::code_links::suggest_links(&ctx, &r.text, now)
            {
                let dup = r.code_refs.iter().any(|x| {
                    x.path == cr.path && x.start_line == cr.start_line && x.end_line == cr.end_line
                });
                let attached = a.auto_link && !dup && r.code_refs.len() < format::memory::MAX_LIST;
                cr.confidence = Some(conf);
                cr.reason = crate::tools::code_links::INFERRED.into();
                let mut out = code_ref_out(&cr);
                out.status = "fresh".into();
                if attached {
                    r.code_refs.push(cr);
                }
                if !dup {
                    suggested_links.push(SuggestedLink {
                        memory: i,
                        matched,
                        confidence: conf,
                        reason: crate::tools::code_links::INFERRED.into(),
                        code_ref: out,
                        attached,
                    });
                }
            }
        }
        let t = Instant::now();
        let texts: Vec<&str> = recs.iter().map(|r| r.text.as_str()).collect();
        let (vecs, _) = self
            .encoder()
            .embed(&texts)
            .map_err(|e| ToolError::Internal(format!("embedding failed: {e}")))?;
        let embed_ms = ms(t.elapsed());
        let dim = self.encoder().dim();
        let ids: Vec<String> = recs.iter().map(|r| r.id.clone()).collect();
        let t = Instant::now();
        let sims = similar_for(&self.snapshot().memory, &ids, &vecs, dim, DEFAULT_NPROBE);
        let similar_ms = ms(t.elapsed());
        for (r, s) in recs.iter_mut().zip(sims) {
            r.similar = s;
        }
        let ops = recs
            .into_iter()
            .enumerate()
            .map(|(i, record)| WalOp::Put {
                record: Box::new(record),
                vector: vecs[i * dim..(i + 1) * dim].to_vec(),
            })
            .collect();
        self.write_with(|_| Ok((ops, ())))?;
        Ok(AddMemoriesAnswer {
            ids,
            suggested_links,
            debug: a.debug.then(|| Debug {
                embed_ms,
                graph_ms: similar_ms,
                other_ms: ms(t.elapsed()) - similar_ms,
                total_ms: ms(t0.elapsed()),
                ..Debug::default()
            }),
        })
    }

    /// Writes complete records with precomputed vectors (`records.len() × dim` floats): the
    /// write path of `add_memories` without validation of tool input or embedding. Records
    /// are validated; ids must be new. Their SIMILAR links are kept as given (a bulk load;
    /// [`memory::similar::similar_for`] computes them).
    pub fn put_memories(&self, records: Vec<MemoryRecord>, vectors: &[f32]) -> ToolResult<()> {
        let dim = self.encoder().dim();
        if vectors.len() != records.len() * dim {
            return Err(ToolError::InvalidInput(format!(
                "{} floats for {} records of dimension {dim}",
                vectors.len(),
                records.len()
            )));
        }
        for r in &records {
            validate_record(r).map_err(|e| ToolError::InvalidInput(e.to_string()))?;
        }
        let ops = records
            .into_iter()
            .enumerate()
            .map(|(i, record)| WalOp::Put {
                record: Box::new(record),
                vector: vectors[i * dim..(i + 1) * dim].to_vec(),
            })
            .collect();
        self.write_with(|_| Ok((ops, ())))
    }

    pub fn update_memory(&self, a: &UpdateMemoryArgs) -> ToolResult<MemoryAnswer> {
        let t0 = Instant::now();
        let id = a.id.trim().to_string();
        check_id(&id)?;
        // Embed a new text before taking the writer lock.
        let mut embed_ms = 0.0;
        let new_vec = match &a.text {
            Some(t) => {
                if t.trim().is_empty() {
                    return Err(ToolError::InvalidInput(
                        "`text` is empty; pass the new text or leave it out".into(),
                    ));
                }
                if t.len() > format::memory::MAX_TEXT_BYTES {
                    return Err(ToolError::InvalidInput(format!(
                        "the memory text is {} bytes; the limit is {} bytes",
                        t.len(),
                        format::memory::MAX_TEXT_BYTES
                    )));
                }
                let t1 = Instant::now();
                let v = self
                    .encoder()
                    .embed(&[t.as_str()])
                    .map_err(|e| ToolError::Internal(format!("embedding failed: {e}")))?
                    .0;
                embed_ms = ms(t1.elapsed());
                Some(v)
            }
            None => None,
        };
        let add = canonical_tags(a.add_tags.as_deref().unwrap_or_default())?;
        let remove = canonical_tags(a.remove_tags.as_deref().unwrap_or_default())?;
        let replace = a.tags.as_deref().map(canonical_tags).transpose()?;
        let scope = one_of("scope", a.scope.clone(), &format::memory::SCOPES)?;
        let source = one_of("source", a.source.clone(), &format::memory::SOURCES)?;
        let state = one_of("state", a.state.clone(), &format::memory::STATES)?;
        // Code references are completed (files read, hashed) before the writer lock.
        let new_refs = match &a.code_refs {
            Some(c) => {
                let snap = self.snapshot();
                Some(complete_refs(
                    Some(c.clone()),
                    &self.ref_ctx(&snap),
                    now_ms(),
                )?)
            }
            None => None,
        };
        // New text, new SIMILAR edges (against everything but the memory itself).
        let new_sims = new_vec.as_ref().map(|v| {
            let dim = self.encoder().dim();
            similar_for(
                &self.snapshot().memory,
                std::slice::from_ref(&id),
                v,
                dim,
                DEFAULT_NPROBE,
            )
            .remove(0)
        });
        let updated = self.write_with(|snap| {
            let (mut r, old_vec) = snap.memory.lookup(&id).ok_or_else(|| not_found(&id))?;
            if let Some(t) = &a.text {
                r.text = t.clone();
            }
            if let Some(s) = &new_sims {
                r.similar = s.clone();
            }
            if let Some(c) = &a.category {
                r.category = c.trim().to_string();
            }
            if let Some(s) = &scope {
                r.scope = s.clone();
            }
            if let Some(e) = &a.entity {
                r.entity = e.trim().to_string();
            }
            if let Some(t) = &replace {
                r.tags = t.clone();
            }
            r.tags.retain(|t| {
                !remove
                    .iter()
                    .any(|x| x == t || (!x.contains('=') && format::memory::tag_key(t) == x))
            });
            r.tags.extend(add.iter().cloned());
            r.tags.sort();
            r.tags.dedup();
            if let Some(s) = &source {
                r.source = s.clone();
            }
            if let Some(e) = &a.evidence {
                r.evidence = e.clone();
            }
            for e in a.add_evidence.iter().flatten() {
                if !r.evidence.contains(e) {
                    r.evidence.push(e.clone());
                }
            }
            let now = now_ms().max(r.created_at);
            if let Some(c) = &new_refs {
                r.code_refs = c.clone();
            }
            if let Some(s) = &state {
                r.state = s.clone();
            }
            r.updated_at = now.max(r.updated_at);
            validate_record(&r).map_err(|e| ToolError::InvalidInput(e.to_string()))?;
            let vector = new_vec.clone().unwrap_or(old_vec);
            Ok((
                vec![WalOp::Put {
                    record: Box::new(r.clone()),
                    vector,
                }],
                r,
            ))
        })?;
        let snap = self.snapshot();
        Ok(MemoryAnswer {
            memory: self.annotated(&snap, &updated),
            debug: a.debug.then(|| Debug {
                embed_ms,
                total_ms: ms(t0.elapsed()),
                ..Debug::default()
            }),
        })
    }

    pub fn delete_memories(&self, a: &DeleteMemoriesArgs) -> ToolResult<DeleteMemoriesAnswer> {
        let t0 = Instant::now();
        if a.ids.is_empty() || a.ids.len() > MAX_BATCH {
            return Err(ToolError::InvalidInput(format!(
                "`ids` must hold 1 to {MAX_BATCH} memory ids"
            )));
        }
        let mut ids: Vec<String> = a.ids.iter().map(|s| s.trim().to_string()).collect();
        for id in &ids {
            check_id(id)?;
        }
        ids.sort();
        ids.dedup();
        let deleted = self.write_with(|snap| {
            let missing: Vec<&String> = ids
                .iter()
                .filter(|id| snap.memory.lookup(id).is_none())
                .collect();
            if !missing.is_empty() {
                return Err(ToolError::NotFound {
                    message: format!(
                        "no memory with id {}; nothing was deleted",
                        missing
                            .iter()
                            .map(|s| format!("`{s}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    suggestions: vec!["list_memories".into()],
                });
            }
            let ops = ids
                .iter()
                .map(|id| WalOp::Delete { id: id.clone() })
                .collect();
            Ok((ops, ids.clone()))
        })?;
        Ok(DeleteMemoriesAnswer {
            deleted,
            debug: a.debug.then(|| Debug {
                total_ms: ms(t0.elapsed()),
                ..Debug::default()
            }),
        })
    }
}
