//! Per-limit state, inline for the usual one or two limits, so a key's
//! state sits in the map's own memory instead of behind another pointer.

use std::ops::{Deref, DerefMut};

/// A fixed-length list of `T`, stored inline up to two items.
#[derive(Clone, Debug)]
pub(crate) enum Slots<T> {
    Inline { len: u8, items: [T; 2] },
    Heap(Box<[T]>),
}

impl<T: Copy + Default> Slots<T> {
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

impl<T: Copy + Default> Default for Slots<T> {
    fn default() -> Self {
        Self::new(0)
    }
}

impl<T: Copy + Default> FromIterator<T> for Slots<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let items: Vec<T> = iter.into_iter().collect();
        let mut slots = Self::new(items.len());
        slots.copy_from_slice(&items);
        slots
    }
}

impl<T> Deref for Slots<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Self::Inline { len, items } => &items[..usize::from(*len)],
            Self::Heap(items) => items,
        }
    }
}

impl<T> DerefMut for Slots<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Self::Inline { len, items } => &mut items[..usize::from(*len)],
            Self::Heap(items) => items,
        }
    }
}
