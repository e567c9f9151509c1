//! One map per key type inside an untyped store, found without a lock for
//! the first (usually the only) key type.

use std::any::Any;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

type AnyValue = Arc<dyn Any + Send + Sync>;

/// Values of any `'static` type, at most one per type, created on first use.
#[derive(Default)]
pub(super) struct TypeMap {
    /// The first type's value, read without locking.
    first: OnceLock<AnyValue>,
    /// Every other type's value. Its lock also orders the creation of `first`.
    others: Mutex<Vec<AnyValue>>,
}

impl TypeMap {
    /// Runs `f` on the `T` held here, creating it with `make` if missing.
    pub(super) fn with<T, R>(&self, make: impl FnOnce() -> T, f: impl FnOnce(&T) -> R) -> R
    where
        T: Any + Send + Sync,
    {
        if let Some(value) = self.first.get().and_then(|value| value.downcast_ref::<T>()) {
            return f(value);
        }
        let value = self.find_or_create(make);
        f(&value)
    }

    fn find_or_create<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        let mut others = self.others.lock().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have set `first` to a `T` since we looked.
        let existing = self.first.get().into_iter().chain(others.iter());
        if let Some(found) = existing
            .cloned()
            .find_map(|value| value.downcast::<T>().ok())
        {
            return found;
        }
        let created = Arc::new(make());
        let erased: AnyValue = created.clone();
        if let Err(erased) = self.first.set(erased) {
            others.push(erased);
        }
        created
    }
}
