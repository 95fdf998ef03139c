//! Batch planning: sort texts by token length and cut batches under a padded-token budget.

/// Default cap on padded tokens (`batch_len * longest_in_batch`) per forward pass.
pub const DEFAULT_TOKEN_BUDGET: usize = 8192;
/// Default cap on texts per forward pass.
pub const DEFAULT_MAX_BATCH: usize = 64;

/// One planned forward pass: indices into the input (sorted by ascending token length) and
/// the padded sequence length of the batch (the longest member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Input indices, ascending by token length (ties keep input order).
    pub indices: Vec<usize>,
    /// Sequence length every member is padded to.
    pub seq_len: usize,
}

impl Batch {
    /// Padded tokens this batch costs (`indices.len() * seq_len`).
    pub fn padded_tokens(&self) -> usize {
        self.indices.len() * self.seq_len
    }
}

/// Fixed cost of one forward pass, in padded-token equivalents, used to trade padding
/// against batch count (small batches under-use the matmul kernels and add dispatch cost).
pub const BATCH_OVERHEAD_TOKENS: usize = 512;

/// Plans batches for texts with the given token lengths.
///
/// Texts are stably sorted by length and split into contiguous runs so that every batch
/// holds at most `max_batch` texts and `len * longest <= token_budget`. Among such splits
/// the planner picks the one minimising `padded tokens + BATCH_OVERHEAD_TOKENS * batches`
/// (exact dynamic programme, `O(n * max_batch)`), so a few long texts do not force padding
/// on many short ones. A single text longer than the budget still gets a batch of its own.
/// `max_batch == 0` is treated as 1.
pub fn plan_batches(lengths: &[usize], token_budget: usize, max_batch: usize) -> Vec<Batch> {
    let max_batch = max_batch.max(1);
    let n = lengths.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| lengths[i]);
    let sorted: Vec<usize> = order.iter().map(|&i| lengths[i]).collect();

    // best[j] = minimal cost of planning sorted[..j]; cut[j] = start of the last batch.
    let mut best = vec![usize::MAX; n + 1];
    let mut cut = vec![0usize; n + 1];
    best[0] = 0;
    for j in 1..=n {
        let longest = sorted[j - 1];
        for size in 1..=max_batch.min(j) {
            let padded = size.saturating_mul(longest);
            if size > 1 && padded > token_budget {
                break; // larger batches only get more expensive
            }
            let i = j - size;
            let cost = best[i]
                .saturating_add(padded)
                .saturating_add(BATCH_OVERHEAD_TOKENS);
            if cost < best[j] {
                best[j] = cost;
                cut[j] = i;
            }
        }
    }

    let mut batches = Vec::new();
    let mut j = n;
    while j > 0 {
        let i = cut[j];
        batches.push(Batch {
            indices: order[i..j].to_vec(),
            seq_len: sorted[j - 1],
        });
        j = i;
    }
    batches.reverse();
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_invariants(lengths: &[usize], budget: usize, max_batch: usize) -> Vec<Batch> {
        let batches = plan_batches(lengths, budget, max_batch);
        let mut seen = vec![false; lengths.len()];
        let mut prev_len = 0;
        for b in &batches {
            assert!(!b.indices.is_empty());
            assert!(b.indices.len() <= max_batch.max(1));
            assert_eq!(
                b.seq_len,
                b.indices.iter().map(|&i| lengths[i]).max().unwrap()
            );
            assert!(b.padded_tokens() <= budget || b.indices.len() == 1);
            for &i in &b.indices {
                assert!(!seen[i], "index {i} planned twice");
                seen[i] = true;
                assert!(lengths[i] >= prev_len, "not sorted by length");
                prev_len = lengths[i];
            }
        }
        assert!(seen.iter().all(|&s| s), "some index not planned");
        batches
    }

    #[test]
    fn empty_input_gives_no_batches() {
        assert!(plan_batches(&[], 8192, 64).is_empty());
    }

    #[test]
    fn single_text() {
        let b = check_invariants(&[7], 8192, 64);
        assert_eq!(
            b,
            vec![Batch {
                indices: vec![0],
                seq_len: 7
            }]
        );
    }

    #[test]
    fn sorts_by_length_and_is_stable() {
        let b = check_invariants(&[5, 2, 5, 1, 2], 8192, 64);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].indices, vec![3, 1, 4, 0, 2]);
        assert_eq!(b[0].seq_len, 5);
    }

    #[test]
    fn respects_max_batch() {
        let lengths = vec![3; 130];
        let b = check_invariants(&lengths, usize::MAX, 64);
        assert_eq!(
            b.iter().map(|b| b.indices.len()).collect::<Vec<_>>(),
            vec![64, 64, 2]
        );
    }

    #[test]
    fn respects_token_budget() {
        // 10 texts of 100 tokens, budget 350 -> at most 3 per batch, 4 batches.
        let lengths = vec![100; 10];
        let b = check_invariants(&lengths, 350, 64);
        assert_eq!(b.len(), 4);
        assert!(b.iter().all(|b| b.indices.len() <= 3));
    }

    #[test]
    fn splits_when_padding_costs_more_than_a_batch() {
        // 60 short texts and 4 at the cap: one batch would pad 60 texts to 256.
        let mut lengths = vec![20; 60];
        lengths.extend([256; 4]);
        let b = check_invariants(&lengths, 1 << 20, 64);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].seq_len, 20);
        assert_eq!(b[1].seq_len, 256);
        let padded: usize = b.iter().map(Batch::padded_tokens).sum();
        assert_eq!(padded, 60 * 20 + 4 * 256);
    }

    #[test]
    fn keeps_similar_lengths_together() {
        // Near-equal lengths: padding saved by splitting is below the batch overhead.
        let lengths: Vec<usize> = (0..64).map(|i| 100 + i % 3).collect();
        let b = check_invariants(&lengths, 1 << 20, 64);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn budget_accounts_for_padding_to_longest() {
        // 4 short then one long: the long one must not join if padding breaks the budget.
        let b = check_invariants(&[10, 10, 10, 10, 256], 1024, 64);
        assert!(b.iter().all(|b| b.padded_tokens() <= 1024));
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].indices, vec![0, 1, 2, 3]);
        assert_eq!(b[1].indices, vec![4]);
    }

    #[test]
    fn oversized_text_gets_own_batch() {
        let b = check_invariants(&[5, 500, 6], 100, 64);
        assert_eq!(b.len(), 2);
        assert_eq!(b[1].indices, vec![1]);
        assert_eq!(b[1].seq_len, 500);
    }

    #[test]
    fn zero_lengths_and_zero_max_batch() {
        let b = check_invariants(&[0, 0, 3], 8192, 0);
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn mixed_lengths_invariants() {
        let lengths: Vec<usize> = (0..1000).map(|i| (i * 7919) % 257).collect();
        for budget in [1, 256, 1000, 8192, 100_000] {
            for max_batch in [1, 7, 64] {
                check_invariants(&lengths, budget, max_batch);
            }
        }
    }
}
