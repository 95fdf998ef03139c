//! Session context: a memory is scored with its session besides its own text.
//!
//! Memories that carry a `session=<id>` tag (a conversation, a work session, a ticket: any
//! grouping the writer chose) are read as parts of one whole. After fusion, each candidate's
//! score becomes
//!
//! ```text
//! (own · (1 − session − neighbour) + session · S + neighbour · N) / (1 − neighbour)
//! ```
//!
//! where `S` is its session's score among the candidates (the mean of the best turn and the
//! mean of the best [`SESSION_TOP`] turns) and `N` the best score of its nearest candidates in
//! time within the session (the one just before and the one just after it). A question whose
//! answer is spread over a conversation ("what did we decide about the move?") thus lifts the
//! turns of the session that talks about it, and a turn that only says "yes, Tuesday works"
//! rises with the turn it answers. Memories without a session keep their own score, and so does
//! a session's only candidate without neighbours (the divisor is what such a memory would
//! get: `S` is then its own score and `N` is 0).
//!
//! Only candidates are looked at (the fused top [`code::search::CANDIDATE_DEPTH`] of each
//! list), so the cost is a sort of at most a few hundred scores.

use std::collections::HashMap;

/// The tag key that groups memories into sessions.
pub const SESSION_TAG: &str = "session";

/// How many of a session's best candidates its mean takes.
pub const SESSION_TOP: usize = 3;

/// Weights of the session context (fractions of the final score).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionWeights {
    /// Share of the session's score `S`.
    pub session: f32,
    /// Share of the nearest neighbours' score `N`.
    pub neighbour: f32,
}

/// The weights `search_memory` uses when asked for session context (`session_context: true`).
/// Not on by default: on both synthetic conversation sets of `benches/src/bin/styles.rs`, whose
/// sessions mix many topics, it measured R@10 −0.014 and −0.011 on its own; it is meant for
/// sessions that are about one subject (a ticket, a work session).
pub const SESSION_WEIGHTS: SessionWeights = SessionWeights {
    session: 0.2,
    neighbour: 0.1,
};

/// No session context.
pub const NO_SESSION_CONTEXT: SessionWeights = SessionWeights {
    session: 0.0,
    neighbour: 0.0,
};

/// One candidate: its score, its session (if any) and its time.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<'a> {
    pub score: f32,
    pub session: Option<&'a str>,
    pub at: i64,
}

/// The scores after session context, in the candidates' order.
pub fn rescore(cands: &[Candidate<'_>], w: SessionWeights) -> Vec<f32> {
    let mut by_session: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, c) in cands.iter().enumerate() {
        if let Some(s) = c.session {
            by_session.entry(s).or_default().push(i);
        }
    }
    let mut out: Vec<f32> = cands.iter().map(|c| c.score).collect();
    if w.session <= 0.0 && w.neighbour <= 0.0 {
        return out;
    }
    let own = (1.0 - w.session - w.neighbour).max(0.0);
    // What a lone member gets per unit of its own score: scores without context stay as they
    // are.
    let unit = own + w.session;
    if unit <= 0.0 {
        return out;
    }
    for members in by_session.values() {
        let mut scores: Vec<f32> = members.iter().map(|&i| cands[i].score).collect();
        scores.sort_by(|a, b| b.total_cmp(a));
        let top = &scores[..scores.len().min(SESSION_TOP)];
        let s = 0.5 * (scores[0] + top.iter().sum::<f32>() / top.len() as f32);
        // Neighbours: the nearest candidates in time on either side (ties by order).
        let mut by_time = members.clone();
        by_time.sort_by_key(|&i| (cands[i].at, i));
        for (p, &i) in by_time.iter().enumerate() {
            let before = p.checked_sub(1).map(|q| cands[by_time[q]].score);
            let after = by_time.get(p + 1).map(|&q| cands[q].score);
            let n = before.into_iter().chain(after).fold(0.0f32, f32::max);
            out[i] = (own * cands[i].score + w.session * s + w.neighbour * n) / unit;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(score: f32, session: Option<&str>, at: i64) -> Candidate<'_> {
        Candidate { score, session, at }
    }

    #[test]
    fn a_strong_session_lifts_its_turns() {
        let cands = [
            c(0.60, Some("a"), 1),
            c(0.58, Some("b"), 1),
            c(0.55, Some("b"), 2),
            c(0.54, Some("b"), 3),
        ];
        let s = rescore(&cands, SESSION_WEIGHTS);
        // Session b has three good turns; its best now outranks a's lone turn.
        assert!(s[1] > s[0], "{s:?}");
        // The order inside a session follows own score and neighbours.
        assert!(s[1] > s[3]);
    }

    #[test]
    fn without_sessions_the_order_is_unchanged() {
        let cands = [c(0.9, None, 5), c(0.5, None, 1), c(0.7, None, 3)];
        let s = rescore(&cands, SESSION_WEIGHTS);
        assert_eq!(s, vec![0.9, 0.5, 0.7]);
        let off = rescore(
            &cands,
            SessionWeights {
                session: 0.0,
                neighbour: 0.0,
            },
        );
        assert_eq!(off, vec![0.9, 0.5, 0.7]);
    }

    #[test]
    fn a_lone_session_member_scores_like_a_memory_without_one() {
        let cands = [c(0.8, Some("x"), 1), c(0.8, None, 1)];
        let s = rescore(&cands, SESSION_WEIGHTS);
        assert!(
            (s[0] - 0.8).abs() < 1e-6 && (s[1] - 0.8).abs() < 1e-6,
            "{s:?}"
        );
    }
}
