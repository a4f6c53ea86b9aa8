//! The collector every rule reports through: `Ctx` keeps the violations of one
//! document within the report's limits, and the walk's position in it.
//!
//! There is one way to report: `ctx.report(rule, place, || message)`. The place
//! (`pointer::Place`) and the message are built only when the violation is kept; once
//! the report is full a violation is counted, never written. A violation has its
//! rule's catalogued severity; the few rules whose severity depends on the case say
//! so with `rule.with_severity(…)`.

use crate::pointer::{Path, Place, Segment};
use crate::quota::Claim;
use crate::report::{Collected, Violation};
use crate::rules::Graded;

pub struct Ctx<'i> {
    pub path: Path<'i>,
    pub out: Collected,
    /// What the launch charges to its project, when the quota is judged later
    /// (`quota::charge`).
    pub claim: Option<Claim>,
}

impl<'i> Ctx<'i> {
    pub fn new() -> Self {
        Ctx::with_limits(Default::default())
    }

    pub fn with_limits(limits: crate::limits::ReportLimits) -> Self {
        Ctx {
            path: Path::new(),
            out: Collected::new(limits),
            claim: None,
        }
    }

    /// A violation of `rule` at `place`; `message` says what is wrong and what would
    /// be accepted. Neither is built when the report has no room left.
    #[inline]
    pub fn report(
        &mut self,
        rule: impl Into<Graded>,
        place: impl Place,
        message: impl FnOnce() -> String,
    ) {
        let rule = rule.into();
        if !self.out.has_room() {
            return self.out.skip(rule.severity);
        }
        let field = place.render(&self.path);
        self.out.push(Violation::new(rule, field, message()));
    }

    /// Runs `f` with the walk one step down, at `segment`: a violation `Here` inside
    /// is placed there.
    #[inline]
    pub fn within<R>(
        &mut self,
        segment: impl Into<Segment<'i>>,
        f: impl FnOnce(&mut Self) -> R,
    ) -> R {
        self.path.push(segment.into());
        let result = f(self);
        self.path.pop();
        result
    }
}

impl Default for Ctx<'_> {
    fn default() -> Self {
        Self::new()
    }
}
