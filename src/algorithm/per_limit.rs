//! Per-limit state, inline for the usual one or two limits, so a key's
//! state sits in the map's own memory instead of behind another pointer.

use std::ops::{Deref, DerefMut};

use super::decision::Decision;

/// A fixed-length list of `T`, stored inline up to two items.
#[derive(Clone, Debug)]
pub(crate) enum PerLimit<T> {
    Inline { len: u8, items: [T; 2] },
    Heap(Box<[T]>),
}

impl<T: Copy + Default> PerLimit<T> {
    /// The records, started afresh if they are not `len`: a state judged
    /// under another number of limits than before.
    #[inline]
    pub(crate) fn fit(&mut self, len: usize) -> &mut Self {
        if self.len() != len {
            *self = Self::new(len);
        }
        self
    }

    /// `len` default items.
    pub(crate) fn new(len: usize) -> Self {
        if len <= 2 {
            Self::Inline {
                len: len as u8,
                items: [T::default(); 2],
            }
        } else {
            Self::Heap(vec![T::default(); len].into_boxed_slice())
        }
    }
}

/// A refused request leaves a key's state as it was. Rolling windows
/// forward on a refusal would move the time that a clock stepping back is
/// judged at, which the Redis scripts, writing nothing on a refusal, could
/// not follow; and a refusal that writes nothing is cheaper.
impl<T: Copy + Default> PerLimit<T> {
    /// Runs `decide` on the records, then puts them back as they were unless
    /// the request was accepted.
    #[inline]
    pub(crate) fn unless_refused(&mut self, decide: impl FnOnce(&mut [T]) -> Decision) -> Decision {
        if let Self::Inline { len, items } = self {
            // Saved whole: a copy the size of the records, no more.
            let (len, items) = (*len, *items);
            let decision = decide(self);
            if !decision.is_allowed() {
                *self = Self::Inline { len, items };
            }
            return decision;
        }
        // A policy's limits are saved on the stack; the public API takes
        // longer lists.
        let mut inline = [T::default(); super::INLINE_LIMITS];
        let len = self.len();
        let saved: Vec<T>;
        let saved: &[T] = if len <= inline.len() {
            inline[..len].copy_from_slice(self);
            &inline[..len]
        } else {
            saved = self.to_vec();
            &saved
        };
        let decision = decide(self);
        if !decision.is_allowed() {
            self.copy_from_slice(saved);
        }
        decision
    }
}

impl<T: Copy + Default> Default for PerLimit<T> {
    fn default() -> Self {
        Self::new(0)
    }
}

/// Up to two items are collected in place, with no allocation: a store
/// that keeps records packed builds states from them.
impl<T: Copy + Default> FromIterator<T> for PerLimit<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let mut items = [T::default(); 2];
        let mut len = 0;
        while len < items.len() {
            let Some(item) = iter.next() else {
                let len = len as u8;
                return Self::Inline { len, items };
            };
            items[len] = item;
            len += 1;
        }
        match iter.next() {
            None => Self::Inline { len: 2, items },
            Some(item) => Self::Heap(items.into_iter().chain([item]).chain(iter).collect()),
        }
    }
}

impl<T> Deref for PerLimit<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Self::Inline { len, items } => &items[..usize::from(*len)],
            Self::Heap(items) => items,
        }
    }
}

impl<T> DerefMut for PerLimit<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Self::Inline { len, items } => &mut items[..usize::from(*len)],
            Self::Heap(items) => items,
        }
    }
}
