//! The SQLite store's record writer (`jobgate._core.SqliteWriter`): the queue, the
//! batches and the answers are `record_writer`'s; here, the connection.
//!
//! The same SQLite library as Python's `sqlite3`: the copy the process has loaded as
//! `libsqlite3.so.0`, found without loading another (`RTLD_NOLOAD`), and used only if
//! Python's `_sqlite3` resolves SQLite's functions to it. Two copies in one process
//! would each keep their own table of the file's POSIX locks, and a connection of one
//! closing the file would drop the other's locks. Where Python's SQLite is built in
//! rather than loaded, there is no writer, and the store opens every record itself.
//! A failure is answered with SQLite's extended result code and message.

#![allow(unsafe_code)] // calls into the process's own libsqlite3 (lib.rs denies it elsewhere)

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple};

use super::record_writer::{loaded, symbol, Code, Failure, Opening, Store, Submission, Writer};

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

impl Api {
    /// The library Python's `sqlite3` loaded, or why there is none to use.
    /// `python_sqlite` is the path of Python's `_sqlite3` module: the library is used
    /// only if that module resolves SQLite's functions to it (a Python whose SQLite is
    /// built in resolves them to its own copy, even with libsqlite3.so.0 loaded by
    /// some other module).
    fn loaded(python_sqlite: &str) -> Result<Api, String> {
        let module = CString::new(python_sqlite)
            .map_err(|_| "the path of Python's _sqlite3 holds a NUL".to_string())?;
        let (Some(library), Some(python)) = (loaded(c"libsqlite3.so.0"), loaded(&module)) else {
            return Err(
                "this Python's sqlite3 has not loaded libsqlite3.so.0 (its SQLite is built in)"
                    .into(),
            );
        };
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
        let path = CString::new(path)
            .map_err(|_| (Code::Sqlite(21), "the store's path holds a NUL".to_string()))?;
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
            return (Code::Sqlite(rc), "the job store could not be opened".into());
        }
        // SAFETY: an open connection; errmsg's text is copied before the next call.
        unsafe {
            let message = CStr::from_ptr((self.api.errmsg)(self.db))
                .to_string_lossy()
                .into_owned();
            (Code::Sqlite((self.api.extended_errcode)(self.db)), message)
        }
    }

    fn prepare(&self, sql: &str) -> Result<Handle, Failure> {
        let text = CString::new(sql)
            .map_err(|_| (Code::Sqlite(21), "a statement holds a NUL".to_string()))?;
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
                    Code::Sqlite(SQLITE_TOOBIG),
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
    fn write_rows(&self, openings: &[&Submission<Vec<Value>>]) -> Result<(), Failure> {
        if self.in_transaction() {
            // A rollback that failed left one open: a row written in it now would be
            // answered before any commit. Try again; fail rather than write in it.
            let _ = self.run(self.rollback);
            if self.in_transaction() {
                return Err((
                    Code::Sqlite(SQLITE_ERROR),
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

impl Store for Connection {
    type Row = Vec<Value>;

    fn write(&mut self, batch: &[&Submission<Vec<Value>>]) -> Result<(), Failure> {
        self.write_rows(batch)
    }

    fn store_wide(failure: &Failure) -> bool {
        matches!(failure.0, Code::Sqlite(code) if STORE_WIDE.contains(&(code & 0xFF)))
    }

    fn unwritten(why: &str) -> Failure {
        (Code::Sqlite(SQLITE_ABORT), why.into())
    }

    /// A checkpoint the store asked for (`checkpoint_soon`).
    fn after_batch(&mut self) {
        let _ = self.run(self.checkpoint); // the store's checkpointer logs its own failures
    }
}

/// A record writer of the core on one SQLite file (module docs).
#[pyclass(frozen, module = "jobgate._core")]
pub struct SqliteWriter {
    writer: Writer<Vec<Value>>,
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
        Ok(Self {
            writer: Writer::start(connection, "jobgate-sqlite")?,
        })
    }

    /// Queues `rows` (tuples of the insert's parameters) to be opened together; returns
    /// at once. After `close`, the opening fails with SQLITE_ABORT.
    fn submit(&self, rows: &Bound<'_, PyList>) -> PyResult<Opening> {
        let rows = rows
            .iter()
            .map(|row| values(&row))
            .collect::<PyResult<Vec<_>>>()?;
        let bytes = rows
            .iter()
            .flatten()
            .map(|value| match value {
                Value::Text(text) => text.len(),
                Value::Blob(bytes) => bytes.len(),
                Value::Null | Value::Int(_) => 8,
            })
            .sum();
        Ok(self.writer.submit(rows, bytes))
    }

    /// Has the writer run `PRAGMA wal_checkpoint(PASSIVE)` after its next commit.
    fn checkpoint_soon(&self) {
        self.writer.after_next_batch();
    }

    /// Writes what is queued, then stops; waits at most `wait` seconds for that.
    /// Whether everything handed to it was written (or failed) by then.
    fn close(&self, py: Python<'_>, wait: f64) -> bool {
        self.writer.close(py, wait)
    }
}
