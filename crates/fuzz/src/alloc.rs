//! A global allocator that counts, per thread, the bytes currently allocated and the peak since
//! the last [`start`], so a target can tell how much one input made the decoder allocate.
//!
//! Per thread, so the test harness's other threads do not count; the counters are `const`
//! thread-locals without destructors, which allocate nothing themselves.
#![allow(unsafe_code)] // a `GlobalAlloc` is unsafe by definition; it only forwards to `System`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// The counting allocator. Install it with
/// `#[global_allocator] static A: warden_fuzz::CountingAlloc = warden_fuzz::CountingAlloc;`.
pub struct CountingAlloc;

static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn grow(n: usize) {
    let _ = CURRENT.try_with(|c| {
        let now = c.get().wrapping_add(n);
        c.set(now);
        let _ = PEAK.try_with(|p| {
            if now > p.get() {
                p.set(now)
            }
        });
    });
}

fn shrink(n: usize) {
    let _ = CURRENT.try_with(|c| c.set(c.get().wrapping_sub(n)));
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            // Counted as the new block arriving before the old one leaves: what a copying
            // realloc holds at its peak.
            grow(new_size);
            shrink(layout.size());
        }
        p
    }
}

impl CountingAlloc {
    /// Marks the allocator as installed; the first call to [`start`] does it too, but only the
    /// allocator itself can know it is in use, so [`start`] checks by allocating.
    fn probe() -> bool {
        if INSTALLED.load(Ordering::Relaxed) {
            return true;
        }
        let before = CURRENT.with(Cell::get);
        let b = std::hint::black_box(Box::new(0u64));
        let seen = CURRENT.with(Cell::get) != before;
        drop(b);
        if seen {
            INSTALLED.store(true, Ordering::Relaxed);
        }
        seen
    }
}

/// Whether [`CountingAlloc`] is this process's global allocator.
pub fn installed() -> bool {
    CountingAlloc::probe()
}

/// Starts a measurement on this thread: the peak is reset to what is allocated now. Returns that
/// baseline.
pub fn start() -> usize {
    let now = CURRENT.with(Cell::get);
    PEAK.with(|p| p.set(now));
    now
}

/// The most this thread had allocated, above `baseline`, since [`start`] returned it.
pub fn peak_since(baseline: usize) -> usize {
    PEAK.with(Cell::get).saturating_sub(baseline)
}
