//! One map per type inside an untyped store, found without taking a lock.

use std::any::Any;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

type AnyValue = Arc<dyn Any + Send + Sync>;

/// How many types are found without a lock: a store serves one key type
/// per algorithm in practice, three algorithms at most.
const SLOTS: usize = 8;

/// Values of any `'static` type, at most one per type, created on first use.
#[derive(Default)]
pub(super) struct TypeMap {
    /// Filled in order, each once, under `create`; read without locking.
    slots: [OnceLock<AnyValue>; SLOTS],
    /// Types beyond the slots, behind the lock.
    overflow: Mutex<Vec<AnyValue>>,
    /// Orders the creation of values, so a type is never created twice.
    create: Mutex<()>,
}

impl TypeMap {
    /// Runs `f` on the `T` held here, creating it with `make` if missing.
    pub(super) fn with<T, R>(&self, make: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R
    where
        T: Any + Send + Sync,
    {
        for slot in &self.slots {
            match slot.get() {
                Some(value) => {
                    if let Some(value) = value.downcast_ref::<T>() {
                        return f(value);
                    }
                }
                None => break,
            }
        }
        let value = self.find_or_create(make);
        f(&value)
    }

    /// Runs `f` on the `T` held here, if there is one; creates nothing.
    pub(super) fn peek<T, R>(&self, f: impl FnOnce(&T) -> R) -> Option<R>
    where
        T: Any + Send + Sync,
    {
        let overflow = self.overflow.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all = self
            .slots
            .iter()
            .filter_map(OnceLock::get)
            .chain(overflow.iter());
        all.find_map(|value| value.downcast_ref::<T>()).map(f)
    }

    fn find_or_create<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        let _creating = self.create.lock().unwrap_or_else(PoisonError::into_inner);
        let mut overflow = self.overflow.lock().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have created it since we looked.
        let existing = self
            .slots
            .iter()
            .filter_map(OnceLock::get)
            .chain(overflow.iter());
        if let Some(found) = existing
            .cloned()
            .find_map(|value| value.downcast::<T>().ok())
        {
            return found;
        }
        let created = Arc::new(make());
        let erased: AnyValue = created.clone();
        match self.slots.iter().find(|slot| slot.get().is_none()) {
            Some(slot) => {
                let _ = slot.set(erased);
            }
            None => overflow.push(erased),
        }
        created
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_gets_one_value_lock_free_or_not() {
        let map = TypeMap::default();
        macro_rules! touch {
            ($($t:ty),*) => {$(
                map.with(|| <$t>::default(), |_| ());
            )*};
        }
        // More types than slots, to exercise the overflow too.
        touch!(u8, u16, u32, u64, i8, i16, i32, i64, u128, i128);
        map.with(|| 7u8, |v| assert_eq!(*v, 0, "created once, not again"));
        map.with(|| 7i128, |v| assert_eq!(*v, 0));
        assert_eq!(map.overflow.lock().unwrap().len(), 2);
    }
}
