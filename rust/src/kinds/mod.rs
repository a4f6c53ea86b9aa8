//! The rules of each kind of document, one module per kind, and the dispatch from a
//! kind to its rules.
//!
//! A kind module owns its shape (the schema layer) and its semantic rules; the large
//! kinds are folders split by concern (`patterns`, `shape`, `document`,
//! `deployment`). `nested` holds what two kinds share. Adding a kind: a variant of
//! `kind::Kind` (its name and how it is detected), a module here with a `check`, and
//! its arm in `check` below; its rules go in the catalogue (`rules`).

pub mod best_rec;
pub mod job_record;
pub mod jobspec;
pub mod nested;
pub mod spec_bundle;

use crate::admission::Admission;
use crate::config::CoreConfig;
use crate::kind::Kind;
use crate::node::Value;
use crate::schema::Ctx;

/// Applies `kind`'s rules to the document at `root`.
pub fn check<'t, 'i>(
    kind: Kind,
    root: Value<'t, 'i>,
    config: &CoreConfig,
    admission: &Admission,
    ctx: &mut Ctx<'i>,
) {
    match kind {
        Kind::JobSpec => jobspec::check(root, config, admission, ctx),
        Kind::SpecBundle => spec_bundle::check(root, config, ctx),
        Kind::JobRecord => job_record::check(root, ctx),
        Kind::BestRec => best_rec::check(root, ctx),
    }
}

#[cfg(test)]
mod tests {
    use crate::schema::{Additional, ObjectShape, Shape};

    /// The walk finds a field by trying the one after the last found first and wrapping
    /// around, which is the first match only while no table names a field twice.
    #[test]
    fn every_table_names_each_field_once() {
        fn shape(s: &Shape, tables: &mut usize) {
            match s {
                Shape::Nullable(inner) => shape(inner, tables),
                Shape::Array { items, .. } => shape(items, tables),
                Shape::Object(obj) => object(obj, tables),
                _ => {}
            }
        }
        fn object(obj: &ObjectShape, tables: &mut usize) {
            *tables += 1;
            for (i, f) in obj.fields.iter().enumerate() {
                assert!(
                    obj.fields[..i].iter().all(|g| g.name != f.name),
                    "{} is named twice",
                    f.name
                );
                shape(&f.shape, tables);
            }
            if let Additional::Values(values) = obj.additional {
                shape(values, tables);
            }
        }
        let mut tables = 0;
        for root in [
            &super::jobspec::shape::JOBSPEC,
            &super::spec_bundle::shape::BUNDLE,
            &super::best_rec::BEST_REC,
            &super::job_record::RECORD,
        ] {
            object(root, &mut tables);
        }
        assert!(tables > 30, "{tables} tables visited");
    }
}
