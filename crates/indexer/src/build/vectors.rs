//! The vectors of a new segment: reused from the existing index by content hash, the rest
//! embedded; and the IVF coarse centroids when the encoder can train them on its GPU.

use std::collections::HashMap;
use std::time::Instant;

use format::records::ChunkRecord;
use format::Index;

use super::{BuildOptions, BuildReport, EmbedError, Embedder};
use crate::progress::Progress;
use crate::IndexerError;

/// Where each chunk's vector comes from, before embedding.
struct VectorPlan {
    /// `chunks.len() × dim`, reused rows filled in.
    vectors: Vec<f32>,
    /// Chunks to embed: the first chunk of each distinct new text, in chunk order.
    todo: Vec<usize>,
    /// (embedded chunk, chunk with the same text): rows copied after embedding.
    copies: Vec<(usize, usize)>,
}

/// Where each content hash of the existing index has a vector: (segment, chunk), the first
/// one. Built once per build, shared by its segments.
pub(super) type Known = HashMap<[u8; 32], (usize, u32)>;

pub(super) fn known_vectors(existing: Option<&Index>) -> Known {
    let mut known = Known::new();
    if let Some(ix) = existing {
        for (si, ls) in ix.segments.iter().enumerate() {
            for (ci, c) in ls.segment.table().chunks.iter().enumerate() {
                known.entry(c.content_hash).or_insert((si, ci as u32));
            }
        }
    }
    known
}

/// Copies the vectors of chunks whose content hash is already in the existing index and
/// lists the chunks left to embed, each distinct text once.
fn reuse_vectors(
    existing: Option<&Index>,
    known: &Known,
    chunks: &[ChunkRecord],
    dim: usize,
) -> VectorPlan {
    let mut vectors = vec![0f32; chunks.len() * dim];
    let mut todo: Vec<usize> = Vec::new();
    let mut first_of: HashMap<[u8; 32], usize> = HashMap::new();
    let mut copies: Vec<(usize, usize)> = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        if let Some((si, ci)) = known.get(&c.content_hash) {
            let ix = existing.expect("known implies existing");
            if let Some(v) = ix.segments[*si].segment.vector(*ci) {
                vectors[i * dim..(i + 1) * dim].copy_from_slice(v);
                continue;
            }
        }
        match first_of.get(&c.content_hash) {
            Some(&j) => copies.push((j, i)),
            None => {
                first_of.insert(c.content_hash, i);
                todo.push(i);
            }
        }
    }
    VectorPlan {
        vectors,
        todo,
        copies,
    }
}

/// The vectors of a new segment (`chunks.len() × dim`): reused by content hash
/// ([`reuse_vectors`]), the rest embedded in groups of `opts.embed_group` texts (else the
/// embedder's default), in chunk order.
#[allow(clippy::too_many_arguments)]
pub(super) fn embed_vectors(
    opts: &BuildOptions,
    embedder: &dyn Embedder,
    existing: Option<&Index>,
    known: &Known,
    chunks: &[ChunkRecord],
    texts: &[String],
    report: &mut BuildReport,
    progress: &Progress,
) -> Result<Vec<f32>, IndexerError> {
    let t = Instant::now();
    let dim = embedder.dim();
    let VectorPlan {
        mut vectors,
        todo,
        copies,
    } = reuse_vectors(existing, known, chunks, dim);
    let bar = progress.bar(todo.len() as u64, "embed");
    let group = opts
        .embed_group
        .unwrap_or_else(|| embedder.default_group())
        .max(1);
    let index_groups: Vec<&[usize]> = todo.chunks(group).collect();
    let text_groups: Vec<Vec<&str>> = index_groups
        .iter()
        .map(|g| g.iter().map(|&i| texts[i].as_str()).collect())
        .collect();
    let mut next = 0usize;
    embedder.embed_groups(text_groups, &mut |v, tokens| {
        let group = index_groups.get(next).ok_or(EmbedError::ExtraGroup)?;
        next += 1;
        report.tokens_embedded += tokens;
        if v.len() != group.len() * dim {
            return Err(EmbedError::WrongLength {
                floats: v.len(),
                texts: group.len(),
            });
        }
        for (k, &i) in group.iter().enumerate() {
            vectors[i * dim..(i + 1) * dim].copy_from_slice(&v[k * dim..(k + 1) * dim]);
        }
        bar.inc(group.len() as u64);
        progress.tick_line(&format!("embed: {}/{} chunks", bar.position(), todo.len()));
        Ok(())
    })?;
    if next != index_groups.len() {
        return Err(EmbedError::MissingGroups {
            got: next,
            want: index_groups.len(),
        }
        .into());
    }
    bar.finish_and_clear();
    for (j, i) in copies {
        let (a, b) = (j * dim, i * dim);
        vectors.copy_within(a..a + dim, b);
    }
    report.chunks_embedded += todo.len();
    report.chunks_reused += chunks.len() - todo.len();
    report.timings.push(("embed", t.elapsed()));
    Ok(vectors)
}

/// IVF coarse centroids for a segment of `n` chunks large enough to get an IVF
/// index, trained on the encoder's GPU outside the directory lock. `None` when the segment is
/// small or the encoder has no GPU (the segment writer then trains them on the CPU,
/// `format::ivf_write`).
pub(super) fn gpu_ivf_centroids(
    embedder: &dyn Embedder,
    vectors: &[f32],
    n: usize,
    report: &mut BuildReport,
) -> Result<Option<Vec<f32>>, IndexerError> {
    if n >= format::vectors::IVF_THRESHOLD {
        let t = Instant::now();
        let dim = embedder.dim();
        let sample = format::vectors::ivf_training_sample(vectors, dim);
        let k = format::vectors::nlist_for(n);
        if let Some(r) = embedder.ivf_centroids(&sample, dim, k) {
            let centroids = r?;
            report.timings.push(("ivf-centroids-gpu", t.elapsed()));
            return Ok(Some(centroids));
        }
    }
    Ok(None)
}
