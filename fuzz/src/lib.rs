//! Fuzzing the decoders of bytes from outside (see the tests). What they
//! share: mutations of a valid input, and inputs nested deeper than any
//! parser's stack should go.

use proptest::prelude::*;

/// One edit of a byte string: flip a byte, insert or delete some, cut it.
#[derive(Clone, Debug)]
pub enum Edit {
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Cut(usize),
}

pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<usize>(), 1usize..32).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<usize>().prop_map(Edit::Cut),
    ];
    proptest::collection::vec(edit, 1..8)
}

/// `base` with `edits` applied.
pub fn mutate(base: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = base.to_vec();
    for e in edits {
        let len = out.len().max(1);
        match e {
            Edit::Set(i, b) => {
                if !out.is_empty() {
                    let at = i % out.len();
                    out[at] = *b;
                }
            }
            Edit::Insert(i, bytes) => {
                let at = i % (out.len() + 1);
                out.splice(at..at, bytes.iter().copied());
            }
            Edit::Delete(i, n) => {
                let at = i % len;
                let end = (at + n).min(out.len());
                if at < end {
                    out.drain(at..end);
                }
            }
            Edit::Cut(i) => out.truncate(i % len),
        }
    }
    out
}

/// Text nested `depth` times (`open` ... `close`), for stack-depth limits.
pub fn nested(open: &str, close: &str, depth: usize) -> String {
    format!("{}{}", open.repeat(depth), close.repeat(depth))
}
