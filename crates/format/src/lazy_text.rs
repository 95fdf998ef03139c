//! Chunk text whose UTF-8 is checked when it is read, not when the segment is opened: how
//! format 3 records hold their text (format 4 keeps texts in `texts.bin`, [`crate::texts`],
//! and its records hold none).
//!
//! Format 3's `chunks.rkyv` holds every chunk's text, about 1 KB a chunk: a million chunks
//! carry about a gigabyte of it. rkyv's `ArchivedString` checks the UTF-8 of every string when the archive is
//! validated, so opening such an index read all of that text from the page cache and checked it
//! (about 100-400 ms and 1 GB of resident pages at 1M chunks on the 2-core VM) before the first
//! query, which reads about ten texts.
//!
//! [`LazyUtf8`] archives a `String` as [`ArchivedText`]: byte for byte an `ArchivedString` (the
//! same `ArchivedStringRepr`, so segments written before this type existed read unchanged and
//! segment ids do not move), whose validation checks the representation and claims the bytes'
//! range inside the archive exactly as `ArchivedString`'s does, but leaves the UTF-8 check to
//! [`ArchivedText::as_str`], which returns an error for bytes that are not UTF-8. Nothing is
//! ever read past the archive: the bounds are checked at open as before. `indexer verify`
//! ([`crate::Segment::verify`]) checks every text.

use rkyv::rancor::{Fallible, Source};
use rkyv::ser::{Allocator, Writer};
use rkyv::string::repr::ArchivedStringRepr;
use rkyv::string::{ArchivedString, StringResolver};
use rkyv::validation::{ArchiveContext, ArchiveContextExt};
use rkyv::with::{ArchiveWith, DeserializeWith, SerializeWith};
use rkyv::{Place, Portable};

/// Chunk text stored as bytes of an `ArchivedString` whose UTF-8 is checked on read.
#[derive(Portable)]
#[repr(transparent)]
pub struct ArchivedText {
    repr: ArchivedStringRepr,
}

/// The text was not UTF-8: the segment file is damaged (bytes changed after it was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a chunk text of {len} bytes is not valid UTF-8 at byte {at}")]
pub struct TextError {
    pub len: usize,
    pub at: usize,
}

/// `b` as text, or where it stops being UTF-8: the one check of a chunk text read from a
/// segment, in either format (`texts.bin` too, [`crate::texts`]).
pub(crate) fn utf8(b: &[u8]) -> Result<&str, TextError> {
    std::str::from_utf8(b).map_err(|e| TextError {
        len: b.len(),
        at: e.valid_up_to(),
    })
}

impl ArchivedText {
    /// The text, checked to be UTF-8 (a few nanoseconds per hundred bytes). Crate-private:
    /// format 4 records hold no text, so readers go through [`crate::Segment::chunk_text`].
    pub(crate) fn as_str(&self) -> Result<&str, TextError> {
        utf8(self.repr.as_bytes())
    }

    /// The raw bytes (UTF-8 unless the file is damaged).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.repr.as_bytes()
    }
}

impl std::fmt::Debug for ArchivedText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// The checks rkyv 0.8's `ArchivedString` validation (`string/mod.rs`, `verify`) makes of a
/// string's representation, less its UTF-8 check: the representation itself (an out-of-line
/// string is longer than the inline capacity) and, for an out-of-line string, its bytes
/// claimed as a subtree of the archive (inside the buffer, overlapping no other claimed
/// range), on which `out_of_line` then runs. Returns the representation. Shared by
/// [`ArchivedText`] (no more checks) and [`crate::short_str::ArchivedShortStr`] (UTF-8).
///
/// # Safety
/// As for `CheckBytes::check_bytes`: `value` is aligned and points to enough bytes.
pub(crate) unsafe fn check_string_repr<'a, C>(
    value: *const ArchivedStringRepr,
    context: &mut C,
    out_of_line: impl FnOnce(&[u8]) -> Result<(), C::Error>,
) -> Result<&'a ArchivedStringRepr, C::Error>
where
    C: Fallible + ArchiveContext + ?Sized,
    C::Error: Source,
{
    // SAFETY: the caller's guarantee.
    unsafe { <ArchivedStringRepr as rkyv::bytecheck::CheckBytes<C>>::check_bytes(value, context)? };
    // SAFETY: every bit pattern of the representation's fields is valid (rkyv's own check
    // relies on the same).
    let repr = unsafe { &*value };
    if !repr.is_inline() {
        let base = value.cast::<u8>();
        // SAFETY: the representation is out of line (checked just above).
        let offset = unsafe { repr.out_of_line_offset() };
        let bytes: *const [u8] =
            std::ptr::slice_from_raw_parts(base.wrapping_offset(offset), repr.len());
        // SAFETY (of the dereference): `in_subtree` checked that the range lies inside the
        // archive before it runs the closure.
        context.in_subtree(bytes, |_| out_of_line(unsafe { &*bytes }))?;
    }
    Ok(repr)
}

// SAFETY: `check_string_repr` makes `ArchivedString`'s checks without the UTF-8 check. Every
// bit pattern of the claimed bytes is a valid `[u8]`, which is all `ArchivedText` ever exposes
// without the UTF-8 check of `as_str`.
unsafe impl<C> rkyv::bytecheck::CheckBytes<C> for ArchivedText
where
    C: Fallible + ArchiveContext + ?Sized,
    C::Error: Source,
{
    unsafe fn check_bytes(value: *const Self, context: &mut C) -> Result<(), C::Error> {
        // SAFETY: the caller's guarantee; the type is `repr(transparent)` over
        // `ArchivedStringRepr`.
        unsafe { check_string_repr(value.cast(), context, |_| Ok(()))? };
        Ok(())
    }
}

/// `#[rkyv(with = LazyUtf8)]` on a `String` field: archived as [`ArchivedText`].
pub struct LazyUtf8;

impl ArchiveWith<String> for LazyUtf8 {
    type Archived = ArchivedText;
    type Resolver = StringResolver;

    fn resolve_with(field: &String, resolver: StringResolver, out: Place<ArchivedText>) {
        // SAFETY: `ArchivedText` is `repr(transparent)` over the representation that
        // `ArchivedString` is also `repr(transparent)` over: the same size and alignment.
        let out = unsafe { out.cast_unchecked::<ArchivedString>() };
        ArchivedString::resolve_from_str(field, resolver, out);
    }
}

impl<S> SerializeWith<String, S> for LazyUtf8
where
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: Source,
{
    fn serialize_with(field: &String, serializer: &mut S) -> Result<StringResolver, S::Error> {
        ArchivedString::serialize_from_str(field, serializer)
    }
}

impl<D> DeserializeWith<ArchivedText, String, D> for LazyUtf8
where
    D: Fallible + ?Sized,
    D::Error: Source,
{
    fn deserialize_with(field: &ArchivedText, _: &mut D) -> Result<String, D::Error> {
        field
            .as_str()
            .map(str::to_string)
            .map_err(<D::Error as Source>::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkyv::{Archive, Serialize};

    #[derive(Archive, Serialize)]
    struct Plain {
        a: String,
        b: String,
    }

    #[derive(Archive, Serialize)]
    struct Lazy {
        #[rkyv(with = LazyUtf8)]
        a: String,
        #[rkyv(with = LazyUtf8)]
        b: String,
    }

    fn texts() -> Vec<(String, String)> {
        vec![
            (String::new(), "short".into()),
            ("exactly8".into(), "nine byte".into()),
            ("fn main() { println!(\"héllo\"); }".repeat(40), "ü".into()),
        ]
    }

    #[test]
    fn bytes_equal_archived_string_and_read_back() {
        for (a, b) in texts() {
            let plain = rkyv::to_bytes::<rkyv::rancor::Error>(&Plain {
                a: a.clone(),
                b: b.clone(),
            })
            .unwrap();
            let lazy = rkyv::to_bytes::<rkyv::rancor::Error>(&Lazy {
                a: a.clone(),
                b: b.clone(),
            })
            .unwrap();
            assert_eq!(plain.as_slice(), lazy.as_slice(), "same bytes for {a:?}");
            // Written as `ArchivedString`, read as `ArchivedText`, and the other way round.
            let r = rkyv::access::<ArchivedLazy, rkyv::rancor::Error>(&plain).unwrap();
            assert_eq!(r.a.as_str().unwrap(), a);
            assert_eq!(r.b.as_str().unwrap(), b);
            let p = rkyv::access::<ArchivedPlain, rkyv::rancor::Error>(&lazy).unwrap();
            assert_eq!(p.a.as_str(), a);
        }
    }

    #[test]
    fn bad_utf8_opens_and_fails_on_read_while_bad_bounds_fail_at_open() {
        let a = "x".repeat(100);
        let mut bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&Lazy {
            a: a.clone(),
            b: "ok".into(),
        })
        .unwrap()
        .to_vec();
        let at = bytes.windows(100).position(|w| w == a.as_bytes()).unwrap();
        bytes[at + 7] = 0xC3; // a lead byte followed by 'x': not UTF-8
        let mut aligned = rkyv::util::AlignedVec::<16>::new();
        aligned.extend_from_slice(&bytes);
        // `ArchivedString` refuses the whole archive; `ArchivedText` opens it ...
        assert!(rkyv::access::<ArchivedPlain, rkyv::rancor::Error>(&aligned).is_err());
        let r = rkyv::access::<ArchivedLazy, rkyv::rancor::Error>(&aligned).unwrap();
        // ... and the read of that one text fails, saying where.
        assert_eq!(r.a.as_str(), Err(TextError { len: 100, at: 7 }));
        assert_eq!(r.b.as_str().unwrap(), "ok");
        // A length that runs past the buffer is refused at open, as before.
        let mut long = rkyv::to_bytes::<rkyv::rancor::Error>(&Lazy {
            a: a.clone(),
            b: "ok".into(),
        })
        .unwrap()
        .to_vec();
        let root = long.len() - std::mem::size_of::<ArchivedLazy>();
        // `a`'s representation starts with its out-of-line length: the low byte holds the tag
        // `0b10` and the low 6 bits, the rest the length shifted by 6. One MiB: past the end.
        let len: u32 = 1 << 20;
        let tagged = 0x80 | (len & 0x3f) | ((len >> 6) << 8);
        long[root..root + 4].copy_from_slice(&tagged.to_le_bytes());
        let mut aligned = rkyv::util::AlignedVec::<16>::new();
        aligned.extend_from_slice(&long);
        assert!(rkyv::access::<ArchivedLazy, rkyv::rancor::Error>(&aligned).is_err());
    }
}
