//! The request log's writer (`jobgate._core.LineSink`): the RPC threads hand over each
//! line's parts and go on; a thread of the core stamps, joins and writes them, and
//! never takes the GIL to do it. A writer thread in Python held the GIL for every
//! line it joined and every write it made, time the RPC threads and grpcio's poller
//! then waited for.
//!
//! Bounded: past `capacity` lines waiting, a line is refused (the caller counts it
//! dropped), as is a line the stream refuses (counted through the next handover, or
//! `close`). A stream that is not a file (a test's buffer) is written through its
//! Python `write` and `flush`, with the GIL: the only time this thread takes it.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A line's parts as handed over: stamped and joined by the writer.
enum Line {
    /// `{"ts":"<created>",` + `head` + `,` + the fields object without its `{`.
    Spliced {
        created: f64,
        head: Vec<u8>,
        fields: Vec<u8>,
    },
    /// A line encoded whole by the caller (fields that needed bounding).
    Whole(Vec<u8>),
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Line>,
    closing: bool,
    finished: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// The writer waits here for a first line; `close` waits here for the writer.
    changed: Condvar,
    /// Lines the stream refused, not yet reported to the caller.
    lost: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A writer that panicked left nothing half-changed that matters here.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

enum Target {
    /// A file descriptor of the caller's, duplicated: this sink closes its copy.
    File(File),
    /// A Python binary stream: `write(bytes)`, then `flush()`.
    Stream(Py<PyAny>),
}

/// The request log's lines, written by a thread of the core.
#[pyclass(module = "jobgate._core", frozen)]
pub struct LineSink {
    shared: Arc<Shared>,
    capacity: usize,
}

#[pymethods]
impl LineSink {
    /// A sink writing to `fd` (a descriptor it now owns), or else to `stream` (a
    /// Python binary stream), at most `write_bytes` a write (whole lines; a longer line
    /// alone), after letting lines gather `gather_seconds` from the first.
    #[new]
    #[pyo3(signature = (*, fd=None, stream=None, capacity, write_bytes, gather_seconds))]
    fn new(
        fd: Option<i32>,
        stream: Option<Py<PyAny>>,
        capacity: usize,
        write_bytes: usize,
        gather_seconds: f64,
    ) -> PyResult<Self> {
        let target = match (fd, stream) {
            (Some(fd), None) if fd >= 0 => Target::File(owned_file(fd)),
            (None, Some(stream)) => Target::Stream(stream),
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "a LineSink writes to a file descriptor or to a stream, one of them",
                ))
            }
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
            lost: AtomicU64::new(0),
        });
        let writer = Writer {
            shared: Arc::clone(&shared),
            target,
            write_bytes: write_bytes.max(1),
            gather: Duration::from_secs_f64(gather_seconds.max(0.0)),
        };
        std::thread::Builder::new()
            .name("jobgate-request-log".into())
            .spawn(move || writer.run())
            .map_err(|e| {
                pyo3::exceptions::PyOSError::new_err(format!(
                    "the request log's writer could not start: {e}"
                ))
            })?;
        Ok(LineSink { shared, capacity })
    }

    /// Hands over a line: `created` (time.time()), `head` (its level, logger and
    /// message, as `"level":…,"logger":…,"message":…`) and `fields` (a JSON object of
    /// at least one member). Returns how many lines to count as dropped: this one if
    /// `capacity` are already waiting or the sink is closed, and those the stream
    /// refused since the last handover.
    fn line(&self, created: f64, head: &[u8], fields: &[u8]) -> u64 {
        let refused = self.push(Line::Spliced {
            created,
            head: head.to_vec(),
            fields: fields.to_vec(),
        });
        refused + self.shared.lost.swap(0, Ordering::Relaxed)
    }

    /// Hands over a line encoded whole (without its newline); returns as `line` does.
    fn whole(&self, line: &[u8]) -> u64 {
        let refused = self.push(Line::Whole(line.to_vec()));
        refused + self.shared.lost.swap(0, Ordering::Relaxed)
    }

    /// Lines handed over and not yet taken by the writer.
    fn pending(&self) -> usize {
        self.shared.lock().lines.len()
    }

    /// Writes every line handed over so far and ends the writer, waiting at most
    /// `timeout` seconds (a stream that takes nothing cannot hold a stopping server);
    /// returns the lines the stream refused that no handover has reported yet.
    fn close(&self, py: Python<'_>, timeout: f64) -> u64 {
        py.detach(|| {
            let deadline = Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
            let mut queue = self.shared.lock();
            queue.closing = true;
            self.shared.changed.notify_all();
            while !queue.finished {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                queue = self
                    .shared
                    .changed
                    .wait_timeout(queue, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        });
        self.shared.lost.swap(0, Ordering::Relaxed)
    }
}

impl LineSink {
    /// Queues `line`: 0, or 1 when it is refused.
    fn push(&self, line: Line) -> u64 {
        let mut queue = self.shared.lock();
        if queue.closing || queue.lines.len() >= self.capacity {
            return 1;
        }
        let was_empty = queue.lines.is_empty();
        queue.lines.push_back(line);
        drop(queue);
        if was_empty {
            self.shared.changed.notify_all(); // the writer waits only on an empty queue
        }
        0
    }
}

impl Drop for LineSink {
    /// A sink dropped unclosed still writes what it was handed, then its writer ends.
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.changed.notify_all();
    }
}

/// The descriptor the caller hands over (an `os.dup` of its stream's), owned from now
/// on: closed when the writer ends.
#[allow(unsafe_code)] // taking ownership of a raw descriptor (lib.rs denies unsafe elsewhere)
fn owned_file(fd: i32) -> File {
    // SAFETY: the caller made `fd` for this sink alone and never uses or closes it.
    unsafe { File::from_raw_fd(fd) }
}

struct Writer {
    shared: Arc<Shared>,
    target: Target,
    write_bytes: usize,
    gather: Duration,
}

impl Writer {
    fn run(mut self) {
        loop {
            let mut queue = self.shared.lock();
            while queue.lines.is_empty() && !queue.closing {
                queue = self
                    .shared
                    .changed
                    .wait(queue)
                    .unwrap_or_else(|e| e.into_inner());
            }
            if queue.lines.is_empty() {
                queue.finished = true;
                self.shared.changed.notify_all();
                return;
            }
            if !queue.closing {
                // One wake-up and a few writes for a busy server's many lines.
                drop(queue);
                std::thread::sleep(self.gather);
                queue = self.shared.lock();
            }
            let lines = std::mem::take(&mut queue.lines);
            drop(queue);
            self.write(lines);
        }
    }

    /// Writes `lines` in chunks of whole lines, at most `write_bytes` a chunk unless a
    /// line alone is longer: a write of at most PIPE_BUF bytes to a pipe is never
    /// interleaved with another process's (`serve --workers N` share their stderr).
    fn write(&mut self, lines: VecDeque<Line>) {
        let mut chunk: Vec<u8> = Vec::with_capacity(self.write_bytes);
        let mut in_chunk = 0u64;
        let mut stamp = Stamp::default();
        for line in lines {
            let start = chunk.len();
            match line {
                Line::Spliced {
                    created,
                    head,
                    fields,
                } => {
                    chunk.extend_from_slice(b"{\"ts\":\"");
                    chunk.extend_from_slice(stamp.of(created).as_bytes());
                    chunk.extend_from_slice(b"\",");
                    chunk.extend_from_slice(&head);
                    chunk.push(b',');
                    chunk.extend_from_slice(fields.get(1..).unwrap_or_default());
                }
                Line::Whole(bytes) => chunk.extend_from_slice(&bytes),
            }
            chunk.push(b'\n');
            if chunk.len() > self.write_bytes && start > 0 {
                let next = chunk.split_off(start);
                self.flush(&chunk, in_chunk);
                chunk = next;
                in_chunk = 0;
            }
            in_chunk += 1;
        }
        if !chunk.is_empty() {
            self.flush(&chunk, in_chunk);
        }
    }

    fn flush(&mut self, bytes: &[u8], lines: u64) {
        let written = match &mut self.target {
            Target::File(file) => file.write_all(bytes).is_ok(),
            Target::Stream(stream) => Python::attach(|py| {
                let stream = stream.bind(py);
                stream
                    .call_method1("write", (PyBytes::new(py, bytes),))
                    .and_then(|_| stream.call_method0("flush"))
                    .is_ok()
            }),
        };
        if !written {
            // stderr closed or gone: the lines are lost, and counted.
            self.shared.lost.fetch_add(lines, Ordering::Relaxed);
        }
    }
}

/// RFC 3339 UTC timestamps to the millisecond, as `logs.timestamp` writes them (the
/// millisecond of `round(created * 1e6) // 1000`): lines come several to a
/// millisecond, and each millisecond is formatted once.
#[derive(Default)]
struct Stamp {
    milli: Option<i64>,
    text: String,
}

impl Stamp {
    fn of(&mut self, created: f64) -> &str {
        let milli = ((created * 1e6).round_ties_even() as i64).div_euclid(1000);
        if self.milli != Some(milli) {
            self.text = chrono::DateTime::from_timestamp_millis(milli)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
                .unwrap_or_else(|| "1970-01-01T00:00:00.000Z".into());
            self.milli = Some(milli);
        }
        &self.text
    }
}
