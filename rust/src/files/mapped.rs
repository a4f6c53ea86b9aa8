//! Large files hashed from a read-only mapping, guarded against truncation.
//!
//! Reading a file copies it out of the page cache; hashing a mapping of it does not, and
//! that copy is what keeps SHA-256 of a large file read under OpenSSL's rate. Hashed
//! straight through, though, a mapping makes the hash wait on memory at every page, so
//! each page is prefetched a little ahead of the hash (`hash_ahead`). The
//! mapping gains only where the kernel maps the page cache in large folios (a 2 MiB
//! folio in one fault); where it maps a few pages at a time (small folios: a tmpfs, a
//! kernel or file system without large folios, a file written in small pieces), setting
//! up and tearing down that many page-table entries costs more than the copy. So the
//! mapping measures itself as it hashes: once its faults show small pieces, the caller
//! reads the rest of the file instead (`Mapped::read_on`).
//!
//! A mapped file truncated by its producer while it is hashed raises SIGBUS on the
//! pages past its new end, which would kill the service. So the process gets one SIGBUS
//! handler (installed the first time a file is mapped) and a table of the address ranges
//! being hashed: a fault inside one maps zero pages over the rest of that range, so the
//! hash runs on, and marks the range truncated. The digest of such a file is discarded,
//! as is that of a file whose fstat moved while it was hashed, and the caller reads the
//! file instead (`hashing::sha256_file`): a file that changed is reported exactly as
//! the read path reports it. A fault anywhere else goes to the handler that was there
//! before ours (Python's faulthandler, Rust's stack-overflow handler) or, if there was
//! none, kills the process as it would have.
//!
//! Owns the mapping, the handler and every `unsafe` they need; must not open files
//! (callers open regular files only, non-blocking) nor judge what it hashes.

#![allow(unsafe_code)] // mmap, reading the mapping and the SIGBUS handler (lib.rs denies it elsewhere)

use std::ffi::{c_int, c_void};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use rustix::fs::{fstat, FileType, Stat};
use sha2::{Digest, Sha256};

/// Files from 2 MiB are mapped; smaller ones are read. Below it no folio can be mapped
/// whole by a page-table entry of its own (2 MiB on x86-64), so setting a mapping up,
/// faulting it in and tearing it down costs more than the copy saves (BENCHMARKS.md).
pub const THRESHOLD: u64 = 2 << 20;

/// Past `THRESHOLD` bytes, a mapping that faulted once for every `FINE` bytes or less
/// is mapped a few pages at a time (the kernel's fault-around maps 64 KiB of small
/// folios per fault), and the rest of the file is read; large folios fault once per
/// 2 MiB, with now and then a stretch of small ones.
const FINE: u64 = 128 << 10;

/// Hashed (and fed to the sink) a mebibyte at a time, so a truncated range stops early.
const CHUNK: usize = 1 << 20;

/// Within a chunk the hash takes `STEP` bytes at a time and first asks the CPU for the
/// first cache line of each page `AHEAD` bytes further on. Hashed straight through, a
/// mapping ran at ~0.8x of SHA-256 on bytes already in cache (an Intel Xeon with the
/// SHA extensions: the hash waits on memory at the start of every page, where the
/// hardware's own prefetcher stops); one prefetch per page ahead starts the
/// prefetcher there before the hash arrives, and the same bytes hash at ~0.95x. More
/// prefetches per page, or prefetching further ahead, measured slower (BENCHMARKS.md).
const STEP: usize = 16 << 10;
const AHEAD: usize = 32 << 10;

/// Ranges hashed at once; a thread that finds none free reads its file instead.
const SLOTS: usize = 64;

/// `JOBGATE_MAPPED_HASHING=0` reads every file (the benchmark's comparison, and a way
/// out on a file system whose mappings misbehave).
fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        !matches!(
            std::env::var("JOBGATE_MAPPED_HASHING").as_deref(),
            Ok("0" | "off" | "false" | "no")
        )
    })
}

/// What hashing a file from a mapping gave: `hasher` has had its first `hashed` bytes
/// (and the sink too), the whole file when `read_on` is `None`. Otherwise the kernel
/// set the mapping up a few pages at a time, and `read_on` is the file's fstat from
/// before it was mapped: the rest is read on into `hasher`, and the file read again
/// from its start if it `moved` from that meanwhile.
pub struct Mapped {
    pub hasher: Sha256,
    pub hashed: u64,
    pub read_on: Option<Stat>,
}

/// The SHA-256 of `file`, hashed from a mapping (all of it, or the part before the
/// mapping proved fine-grained), every chunk also given to `sink`; `None` when it must
/// be read instead: smaller than `THRESHOLD` or larger than `limit`, not mappable, the
/// handler not ours, or the file changed while it was hashed. The file's offset is
/// left where it was.
pub fn sha256(file: &File, limit: u64, mut sink: Option<&mut dyn Write>) -> Option<Mapped> {
    let before = fstat(file).ok()?;
    let size = u64::try_from(before.st_size).ok()?;
    if size < THRESHOLD
        || size > limit
        || FileType::from_raw_mode(before.st_mode) != FileType::RegularFile
        || !enabled()
        || !guarded()
    {
        return None;
    }
    let map = Mapping::new(file, usize::try_from(size).ok()?)?;
    // Declared after `map`, so dropped (the range retired) before it is unmapped.
    let active = Active::claim(&map)?;
    let mut hasher = Sha256::new();
    let start = faults();
    let mut hashed = 0u64;
    let bytes = map.bytes();
    for (at, chunk) in (0..).step_by(CHUNK).zip(bytes.chunks(CHUNK)) {
        hash_ahead(&mut hasher, bytes, at, chunk.len());
        if let Some(sink) = sink.as_mut() {
            sink.write_all(chunk).ok()?;
        }
        if active.truncated() {
            return None;
        }
        hashed += chunk.len() as u64;
        if hashed >= THRESHOLD && hashed < size && fine_grained(start, hashed) {
            return Some(Mapped {
                hasher,
                hashed,
                read_on: Some(before),
            });
        }
    }
    let truncated = active.truncated();
    drop(active);
    drop(map);
    if truncated || moved(&before, file) {
        return None;
    }
    Some(Mapped {
        hasher,
        hashed,
        read_on: None,
    })
}

/// Hashes `len` bytes of `bytes` from `at`, `STEP` at a time, prefetching one line of
/// each page `AHEAD` bytes beyond (never past `bytes`).
fn hash_ahead(hasher: &mut Sha256, bytes: &[u8], at: usize, len: usize) {
    let page = page_size();
    let end = at + len;
    let mut from = at;
    while from < end {
        let to = (from + STEP).min(end);
        let mut ahead = (from + AHEAD).next_multiple_of(page);
        while ahead < (to + AHEAD).min(bytes.len()) {
            prefetch(&bytes[ahead]);
            ahead += page;
        }
        hasher.update(&bytes[from..to]);
        from = to;
    }
}

/// Asks the CPU to bring the cache line of `byte` in; a hint, which never faults (a page
/// not mapped yet, or past a truncated file's end, is skipped) and changes nothing.
#[inline(always)]
fn prefetch(byte: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads nothing into the program and raises no fault; SSE, which
    // it needs, is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            byte as *const u8 as *const i8,
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = byte;
}

/// Whether the file was resized or written since `before` (or cannot be looked at).
pub fn moved(before: &Stat, file: &File) -> bool {
    let Ok(after) = fstat(file) else {
        return true;
    };
    (before.st_size, before.st_mtime, before.st_mtime_nsec)
        != (after.st_size, after.st_mtime, after.st_mtime_nsec)
        || (before.st_ctime, before.st_ctime_nsec) != (after.st_ctime, after.st_ctime_nsec)
}

/// The page faults this thread has taken (which hashing a mapping takes on it alone).
fn faults() -> Option<u64> {
    // SAFETY: getrusage only fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        (libc::getrusage(libc::RUSAGE_THREAD, &mut usage) == 0).then_some(usage)
    }?;
    u64::try_from(usage.ru_minflt + usage.ru_majflt).ok()
}

/// Whether the mapping faulted once per `FINE` bytes or more often while `hashed`
/// bytes of it were hashed, since `start` faults.
fn fine_grained(start: Option<u64>, hashed: u64) -> bool {
    match (start, faults()) {
        (Some(start), Some(now)) => now.saturating_sub(start) > hashed / FINE,
        _ => false,
    }
}

/// A read-only shared mapping of a whole file, unmapped when dropped.
struct Mapping {
    ptr: *mut c_void,
    /// The file's size when mapped.
    len: usize,
    /// `len` rounded up to whole pages: what the kernel mapped.
    span: usize,
}

impl Mapping {
    fn new(file: &File, len: usize) -> Option<Mapping> {
        let page = page_size();
        let span = len.checked_add(page - 1)? & !(page - 1);
        // SAFETY: a new read-only mapping at an address the kernel picks (no MAP_FIXED),
        // so it replaces nothing; `file` is an open regular file and `len` > 0.
        let ptr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: advice on our own mapping; it changes readahead, never the contents.
        // Read once from start to end: readahead ahead of the faults, pages behind them
        // may go. A file system that ignores it is hashed all the same.
        unsafe { libc::madvise(ptr, span, libc::MADV_SEQUENTIAL) };
        Some(Mapping { ptr, len, span })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping holds `len` readable bytes until `drop` unmaps it, and the
        // slice cannot outlive `self`. A page past the file's end, if it is truncated
        // meanwhile, faults into `on_sigbus`, which maps zeros there while the range is
        // active (it is, from `Active::claim` to its drop, and the slice is only read in
        // between). The bytes may change under us (the file written by another process,
        // zeros mapped in): they are only read into the hasher, and a digest of bytes
        // that changed is discarded (`sha256`), as memmap2 and ripgrep do.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped (and the zero pages the handler may
        // have put inside it); no slice of it is alive, `bytes` borrows `self`.
        unsafe { libc::munmap(self.ptr, self.span) };
    }
}

/// One entry of the table the handler reads: a range being hashed (`end` 0 when free)
/// and whether a fault was met in it. Only atomics, so the handler reads it safely.
struct Range {
    taken: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    truncated: AtomicBool,
}

static RANGES: [Range; SLOTS] = [const {
    Range {
        taken: AtomicBool::new(false),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        truncated: AtomicBool::new(false),
    }
}; SLOTS];

/// A range of `RANGES` published for the handler while a mapping is hashed. A table
/// shared by all threads, not a thread-local: reading a thread-local of a library
/// loaded by `dlopen` may allocate, which a signal handler must never do.
struct Active {
    range: &'static Range,
}

impl Active {
    fn claim(map: &Mapping) -> Option<Active> {
        let range = RANGES.iter().find(|r| {
            r.taken
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })?;
        range.truncated.store(false, Ordering::SeqCst);
        range.start.store(map.ptr as usize, Ordering::SeqCst);
        range
            .end
            .store(map.ptr as usize + map.span, Ordering::SeqCst);
        // The handler runs on this thread, between two of its instructions: keep the
        // compiler from moving reads of the mapping above the stores that publish it.
        compiler_fence(Ordering::SeqCst);
        Some(Active { range })
    }

    fn truncated(&self) -> bool {
        compiler_fence(Ordering::SeqCst);
        self.range.truncated.load(Ordering::SeqCst)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        compiler_fence(Ordering::SeqCst);
        self.range.end.store(0, Ordering::SeqCst);
        self.range.start.store(0, Ordering::SeqCst);
        self.range.taken.store(false, Ordering::Release);
    }
}

static PAGE: AtomicUsize = AtomicUsize::new(0);

fn page_size() -> usize {
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf only reads a constant of the system.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .ok()
                .filter(|p| p.is_power_of_two())
                .unwrap_or(4096);
            PAGE.store(page, Ordering::Relaxed);
            page
        }
        page => page,
    }
}

/// The SIGBUS action there was before ours, for faults outside our ranges; null until
/// ours is installed. Each install leaks one (a few dozen bytes): the handler may read
/// it at any instant, so it is never freed.
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
/// Whether ours was ever installed; held while installing.
static INSTALLED: Mutex<bool> = Mutex::new(false);

/// The current SIGBUS action.
fn current() -> Option<libc::sigaction> {
    // SAFETY: a query (no new action) into a zeroed struct of the right type.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(libc::SIGBUS, ptr::null(), &mut now) == 0).then_some(now)
    }
}

fn is_ours(action: &libc::sigaction) -> bool {
    action.sa_sigaction == on_sigbus as *const () as libc::sighandler_t
}

/// Whether our handler is the one installed, installing it if needed: checked before
/// every mapping, since something may have replaced it since (Python's
/// `faulthandler.enable()`, say). Installed the first time, chaining to what was
/// there; later only over the default or ignored action. A handler that replaced ours
/// may chain back to it (faulthandler does): installing ours over it again would make
/// each chain to the other forever, so then files are read instead.
fn guarded() -> bool {
    if current().is_some_and(|now| is_ours(&now)) {
        return true;
    }
    let mut installed_once = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(now) = current() else {
        return false;
    };
    if is_ours(&now) {
        return true;
    }
    if *installed_once && now.sa_sigaction != libc::SIG_DFL && now.sa_sigaction != libc::SIG_IGN {
        return false;
    }
    page_size();
    PREVIOUS.store(Box::into_raw(Box::new(now)), Ordering::SeqCst);
    // SAFETY: installs a handler that only touches atomics and async-signal-safe
    // system calls (mmap, sigaction, raise), with SA_SIGINFO as it expects.
    let replaced = unsafe {
        let mut ours: libc::sigaction = std::mem::zeroed();
        ours.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut ours.sa_mask);
        let mut replaced: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &ours, &mut replaced) != 0 {
            return false;
        }
        replaced
    };
    // Another library may have installed its handler since `current()`: chain to it.
    if (replaced.sa_sigaction, replaced.sa_flags) != (now.sa_sigaction, now.sa_flags) {
        PREVIOUS.store(Box::into_raw(Box::new(replaced)), Ordering::SeqCst);
    }
    *installed_once = true;
    true
}

/// Faults met inside a range being hashed, since the process started.
pub static FAULTS: AtomicUsize = AtomicUsize::new(0);

/// The process's SIGBUS handler while ours is installed.
extern "C" fn on_sigbus(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    if info.is_null() {
        // Called as a plain handler, by one installed after ours that chains to it.
        return chain(signal, info, context, 0);
    }
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t; si_addr is the
    // faulting address when si_code > 0 (raised by the kernel, not sent by a process).
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code > 0 {
        for range in &RANGES {
            let (start, end) = (
                range.start.load(Ordering::SeqCst),
                range.end.load(Ordering::SeqCst),
            );
            if start <= addr && addr < end {
                if zero_fill(addr, end) {
                    range.truncated.store(true, Ordering::SeqCst);
                    FAULTS.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                break;
            }
        }
    }
    chain(signal, info, context, code);
}

/// Maps zero pages from the page of `addr` to `end`, so the faulting read (and those
/// after it) complete; whether that worked.
fn zero_fill(addr: usize, end: usize) -> bool {
    let from = addr & !(PAGE.load(Ordering::Relaxed) - 1);
    // SAFETY: [from, end) lies in a mapping this process made and is hashing (its range
    // is active until its owner retires it, then unmaps the whole range whatever is
    // mapped there), so MAP_FIXED replaces nothing else. mmap is a bare system call on
    // Linux, safe in a handler; errno is kept for the code the fault interrupted.
    unsafe {
        let errno = *libc::__errno_location();
        let zeros = libc::mmap(
            from as *mut c_void,
            end - from,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        );
        *libc::__errno_location() = errno;
        zeros != libc::MAP_FAILED
    }
}

/// A SIGBUS that is not ours, passed to the action that was there before ours.
fn chain(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void, code: c_int) {
    // SAFETY: PREVIOUS is null or a leaked Box, never freed.
    let previous = unsafe { PREVIOUS.load(Ordering::SeqCst).as_ref() };
    match previous {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            // SAFETY: a handler function installed with these flags, called as the
            // kernel would have called it, on this thread, in this signal's context.
            unsafe {
                if p.sa_flags & libc::SA_SIGINFO != 0 {
                    let handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                        std::mem::transmute(p.sa_sigaction);
                    handler(signal, info, context);
                } else {
                    let handler: extern "C" fn(c_int) = std::mem::transmute(p.sa_sigaction);
                    handler(signal);
                }
            }
        }
        // A SIGBUS sent by a process, ignored as it was before.
        Some(p) if p.sa_sigaction == libc::SIG_IGN && code <= 0 => {}
        _ => {
            // Default (or ignored, which the kernel does not do for a fault): put it back
            // and let the signal take its course. A fault happens again when the handler
            // returns and meets it; a signal sent by a process is raised again.
            // SAFETY: sigaction and raise are async-signal-safe; the action is a copy.
            unsafe {
                let mut action: libc::sigaction = match previous {
                    Some(p) => *p,
                    None => std::mem::zeroed(),
                };
                if previous.is_none() {
                    action.sa_sigaction = libc::SIG_DFL;
                    libc::sigemptyset(&mut action.sa_mask);
                }
                libc::sigaction(signal, &action, ptr::null_mut());
                if code <= 0 {
                    libc::raise(signal);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::hashing::{sha256_bytes, sha256_file, sha256_reader};
    use std::io::Seek;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn content(size: usize) -> Vec<u8> {
        (0..size)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
            .collect()
    }

    #[test]
    fn a_large_file_hashes_as_it_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big.bin");
        let data = content((3 << 20) + 123);
        std::fs::write(&path, &data).unwrap();
        let mut file = File::open(&path).unwrap();
        let (sha256, size, sink) = sha256_file(&mut file, u64::MAX, || Some(Vec::new())).unwrap();
        assert_eq!((&sha256, size), (&sha256_bytes(&data), data.len() as u64));
        assert_eq!(sink.unwrap(), data);
        let read = sha256_reader(&mut File::open(&path).unwrap(), u64::MAX, None).unwrap();
        assert_eq!((sha256, size), read);
        // Small files and files over the limit are left to the read path.
        assert!(super::sha256(&file, data.len() as u64 - 1, None).is_none());
        std::fs::write(&path, &data[..1000]).unwrap();
        assert!(super::sha256(&File::open(&path).unwrap(), u64::MAX, None).is_none());
    }

    #[test]
    fn hashing_ahead_hashes_every_byte_once() {
        // Sizes on either side of a page, a step, the prefetch distance and a chunk,
        // hashed in chunks as `sha256` does: the prefetches stay inside the bytes.
        for size in [
            1,
            4095,
            4096,
            STEP - 1,
            STEP,
            STEP + 1,
            AHEAD + STEP + 4097,
            CHUNK - 1,
            CHUNK,
            CHUNK + AHEAD - 1,
            2 * CHUNK + 12_345,
        ] {
            let data = content(size);
            let mut hasher = Sha256::new();
            for (at, chunk) in (0..).step_by(CHUNK).zip(data.chunks(CHUNK)) {
                hash_ahead(&mut hasher, &data, at, chunk.len());
            }
            assert_eq!(hasher.finalize(), Sha256::digest(&data), "{size} bytes");
        }
        // A mapped file of exactly `THRESHOLD` bytes ends on a step and a page.
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("exact.bin");
        let data = content(THRESHOLD as usize);
        std::fs::write(&path, &data).unwrap();
        let mut file = File::open(&path).unwrap();
        let (sha256, size, _) = sha256_file(&mut file, u64::MAX, || None::<Vec<u8>>).unwrap();
        assert_eq!((sha256, size), (sha256_bytes(&data), THRESHOLD));
    }

    /// Written 4 KiB at a time, so its page cache is small folios the kernel maps a few
    /// pages per fault: hashed from the mapping for `THRESHOLD` bytes, then read on.
    fn written_in_small_pieces(path: &std::path::Path, data: &[u8]) {
        let mut file = File::create(path).unwrap();
        for piece in data.chunks(4096) {
            file.write_all(piece).unwrap();
        }
    }

    #[test]
    fn a_file_mapped_a_few_pages_at_a_time_is_read_on() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big.bin");
        let data = content((5 << 20) + 123);
        written_in_small_pieces(&path, &data);
        let mut sink = Vec::new();
        match super::sha256(&File::open(&path).unwrap(), u64::MAX, Some(&mut sink)) {
            Some(Mapped {
                hashed,
                read_on: Some(_),
                ..
            }) => assert_eq!(hashed, THRESHOLD),
            Some(Mapped { read_on: None, .. }) => {
                panic!("hashed whole from a fine-grained mapping")
            }
            None => panic!("not mapped"),
        }
        assert_eq!(sink, data[..THRESHOLD as usize]);
        let mut file = File::open(&path).unwrap();
        let (sha256, size, sink) = sha256_file(&mut file, u64::MAX, || Some(Vec::new())).unwrap();
        assert_eq!((sha256, size), (sha256_bytes(&data), data.len() as u64));
        assert_eq!(sink.unwrap(), data);
        // The limit counts the mapped part too.
        let mut file = File::open(&path).unwrap();
        let limit = data.len() as u64 - 1;
        let err = sha256_file(&mut file, limit, || None::<std::io::Sink>).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    /// Rewrites a byte the mapping already hashed, and grows the file, when the first
    /// bytes read after the mapped part reach it.
    struct Tamper {
        path: std::path::PathBuf,
        seen: usize,
        once: Arc<AtomicBool>,
        bytes: Vec<u8>,
    }

    impl Write for Tamper {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.seen += buf.len();
            if self.seen > THRESHOLD as usize && !self.once.swap(true, Ordering::SeqCst) {
                let mut f = std::fs::OpenOptions::new().write(true).open(&self.path)?;
                f.write_all(b"!")?;
                f.seek(std::io::SeekFrom::End(0))?;
                f.write_all(b"grown")?;
            }
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Changed while the rest of it was read after the mapped part: read again from the
    /// start, as the file now is, never the old part's digest with the new rest.
    #[test]
    fn a_file_changed_while_read_on_is_read_again() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big.bin");
        let data = content((3 << 20) + 123);
        written_in_small_pieces(&path, &data);
        let once = Arc::new(AtomicBool::new(false));
        let new_sink = || {
            Some(Tamper {
                path: path.clone(),
                seen: 0,
                once: once.clone(),
                bytes: Vec::new(),
            })
        };
        let mut file = File::open(&path).unwrap();
        let (sha256, size, sink) = sha256_file(&mut file, u64::MAX, new_sink).unwrap();
        assert!(once.load(Ordering::SeqCst));
        let now = std::fs::read(&path).unwrap();
        assert_eq!(&now[..1], b"!");
        assert_eq!((sha256, size), (sha256_bytes(&now), now.len() as u64));
        assert_eq!(sink.unwrap().bytes, now);
    }

    /// A producer truncates the file at a random instant of each hash: never a crash,
    /// and the answer is either the whole file's (truncated after the hash) or what
    /// reading the truncated file gives, never a digest of zero pages.
    #[test]
    fn a_file_truncated_while_hashed_is_read_again() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big.bin");
        let size = 4 << 20;
        let data = Arc::new(content(size));
        let whole = (sha256_bytes(&data), size as u64);
        let faults = FAULTS.load(Ordering::Relaxed);
        let started = Instant::now();
        let (mut rounds, mut after) = (0u64, 0);
        while rounds < 16 || (FAULTS.load(Ordering::Relaxed) == faults && rounds < 200) {
            rounds += 1;
            std::fs::write(&path, &*data).unwrap();
            let cut = (rounds as usize * 777_777) % (size / 2);
            // From at once to after the hash ends (tens of ms unoptimized, a few here).
            let delay = Duration::from_micros(rounds * 7_000 % 90_000);
            let producer = {
                let path = path.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                    f.set_len(cut as u64).unwrap();
                })
            };
            let mut file = File::open(&path).unwrap();
            let got = sha256_file(&mut file, u64::MAX, || None::<std::io::Sink>).unwrap();
            producer.join().unwrap();
            let got = (got.0, got.1);
            let short = (sha256_bytes(&data[..cut]), cut as u64);
            assert!(got == whole || got == short, "round {rounds}: {got:?}");
            after += usize::from(got == whole);
        }
        eprintln!(
            "{rounds} rounds, {after} truncated after the hash, {} faults, {:?}",
            FAULTS.load(Ordering::Relaxed) - faults,
            started.elapsed()
        );
        assert!(
            FAULTS.load(Ordering::Relaxed) > faults,
            "no truncation met a mapped hash in {rounds} rounds ({:?})",
            started.elapsed()
        );
    }

    /// Truncated and grown again without pause, by another thread, while hashed over
    /// and over: the process survives and every hash returns.
    #[test]
    fn a_file_truncated_repeatedly_never_crashes() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big.bin");
        let size = 8 << 20;
        std::fs::write(&path, content(size)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let producer = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    f.set_len(i * 65_537 % (size as u64 / 2)).unwrap();
                    f.set_len(size as u64).unwrap();
                }
            })
        };
        for _ in 0..100 {
            let mut file = File::open(&path).unwrap();
            let (_, read, _) = sha256_file(&mut file, u64::MAX, || None::<std::io::Sink>).unwrap();
            assert!(read <= size as u64);
        }
        stop.store(true, Ordering::Relaxed);
        producer.join().unwrap();
    }

    /// Run in a child process (it ends by a fault): a SIGBUS outside the ranges being
    /// hashed reaches the handler installed before ours, or kills as the default does.
    #[test]
    fn a_fault_elsewhere_reaches_the_previous_handler() {
        let me = std::env::current_exe().unwrap();
        let run = |previous: &str| {
            Command::new(&me)
                .args([
                    "--exact",
                    "files::mapped::tests::sigbus_child",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env("JOBGATE_SIGBUS_CHILD", previous)
                .output()
                .unwrap()
        };
        let chained = run("handler");
        assert_eq!(chained.status.code(), Some(42), "{chained:?}");
        let default = run("default");
        assert_eq!(default.status.signal(), Some(libc::SIGBUS), "{default:?}");
    }

    extern "C" fn exit_42(_: c_int) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(42) };
    }

    #[test]
    fn sigbus_child() {
        let Ok(previous) = std::env::var("JOBGATE_SIGBUS_CHILD") else {
            return;
        };
        // SAFETY: a test process of its own; the action is a plain function or SIG_DFL.
        unsafe {
            let handler = if previous == "handler" {
                exit_42 as *const () as libc::sighandler_t
            } else {
                libc::SIG_DFL
            };
            libc::signal(libc::SIGBUS, handler);
        }
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big.bin");
        std::fs::write(&path, content(2 << 20)).unwrap();
        // Installs ours over the previous one.
        assert!(sha256(&File::open(&path).unwrap(), u64::MAX, None).is_some());
        // A mapping of our own, not being hashed, read past the file's new end.
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        // SAFETY: this child exists to fault; the mapping is never unmapped.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                2 << 20,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        f.set_len(0).unwrap();
        f.flush().unwrap();
        // SAFETY: the read faults, which is the point.
        let byte = unsafe { ptr::read_volatile((p as *const u8).add(1 << 20)) };
        panic!("read {byte} past the end of a truncated file without a fault");
    }
}
