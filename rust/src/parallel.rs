//! Work shared between the calling thread and helpers that may join late.
//!
//! A server calls the core once per request, a millisecond or more apart: between
//! two calls the pool's threads go to sleep, and on a small (often virtual) machine
//! waking one takes a good part of a call. So the caller never waits for a helper to
//! wake, neither to start nor to finish: it takes runs of items itself from the
//! first moment, a helper takes runs when it gets going, and the caller waits only
//! for runs a helper has already taken. A helper that wakes after the last run was
//! taken finds nothing and goes back to sleep, without the caller waiting for it.
//! (`rayon::in_place_scope` would wait for every helper spawned to have run, awake
//! or not: measured, a call every 5 ms took longer than on one thread.) And a helper
//! of the global pool stays awake a little after its part (`linger`), so that calls
//! that come one after another, as a gateway's batches do, find it awake.

#![allow(unsafe_code)] // the work's lifetime, erased for helpers that outlive no run they take

use std::any::Any;
use std::cell::Cell;
use std::collections::HashMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// `f` of every item, in the items' order, on `threads` threads (every core with
/// `None`): the calling thread and helpers from a pool. The items go out in runs of
/// `run`, each run to whichever thread asks first. One thread's worth of work (a run
/// or fewer, or `threads` of 1) stays on the caller. A panic in `f`, on any thread,
/// is raised here once every run taken has ended.
pub(crate) fn shared<T: Sync, R: Send>(
    items: &[T],
    run: usize,
    threads: Option<usize>,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let run = run.max(1);
    let runs = items.len().div_ceil(run);
    let helpers = threads
        .unwrap_or_else(rayon::current_num_threads)
        .min(runs)
        .saturating_sub(1);
    if helpers == 0 {
        return items.iter().map(f).collect();
    }
    let done: Vec<Mutex<Vec<R>>> = (0..runs).map(|_| Mutex::new(Vec::new())).collect();
    let work = |i: usize| {
        let out = items[i * run..items.len().min((i + 1) * run)]
            .iter()
            .map(&f)
            .collect();
        *done[i].lock().unwrap_or_else(|e| e.into_inner()) = out;
    };
    let work: &(dyn Fn(usize) + Sync) = &work;
    // SAFETY: only the lifetime is erased. `Board::take_runs` calls `work` for a run
    // it took, and the caller does not return (nor unwind) before every run taken has
    // ended (`wait`), after which no thread takes a run: `work` is never called once
    // it is gone.
    let work: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(work) };
    let board = Arc::new(Board {
        next: AtomicUsize::new(0),
        ended: AtomicUsize::new(0),
        runs,
        work,
        panic: Mutex::new(None),
    });
    let pool = threads.map(|n| pool(n - 1));
    for _ in 0..helpers {
        let board = board.clone();
        match &pool {
            None => rayon::spawn(move || {
                {
                    let _held = Held::enter();
                    board.take_runs();
                }
                drop(board);
                linger();
            }),
            Some(pool) => pool.spawn(move || board.take_runs()),
        }
    }
    // Nothing may unwind out of here before `wait` has seen every run taken end
    // (`take_runs` catches what `f` raises): were it to, helpers would still be using
    // this frame. Should it ever, the process stops rather than go on.
    let guard = AbortOnUnwind;
    board.take_runs();
    board.wait();
    std::mem::forget(guard);
    if let Some(panic) = board.panic.lock().unwrap_or_else(|e| e.into_inner()).take() {
        resume_unwind(panic);
    }
    done.into_iter()
        .flat_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// How long a helper of the global pool stays awake after its part of a call, for the
/// next call's part. A server calls the core once per request: at one AdmitBatch of
/// 256 documents at a time, the next call comes about a millisecond after this one
/// ends, by when an idle helper has gone to sleep and the caller checks alone.
const LINGER: Duration = Duration::from_millis(2);

/// The longest one helper lingers, however many parts it takes meanwhile: a part run
/// by a thread waiting inside other work (a `join` of files) holds that wait while it
/// lingers.
const LINGER_AT_MOST: Duration = Duration::from_millis(20);

thread_local! {
    /// Whether this thread is lingering or doing a part already: a part it takes
    /// meanwhile does not linger (the stack stays two parts deep however long calls
    /// come, and no part lingers inside another).
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// `HELD` set until dropped, then as it was.
struct Held(bool);

impl Held {
    fn enter() -> Held {
        Held(HELD.with(|h| h.replace(true)))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|h| h.set(self.0));
    }
}

/// Stays awake for `LINGER` after the last part this helper took (`LINGER_AT_MOST` in
/// all), taking the next call's part as soon as it is spawned; yields the CPU to any
/// other thread that is ready in the meantime.
fn linger() {
    if HELD.with(Cell::get) {
        return;
    }
    let _held = Held::enter();
    let began = Instant::now();
    let mut until = began + LINGER;
    let end = began + LINGER_AT_MOST;
    loop {
        let now = Instant::now();
        if now >= until || now >= end {
            return;
        }
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => until = Instant::now() + LINGER,
            Some(rayon::Yield::Idle) => std::thread::yield_now(),
            None => return,
        }
    }
}

/// Stops the process if dropped: what unwinds past it would leave threads using freed
/// memory.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        std::process::abort();
    }
}

/// What the threads of one `shared` call share: the next run to take, how many have
/// ended, and the work (valid while a run is left to end).
struct Board {
    next: AtomicUsize,
    ended: AtomicUsize,
    runs: usize,
    work: *const (dyn Fn(usize) + Sync),
    /// The first panic of a run, raised on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `work` is `Sync` and only called for a run taken (see `shared`).
unsafe impl Send for Board {}
unsafe impl Sync for Board {}

impl Board {
    /// Takes runs and does them until none is left.
    fn take_runs(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.runs {
                return;
            }
            // SAFETY: run `i` was taken, so the caller is waiting for it to end.
            let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*self.work)(i) }));
            if let Err(panic) = result {
                let mut first = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                if first.is_none() {
                    *first = Some(panic);
                } else {
                    // Not dropped: a payload's drop may panic in turn, outside any catch.
                    std::mem::forget(panic);
                }
            }
            self.ended.fetch_add(1, Ordering::Release);
        }
    }

    /// Until every run has ended. Called once no run is left to take, so what is
    /// waited for is runs under way on helpers: at most one run each.
    fn wait(&self) {
        let mut spins = 0u32;
        while self.ended.load(Ordering::Acquire) < self.runs {
            if spins < 100 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Thread pools of a given size, built once and kept.
pub(crate) fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    pools
        .entry(threads)
        .or_insert_with(|| {
            Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("jobgate-check-{i}"))
                    .build()
                    .unwrap_or_else(|_| {
                        rayon::ThreadPoolBuilder::new()
                            .build()
                            .expect("a rayon thread pool")
                    }),
            )
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_work_comes_back_whole_and_in_order() {
        for threads in [None, Some(1), Some(2), Some(5)] {
            for len in [0, 1, 7, 8, 9, 63, 64, 65, 1000] {
                let items: Vec<usize> = (0..len).collect();
                let calls = AtomicUsize::new(0);
                let out = shared(&items, 8, threads, |i| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    i * 3
                });
                assert_eq!(
                    out,
                    items.iter().map(|i| i * 3).collect::<Vec<_>>(),
                    "{threads:?}, {len}"
                );
                assert_eq!(calls.into_inner(), len, "each item once");
            }
        }
    }

    #[test]
    fn a_panic_on_any_thread_reaches_the_caller() {
        let items: Vec<usize> = (0..400).collect();
        for bad in [0, 399] {
            let caught = std::panic::catch_unwind(|| {
                shared(&items, 8, Some(3), |i| {
                    assert!(*i != bad, "item {bad}");
                    *i
                })
            });
            assert!(caught.is_err(), "item {bad}");
        }
    }

    #[test]
    fn runs_of_nothing_are_runs_of_one() {
        let items: Vec<usize> = (0..10).collect();
        assert_eq!(shared(&items, 0, Some(2), |i| *i), items);
    }

    /// A panic payload whose drop panics in turn.
    struct Bomb;

    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("a payload's drop");
        }
    }

    #[test]
    fn the_caller_never_unwinds_while_a_helper_works_for_it() {
        // A helper's panic is kept first; then the caller's own run raises a payload
        // whose drop panics. The caller must still wait for the helper's other run.
        use std::sync::atomic::AtomicBool;
        let caller = std::thread::current().id();
        let (kept, returned, used_after) = (
            AtomicBool::new(false),
            AtomicBool::new(false),
            AtomicBool::new(false),
        );
        let items: Vec<usize> = (0..4).collect();
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| {
            shared(&items, 1, Some(2), |i| {
                if std::thread::current().id() == caller {
                    let waited = Instant::now();
                    while !kept.load(Ordering::SeqCst) && waited.elapsed() < Duration::from_secs(2)
                    {
                        std::thread::yield_now();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    std::panic::panic_any(Bomb);
                }
                if !kept.swap(true, Ordering::SeqCst) {
                    panic!("the helper's panic");
                }
                std::thread::sleep(Duration::from_millis(300));
                if returned.load(Ordering::SeqCst) {
                    used_after.store(true, Ordering::SeqCst);
                }
                *i
            })
        }));
        returned.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500)); // the helper's run would end by now
        assert!(caught.is_err());
        assert!(
            !used_after.load(Ordering::SeqCst),
            "a helper was in `f` after the caller unwound"
        );
    }

    #[test]
    fn a_stream_of_calls_leaves_a_lingering_helper_shallow() {
        // Each call's part may be taken by a helper still lingering after the last
        // one's: it must not linger inside that part again, or the stack would grow
        // by a part for every call of the stream.
        let items: Vec<usize> = (0..64).collect();
        for _ in 0..200_000 {
            assert_eq!(shared(&items, 8, None, |i| *i)[63], 63);
        }
    }

    #[test]
    fn the_caller_does_not_wait_for_a_helper_that_has_not_woken() {
        // The only helper is held busy for a long while: the caller does every run
        // alone and returns long before the helper is free to look at its board.
        let pool = pool(1);
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, running) = std::sync::mpsc::channel::<()>();
        pool.spawn(move || {
            started.send(()).unwrap();
            let _ = held.recv_timeout(Duration::from_secs(30));
        });
        running.recv().unwrap();
        let items: Vec<usize> = (0..64).collect();
        let began = std::time::Instant::now();
        let out = shared(&items, 8, Some(2), |i| *i + 1);
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "waited for the helper"
        );
        assert_eq!(out, (1..=64).collect::<Vec<_>>());
        release.send(()).unwrap();
    }
}
