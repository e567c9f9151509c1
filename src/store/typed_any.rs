//! A shared value with its type erased and remembered, so that reading it
//! back as that type costs a comparison with a constant.
//!
//! `Arc<dyn Any>::downcast_ref` asks the value for its type through the
//! vtable on every call, and the 16-byte `TypeId` comes back through
//! memory. On the memory store's hot path, where every decision finds its
//! policy's map this way, that call took 14 of 37 ns a decision on a hot
//! key (AMD EPYC, Zen 4; a `perf` profile put two thirds of the lookup's
//! samples on the instruction after it). Remembering the `TypeId` beside
//! the value turns the check into a comparison with a constant; what it
//! then returns is the same reference `downcast_ref` would, without the
//! call. This is the crate's one `unsafe` block.

use std::any::{Any, TypeId};
use std::sync::Arc;

/// A value of some type `T`, shared, that knows it is a `T`.
#[derive(Clone)]
pub(super) struct TypedAny {
    /// `TypeId::of::<T>()` for the `T` that `value` was made from: set
    /// together with it in [`new`](Self::new) and never apart from it.
    type_id: TypeId,
    value: Arc<dyn Any + Send + Sync>,
}

impl TypedAny {
    pub(super) fn new<T: Any + Send + Sync>(value: Arc<T>) -> Self {
        Self {
            type_id: TypeId::of::<T>(),
            value,
        }
    }

    /// The value as a `T`, if it is one.
    #[inline]
    pub(super) fn get<T: Any>(&self) -> Option<&T> {
        if self.type_id != TypeId::of::<T>() {
            return None;
        }
        debug_assert!(self.value.is::<T>());
        let value: *const (dyn Any + Send + Sync) = Arc::as_ptr(&self.value);
        // SAFETY: `type_id` is `TypeId::of` the type `value` was created
        // from (both fields are private and set only by `new`), so the
        // pointee is a `T`; the reference borrows `self`, which keeps the
        // `Arc`, and so the value, alive.
        #[allow(unsafe_code)]
        let value = unsafe { &*value.cast::<T>() };
        Some(value)
    }

    /// The value as a `T`, shared, if it is one.
    pub(super) fn to_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.value.clone().downcast::<T>().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_reads_back_the_same_value() {
        let typed = TypedAny::new(Arc::new(String::from("map")));
        let copy = typed.clone();
        drop(typed);
        assert_eq!(copy.get::<String>().map(String::as_str), Some("map"));
        // Zero-sized and over-aligned values too.
        assert_eq!(TypedAny::new(Arc::new(())).get::<()>(), Some(&()));
        #[repr(align(64))]
        #[derive(Debug, PartialEq)]
        struct Aligned(u8);
        let aligned = TypedAny::new(Arc::new(Aligned(3)));
        let read = aligned.get::<Aligned>().unwrap();
        assert_eq!(read, &Aligned(3));
        assert_eq!(std::ptr::from_ref(read) as usize % 64, 0);
    }

    #[test]
    fn a_value_reads_back_only_as_its_own_type() {
        let typed = TypedAny::new(Arc::new(7u64));
        assert_eq!(typed.get::<u64>(), Some(&7));
        assert_eq!(typed.get::<i64>(), None);
        assert_eq!(typed.get::<u32>(), None);
        assert_eq!(typed.to_arc::<u64>().as_deref(), Some(&7));
        assert!(typed.to_arc::<String>().is_none());
    }
}
