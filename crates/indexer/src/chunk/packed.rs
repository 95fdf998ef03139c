//! A file's call sites packed into one byte buffer while a build holds them for the whole tree.
//!
//! A build keeps every file's [`Call`]s from its parse until the graph is resolved, for the
//! whole tree at once. As values a call is 88 bytes (an index, a line and three 24-byte
//! strings, two of them usually absent); packed it is its bytes: varints for the index and the
//! line, each string as a length and its bytes (1.6M calls on this machine's cargo registry:
//! 141 MB as values). [`PackedCalls::iter`] gives back the same calls in the same order.
//!
//! Layout, per call: `from`, `line` (LEB128 varints), the callee (length, bytes), then the
//! qualifier and the receiver (0 when absent, else length + 1, then the bytes).

use super::Call;

/// One file's calls, packed ([`PackedCalls::pack`]); empty holds no allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedCalls {
    bytes: Box<[u8]>,
    len: u32,
}

impl PackedCalls {
    /// Packs `calls` (their order is kept).
    pub fn pack(calls: &[Call]) -> PackedCalls {
        let mut out = Vec::new();
        for c in calls {
            put_varint(&mut out, c.from as u64);
            put_varint(&mut out, u64::from(c.line));
            put_str(&mut out, &c.callee);
            put_opt(&mut out, c.qualifier.as_deref());
            put_opt(&mut out, c.receiver.as_deref());
        }
        PackedCalls {
            // No spare capacity: the buffer is held for the whole tree.
            bytes: out.into_boxed_slice(),
            // A file's calls are far fewer than its bytes, which are at most `u32::MAX`.
            len: u32::try_from(calls.len()).unwrap_or(u32::MAX),
        }
    }

    /// How many calls are packed.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether no call is packed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held (besides the value itself).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The calls as [`PackedCalls::pack`] was given them, borrowed from the buffer.
    pub fn iter(&self) -> PackedIter<'_> {
        PackedIter(Reader::new(&self.bytes))
    }

    /// The packed bytes and the number of calls in them (what a build's facts cache stores).
    pub(crate) fn raw(&self) -> (&[u8], u32) {
        (&self.bytes, self.len)
    }

    /// Calls packed by [`PackedCalls::pack`], from [`PackedCalls::raw`]'s parts; `None` when
    /// `bytes` do not hold exactly `len` calls.
    pub(crate) fn from_raw(bytes: &[u8], len: u32) -> Option<PackedCalls> {
        let mut r = Reader::new(bytes);
        for _ in 0..len {
            r.call()?;
        }
        r.is_done().then(|| PackedCalls {
            bytes: bytes.into(),
            len,
        })
    }
}

/// A [`Call`] borrowed from where it is held (a [`Call`] itself: [`Call::view`], or a
/// [`PackedCalls`] buffer): what resolution reads of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRef<'a> {
    pub from: usize,
    pub callee: &'a str,
    pub qualifier: Option<&'a str>,
    pub receiver: Option<&'a str>,
    pub line: u32,
}

impl CallRef<'_> {
    /// The call as a value.
    pub fn to_call(self) -> Call {
        Call {
            from: self.from,
            callee: self.callee.into(),
            qualifier: self.qualifier.map(Into::into),
            receiver: self.receiver.map(Into::into),
            line: self.line,
        }
    }
}

impl Call {
    /// The call, borrowed ([`CallRef`]).
    pub fn view(&self) -> CallRef<'_> {
        CallRef {
            from: self.from,
            callee: &self.callee,
            qualifier: self.qualifier.as_deref(),
            receiver: self.receiver.as_deref(),
            line: self.line,
        }
    }
}

/// The calls of a [`PackedCalls`], in order ([`PackedCalls::iter`]).
pub struct PackedIter<'a>(Reader<'a>);

impl<'a> Iterator for PackedIter<'a> {
    type Item = CallRef<'a>;

    fn next(&mut self) -> Option<CallRef<'a>> {
        if self.0.is_done() {
            return None;
        }
        // The buffer is only ever written by `pack`, so a short or malformed read cannot
        // happen; it would end the list rather than invent a call.
        let c = self.0.call();
        if c.is_none() {
            self.0.at = self.0.bytes.len();
        }
        c
    }
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn put_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            put_varint(out, s.len() as u64 + 1);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// Reads what `put_varint`, `put_str` and `put_opt` wrote; every read is bounds-checked and
/// `None` past the end or on malformed bytes.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn is_done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    pub(crate) fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// The next `len` bytes.
    pub(crate) fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(len)?;
        let b = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(b)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.varint()?).ok()
    }

    pub(crate) fn usize(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }

    /// A count of items, each of at least one byte: `None` above the bytes left, so a
    /// malformed count cannot make a reader loop for long.
    pub(crate) fn count(&mut self) -> Option<usize> {
        let n = self.usize()?;
        (n <= self.bytes.len().saturating_sub(self.at)).then_some(n)
    }

    /// A string written by `put_str`.
    pub(crate) fn str(&mut self) -> Option<&'a str> {
        let len = self.usize()?;
        self.str_of(len)
    }

    pub(crate) fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at)?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn str_of(&mut self, len: usize) -> Option<&'a str> {
        let end = self.at.checked_add(len)?;
        let s = std::str::from_utf8(self.bytes.get(self.at..end)?).ok()?;
        self.at = end;
        Some(s)
    }

    pub(crate) fn opt(&mut self) -> Option<Option<&'a str>> {
        match usize::try_from(self.varint()?).ok()? {
            0 => Some(None),
            n => self.str_of(n - 1).map(Some),
        }
    }

    fn call(&mut self) -> Option<CallRef<'a>> {
        let from = usize::try_from(self.varint()?).ok()?;
        let line = u32::try_from(self.varint()?).ok()?;
        let len = usize::try_from(self.varint()?).ok()?;
        let callee = self.str_of(len)?;
        let qualifier = self.opt()?;
        let receiver = self.opt()?;
        Some(CallRef {
            from,
            callee,
            qualifier,
            receiver,
            line,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(from: usize, callee: &str, q: Option<&str>, r: Option<&str>, line: u32) -> Call {
        Call {
            from,
            callee: callee.into(),
            qualifier: q.map(Into::into),
            receiver: r.map(Into::into),
            line,
        }
    }

    #[test]
    fn calls_come_back_as_packed() {
        let long = "a_callee_name_longer_than_twenty_four_bytes_and_then_some".repeat(3);
        let calls = vec![
            call(0, "parse", None, None, 1),
            call(3, "new", Some("Parser"), Some("Parser"), 17),
            call(127, "", Some(""), Some(""), 127),
            call(128, "é名", Some("self.parser"), None, 128),
            call(usize::MAX, &long, None, Some(&long), u32::MAX),
            call(16_384, "x", Some(&long), None, 0),
        ];
        let packed = PackedCalls::pack(&calls);
        let unpack = |p: &PackedCalls| p.iter().map(CallRef::to_call).collect::<Vec<_>>();
        assert_eq!(packed.len(), calls.len());
        assert!(!packed.is_empty());
        assert_eq!(unpack(&packed), calls);
        assert!(packed.iter().eq(calls.iter().map(Call::view)));
        // Its bytes are what the calls' strings and varints take, nothing spare.
        let strings: usize = calls
            .iter()
            .map(|c| {
                c.callee.len()
                    + c.qualifier.as_ref().map_or(0, |s| s.len())
                    + c.receiver.as_ref().map_or(0, |s| s.len())
            })
            .sum();
        assert!(packed.heap_bytes() > strings);
        assert!(packed.heap_bytes() < strings + calls.len() * 20);
    }

    #[test]
    fn a_cut_buffer_ends_the_list_and_never_invents_a_call() {
        let calls = vec![
            call(1, "parse", Some("self.p"), None, 10),
            call(2, "new", Some("Parser"), Some("Parser"), 300),
            call(3, "run", None, Some("Runner"), 70_000),
        ];
        let packed = PackedCalls::pack(&calls);
        for cut in 0..packed.bytes.len() {
            let short = PackedCalls {
                bytes: packed.bytes[..cut].into(),
                len: packed.len,
            };
            let got: Vec<Call> = short.iter().map(CallRef::to_call).collect();
            assert!(got.len() < calls.len(), "cut at {cut}");
            assert_eq!(got[..], calls[..got.len()], "cut at {cut}");
        }
    }

    #[test]
    fn no_calls_pack_to_nothing() {
        let packed = PackedCalls::pack(&[]);
        assert!(packed.is_empty());
        assert_eq!(packed.heap_bytes(), 0);
        assert_eq!(packed.iter().count(), 0);
        assert_eq!(packed, PackedCalls::default());
    }

    #[test]
    fn extracted_calls_round_trip() {
        // The calls of a real parse, every field set somewhere.
        let src = "use crate::p::Parser;\n\npub struct Run { p: Parser }\n\nimpl Run {\n    pub fn go(&self, x: &Parser) {\n        let q = Parser::new();\n        q.parse();\n        x.parse();\n        self.p.parse();\n        helper(1);\n    }\n}\n\nfn helper(n: u32) -> u32 { n }\n";
        let fx = super::super::extract(
            super::super::Language::Rust,
            "r",
            "src/run.rs",
            src,
            &Default::default(),
        );
        assert!(fx.calls.len() >= 4, "{:?}", fx.calls);
        assert!(fx.calls.iter().any(|c| c.qualifier.is_some()));
        assert!(fx.calls.iter().any(|c| c.receiver.is_some()));
        let packed = PackedCalls::pack(&fx.calls);
        assert!(packed
            .iter()
            .map(CallRef::to_call)
            .eq(fx.calls.iter().cloned()));
        assert!(packed.heap_bytes() < fx.calls.len() * std::mem::size_of::<Call>() / 2);
    }
}
