//! What the core's record writers share (`sqlite_writer`, `postgres_writer`):
//! admissions that read nothing before they are decided (no quota, no idempotency
//! key) hand their record's row to a thread of the core, which opens the records
//! queued meanwhile in one transaction while the calls go on building their answers.
//! A call waits for its commit (`Opening.wait`) only before it answers, and lets the
//! GIL go only if the commit is not in yet. Run by a Python thread, the statement let
//! the GIL go and took it back around the driver's every call, and the call's own
//! Python waited for it; here the write runs beside that Python, on the other core.
//!
//! No admission fails another: when a transaction of several fails because of a row,
//! each is written again alone, so only the one at fault fails; when the store is
//! locked, full or down, all fail at once (alone, each would fail alike, a locked
//! store making each wait out its timeout again). A failure is answered with the
//! database's own code and message; the store maps them as it maps its driver's.

#![allow(unsafe_code)] // `symbol`: the writers' functions, looked up in a loaded library

use std::collections::VecDeque;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The handle of `path`, a shared object this process has already loaded; `None`
/// when it has not (nothing is loaded here).
pub fn loaded(path: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlopen with RTLD_NOLOAD only looks up objects already loaded.
    let library = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    (!library.is_null()).then_some(library)
}

/// `name` from the loaded `library` (a `dlopen` handle), as the function type `T`.
///
/// # Safety
/// `T` must be the C signature the library documents for `name`.
pub unsafe fn symbol<T: Copy>(library: *mut c_void, name: &CStr) -> Result<T, String> {
    let found = libc::dlsym(library, name.as_ptr());
    if found.is_null() {
        return Err(format!(
            "the loaded library has no {}",
            name.to_string_lossy()
        ));
    }
    // SAFETY: the caller's: `T` is `name`'s C signature.
    Ok(std::mem::transmute_copy::<*mut c_void, T>(&found))
}

/// The most bytes of rows one batch takes (at least one submission, whatever its
/// size): a database refuses a message beyond some size (PostgreSQL's is 1 GiB), and
/// then every row of the batch would fail with it.
const BATCH_BYTES: usize = 64 << 20;

/// A database's code for a failure, as Python gets it: SQLite's extended result code
/// (an int) or PostgreSQL's SQLSTATE (a str).
#[derive(Clone, Debug, IntoPyObject)]
pub enum Code {
    Sqlite(i32),
    Sqlstate(String),
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Code::Sqlite(code) => write!(f, "{code}"),
            Code::Sqlstate(state) => f.write_str(state),
        }
    }
}

/// A failure: the database's code and its message.
pub type Failure = (Code, String);

/// One database connection of a writer: how it writes a batch and what its failures say.
pub trait Store: Send + 'static {
    type Row: Send + 'static;

    /// The rows of `batch` in one transaction: committed, or nothing written.
    fn write(&mut self, batch: &[&Submission<Self::Row>]) -> Result<(), Failure>;

    /// Whether `failure` says the store is down, full or locked rather than that a row
    /// is at fault: then every row of the batch fails with it.
    fn store_wide(failure: &Failure) -> bool;

    /// The failure of a submission the writer will not write (`why`: it is closing,
    /// or it stopped).
    fn unwritten(why: &str) -> Failure;

    /// Runs after a batch when the store asked for it (`Writer::after_next_batch`).
    fn after_batch(&mut self) {}
}

/// What a submission is told once written.
#[derive(Default)]
struct Outcome {
    done: bool,
    failure: Option<Failure>,
}

/// A submission's outcome, shared between the writer and the call waiting for it.
#[derive(Default)]
struct Answer {
    outcome: Mutex<Outcome>,
    settled: Condvar,
    // Set with the outcome: a wait that finds it set takes no lock and keeps the GIL.
    ready: AtomicBool,
}

impl Answer {
    fn settle(&self, failure: Option<Failure>) {
        let mut outcome = lock(&self.outcome);
        outcome.done = true;
        outcome.failure = failure;
        self.ready.store(true, Ordering::Release);
        self.settled.notify_all();
    }
}

/// One submission: the rows of one admission group, opened together or not at all.
pub struct Submission<R> {
    pub rows: Vec<R>,
    /// The rows' size, as the batch's budget counts it.
    bytes: usize,
    answer: Arc<Answer>,
    /// The failure it gets should it be dropped unanswered.
    stopped: fn(&str) -> Failure,
}

impl<R> Drop for Submission<R> {
    /// A submission dropped unanswered (the writer panicked) fails rather than leave
    /// its caller waiting for ever.
    fn drop(&mut self) {
        if !self.answer.ready.load(Ordering::Acquire) {
            self.answer
                .settle(Some((self.stopped)("the job store's writer stopped")));
        }
    }
}

struct Queue<R> {
    waiting: VecDeque<Submission<R>>,
    /// A batch taken and not yet answered.
    writing: bool,
    closing: bool,
    finished: bool,
}

struct Shared<R> {
    queue: Mutex<Queue<R>>,
    /// The writer waits here for submissions; `close` waits here for the writer.
    changed: Condvar,
    /// `Store::after_batch` to run after the next batch.
    after_batch: AtomicBool,
}

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A writer that panicked left nothing half-changed that matters here.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The writer: takes what is queued, writes it, answers it; until closed and drained.
fn write_all<S: Store>(mut store: S, shared: Arc<Shared<S::Row>>) {
    loop {
        let batch: Vec<Submission<S::Row>> = {
            let mut queue = lock(&shared.queue);
            while queue.waiting.is_empty() && !queue.closing {
                queue = shared
                    .changed
                    .wait(queue)
                    .unwrap_or_else(|e| e.into_inner());
            }
            if queue.waiting.is_empty() {
                break;
            }
            queue.writing = true;
            let mut taken = 0;
            let mut batch = Vec::new();
            while let Some(next) = queue.waiting.front() {
                if !batch.is_empty() && taken + next.bytes > BATCH_BYTES {
                    break; // the rest make the next batch
                }
                taken += next.bytes;
                batch.extend(queue.waiting.pop_front());
            }
            batch
        };
        let all: Vec<&Submission<S::Row>> = batch.iter().collect();
        match store.write(&all) {
            Ok(()) => batch.iter().for_each(|s| s.answer.settle(None)),
            Err(failure) if batch.len() == 1 || S::store_wide(&failure) => {
                batch
                    .iter()
                    .for_each(|s| s.answer.settle(Some(failure.clone())));
            }
            // A row at fault: each alone, so that only that one fails.
            Err(_) => batch
                .iter()
                .for_each(|s| s.answer.settle(store.write(&[s]).err())),
        }
        if shared.after_batch.swap(false, Ordering::AcqRel) {
            store.after_batch();
        }
        lock(&shared.queue).writing = false;
        shared.changed.notify_all();
    }
    drop(store); // closed before `close` hears that the writer finished
    lock(&shared.queue).finished = true;
    shared.changed.notify_all();
}

/// A writer thread on one connection, and its queue.
pub struct Writer<R> {
    shared: Arc<Shared<R>>,
    unwritten: fn(&str) -> Failure,
}

impl<R: Send + 'static> Writer<R> {
    /// Starts the thread `name` writing through `store`.
    pub fn start<S: Store<Row = R>>(store: S, name: &str) -> PyResult<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                writing: false,
                closing: false,
                finished: false,
            }),
            changed: Condvar::new(),
            after_batch: AtomicBool::new(false),
        });
        let writer = shared.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || write_all(store, writer))
            .map_err(|e| {
                PyRuntimeError::new_err(format!(
                    "the job store's writer could not start a thread: {e}"
                ))
            })?;
        Ok(Self {
            shared,
            unwritten: S::unwritten,
        })
    }

    /// Queues `rows` (of `bytes` in all) to be opened together; returns at once. After
    /// `close`, the opening fails as `Store::unwritten`.
    pub fn submit(&self, rows: Vec<R>, bytes: usize) -> Opening {
        let answer = Arc::new(Answer::default());
        let mut queue = lock(&self.shared.queue);
        if queue.closing {
            answer.settle(Some((self.unwritten)("the job store is closing")));
        } else {
            queue.waiting.push_back(Submission {
                rows,
                bytes,
                answer: answer.clone(),
                stopped: self.unwritten,
            });
            self.shared.changed.notify_all();
        }
        Opening { answer }
    }

    /// Has the writer run `Store::after_batch` after its next batch.
    pub fn after_next_batch(&self) {
        self.shared.after_batch.store(true, Ordering::Release);
    }

    /// Writes what is queued, then stops; waits at most `wait` seconds for that.
    /// Whether everything handed to it was written (or failed) by then.
    pub fn close(&self, py: Python<'_>, wait: f64) -> bool {
        let shared = self.shared.clone();
        py.detach(move || {
            let patience = Duration::try_from_secs_f64(wait.max(0.0)).unwrap_or(Duration::MAX);
            let deadline = Instant::now().checked_add(patience);
            let mut queue = lock(&shared.queue);
            queue.closing = true;
            shared.changed.notify_all();
            // Nothing queued and no batch under way: nothing is left unwritten.
            while !queue.finished && (queue.writing || !queue.waiting.is_empty()) {
                let left = deadline.map_or(Duration::MAX, |d| {
                    d.saturating_duration_since(Instant::now())
                });
                if left.is_zero() {
                    return false;
                }
                queue = shared
                    .changed
                    .wait_timeout(queue, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            true
        })
    }
}

impl<R> Drop for Writer<R> {
    /// A writer dropped unclosed ends its thread once it has written what it holds.
    fn drop(&mut self) {
        lock(&self.shared.queue).closing = true;
        self.shared.changed.notify_all();
    }
}

/// One submission's commit: `wait()` returns None once committed, or the failure as
/// (the database's code, its message).
#[pyclass(frozen, module = "jobgate._core")]
pub struct Opening {
    answer: Arc<Answer>,
}

#[pymethods]
impl Opening {
    /// Waits for the commit (without the GIL, unless it is in already): None once
    /// committed, else (code, message).
    fn wait(&self, py: Python<'_>) -> Option<Failure> {
        if !self.answer.ready.load(Ordering::Acquire) {
            let answer = self.answer.clone();
            py.detach(move || {
                let mut outcome = lock(&answer.outcome);
                while !outcome.done {
                    outcome = answer
                        .settled
                        .wait(outcome)
                        .unwrap_or_else(|e| e.into_inner());
                }
            });
        }
        lock(&self.answer.outcome).failure.clone()
    }

    /// Whether the commit is in (or failed) already.
    fn done(&self) -> bool {
        self.answer.ready.load(Ordering::Acquire)
    }
}
