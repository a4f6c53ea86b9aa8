//! The PostgreSQL store's record writer (`jobgate._core.PostgresWriter`): the queue,
//! the batches and the answers are `record_writer`'s; here, the connection. A batch
//! is one statement in autocommit (the store's `jobgate_open_group`: the projects'
//! advisory locks, the records, their first transitions and the GPUs charged), so one
//! round trip and one commit, durable when it returns as any of the store's commits.
//!
//! The connection is libpq's: the copy psycopg loaded (found without loading another,
//! `RTLD_NOLOAD`), opened with the conninfo the store's own connections are opened
//! with, so that host, TLS, service files and timeouts are the same. A connection lost
//! fails its batch (SQLSTATE 08006) and is opened again before the next one. A
//! failure is answered with its SQLSTATE and libpq's message.

#![allow(unsafe_code)] // calls into the process's own libpq (lib.rs denies it elsewhere)

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CStr, CString};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::record_writer::{loaded, symbol, Code, Failure, Opening, Store, Submission, Writer};

type Handle = *mut c_void;
type NoticeProcessor = Option<unsafe extern "C" fn(*mut c_void, *const c_char)>;

/// What becomes of the server's notices on the writer's connection: nothing. libpq's
/// own would print them on stderr, among the service's JSON log lines; a failure the
/// writer meets comes back with its batch, and the store logs it there.
unsafe extern "C" fn ignore_notice(_arg: *mut c_void, _message: *const c_char) {}

const CONNECTION_OK: c_int = 0;
const PGRES_TUPLES_OK: c_int = 2;
const PQTRANS_IDLE: c_int = 0;
const PG_DIAG_SQLSTATE: c_int = b'C' as c_int;
/// The name the batch statement is prepared under on the writer's connection.
const STATEMENT: &CStr = c"jobgate_open_later";
/// The SQLSTATE of a connection lost or never made (connection_failure).
const CONNECTION_FAILURE: &str = "08006";
/// The SQLSTATE a submission gets when the writer will not write it: jobgate's own
/// (class JG, which PostgreSQL never uses).
const UNWRITTEN: &str = "JG000";
/// jobgate's SQLSTATE for a session that does not read text as UTF-8.
const NOT_UTF8: &str = "JG001";

/// The few libpq functions the writer calls, from the library the process loaded.
struct Api {
    connectdb: unsafe extern "C" fn(*const c_char) -> Handle,
    status: unsafe extern "C" fn(Handle) -> c_int,
    consume_input: unsafe extern "C" fn(Handle) -> c_int,
    set_notice_processor:
        unsafe extern "C" fn(Handle, NoticeProcessor, *mut c_void) -> NoticeProcessor,
    parameter_status: unsafe extern "C" fn(Handle, *const c_char) -> *const c_char,
    transaction_status: unsafe extern "C" fn(Handle) -> c_int,
    reset: unsafe extern "C" fn(Handle),
    finish: unsafe extern "C" fn(Handle),
    error_message: unsafe extern "C" fn(Handle) -> *const c_char,
    prepare:
        unsafe extern "C" fn(Handle, *const c_char, *const c_char, c_int, *const u32) -> Handle,
    exec_prepared: unsafe extern "C" fn(
        Handle,
        *const c_char,
        c_int,
        *const *const c_char,
        *const c_int,
        *const c_int,
        c_int,
    ) -> Handle,
    result_status: unsafe extern "C" fn(Handle) -> c_int,
    result_error_field: unsafe extern "C" fn(Handle, c_int) -> *const c_char,
    result_error_message: unsafe extern "C" fn(Handle) -> *const c_char,
    clear: unsafe extern "C" fn(Handle),
}

impl Api {
    /// The libpq loaded at `path` (by psycopg), or why there is none to use.
    fn loaded(path: &str) -> Result<Api, String> {
        let path = CString::new(path).map_err(|_| "libpq's path holds a NUL".to_string())?;
        let library = loaded(&path).ok_or("this process has not loaded that libpq")?;
        // SAFETY: each symbol is looked up by its documented name and C signature.
        unsafe {
            Ok(Api {
                connectdb: symbol(library, c"PQconnectdb")?,
                status: symbol(library, c"PQstatus")?,
                consume_input: symbol(library, c"PQconsumeInput")?,
                set_notice_processor: symbol(library, c"PQsetNoticeProcessor")?,
                parameter_status: symbol(library, c"PQparameterStatus")?,
                transaction_status: symbol(library, c"PQtransactionStatus")?,
                reset: symbol(library, c"PQreset")?,
                finish: symbol(library, c"PQfinish")?,
                error_message: symbol(library, c"PQerrorMessage")?,
                prepare: symbol(library, c"PQprepare")?,
                exec_prepared: symbol(library, c"PQexecPrepared")?,
                result_status: symbol(library, c"PQresultStatus")?,
                result_error_field: symbol(library, c"PQresultErrorField")?,
                result_error_message: symbol(library, c"PQresultErrorMessage")?,
                clear: symbol(library, c"PQclear")?,
            })
        }
    }
}

/// `text` (libpq's, NUL-terminated, possibly NULL) as an owned string.
fn owned(text: *const c_char) -> Option<String> {
    // SAFETY: libpq returns NULL or a NUL-terminated string it keeps until the next call.
    (!text.is_null()).then(|| {
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .trim_end()
            .to_owned()
    })
}

/// A record's row for the batch statement: its project (whose advisory lock the batch
/// takes) and its JSON object, as `jobgate_open_group` reads a row.
pub struct Row {
    project: String,
    json: Vec<u8>,
}

/// The writer's own connection, with its statement prepared once per session.
struct Connection {
    api: Api,
    conn: Handle,
    statement: CString,
    prepared: bool,
}

// SAFETY: the connection is only ever used by one thread at a time: its writer thread,
// or the constructor before that thread starts.
unsafe impl Send for Connection {}

impl Connection {
    fn open(api: Api, conninfo: &str, statement: &str) -> Result<Connection, Failure> {
        let conninfo = CString::new(conninfo).map_err(|_| {
            (
                Code::Sqlstate(CONNECTION_FAILURE.into()),
                "the store's URL holds a NUL".into(),
            )
        })?;
        let statement = CString::new(statement).map_err(|_| {
            (
                Code::Sqlstate("42601".into()),
                "the statement holds a NUL".into(),
            )
        })?;
        // SAFETY: a NUL-terminated conninfo; the connection is finished on drop.
        let conn = unsafe { (api.connectdb)(conninfo.as_ptr()) };
        if !conn.is_null() {
            // SAFETY: a connection; the processor is kept across PQreset.
            unsafe { (api.set_notice_processor)(conn, Some(ignore_notice), std::ptr::null_mut()) };
        }
        let mut connection = Connection {
            api,
            conn,
            statement,
            prepared: false,
        };
        connection.ready()?;
        Ok(connection)
    }

    fn connected(&self) -> bool {
        // SAFETY: PQstatus takes NULL (CONNECTION_BAD) or a connection.
        !self.conn.is_null() && unsafe { (self.api.status)(self.conn) } == CONNECTION_OK
    }

    /// The connection's own failure (none made, or lost), as a connection failure.
    fn lost(&self) -> Failure {
        // SAFETY: PQerrorMessage takes a connection (never NULL here: checked first).
        let message = if self.conn.is_null() {
            None
        } else {
            owned(unsafe { (self.api.error_message)(self.conn) })
        };
        (
            Code::Sqlstate(CONNECTION_FAILURE.into()),
            message.unwrap_or_else(|| "no connection to the job store".into()),
        )
    }

    /// What `result` says: Ok for `expected`, else its SQLSTATE and message (a lost
    /// connection's when there is no result or no SQLSTATE). Clears `result`.
    fn outcome(&self, result: Handle, expected: c_int) -> Result<(), Failure> {
        if result.is_null() {
            return Err(self.lost());
        }
        // SAFETY: a result of this connection, cleared once, after its fields are copied.
        let failure = unsafe {
            let status = (self.api.result_status)(result);
            let failure = (status != expected).then(|| {
                (
                    owned((self.api.result_error_field)(result, PG_DIAG_SQLSTATE)),
                    owned((self.api.result_error_message)(result)),
                )
            });
            (self.api.clear)(result);
            failure
        };
        match failure {
            None => Ok(()),
            Some((Some(state), message)) if self.connected() => Err((
                Code::Sqlstate(state),
                message.unwrap_or_else(|| "the job store refused the statement".into()),
            )),
            Some(_) => Err(self.lost()),
        }
    }

    /// Connected (again, if the connection was lost) and the statement prepared.
    fn ready(&mut self) -> Result<(), Failure> {
        if self.connected() {
            // What the server sent while the connection sat idle (that it is ending the
            // session, an idle timeout): read now, so that a connection gone is opened
            // again before a batch is sent on it, not found gone by the batch.
            // Twice: the first read takes what was sent, the second finds the end of
            // the stream after it. Neither blocks.
            // SAFETY: a connection; nothing is in flight on it between batches.
            unsafe {
                if (self.api.consume_input)(self.conn) == 1 {
                    (self.api.consume_input)(self.conn);
                }
            }
        }
        if !self.connected() {
            if self.conn.is_null() {
                return Err(self.lost());
            }
            // SAFETY: a connection of this library; PQreset reconnects with its conninfo.
            unsafe { (self.api.reset)(self.conn) };
            self.prepared = false;
            if !self.connected() {
                return Err(self.lost());
            }
        }
        if !self.prepared {
            self.speaks_utf8()?;
            // SAFETY: a connection, and NUL-terminated name and statement.
            let result = unsafe {
                (self.api.prepare)(
                    self.conn,
                    STATEMENT.as_ptr(),
                    self.statement.as_ptr(),
                    2,
                    std::ptr::null(),
                )
            };
            self.outcome(result, 1)?; // PGRES_COMMAND_OK
            self.prepared = true;
        }
        Ok(())
    }

    /// Whether the session reads what it is sent as UTF-8, as the rows are (the store
    /// asks for it in the conninfo; a server that ignored that would store text
    /// garbled, charged to projects of other names).
    fn speaks_utf8(&self) -> Result<(), Failure> {
        // SAFETY: a connection, and a NUL-terminated parameter name.
        let encoding =
            owned(unsafe { (self.api.parameter_status)(self.conn, c"client_encoding".as_ptr()) });
        match encoding.as_deref() {
            Some("UTF8") => Ok(()),
            other => Err((
                Code::Sqlstate(NOT_UTF8.into()),
                format!(
                    "the job store's writer needs client_encoding UTF8, not {}",
                    other.unwrap_or("none")
                ),
            )),
        }
    }

    /// The batch statement's two parameters: the advisory locks of the rows' projects
    /// (each once, in sorted order, as every transaction of the store takes them) and
    /// the rows, both JSON texts.
    fn parameters(batch: &[&Submission<Row>]) -> Result<(CString, CString), Failure> {
        let projects: BTreeSet<&str> = batch
            .iter()
            .flat_map(|s| s.rows.iter().map(|r| r.project.as_str()))
            .collect();
        let locks: Vec<serde_json::Value> = projects
            .into_iter()
            .map(|p| serde_json::json!({ "p": p }))
            .collect();
        let locks = serde_json::to_string(&locks).expect("a JSON value serializes");
        let mut rows = Vec::with_capacity(
            2 + batch
                .iter()
                .flat_map(|s| &s.rows)
                .map(|r| r.json.len() + 1)
                .sum::<usize>(),
        );
        rows.push(b'[');
        for (i, row) in batch.iter().flat_map(|s| &s.rows).enumerate() {
            if i > 0 {
                rows.push(b',');
            }
            rows.extend_from_slice(&row.json);
        }
        rows.push(b']');
        let refused = |_| {
            (
                Code::Sqlstate("22021".into()),
                "a row holds a NUL byte".to_string(),
            )
        };
        Ok((
            CString::new(locks).map_err(refused)?,
            CString::new(rows).map_err(refused)?,
        ))
    }
}

impl Store for Connection {
    type Row = Row;

    fn write(&mut self, batch: &[&Submission<Row>]) -> Result<(), Failure> {
        self.ready()?;
        let (locks, rows) = Self::parameters(batch)?;
        let values = [locks.as_ptr(), rows.as_ptr()];
        // SAFETY: a connection, its prepared statement, and two NUL-terminated text
        // parameters that outlive the call.
        let result = unsafe {
            (self.api.exec_prepared)(
                self.conn,
                STATEMENT.as_ptr(),
                2,
                values.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                0,
            )
        };
        let written = self.outcome(result, PGRES_TUPLES_OK);
        // One statement in autocommit leaves no transaction open; should one be (a
        // session changed behind the store's back), the connection is not trusted.
        // SAFETY: a connection.
        if self.connected() && unsafe { (self.api.transaction_status)(self.conn) } != PQTRANS_IDLE {
            // SAFETY: as above; the next batch reconnects.
            unsafe { (self.api.reset)(self.conn) };
            self.prepared = false;
            return Err((
                Code::Sqlstate(CONNECTION_FAILURE.into()),
                "the job store's writer found a transaction left open".into(),
            ));
        }
        written
    }

    /// Connection failures (08), insufficient resources (53: a full disk, too many
    /// connections), operator intervention (57: a server shutting down, a statement
    /// cancelled), system errors (58), internal errors (XX), a read-only server
    /// (25006), a lock not had in time (55P03: written alone, each would wait it out
    /// again) and the writer's own refusals (JG): every row would fail alike.
    fn store_wide(failure: &Failure) -> bool {
        match &failure.0 {
            Code::Sqlstate(state) => {
                ["08", "53", "57", "58", "XX", "JG"]
                    .iter()
                    .any(|class| state.starts_with(class))
                    || state == "25006"
                    || state == "55P03"
            }
            Code::Sqlite(_) => true,
        }
    }

    fn unwritten(why: &str) -> Failure {
        (Code::Sqlstate(UNWRITTEN.into()), why.into())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if !self.conn.is_null() {
            // SAFETY: a connection of this library, finished once.
            unsafe { (self.api.finish)(self.conn) };
        }
    }
}

/// A record writer of the core on one PostgreSQL database (module docs).
#[pyclass(frozen, module = "jobgate._core")]
pub struct PostgresWriter {
    writer: Writer<Row>,
}

fn row(row: &Bound<'_, PyAny>) -> PyResult<Row> {
    let refused = || PyTypeError::new_err("a row is a tuple (project: str, row: bytes)");
    let row = row.cast::<PyTuple>().map_err(|_| refused())?;
    if row.len() != 2 {
        return Err(refused());
    }
    let project = row.get_item(0)?;
    let json = row.get_item(1)?;
    Ok(Row {
        project: project
            .cast::<PyString>()
            .map_err(|_| refused())?
            .to_str()?
            .to_owned(),
        json: json
            .cast::<PyBytes>()
            .map_err(|_| refused())?
            .as_bytes()
            .to_vec(),
    })
}

#[pymethods]
impl PostgresWriter {
    /// A writer on the database `conninfo` names (its schema in place), running
    /// `statement` (two parameters: the locks, the rows, as JSON texts) for each batch;
    /// `libpq` is the path of the libpq this process loaded. Raises RuntimeError when
    /// that libpq is not loaded, ValueError when the connection cannot be made or the
    /// statement prepared (with libpq's message, which may name the server).
    #[new]
    fn new(py: Python<'_>, conninfo: &str, statement: &str, libpq: &str) -> PyResult<Self> {
        let api = Api::loaded(libpq).map_err(PyRuntimeError::new_err)?;
        let connection = py
            .detach(|| Connection::open(api, conninfo, statement))
            .map_err(|(code, message)| {
                PyValueError::new_err(format!("{message} (SQLSTATE {code})"))
            })?;
        Ok(Self {
            writer: Writer::start(connection, "jobgate-postgres")?,
        })
    }

    /// Queues `rows` ((project, the row's JSON object as bytes) each) to be opened
    /// together; returns at once. After `close`, the opening fails with SQLSTATE JG000.
    fn submit(&self, rows: &Bound<'_, PyList>) -> PyResult<Opening> {
        let rows = rows.iter().map(|r| row(&r)).collect::<PyResult<Vec<_>>>()?;
        let bytes = rows.iter().map(|r| r.project.len() + r.json.len()).sum();
        Ok(self.writer.submit(rows, bytes))
    }

    /// Writes what is queued, then stops; waits at most `wait` seconds for that.
    /// Whether everything handed to it was written (or failed) by then.
    fn close(&self, py: Python<'_>, wait: f64) -> bool {
        self.writer.close(py, wait)
    }
}
