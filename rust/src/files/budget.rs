//! The work one reading of a package may do: the bytes it inflates, bounded by
//! `limits.max_package_ratio` times the package's own size (past a floor every package
//! is allowed), and the time until the caller's deadline.
//!
//! Owns the count and its refusals; must not read any format (the readers charge it as
//! they go: the tar stream as it inflates, zip members as they inflate, and every gzip
//! member or zstd frame as it starts). Memory is bounded elsewhere; this bounds CPU.

use std::cell::Cell;
use std::fmt;
use std::io::{self, Read};
use std::time::Instant;

use crate::limits::{PackageLimits, PACKAGE_RATIO_FLOOR};

/// What starting a gzip member or a zstd frame is charged, in inflated bytes: each sets
/// up a decoder afresh, which costs as much as inflating tens of KiB, so a package of
/// empty frames is bounded like one that inflates.
pub const STREAM_START_COST: u64 = 64 << 10;

/// Why reading stopped before the package's end. It travels inside `io::Error` through
/// the decompressors and member readers, as a phrase that follows "the package <path>".
#[derive(Debug)]
pub(crate) enum Stop {
    /// Past the inflate budget: the package is refused (`limits.size`).
    Budget(String),
    /// Past the caller's deadline: no verdict.
    Deadline(String),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Budget(why) | Stop::Deadline(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Stop {}

/// The work spent reading one package, against its budget and deadline. Shared by
/// reference among the readers of one package, read by one thread.
#[derive(Debug)]
pub struct Meter {
    spent: Cell<u64>,
    budget: u64,
    ratio: u64,
    package_len: u64,
    deadline: Option<Instant>,
}

impl Meter {
    /// The meter of a package of `package_len` bytes, read until `deadline` at most.
    pub fn new(limits: &PackageLimits, package_len: u64, deadline: Option<Instant>) -> Self {
        Meter {
            spent: Cell::new(0),
            budget: limits.inflate_budget(package_len),
            ratio: limits.max_ratio,
            package_len,
            deadline,
        }
    }

    /// The bytes the package may inflate to.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Counts `n` more bytes of work; an error once past the budget or the deadline.
    pub fn charge(&self, n: u64) -> io::Result<()> {
        let spent = self.spent.get().saturating_add(n);
        self.spent.set(spent);
        if spent > self.budget {
            return Err(io::Error::other(Stop::Budget(self.over(
                format_args!("inflates past {} bytes", self.budget),
                "before inflating the rest",
            ))));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(io::Error::other(Stop::Deadline(format!(
                "was not read before the deadline: reading stopped after {spent} bytes inflated"
            ))));
        }
        Ok(())
    }

    /// Why `declared` bytes of members are refused before one is inflated, if they are
    /// over the budget.
    pub fn refuse_declared(&self, declared: u64) -> Option<String> {
        (declared > self.budget).then(|| {
            self.over(
                format_args!("declares {declared} bytes of members"),
                "before inflating them",
            )
        })
    }

    fn over(&self, what: fmt::Arguments<'_>, when: &str) -> String {
        format!(
            "{what}, more than limits.max_package_ratio = {} times its {} bytes allows (any package may inflate to {PACKAGE_RATIO_FLOOR} bytes); refused {when}",
            self.ratio, self.package_len
        )
    }
}

/// A reader whose every byte is charged to a meter.
pub struct Metered<'m, R> {
    inner: R,
    meter: &'m Meter,
}

impl<'m, R> Metered<'m, R> {
    pub fn new(inner: R, meter: &'m Meter) -> Self {
        Metered { inner, meter }
    }
}

impl<R: Read> Read for Metered<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.meter.charge(n as u64)?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn stop(e: &io::Error) -> &Stop {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<Stop>())
            .expect("a Stop")
    }

    #[test]
    fn a_package_inflates_to_its_ratio_or_the_floor_whichever_is_more() {
        let limits = PackageLimits::default();
        let small = Meter::new(&limits, 1000, None);
        assert_eq!(small.budget(), PACKAGE_RATIO_FLOOR);
        assert!(small.charge(PACKAGE_RATIO_FLOOR).is_ok());
        let e = small.charge(1).unwrap_err();
        let Stop::Budget(why) = stop(&e) else {
            panic!("{e}")
        };
        assert_eq!(
            why,
            &format!("inflates past {PACKAGE_RATIO_FLOOR} bytes, more than limits.max_package_ratio = 100 times its 1000 bytes allows (any package may inflate to {PACKAGE_RATIO_FLOOR} bytes); refused before inflating the rest")
        );
        let large = Meter::new(&limits, 1 << 30, None);
        assert_eq!(large.budget(), 100 << 30);
        assert!(large.refuse_declared(100 << 30).is_none());
        assert!(large
            .refuse_declared((100 << 30) + 1)
            .is_some_and(|why| why.starts_with(
                "declares 107374182401 bytes of members, more than limits.max_package_ratio = 100"
            )));
        // a ratio that overflows saturates rather than wrapping to a small budget
        let huge = PackageLimits {
            max_ratio: u64::MAX,
            ..limits
        };
        assert_eq!(Meter::new(&huge, 3, None).budget(), u64::MAX);
    }

    #[test]
    fn a_passed_deadline_stops_the_next_charge() {
        let limits = PackageLimits::default();
        let passed = Meter::new(&limits, 10, Some(Instant::now()));
        let e = passed.charge(0).unwrap_err();
        assert!(matches!(stop(&e), Stop::Deadline(why) if why.contains("deadline")));
        let later = Meter::new(
            &limits,
            10,
            Instant::now().checked_add(Duration::from_secs(3600)),
        );
        assert!(later.charge(512).is_ok());
        let mut read = Vec::new();
        Metered::new(&[7u8; 300][..], &later)
            .read_to_end(&mut read)
            .unwrap();
        assert_eq!((read.len(), later.spent.get()), (300, 812));
    }
}
