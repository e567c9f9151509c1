//! The conformance suite, run against every store.

mod suite;

mod memory {
    use tower_sliding_window::{ManualClock, MemoryStore};

    async fn make(clock: ManualClock) -> MemoryStore<ManualClock> {
        MemoryStore::with_clock(clock)
    }

    crate::conformance_suite!(make);
}
