//! Short record strings (names, kinds, symbol ids, paths) checked faster when an archive is
//! opened: the validation of `chunks.rkyv` was mostly rkyv's per-string UTF-8 check.
//!
//! A segment's `chunks.rkyv` holds four strings per chunk (kind, name, qualified name, symbol
//! id): about 450,000 in a segment of 111,111 chunks. rkyv's `ArchivedString` checks each
//! one's bytes with `<[u8]>::is_ascii` (then `from_utf8` if that fails) through a generic
//! verification call; on the 2-core VM that was 3.3 of the 4.4 ms that validating such a
//! table took in memory (the structure alone: 1.1 ms), and with the page faults about 60% of
//! opening a segment.
//!
//! [`ShortStr`] archives a `String` as [`ArchivedShortStr`]: byte for byte an `ArchivedString`
//! (the same `ArchivedStringRepr`), so segments read unchanged in both directions and segment
//! ids do not move. Its validation checks the representation and claims an out-of-line
//! string's bytes inside the archive exactly as `ArchivedString`'s does, and then checks that
//! the bytes are UTF-8 with a word-at-a-time ASCII test ([`inline_ascii`], [`bytes_ascii`]),
//! falling back to `std::str::from_utf8` only for bytes that are not ASCII. The check is as
//! strict as rkyv's: an archive that validates as one validates as the other (tested), and
//! [`ArchivedShortStr::as_str`] is then a plain `&str`.

use rkyv::rancor::{Fallible, Source};
use rkyv::ser::{Allocator, Writer};
use rkyv::string::repr::{ArchivedStringRepr, INLINE_CAPACITY};
use rkyv::string::{ArchivedString, StringResolver};
use rkyv::validation::ArchiveContext;
use rkyv::with::{ArchiveWith, DeserializeWith, SerializeWith};
use rkyv::{Place, Portable};

use crate::lazy_text::check_string_repr;

/// A record string validated (UTF-8 included) when its archive is.
#[derive(Portable)]
#[repr(transparent)]
pub struct ArchivedShortStr {
    repr: ArchivedStringRepr,
}

impl ArchivedShortStr {
    /// The string.
    #[inline]
    pub fn as_str(&self) -> &str {
        // SAFETY: `ArchivedShortStr` is only reachable through a validated archive, and its
        // validation checked that these bytes are UTF-8 (`check_bytes` below).
        unsafe { std::str::from_utf8_unchecked(self.as_bytes()) }
    }

    /// The string's bytes: `ArchivedStringRepr::as_bytes`, with an inline string's length
    /// (the position of its first `0xFF`) found in one word instead of a byte loop: dictionary
    /// and name lookups compare many short keys.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        if !self.repr.is_inline() {
            return self.repr.as_bytes();
        }
        // SAFETY: every representation is `INLINE_CAPACITY` readable bytes.
        let w = u64::from_le_bytes(unsafe { repr_bytes(&self.repr) });
        let len = (first_ff(w).trailing_zeros() / 8) as usize;
        // SAFETY: an inline string's bytes are the first `len` (at most `INLINE_CAPACITY`) of
        // the representation, which lies at the start of `self` (`repr(transparent)`).
        unsafe { std::slice::from_raw_parts((self as *const Self).cast::<u8>(), len) }
    }
}

impl std::ops::Deref for ArchivedShortStr {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ArchivedShortStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for ArchivedShortStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for ArchivedShortStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for ArchivedShortStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self.as_str(), f)
    }
}

impl PartialEq for ArchivedShortStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ArchivedShortStr {}

impl PartialOrd for ArchivedShortStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ArchivedShortStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for ArchivedShortStr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialEq<str> for ArchivedShortStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ArchivedShortStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for ArchivedShortStr {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<ArchivedShortStr> for str {
    fn eq(&self, other: &ArchivedShortStr) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<ArchivedShortStr> for &str {
    fn eq(&self, other: &ArchivedShortStr) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<ArchivedShortStr> for String {
    fn eq(&self, other: &ArchivedShortStr) -> bool {
        self.as_str() == other.as_str()
    }
}

const HIGH: u64 = 0x8080_8080_8080_8080;

/// Whether an inline representation's string is ASCII. The 8 bytes are the string followed
/// by `0xFF` padding (its length is the position of the first `0xFF`), so the string is ASCII
/// exactly when the first byte with its top bit set, if any, is that first `0xFF`.
#[inline]
pub(crate) fn inline_ascii(bytes: [u8; INLINE_CAPACITY]) -> bool {
    let w = u64::from_le_bytes(bytes);
    // Branch-free: short and full-length names mix.
    let below = 1u64
        .checked_shl(first_ff(w).trailing_zeros())
        .unwrap_or(0)
        .wrapping_sub(1);
    w & HIGH & below == 0
}

/// The top bit of the first `0xFF` byte of `w` (little-endian order) is the lowest bit set in
/// the result, which is 0 when there is none: the zero-byte test on `!w`, which may also flag
/// bytes above the first zero byte, never below it.
#[inline]
fn first_ff(w: u64) -> u64 {
    let x = !w;
    x.wrapping_sub(0x0101_0101_0101_0101) & !x & HIGH
}

/// Whether `b` is ASCII: eight bytes at a time, the last word overlapping the one before
/// (the strings here are a few dozen bytes, too short for `is_ascii`'s alignment set-up to
/// pay; an out-of-line string is longer than eight bytes).
#[inline]
pub(crate) fn bytes_ascii(b: &[u8]) -> bool {
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"));
    if b.len() < 8 {
        return b.iter().all(u8::is_ascii);
    }
    let mut acc = word(b.len() - 8);
    let mut at = 0;
    while at + 8 < b.len() {
        acc |= word(at);
        at += 8;
    }
    acc & HIGH == 0
}

#[derive(Debug)]
struct NotUtf8;

impl std::fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a record string is not valid UTF-8")
    }
}

impl std::error::Error for NotUtf8 {}

// SAFETY: the checks are `ArchivedString`'s (rkyv 0.8, `string/mod.rs`, `verify`, and
// bytecheck's `str` check): `check_string_repr` checks the representation (an out-of-line
// string is longer than the inline capacity) and claims an out-of-line string's bytes as a
// subtree of the archive (inside the buffer, not overlapping another claimed range), and the
// bytes of either kind are checked to be UTF-8 here: ASCII by the word tests, else by
// `from_utf8`. `as_str` relies on exactly that.
unsafe impl<C> rkyv::bytecheck::CheckBytes<C> for ArchivedShortStr
where
    C: Fallible + ArchiveContext + ?Sized,
    C::Error: Source,
{
    unsafe fn check_bytes(value: *const Self, context: &mut C) -> Result<(), C::Error> {
        let utf8 = |b: &[u8]| {
            if bytes_ascii(b) || std::str::from_utf8(b).is_ok() {
                Ok(())
            } else {
                Err(<C::Error as Source>::new(NotUtf8))
            }
        };
        // SAFETY: the caller's guarantee; the type is `repr(transparent)` over
        // `ArchivedStringRepr`.
        let repr = unsafe { check_string_repr(value.cast(), context, utf8)? };
        if repr.is_inline() {
            // SAFETY: the representation is `INLINE_CAPACITY` bytes (`ArchivedStringRepr` is a
            // union of the inline bytes and the out-of-line fields, both that size), readable
            // as the caller guarantees.
            let bytes = unsafe { repr_bytes(repr) };
            if !inline_ascii(bytes) && std::str::from_utf8(repr.as_bytes()).is_err() {
                return Err(<C::Error as Source>::new(NotUtf8));
            }
        }
        Ok(())
    }
}

/// The representation's bytes, as the inline form sees them.
///
/// # Safety
/// `repr` must point to `INLINE_CAPACITY` readable bytes (any `ArchivedStringRepr` does).
#[inline]
unsafe fn repr_bytes(repr: &ArchivedStringRepr) -> [u8; INLINE_CAPACITY] {
    const _: () = assert!(std::mem::size_of::<ArchivedStringRepr>() == INLINE_CAPACITY);
    // SAFETY: the caller's guarantee; the read is unaligned-safe.
    unsafe { std::ptr::read_unaligned((repr as *const ArchivedStringRepr).cast()) }
}

/// `#[rkyv(with = ShortStr)]` on a `String` field: archived as [`ArchivedShortStr`].
pub struct ShortStr;

impl ArchiveWith<String> for ShortStr {
    type Archived = ArchivedShortStr;
    type Resolver = StringResolver;

    fn resolve_with(field: &String, resolver: StringResolver, out: Place<ArchivedShortStr>) {
        // SAFETY: `ArchivedShortStr` is `repr(transparent)` over the representation that
        // `ArchivedString` is also `repr(transparent)` over: the same size and alignment.
        let out = unsafe { out.cast_unchecked::<ArchivedString>() };
        ArchivedString::resolve_from_str(field, resolver, out);
    }
}

impl<S> SerializeWith<String, S> for ShortStr
where
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: Source,
{
    fn serialize_with(field: &String, serializer: &mut S) -> Result<StringResolver, S::Error> {
        ArchivedString::serialize_from_str(field, serializer)
    }
}

impl<D> DeserializeWith<ArchivedShortStr, String, D> for ShortStr
where
    D: Fallible + ?Sized,
{
    fn deserialize_with(field: &ArchivedShortStr, _: &mut D) -> Result<String, D::Error> {
        Ok(field.as_str().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkyv::{Archive, Serialize};

    #[derive(Archive, Serialize)]
    struct Plain {
        a: String,
        b: Vec<String>,
    }

    #[derive(Archive, Serialize)]
    struct Short {
        #[rkyv(with = ShortStr)]
        a: String,
        #[rkyv(with = rkyv::with::Map<ShortStr>)]
        b: Vec<String>,
    }

    /// Inline and out-of-line, ASCII and not, every inline length, 8 bytes exactly.
    fn strings() -> Vec<String> {
        let mut v: Vec<String> = (0..=9).map(|n| "abcdefghij"[..n].to_string()).collect();
        v.extend(
            [
                "é",
                "aé",
                "abcdeé",
                "abcdefé",
                "\u{7f}",
                "ü1234567",
                "some_function_name",
                "crate::module::Type::method",
                "scip rust cargo tokio 1.0 runtime/Builder#new_multi_thread().",
                "naïve_résumé_ключ",
                "日本語の識別子",
            ]
            .map(String::from),
        );
        v
    }

    fn aligned(b: &[u8]) -> rkyv::util::AlignedVec<16> {
        let mut a = rkyv::util::AlignedVec::<16>::new();
        a.extend_from_slice(b);
        a
    }

    #[test]
    fn ascii_tests_agree_with_std() {
        // Inline: every length 0-8, each byte position holding each interesting value.
        for len in 0..=INLINE_CAPACITY {
            for pos in 0..len.max(1) {
                for v in [0u8, b'a', 0x7F, 0x80, 0xC3, 0xFE] {
                    let mut bytes = [0xFFu8; INLINE_CAPACITY];
                    bytes[..len].fill(b'x');
                    if pos < len {
                        bytes[pos] = v;
                    }
                    let s = bytes[..len].to_vec();
                    assert_eq!(inline_ascii(bytes), s.is_ascii(), "{bytes:?}");
                    // Bytes after the first 0xFF are not part of the string, whatever they are.
                    for after in len + 1..INLINE_CAPACITY {
                        for junk in [0x00u8, 0x41, 0x80, 0xC3] {
                            let mut b = bytes;
                            b[after] = junk;
                            assert_eq!(inline_ascii(b), s.is_ascii(), "{b:?}");
                        }
                    }
                }
            }
        }
        for s in strings() {
            assert_eq!(bytes_ascii(s.as_bytes()), s.is_ascii(), "{s}");
            for cut in 0..s.len() {
                let b = &s.as_bytes()[cut..];
                assert_eq!(bytes_ascii(b), b.is_ascii());
            }
        }
    }

    #[test]
    fn same_bytes_as_archived_string_and_read_back() {
        let all = strings();
        for a in &all {
            let plain = rkyv::to_bytes::<rkyv::rancor::Error>(&Plain {
                a: a.clone(),
                b: all.clone(),
            })
            .unwrap();
            let short = rkyv::to_bytes::<rkyv::rancor::Error>(&Short {
                a: a.clone(),
                b: all.clone(),
            })
            .unwrap();
            assert_eq!(plain.as_slice(), short.as_slice(), "same bytes for {a:?}");
            let r = rkyv::access::<ArchivedShort, rkyv::rancor::Error>(&plain).unwrap();
            assert_eq!(r.a, *a);
            assert_eq!(&*r.a, a.as_str());
            assert_eq!(r.a.to_string(), *a);
            let read: Vec<&str> = r.b.iter().map(|s| s.as_str()).collect();
            assert_eq!(read, all);
        }
    }

    /// Every single-byte change of an archive holding all the shapes validates as
    /// `ArchivedShortStr` exactly when it validates as `ArchivedString`, and then reads the same.
    #[test]
    fn validates_exactly_when_archived_string_does() {
        let all = strings();
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&Plain {
            a: "a_longer_string_out_of_line".into(),
            b: all,
        })
        .unwrap()
        .to_vec();
        let (mut valid, mut invalid) = (0, 0);
        for at in 0..bytes.len() {
            for v in [
                0x00u8,
                0x41,
                0x7F,
                0x80,
                0xA9,
                0xC3,
                0xE6,
                0xFF,
                bytes[at] ^ 0x01,
            ] {
                let mut m = bytes.clone();
                m[at] = v;
                let m = aligned(&m);
                let plain = rkyv::access::<ArchivedPlain, rkyv::rancor::Error>(&m);
                let short = rkyv::access::<ArchivedShort, rkyv::rancor::Error>(&m);
                match (plain, short) {
                    (Ok(p), Ok(s)) => {
                        valid += 1;
                        assert_eq!(p.a.as_str(), s.a.as_str());
                        assert!(p
                            .b
                            .iter()
                            .zip(s.b.iter())
                            .all(|(x, y)| x.as_str() == y.as_str()));
                    }
                    (Err(_), Err(_)) => invalid += 1,
                    (p, s) => panic!(
                        "byte {at} = {v:#x}: ArchivedString {}, ArchivedShortStr {}",
                        p.is_ok(),
                        s.is_ok()
                    ),
                }
            }
        }
        // Both outcomes were exercised.
        assert!(
            valid > 100 && invalid > 100,
            "{valid} valid, {invalid} invalid"
        );
    }
}
