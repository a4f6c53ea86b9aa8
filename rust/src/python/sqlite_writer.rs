//! The SQLite store's record writer (`jobgate._core.SqliteWriter`): admissions that
//! read nothing before they are decided (no quota, no idempotency key) hand their
//! record's row to a thread of the core, which opens the records queued meanwhile in
//! one transaction while the calls go on building their answers. A call waits for its
//! commit (`Opening.wait`) only before it answers, and lets the GIL go only if the
//! commit is not in yet. Run by a Python thread, the statement let the GIL go and
//! took it back around `sqlite3_step` in every call, and the call's own Python waited
//! for it; here the write runs beside that Python, on the other core.
//!
//! The same SQLite library as Python's `sqlite3`: the copy the process has loaded as
//! `libsqlite3.so.0`, found without loading another (`RTLD_NOLOAD`), and used only if
//! Python's `_sqlite3` resolves SQLite's functions to it. Two copies in one process
//! would each keep their own table of the file's POSIX locks, and a connection of one
//! closing the file would drop the other's locks. Where Python's SQLite is built in
//! rather than loaded, there is no writer, and the store opens every record itself.
//!
//! No admission fails another: when a transaction of several fails because of a row,
//! each is written again alone, so only the one at fault fails; when the store is
//! locked, full or down, all fail at once (alone, each would fail alike, a locked
//! store making each wait out the busy timeout again). A failure is answered with SQLite's
//! extended result code and message; the store maps them as it maps its driver's.

#![allow(unsafe_code)] // calls into the process's own libsqlite3 (lib.rs denies it elsewhere)

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple};

const SQLITE_OK: c_int = 0;
const SQLITE_ROW: c_int = 100;
const SQLITE_DONE: c_int = 101;
const SQLITE_OPEN_READWRITE: c_int = 0x2;
const SQLITE_OPEN_NOMUTEX: c_int = 0x8000;
/// SQLite copies a bound value before `bind_*` returns (`SQLITE_TRANSIENT`).
const SQLITE_TRANSIENT: isize = -1;
/// The code a submission gets when the writer closed before writing it (`SQLITE_ABORT`).
const SQLITE_ABORT: c_int = 4;
/// The code a submission gets when a value is too large for SQLite (`SQLITE_TOOBIG`).
const SQLITE_TOOBIG: c_int = 18;
/// The code a submission gets when the writer's connection cannot go on (`SQLITE_ERROR`).
const SQLITE_ERROR: c_int = 1;
/// Primary codes that say the store is down, full or locked rather than that a row is
/// at fault: BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL. Every row
/// of a batch that fails so fails with it: written alone, each would fail alike, and a
/// locked store would make each wait out the busy timeout again.
const STORE_WIDE: [c_int; 8] = [5, 6, 7, 8, 10, 13, 14, 15];

type Handle = *mut c_void;

/// The few SQLite functions the writer calls, from the library the process loaded.
struct Api {
    open_v2: unsafe extern "C" fn(*const c_char, *mut Handle, c_int, *const c_char) -> c_int,
    close_v2: unsafe extern "C" fn(Handle) -> c_int,
    prepare_v2: unsafe extern "C" fn(
        Handle,
        *const c_char,
        c_int,
        *mut Handle,
        *mut *const c_char,
    ) -> c_int,
    finalize: unsafe extern "C" fn(Handle) -> c_int,
    bind_text: unsafe extern "C" fn(Handle, c_int, *const c_char, c_int, isize) -> c_int,
    bind_blob: unsafe extern "C" fn(Handle, c_int, *const c_void, c_int, isize) -> c_int,
    bind_int64: unsafe extern "C" fn(Handle, c_int, i64) -> c_int,
    bind_null: unsafe extern "C" fn(Handle, c_int) -> c_int,
    step: unsafe extern "C" fn(Handle) -> c_int,
    reset: unsafe extern "C" fn(Handle) -> c_int,
    clear_bindings: unsafe extern "C" fn(Handle) -> c_int,
    errmsg: unsafe extern "C" fn(Handle) -> *const c_char,
    extended_errcode: unsafe extern "C" fn(Handle) -> c_int,
    extended_result_codes: unsafe extern "C" fn(Handle, c_int) -> c_int,
    get_autocommit: unsafe extern "C" fn(Handle) -> c_int,
}

/// `name` from `library`, as the function type `T`.
unsafe fn symbol<T: Copy>(library: Handle, name: &CStr) -> Result<T, String> {
    let found = libc::dlsym(library, name.as_ptr());
    if found.is_null() {
        return Err(format!(
            "the loaded libsqlite3 has no {}",
            name.to_string_lossy()
        ));
    }
    // SAFETY: `T` is the C signature SQLite documents for `name`.
    Ok(std::mem::transmute_copy::<*mut c_void, T>(&found))
}

impl Api {
    /// The library Python's `sqlite3` loaded, or why there is none to use.
    /// `python_sqlite` is the path of Python's `_sqlite3` module: the library is used
    /// only if that module resolves SQLite's functions to it (a Python whose SQLite is
    /// built in resolves them to its own copy, even with libsqlite3.so.0 loaded by
    /// some other module).
    fn loaded(python_sqlite: &str) -> Result<Api, String> {
        let module = CString::new(python_sqlite)
            .map_err(|_| "the path of Python's _sqlite3 holds a NUL".to_string())?;
        // SAFETY: dlopen with RTLD_NOLOAD only looks up objects already loaded.
        let (library, python) = unsafe {
            (
                libc::dlopen(
                    c"libsqlite3.so.0".as_ptr(),
                    libc::RTLD_NOW | libc::RTLD_NOLOAD,
                ),
                libc::dlopen(module.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD),
            )
        };
        if library.is_null() || python.is_null() {
            return Err(
                "this Python's sqlite3 has not loaded libsqlite3.so.0 (its SQLite is built in)"
                    .into(),
            );
        }
        // SAFETY: dlsym on handles of loaded objects; the addresses are only compared.
        let (ours, theirs) = unsafe {
            (
                libc::dlsym(library, c"sqlite3_open_v2".as_ptr()),
                libc::dlsym(python, c"sqlite3_open_v2".as_ptr()),
            )
        };
        if ours.is_null() || ours != theirs {
            return Err(
                "this Python's sqlite3 uses a SQLite of its own, not the loaded libsqlite3.so.0"
                    .into(),
            );
        }
        // SAFETY: each symbol is looked up by its documented name and C signature.
        unsafe {
            Ok(Api {
                open_v2: symbol(library, c"sqlite3_open_v2")?,
                close_v2: symbol(library, c"sqlite3_close_v2")?,
                prepare_v2: symbol(library, c"sqlite3_prepare_v2")?,
                finalize: symbol(library, c"sqlite3_finalize")?,
                bind_text: symbol(library, c"sqlite3_bind_text")?,
                bind_blob: symbol(library, c"sqlite3_bind_blob")?,
                bind_int64: symbol(library, c"sqlite3_bind_int64")?,
                bind_null: symbol(library, c"sqlite3_bind_null")?,
                step: symbol(library, c"sqlite3_step")?,
                reset: symbol(library, c"sqlite3_reset")?,
                clear_bindings: symbol(library, c"sqlite3_clear_bindings")?,
                errmsg: symbol(library, c"sqlite3_errmsg")?,
                extended_errcode: symbol(library, c"sqlite3_extended_errcode")?,
                extended_result_codes: symbol(library, c"sqlite3_extended_result_codes")?,
                get_autocommit: symbol(library, c"sqlite3_get_autocommit")?,
            })
        }
    }
}

/// A value bound to one of the insert's parameters.
enum Value {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

/// A failure: SQLite's extended result code and its message.
type Failure = (i32, String);

/// One connection of the writer's own, with its statements prepared once.
struct Connection {
    api: Api,
    db: Handle,
    insert: Handle,
    begin: Handle,
    commit: Handle,
    rollback: Handle,
    checkpoint: Handle,
}

// SAFETY: the connection is opened NOMUTEX and only ever used by one thread at a time:
// its writer thread, or the constructor before that thread starts.
unsafe impl Send for Connection {}

impl Connection {
    fn open(api: Api, path: &str, insert: &str, pragmas: &[String]) -> Result<Connection, Failure> {
        let path =
            CString::new(path).map_err(|_| (21, "the store's path holds a NUL".to_string()))?;
        let mut db: Handle = std::ptr::null_mut();
        // SAFETY: a valid path and out-pointer; the handle is closed on every failure below.
        let rc = unsafe {
            (api.open_v2)(
                path.as_ptr(),
                &mut db,
                SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                std::ptr::null(),
            )
        };
        let mut connection = Connection {
            api,
            db,
            insert: std::ptr::null_mut(),
            begin: std::ptr::null_mut(),
            commit: std::ptr::null_mut(),
            rollback: std::ptr::null_mut(),
            checkpoint: std::ptr::null_mut(),
        };
        if rc != SQLITE_OK {
            return Err(connection.failure(rc));
        }
        // SAFETY: an open connection.
        unsafe { (connection.api.extended_result_codes)(db, 1) };
        for pragma in pragmas {
            let statement = connection.prepare(pragma)?;
            let done = connection.run(statement);
            // SAFETY: prepared above, finalized once.
            unsafe { (connection.api.finalize)(statement) };
            done?;
        }
        connection.insert = connection.prepare(insert)?;
        connection.begin = connection.prepare("BEGIN IMMEDIATE")?;
        connection.commit = connection.prepare("COMMIT")?;
        connection.rollback = connection.prepare("ROLLBACK")?;
        connection.checkpoint = connection.prepare("PRAGMA wal_checkpoint(PASSIVE)")?;
        Ok(connection)
    }

    fn failure(&self, rc: c_int) -> Failure {
        if self.db.is_null() {
            return (rc, "the job store could not be opened".into());
        }
        // SAFETY: an open connection; errmsg's text is copied before the next call.
        unsafe {
            let message = CStr::from_ptr((self.api.errmsg)(self.db))
                .to_string_lossy()
                .into_owned();
            ((self.api.extended_errcode)(self.db), message)
        }
    }

    fn prepare(&self, sql: &str) -> Result<Handle, Failure> {
        let text = CString::new(sql).map_err(|_| (21, "a statement holds a NUL".to_string()))?;
        let mut statement: Handle = std::ptr::null_mut();
        // SAFETY: an open connection, a NUL-terminated statement and an out-pointer.
        let rc = unsafe {
            (self.api.prepare_v2)(
                self.db,
                text.as_ptr(),
                -1,
                &mut statement,
                std::ptr::null_mut(),
            )
        };
        if rc != SQLITE_OK {
            return Err(self.failure(rc));
        }
        Ok(statement)
    }

    /// Steps `statement` to its end (a pragma may answer rows first), then resets it.
    fn run(&self, statement: Handle) -> Result<(), Failure> {
        loop {
            // SAFETY: a statement prepared on this connection.
            let rc = unsafe { (self.api.step)(statement) };
            if rc == SQLITE_ROW {
                continue;
            }
            // SAFETY: as above; reset returns the step's error again, which is kept.
            unsafe { (self.api.reset)(statement) };
            return if rc == SQLITE_DONE {
                Ok(())
            } else {
                Err(self.failure(rc))
            };
        }
    }

    fn insert_row(&self, row: &[Value]) -> Result<(), Failure> {
        let statement = self.insert;
        for (i, value) in row.iter().enumerate() {
            let at = (i + 1) as c_int;
            let length = match value {
                Value::Text(text) => text.len(),
                Value::Blob(bytes) => bytes.len(),
                Value::Null | Value::Int(_) => 0,
            };
            if length > c_int::MAX as usize {
                // SAFETY: the insert statement.
                unsafe { (self.api.clear_bindings)(statement) };
                return Err((
                    SQLITE_TOOBIG,
                    "a value is too large for the job store".into(),
                ));
            }
            // SAFETY: the insert statement, a parameter index, and values SQLite copies.
            let rc = unsafe {
                match value {
                    Value::Null => (self.api.bind_null)(statement, at),
                    Value::Int(n) => (self.api.bind_int64)(statement, at, *n),
                    Value::Text(s) => (self.api.bind_text)(
                        statement,
                        at,
                        s.as_ptr().cast(),
                        s.len() as c_int,
                        SQLITE_TRANSIENT,
                    ),
                    Value::Blob(b) => (self.api.bind_blob)(
                        statement,
                        at,
                        b.as_ptr().cast(),
                        b.len() as c_int,
                        SQLITE_TRANSIENT,
                    ),
                }
            };
            if rc != SQLITE_OK {
                // SAFETY: as above.
                unsafe { (self.api.clear_bindings)(statement) };
                return Err(self.failure(rc));
            }
        }
        let done = self.run(statement);
        // SAFETY: as above: no value outlives the row.
        unsafe { (self.api.clear_bindings)(statement) };
        done
    }

    /// The rows of `openings` in one transaction (one statement in autocommit when
    /// there is one row): committed, or nothing written.
    fn write(&self, openings: &[&Submission]) -> Result<(), Failure> {
        if self.in_transaction() {
            // A rollback that failed left one open: a row written in it now would be
            // answered before any commit. Try again; fail rather than write in it.
            let _ = self.run(self.rollback);
            if self.in_transaction() {
                return Err((
                    SQLITE_ERROR,
                    "the job store's writer could not end a failed transaction".into(),
                ));
            }
        }
        let rows: Vec<&Vec<Value>> = openings.iter().flat_map(|s| s.rows.iter()).collect();
        if rows.len() == 1 {
            return self.insert_row(rows[0]);
        }
        self.run(self.begin)?;
        let written = rows
            .iter()
            .try_for_each(|row| self.insert_row(row))
            .and_then(|()| self.run(self.commit));
        if written.is_err() && self.in_transaction() {
            let _ = self.run(self.rollback); // should this fail, the next write tries again first
        }
        written
    }

    fn in_transaction(&self) -> bool {
        // SAFETY: an open connection.
        unsafe { (self.api.get_autocommit)(self.db) == 0 }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: each statement was prepared on this connection (finalize ignores
        // NULL), and the connection is closed once, after them.
        unsafe {
            for statement in [
                self.insert,
                self.begin,
                self.commit,
                self.rollback,
                self.checkpoint,
            ] {
                (self.api.finalize)(statement);
            }
            if !self.db.is_null() {
                (self.api.close_v2)(self.db);
            }
        }
    }
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
struct Submission {
    rows: Vec<Vec<Value>>,
    answer: Arc<Answer>,
}

impl Drop for Submission {
    /// A submission dropped unanswered (the writer panicked) fails rather than leave
    /// its caller waiting for ever.
    fn drop(&mut self) {
        if !self.answer.ready.load(Ordering::Acquire) {
            self.answer.settle(Some((
                SQLITE_ABORT,
                "the job store's writer stopped".into(),
            )));
        }
    }
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Submission>,
    /// A batch taken and not yet answered.
    writing: bool,
    closing: bool,
    finished: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// The writer waits here for submissions; `close` waits here for the writer.
    changed: Condvar,
    /// A checkpoint to run after the next commit (`checkpoint_soon`).
    checkpoint: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A writer that panicked left nothing half-changed that matters here.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The writer: takes what is queued, writes it, answers it; until closed and drained.
fn write_all(connection: Connection, shared: Arc<Shared>) {
    loop {
        let batch: Vec<Submission> = {
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
            queue.waiting.drain(..).collect()
        };
        let all: Vec<&Submission> = batch.iter().collect();
        match connection.write(&all) {
            Ok(()) => batch.iter().for_each(|s| s.answer.settle(None)),
            Err(failure) if batch.len() == 1 || STORE_WIDE.contains(&(failure.0 & 0xFF)) => {
                batch
                    .iter()
                    .for_each(|s| s.answer.settle(Some(failure.clone())));
            }
            // A row at fault: each alone, so that only that one fails.
            Err(_) => batch
                .iter()
                .for_each(|s| s.answer.settle(connection.write(&[s]).err())),
        }
        if shared.checkpoint.swap(false, Ordering::AcqRel) {
            let _ = connection.run(connection.checkpoint); // the store's checkpointer logs its own failures
        }
        lock(&shared.queue).writing = false;
        shared.changed.notify_all();
    }
    drop(connection); // closed before `close` hears that the writer finished
    lock(&shared.queue).finished = true;
    shared.changed.notify_all();
}

/// A record writer of the core on one SQLite file (module docs).
#[pyclass(frozen, module = "jobgate._core")]
pub struct SqliteWriter {
    shared: Arc<Shared>,
}

/// One submission's commit: `wait()` returns None once committed, or the failure as
/// (SQLite's extended result code, its message).
#[pyclass(frozen, module = "jobgate._core")]
pub struct Opening {
    answer: Arc<Answer>,
}

fn values(row: &Bound<'_, PyAny>) -> PyResult<Vec<Value>> {
    let row = row
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err("a row is a tuple"))?;
    row.iter()
        .map(|value| {
            if value.is_none() {
                Ok(Value::Null)
            } else if let Ok(text) = value.cast::<PyString>() {
                Ok(Value::Text(text.to_str()?.to_owned()))
            } else if let Ok(bytes) = value.cast::<PyBytes>() {
                Ok(Value::Blob(bytes.as_bytes().to_vec()))
            } else if value.cast::<PyInt>().is_ok() {
                Ok(Value::Int(value.extract::<i64>()?))
            } else {
                Err(PyTypeError::new_err(
                    "a row's values are None, int, str or bytes",
                ))
            }
        })
        .collect()
}

#[pymethods]
impl SqliteWriter {
    /// A writer on the SQLite file at `path` (its schema in place), running `insert`
    /// for each row, with `pragmas` run first on its connection; `python_sqlite` is the
    /// path of Python's `_sqlite3` module. Raises RuntimeError when that module does
    /// not use a loaded libsqlite3.so.0 to share, ValueError when the file cannot be
    /// opened or a statement prepared.
    #[new]
    fn new(path: &str, insert: &str, pragmas: Vec<String>, python_sqlite: &str) -> PyResult<Self> {
        let api = Api::loaded(python_sqlite).map_err(PyRuntimeError::new_err)?;
        let connection =
            Connection::open(api, path, insert, &pragmas).map_err(|(code, message)| {
                PyValueError::new_err(format!("{message} (SQLite code {code})"))
            })?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
            checkpoint: AtomicBool::new(false),
        });
        let writer = shared.clone();
        std::thread::Builder::new()
            .name("jobgate-sqlite".into())
            .spawn(move || write_all(connection, writer))
            .map_err(|e| {
                PyRuntimeError::new_err(format!(
                    "the job store's writer could not start a thread: {e}"
                ))
            })?;
        Ok(Self { shared })
    }

    /// Queues `rows` (tuples of the insert's parameters) to be opened together; returns
    /// at once. After `close`, the opening fails with SQLITE_ABORT.
    fn submit(&self, rows: &Bound<'_, PyList>) -> PyResult<Opening> {
        let rows = rows
            .iter()
            .map(|row| values(&row))
            .collect::<PyResult<Vec<_>>>()?;
        let answer = Arc::new(Answer::default());
        let mut queue = lock(&self.shared.queue);
        if queue.closing {
            answer.settle(Some((SQLITE_ABORT, "the job store is closing".into())));
        } else {
            queue.waiting.push_back(Submission {
                rows,
                answer: answer.clone(),
            });
            self.shared.changed.notify_all();
        }
        Ok(Opening { answer })
    }

    /// Has the writer run `PRAGMA wal_checkpoint(PASSIVE)` after its next commit.
    fn checkpoint_soon(&self) {
        self.shared.checkpoint.store(true, Ordering::Release);
    }

    /// Writes what is queued, then stops; waits at most `wait` seconds for that.
    /// Whether everything handed to it was written (or failed) by then.
    fn close(&self, py: Python<'_>, wait: f64) -> bool {
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

impl Drop for SqliteWriter {
    /// A writer dropped unclosed ends its thread once it has written what it holds.
    fn drop(&mut self) {
        lock(&self.shared.queue).closing = true;
        self.shared.changed.notify_all();
    }
}

#[pymethods]
impl Opening {
    /// Waits for the commit (without the GIL, unless it is in already): None once
    /// committed, else (extended result code, message).
    fn wait(&self, py: Python<'_>) -> Option<(i32, String)> {
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
