//! TAO job-record: the published schema (`job_record.schema.json`) plus the record
//! rules: the first transition is PENDING, nothing follows a terminal transition,
//! `terminal_state` agrees with the transitions, timestamps move forward, and no
//! string carries an unredacted credential.

use chrono::{DateTime, FixedOffset};

use crate::node::{quote, Type, Value};

use crate::admission::AdmissionContext;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::pointer::ptr;
use crate::pointer::Here;
use crate::rules::Rule;
use crate::schema::{
    self, array_of, opt, req, str_matching, Additional, ObjectShape, Pattern, Shape, NONEMPTY,
    STRING,
};
use crate::secrets;
use crate::text::safe_segment;

pub const STATES: [&str; 6] = [
    "PENDING", "RUNNING", "COMPLETE", "ERROR", "CANCELED", "UNKNOWN",
];
pub const TERMINAL: [&str; 3] = ["COMPLETE", "ERROR", "CANCELED"];
pub const SOURCES: [&str; 3] = ["agent", "poller", "backend-hook"];

static ID: Pattern = Pattern::new(Rule::SchemaPattern, safe_segment);
static PLATFORM: Pattern = Pattern::new(Rule::SchemaPattern, platform_name);

const NULLABLE_STRING: Shape = Shape::Nullable(&STRING);

static TRANSITION: ObjectShape = ObjectShape::new(
    &[
        req("ts", NONEMPTY),
        req(
            "state",
            Shape::Enum {
                values: &STATES,
                nullable: false,
            },
        ),
        req("message", STRING),
        req(
            "source",
            Shape::Enum {
                values: &SOURCES,
                nullable: false,
            },
        ),
    ],
    Additional::Forbid,
    None,
);

static RECORD: ObjectShape = ObjectShape::new(
    &[
        req("schema_version", Shape::ConstInt(1)),
        req("id", str_matching(&ID)),
        req("platform", str_matching(&PLATFORM)),
        req("backend_ref", NULLABLE_STRING),
        req("image", NONEMPTY),
        req("network_arch", NONEMPTY),
        req("action", NONEMPTY),
        req("results_dir", NONEMPTY),
        req(
            "storage_tier",
            Shape::Enum {
                values: &["A", "B", "C"],
                nullable: false,
            },
        ),
        opt("upload_excludes", array_of(&STRING)),
        req("submitted_at", NONEMPTY),
        req(
            "transitions",
            Shape::Array {
                items: &Shape::Object(&TRANSITION),
                min_items: 1,
                min_items_rule: Rule::SchemaMinItems,
                unique: false,
            },
        ),
        req(
            "terminal_state",
            Shape::Enum {
                values: &TERMINAL,
                nullable: true,
            },
        ),
        opt(
            "terminal_write_by",
            Shape::Enum {
                values: &SOURCES,
                nullable: true,
            },
        ),
        opt(
            "err_class",
            Shape::Enum {
                values: &["ERR_INFRA", "ERR_PROGRAM"],
                nullable: true,
            },
        ),
        opt("retry_of", NULLABLE_STRING),
        opt("parent_job", NULLABLE_STRING),
        req("redacted", Shape::ConstTrue),
    ],
    Additional::Forbid,
    None,
);

/// `^[a-z0-9][a-z0-9-]{0,31}$`: the platform skill's short name in canonical kebab-case.
fn platform_name(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let ok = (1..=32).contains(&b.len())
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!("is not a canonical platform name (lowercase kebab-case, at most 32 characters), e.g. {}", quote(&s.trim().to_lowercase().replace(' ', "-"))))
    }
}

pub fn check<'t, 'i>(root: Value<'t, 'i>, _: &CoreConfig, _: &AdmissionContext, ctx: &mut Ctx<'i>) {
    schema::walk(root, &Shape::Object(&RECORD), ctx);
    transitions(root, ctx);
    secrets_anywhere(root, ctx);
}

fn transitions(root: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let Some(list) = root.get("transitions") else {
        return;
    };
    // The first terminal transition closes the record (what follows is after_terminal);
    // `terminal_state` is judged against the last one.
    let mut terminal: Option<(usize, &str)> = None;
    let mut last_terminal: Option<&str> = None;
    let mut last_ts: Option<(DateTime<FixedOffset>, &str)> = None;
    for (i, t) in list.items().enumerate() {
        let state = t.get_str("state").filter(|s| STATES.contains(s));
        if let Some(state) = state {
            if i == 0 && state != "PENDING" {
                ctx.report(Rule::TaoRecordFirstState, ptr!["transitions", "0", "state"], || format!("the first transition is {state}; a record opens with PENDING, written before launch"));
            }
            let is_terminal = TERMINAL.contains(&state);
            if let Some((at, prev)) = terminal {
                ctx.report(Rule::TaoRecordAfterTerminal, ptr!["transitions", i, "state"], || format!("a {state} transition follows the terminal {prev} at transitions/{at}; a terminal record takes no further transitions"));
            } else if is_terminal {
                terminal = Some((i, state));
            }
            if is_terminal {
                last_terminal = Some(state);
            }
        }
        if let Some(ts) = t.get_str("ts") {
            if let Ok(parsed) = DateTime::parse_from_rfc3339(ts) {
                if let Some((prev, prev_raw)) = last_ts {
                    if parsed < prev {
                        ctx.report(Rule::TaoRecordTsOrder, ptr!["transitions", i, "ts"], || format!("{} is earlier than the previous transition's {}; timestamps go backwards", quote(ts), quote(prev_raw)));
                    }
                }
                last_ts = Some((parsed, ts));
            }
        }
    }
    let Some(declared) = root.get("terminal_state") else {
        return;
    };
    let declared_state = match declared.ty() {
        Type::Null => None,
        Type::Str(s) if TERMINAL.contains(&s) => Some(s),
        _ => return, // the schema already reports it
    };
    let actual = last_terminal;
    if declared_state != actual {
        let show = |s: Option<&str>| s.map_or("null".to_string(), |s| s.to_string());
        ctx.report(
            Rule::TaoRecordTerminalMismatch,
            ptr!["terminal_state"],
            || {
                format!(
                    "terminal_state is {} but {}",
                    show(declared_state),
                    actual.map_or("no transition is terminal".to_string(), |s| format!(
                        "the last terminal transition is {s}"
                    ))
                )
            },
        );
    }
}

/// `tao.record.secret`: every string of the record, at any depth.
fn secrets_anywhere<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    match v.ty() {
        Type::Str(s) => {
            if let Some(why) = secrets::find_credential(s, secrets::Shapes::Record) {
                ctx.report(Rule::TaoRecordSecret, Here, || {
                    format!(
                        "{} holds an unredacted credential: {why}; records are written redacted",
                        quote(s)
                    )
                });
            }
        }
        Type::Object(_) => {
            for (k, value) in v.entries() {
                ctx.within(k, |ctx| secrets_anywhere(value, ctx));
            }
        }
        Type::Array(_) => {
            for (i, item) in v.items().enumerate() {
                ctx.within(i, |ctx| secrets_anywhere(item, ctx));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::{AdmissionContext, Kind, Rule, Validator};

    /// (rule, pointer) of a record with these transition states and `terminal_state`.
    fn violations(states: &[&str], terminal_state: &str) -> Vec<(Rule, String)> {
        let transitions: Vec<String> = states
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    r#"{{"ts":"2026-07-09T1{i}:00:00+00:00","state":"{s}","message":"m","source":"poller"}}"#
                )
            })
            .collect();
        let record = format!(
            r#"{{"schema_version":1,"id":"j","platform":"slurm","backend_ref":"1","image":"nvcr.io/nvidia/tao:6",
            "network_arch":"dino","action":"train","results_dir":"/r/j","storage_tier":"A",
            "submitted_at":"2026-07-09T10:00:00+00:00","transitions":[{}],"terminal_state":{terminal_state},
            "redacted":true}}"#,
            transitions.join(",")
        );
        let report = Validator::default().check(
            record.as_bytes(),
            Some(Kind::JobRecord),
            &AdmissionContext::default(),
        );
        report
            .violations
            .into_iter()
            .map(|v| (v.rule, v.field))
            .collect()
    }

    #[test]
    fn terminal_state_is_judged_against_the_last_terminal_transition() {
        assert_eq!(
            violations(&["PENDING", "COMPLETE", "ERROR"], r#""ERROR""#),
            vec![(Rule::TaoRecordAfterTerminal, "/transitions/2/state".into())]
        );
        assert_eq!(
            violations(&["COMPLETE", "ERROR"], r#""ERROR""#),
            vec![
                (Rule::TaoRecordFirstState, "/transitions/0/state".into()),
                (Rule::TaoRecordAfterTerminal, "/transitions/1/state".into()),
            ]
        );
        // The first terminal transition is not the one judged.
        assert_eq!(
            violations(&["PENDING", "COMPLETE", "ERROR"], r#""COMPLETE""#),
            vec![
                (Rule::TaoRecordTerminalMismatch, "/terminal_state".into()),
                (Rule::TaoRecordAfterTerminal, "/transitions/2/state".into()),
            ]
        );
        // A non-terminal transition after the terminal one leaves it the last terminal.
        assert_eq!(
            violations(&["PENDING", "CANCELED", "RUNNING"], r#""CANCELED""#),
            vec![(Rule::TaoRecordAfterTerminal, "/transitions/2/state".into())]
        );
        assert_eq!(
            violations(&["PENDING", "RUNNING"], r#""ERROR""#),
            vec![(Rule::TaoRecordTerminalMismatch, "/terminal_state".into())]
        );
        assert_eq!(violations(&["PENDING", "RUNNING"], "null"), vec![]);
    }
}
