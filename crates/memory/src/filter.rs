//! What memory search, listing and the graph filter and boost on: [`MemFilter`] (hard
//! filters, applied as bitmaps before ranking), [`Boosts`] (soft preferences), the fields both
//! read ([`MemFields`], for stored and for delta records) and [`MemKey`] (where a memory is).

use std::sync::Arc;

use format::memory::{tag_key, ArchivedMemoryRecord, MemoryRecord};

use crate::delta::Entry;

pub const ENTITY_BOOST: f32 = 0.1;
pub const CATEGORY_BOOST: f32 = 0.1;
pub const TAG_BOOST: f32 = 0.05;
pub const MAX_TAG_BOOSTS: usize = 4;
/// Default recency half-life and weight.
pub const DEFAULT_HALF_LIFE_DAYS: f64 = 30.0;
pub const DEFAULT_RECENCY_WEIGHT: f32 = 0.1;
/// Boost of a memory whose time falls in the window a question names ("last May").
pub const WHEN_BOOST: f32 = 0.3;

/// The fields filters and boosts look at, for stored and for delta records.
pub trait MemFields {
    fn category(&self) -> &str;
    fn scope(&self) -> &str;
    fn entity(&self) -> &str;
    fn source(&self) -> &str;
    fn state(&self) -> &str;
    fn created_at(&self) -> i64;
    fn has_tag(&self, t: &str) -> bool;
    /// The value of the first tag `key=value` with this key.
    fn tag_value(&self, key: &str) -> Option<&str>;
}

impl MemFields for MemoryRecord {
    fn category(&self) -> &str {
        &self.category
    }
    fn scope(&self) -> &str {
        &self.scope
    }
    fn entity(&self) -> &str {
        &self.entity
    }
    fn source(&self) -> &str {
        &self.source
    }
    fn state(&self) -> &str {
        &self.state
    }
    fn created_at(&self) -> i64 {
        self.created_at
    }
    fn has_tag(&self, t: &str) -> bool {
        self.tags.iter().any(|x| tag_matches(x, t))
    }
    fn tag_value(&self, key: &str) -> Option<&str> {
        self.tags.iter().find_map(|x| value_of(x, key))
    }
}

impl MemFields for ArchivedMemoryRecord {
    fn category(&self) -> &str {
        self.category.as_str()
    }
    fn scope(&self) -> &str {
        self.scope.as_str()
    }
    fn entity(&self) -> &str {
        self.entity.as_str()
    }
    fn source(&self) -> &str {
        self.source.as_str()
    }
    fn state(&self) -> &str {
        self.state.as_str()
    }
    fn created_at(&self) -> i64 {
        self.created_at.to_native()
    }
    fn has_tag(&self, t: &str) -> bool {
        self.tags.iter().any(|x| tag_matches(x.as_str(), t))
    }
    fn tag_value(&self, key: &str) -> Option<&str> {
        self.tags.iter().find_map(|x| value_of(x.as_str(), key))
    }
}

fn value_of<'a>(tag: &'a str, key: &str) -> Option<&'a str> {
    tag.split_once('=')
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// A filter tag `key` matches any tag with that key; `key=value` matches exactly.
fn tag_matches(tag: &str, filter: &str) -> bool {
    if filter.contains('=') {
        tag == filter
    } else {
        tag_key(tag) == filter
    }
}

/// Hard filters. Strings compare exactly, except `entity` (case-insensitive).
#[derive(Debug, Clone)]
pub struct MemFilter {
    pub category: Option<String>,
    pub scope: Option<String>,
    pub entity: Option<String>,
    pub source: Option<String>,
    /// Canonical tags (see [`format::memory::normalize_tag`]).
    pub tags: Vec<String>,
    /// All tags must match (else any).
    pub tags_all: bool,
    /// Unix milliseconds, inclusive / exclusive.
    pub created_after: Option<i64>,
    pub created_before: Option<i64>,
    /// Allowed states; default `["active"]`.
    pub states: Vec<String>,
}

impl Default for MemFilter {
    fn default() -> Self {
        MemFilter {
            category: None,
            scope: None,
            entity: None,
            source: None,
            tags: Vec::new(),
            tags_all: true,
            created_after: None,
            created_before: None,
            states: vec!["active".into()],
        }
    }
}

impl MemFilter {
    /// Only the default state filter: segments can use their precomputed `hidden` bitmap.
    pub fn is_default(&self) -> bool {
        self.category.is_none()
            && self.scope.is_none()
            && self.entity.is_none()
            && self.source.is_none()
            && self.tags.is_empty()
            && self.created_after.is_none()
            && self.created_before.is_none()
            && self.states == ["active"]
    }

    pub fn matches(&self, m: &(impl MemFields + ?Sized)) -> bool {
        self.category.as_deref().is_none_or(|c| m.category() == c)
            && self.scope.as_deref().is_none_or(|s| m.scope() == s)
            && self
                .entity
                .as_deref()
                .is_none_or(|e| m.entity().eq_ignore_ascii_case(e))
            && self.source.as_deref().is_none_or(|s| m.source() == s)
            && self.states.iter().any(|s| s == m.state())
            && self.created_after.is_none_or(|t| m.created_at() >= t)
            && self.created_before.is_none_or(|t| m.created_at() < t)
            && (self.tags.is_empty()
                || if self.tags_all {
                    self.tags.iter().all(|t| m.has_tag(t))
                } else {
                    self.tags.iter().any(|t| m.has_tag(t))
                })
    }
}

/// Soft preferences.
#[derive(Debug, Clone)]
pub struct Boosts {
    pub entity: Option<String>,
    pub category: Option<String>,
    pub tags: Vec<String>,
    /// 0 disables recency.
    pub half_life_days: f64,
    pub recency_weight: f32,
    pub now_ms: i64,
    /// The window a relative date in the question names (see [`crate::when`]): memories whose
    /// time falls inside get [`WHEN_BOOST`].
    pub when: Option<(i64, i64)>,
    /// Session context after fusion (see [`crate::context`]).
    pub sessions: crate::context::SessionWeights,
}

impl Boosts {
    pub fn boost(&self, m: &(impl MemFields + ?Sized)) -> f32 {
        let mut b = 0.0;
        if self
            .entity
            .as_deref()
            .is_some_and(|e| m.entity().eq_ignore_ascii_case(e))
        {
            b += ENTITY_BOOST;
        }
        if self.category.as_deref().is_some_and(|c| m.category() == c) {
            b += CATEGORY_BOOST;
        }
        let tags = self.tags.iter().filter(|t| m.has_tag(t)).count();
        b += TAG_BOOST * tags.min(MAX_TAG_BOOSTS) as f32;
        if self.half_life_days > 0.0 {
            let age_days = (self.now_ms - m.created_at()).max(0) as f64 / 86_400_000.0;
            b += self.recency_weight * (-age_days / self.half_life_days).exp2() as f32;
        }
        if self
            .when
            .is_some_and(|(s, e)| (s..e).contains(&m.created_at()))
        {
            b += WHEN_BOOST;
        }
        b
    }
}

/// A result: where the memory is, its final score, its ranks in the two lists.
#[derive(Debug, Clone)]
pub enum MemKey {
    Segment(usize, u32),
    Delta(Arc<Entry>),
}
