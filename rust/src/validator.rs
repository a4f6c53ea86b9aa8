//! The compiled validator: one configuration, many documents, any number of threads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;

use crate::config::CoreConfig;
use crate::document;
use crate::kinds::{self, Admission, Kind};
use crate::report::{Report, Severity, Violation};
use crate::schema::Ctx;

/// Immutable once built, so one validator is shared freely across threads.
#[derive(Clone, Debug, Default)]
pub struct Validator {
    pub config: CoreConfig,
}

impl Validator {
    pub fn new(config: CoreConfig) -> Self {
        Validator { config }
    }

    /// Checks one document (JSON or YAML bytes); `kind` overrides detection.
    pub fn check(&self, input: &[u8], kind: Option<Kind>, admission: &Admission) -> Report {
        let result = document::with_document(input, &self.config.limits, |root| {
            let mut ctx = Ctx::new();
            document::duplicate_keys(root, &mut ctx.out);
            let kind = kind.or_else(|| Kind::detect(root));
            match kind {
                Some(k) => kinds::check(k, root, &self.config, admission, &mut ctx),
                None => ctx.out.push(Violation {
                    rule: "kind.unknown",
                    field: String::new(),
                    message: "cannot tell which kind of document this is: no apiVersion (jobspec), transitions (job_record), experiment_id or best (best_rec), or mode, command or network_arch (spec_bundle); pass the kind explicitly".into(),
                    severity: Severity::Error,
                }),
            }
            (kind, ctx.out)
        });
        match result {
            Ok((kind, violations)) => Report::new(kind, violations),
            Err(violation) => Report::new(kind, vec![violation]),
        }
    }

    /// Checks many documents in parallel; `threads` of `None` uses every core.
    pub fn check_many<D: AsRef<[u8]> + Sync>(
        &self,
        inputs: &[D],
        kind: Option<Kind>,
        threads: Option<usize>,
    ) -> Vec<Report> {
        let admission = Admission::default();
        let run = || {
            inputs
                .par_iter()
                .map(|d| self.check(d.as_ref(), kind, &admission))
                .collect()
        };
        match threads {
            Some(1) => inputs
                .iter()
                .map(|d| self.check(d.as_ref(), kind, &admission))
                .collect(),
            Some(n) => pool(n).install(run),
            None => run(),
        }
    }
}

/// Thread pools of a given size, built once and kept.
fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
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
