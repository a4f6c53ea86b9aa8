//! How much one input may hold: a document's bytes and depth, a report's violations,
//! a package's members. Plain numbers with their defaults, read by the parser, the
//! report and the package readers alike.
//!
//! A leaf of the crate: imports nothing from it, so any module may use it.

/// The largest document read by default, in bytes.
pub const DEFAULT_MAX_BYTES: usize = 1024 * 1024;
/// The deepest nesting read by default.
pub const DEFAULT_MAX_DEPTH: usize = 64;
/// The deepest nesting a configuration may allow: the walkers recurse per level.
pub const MAX_DEPTH_CEILING: usize = 1024;

/// Size and depth limits of one validator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_bytes: usize,
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: DEFAULT_MAX_BYTES,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// How large one report may grow, so that it stays linear in its document and always
/// fits a response: at most `max_violations` violations and `max_bytes` of fields and
/// messages; what is left out is counted in one `limits.violations` violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportLimits {
    pub max_violations: usize,
    pub max_bytes: usize,
}

pub const DEFAULT_MAX_VIOLATIONS: usize = 1000;
/// Well under gRPC's default 4 MiB message, with room for the request's other reports.
pub const DEFAULT_MAX_REPORT_BYTES: usize = 1 << 20;

impl Default for ReportLimits {
    fn default() -> Self {
        ReportLimits {
            max_violations: DEFAULT_MAX_VIOLATIONS,
            max_bytes: DEFAULT_MAX_REPORT_BYTES,
        }
    }
}

/// How many bytes a package may inflate to per byte of its own, by default: source
/// trees compress 3 to 6 times and JSON-heavy data about 30, while a compression bomb
/// inflates thousands of times.
pub const DEFAULT_MAX_PACKAGE_RATIO: u64 = 100;
/// What any package may inflate to whatever its ratio: a small package inflates far
/// past its size (tar pads every member to 512 bytes and its end to 10 KiB), and this
/// much costs milliseconds to read.
pub const PACKAGE_RATIO_FLOOR: u64 = 16 << 20;

/// The memory the package cache (`files::package_cache`) may hold by default, about.
pub const DEFAULT_PACKAGE_CACHE_BYTES: usize = 64 << 20;

/// Bounds on packages and on each supporting file read from a root.
#[derive(Clone, Copy, Debug)]
pub struct PackageLimits {
    /// The most bytes all members may hold together, inflated.
    pub max_bytes: u64,
    pub max_members: usize,
    /// The most bytes a package may inflate to per byte of its own, past
    /// `PACKAGE_RATIO_FLOOR`: what bounds the work of reading it, as `max_bytes` bounds
    /// what it may hold.
    pub max_ratio: u64,
    /// The bundle document is a document: held in memory, so bounded as one.
    pub max_bundle_bytes: u64,
    /// Memory for packages read once and served again (`files::package_cache`); 0 is off.
    pub cache_bytes: usize,
}

impl Default for PackageLimits {
    fn default() -> Self {
        PackageLimits {
            max_bytes: 1 << 30,
            max_members: 100_000,
            max_ratio: DEFAULT_MAX_PACKAGE_RATIO,
            max_bundle_bytes: DEFAULT_MAX_BYTES as u64,
            cache_bytes: DEFAULT_PACKAGE_CACHE_BYTES,
        }
    }
}

impl PackageLimits {
    /// The bytes a package of `package_len` bytes may inflate to: its tar stream, or
    /// its zip members together.
    pub fn inflate_budget(&self, package_len: u64) -> u64 {
        self.max_ratio
            .saturating_mul(package_len)
            .max(PACKAGE_RATIO_FLOOR)
    }
}
